/* Loads a library with dlopen, calls it and unloads it with dlclose, then
 * does the same with a second library, which the loader maps where the
 * first was (tests/programs/unloaded_library_names.rs): the first library's
 * functions must keep their names although other code is mapped at their
 * addresses when the trace is written.
 *
 *   dlclose_reopen LIB_A LIB_B             (built without fntrace)
 *   dlclose_reopen LIB_A LIB_B dump DIR    (built with -DWITH_FNTRACE,
 *                                           linked with libfntrace.a: the
 *                                           graph tracer enabled in main,
 *                                           fntrace_dump at the end)
 *   dlclose_reopen LIB_A LIB_B dump-loaded DIR
 *                                          (likewise, LIB_B still loaded
 *                                           when it dumps)
 *   dlclose_reopen LIB_A LIB_B flight DIR  (likewise, the flight recorder
 *                                           started in main, a snapshot
 *                                           into DIR at the end; its
 *                                           trigger directory DIR.triggers)
 * LIB_A defines lib_a (tests/c/reopen_a.c), LIB_B foo (tests/c/reopen_b.c).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef WITH_FNTRACE
#include "fntrace.h"
#endif

__attribute__((noinline)) long load_call_unload(const char *path, const char *name, long n,
                                                int unload) {
    void *handle = dlopen(path, RTLD_NOW);
    if (handle == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(2);
    }
    long (*function)(long) = (long (*)(long))dlsym(handle, name);
    if (function == NULL)
        exit(3);
    long result = function(n);
    if (unload && dlclose(handle) != 0)
        exit(4);
    return result;
}

/* Not traced: it runs around the start and end of the tracing. */
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
    int loaded = argc > 4 && !strcmp(argv[3], "dump-loaded");
    int dump = loaded || (argc > 4 && !strcmp(argv[3], "dump"));
    int flight = argc > 4 && !strcmp(argv[3], "flight");
    (void)check;
    (void)dump;
    (void)flight;
#ifdef WITH_FNTRACE
    if (dump) {
        check("fntrace_init", fntrace_init());
        check("fntrace_enable", fntrace_enable("graph"));
    }
    if (flight) {
        char triggers[4096];
        snprintf(triggers, sizeof triggers, "%s.triggers", argv[4]);
        check("fntrace_flight_start", fntrace_flight_start(triggers, 0));
    }
#endif
    long result = load_call_unload(argv[1], "lib_a", 1, 1);
    result += load_call_unload(argv[2], "foo", 2, !loaded);
#ifdef WITH_FNTRACE
    if (dump) {
        check("fntrace_disable", fntrace_disable("graph"));
        check("fntrace_dump", fntrace_dump(argv[4]));
    }
    if (flight) {
        check("fntrace_flight_snapshot", fntrace_flight_snapshot(argv[4]));
        check("fntrace_flight_stop", fntrace_flight_stop());
    }
#endif
    printf("%ld\n", result);
    return 0;
}
