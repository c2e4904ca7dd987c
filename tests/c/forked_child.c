/* A program that forks inside main (tests/programs/forked_child_frames.rs): the
 * child calls child_work(3) (three leaf calls) and then returns from main
 * ("return") or leaves with _exit ("_exit"); the parent waits for it and
 * calls parent_work(2).
 *
 *   forked_child return|_exit
 *
 * Built with -DWITH_FNTRACE and linked with libfntrace.a (or with
 * -DFNTRACE_PRELOADED too, run with libfntrace.so preloaded), it traces itself
 * through the C API from before main (a constructor, not traced itself),
 * as FORKED_CHILD_MODE says:
 *   record  fntrace_record_start(FORKED_CHILD_DIR), stopped at exit (in
 *           the parent, and in a child that returns);
 *   dump    the graph tracer enabled; each process dumps its trace into
 *           FORKED_CHILD_DIR/PID at exit (the child before its _exit).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(WITH_FNTRACE) && defined(FNTRACE_PRELOADED)
#include <dlfcn.h>
/* The C API of the libfntrace.so preloaded (library calls are traced only
 * there), found before main: no call through the PLT then but those the
 * program makes (each one a traced library call). */
static int (*fntrace_init)(void);
static int (*fntrace_enable)(const char *);
static int (*fntrace_disable)(const char *);
static int (*fntrace_dump)(const char *);
static int (*fntrace_record_start)(const char *);
static int (*fntrace_record_stop)(void);
static const char *(*fntrace_last_error)(void);

__attribute__((no_instrument_function)) static void find_api(void) {
    *(void **)&fntrace_init = dlsym(RTLD_DEFAULT, "fntrace_init");
    *(void **)&fntrace_enable = dlsym(RTLD_DEFAULT, "fntrace_enable");
    *(void **)&fntrace_disable = dlsym(RTLD_DEFAULT, "fntrace_disable");
    *(void **)&fntrace_dump = dlsym(RTLD_DEFAULT, "fntrace_dump");
    *(void **)&fntrace_record_start = dlsym(RTLD_DEFAULT, "fntrace_record_start");
    *(void **)&fntrace_record_stop = dlsym(RTLD_DEFAULT, "fntrace_record_stop");
    *(void **)&fntrace_last_error = dlsym(RTLD_DEFAULT, "fntrace_last_error");
    if (fntrace_dump == NULL || fntrace_last_error == NULL)
        _exit(6);
}
#elif defined(WITH_FNTRACE)
#include "fntrace.h"
#endif

static volatile long sink;

__attribute__((noinline)) void leaf(long i) { sink += i; }

__attribute__((noinline)) void child_work(long n) {
    for (long i = 0; i < n; i++)
        leaf(i);
}

__attribute__((noinline)) void parent_work(long n) {
    for (long i = 0; i < n; i++)
        leaf(i);
}

#ifdef WITH_FNTRACE
static int dumping;
/* FORKED_CHILD_DIR, read before tracing starts (getenv would be a traced
 * library call in stop). */
static const char *out_dir;

__attribute__((no_instrument_function)) static void check(const char *what, int rc) {
    if (rc != 0) {
        fprintf(stderr, "%s: %d %s\n", what, rc, fntrace_last_error());
        _exit(5);
    }
}

__attribute__((no_instrument_function, constructor)) static void start(void) {
    const char *mode = getenv("FORKED_CHILD_MODE");
    const char *dir = getenv("FORKED_CHILD_DIR");
    if (mode == NULL || dir == NULL)
        return;
#ifdef FNTRACE_PRELOADED
    find_api();
#endif
    out_dir = dir;
    if (!strcmp(mode, "record")) {
        check("fntrace_record_start", fntrace_record_start(dir));
    } else {
        dumping = 1;
        check("fntrace_init", fntrace_init());
        check("fntrace_enable", fntrace_enable("graph"));
    }
}

/* Stops the recording, or dumps this process's trace. */
__attribute__((no_instrument_function, destructor)) static void stop(void) {
    if (out_dir == NULL)
        return;
    if (dumping) {
        char path[4096];
        check("fntrace_disable", fntrace_disable("graph"));
        snprintf(path, sizeof path, "%s/%d", out_dir, (int)getpid());
        check("fntrace_dump", fntrace_dump(path));
    } else {
        check("fntrace_record_stop", fntrace_record_stop());
    }
}
#endif

int main(int argc, char **argv) {
    if (argc < 2)
        return 64;
    int use_exit = !strcmp(argv[1], "_exit");
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        child_work(3);
        if (use_exit) {
#ifdef WITH_FNTRACE
            if (dumping)
                stop();
#endif
            _exit(0);
        }
        return 0;
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 2;
    parent_work(2);
    return 0;
}
