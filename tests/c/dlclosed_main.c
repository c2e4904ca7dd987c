/* Loads a library (tests/c/dlclosed_plugin.c) with dlopen, calls its
 * plug_run(N), unloads it with dlclose, then returns: the library is gone
 * before the recording ends (tests/programs/unloaded_library_names.rs).
 *
 *   dlclosed_main LIB N               (built without fntrace: for
 *                                      `fntrace record` and `uftrace record`)
 *   dlclosed_main LIB N record DIR    (built with -DWITH_FNTRACE, linked with
 *                                      libfntrace.a: fntrace_record_start in
 *                                      main, fntrace_record_stop at the end)
 *   dlclosed_main LIB N dump DIR      (likewise: the graph tracer enabled in
 *                                      main, fntrace_dump at the end)
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef WITH_FNTRACE
#include "fntrace.h"
#endif

__attribute__((noinline)) long load_run_unload(const char *path, long n) {
    void *handle = dlopen(path, RTLD_NOW);
    if (handle == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(2);
    }
    long (*run)(long) = (long (*)(long))dlsym(handle, "plug_run");
    if (run == NULL)
        exit(3);
    long result = run(n);
    if (dlclose(handle) != 0)
        exit(4);
    return result;
}

/* Not traced: it runs around the start and stop of the recording. */
__attribute__((no_instrument_function)) static void check(const char *what, int rc) {
    if (rc != 0) {
#ifdef WITH_FNTRACE
        fprintf(stderr, "%s: %d %s\n", what, rc, fntrace_last_error());
#else
        fprintf(stderr, "%s: %d\n", what, rc);
#endif
        exit(5);
    }
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 64;
    const char *mode = argc > 4 ? argv[3] : "plain";
    (void)check;
#ifdef WITH_FNTRACE
    if (!strcmp(mode, "record"))
        check("fntrace_record_start", fntrace_record_start(argv[4]));
    if (!strcmp(mode, "dump"))
    {
        check("fntrace_init", fntrace_init());
        check("fntrace_enable", fntrace_enable("graph"));
    }
#endif
    long result = load_run_unload(argv[1], atol(argv[2]));
#ifdef WITH_FNTRACE
    if (!strcmp(mode, "record"))
        check("fntrace_record_stop", fntrace_record_stop());
    if (!strcmp(mode, "dump")) {
        check("fntrace_disable", fntrace_disable("graph"));
        check("fntrace_dump", fntrace_dump(argv[4]));
    }
#endif
    printf("%ld\n", result);
    return 0;
}
