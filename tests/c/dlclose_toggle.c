/* Two threads dlopen a `gcc -pg` library, call
 * it 1000 times and dlclose it, in a loop; a third thread is busy in traced
 * code; main switches `graph` on and off every 2 ms for SECONDS. Then, with
 * tracing quiescent, one more round of the library is traced and dumped to
 * DIR (the test counts it exactly).
 *
 * Usage: dlclose_toggle LIBRARY SECONDS DIR
 * Prints "toggles N failed F loads L"; exits 1 if a toggle failed. Built
 * with -pg and linked with libfntrace.a (tests/dlclose_toggle.rs). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fntrace.h"

static const char *library;
static atomic_int stop;
static atomic_long loads;
static volatile long sink;

typedef long (*run_fn)(long);

static void *open_library(run_fn *run)
{
    void *handle = dlopen(library, RTLD_NOW);
    if (!handle) {
        fprintf(stderr, "dlopen %s: %s\n", library, dlerror());
        exit(2);
    }
    *run = (run_fn)dlsym(handle, "dl_run");
    if (!*run) {
        fprintf(stderr, "dlsym dl_run: %s\n", dlerror());
        exit(2);
    }
    return handle;
}

static void *loader(void *unused)
{
    (void)unused;
    while (!atomic_load(&stop)) {
        run_fn run;
        void *handle = open_library(&run);
        for (long i = 0; i < 1000; i++)
            sink += run(i % 3);
        if (dlclose(handle) != 0) {
            fprintf(stderr, "dlclose: %s\n", dlerror());
            exit(2);
        }
        atomic_fetch_add(&loads, 1);
    }
    return NULL;
}

__attribute__((noinline)) long busy_leaf(long x)
{
    __asm__ volatile("" : "+r"(x));
    return x * 7 + 3;
}

__attribute__((noinline)) long busy_work(long n)
{
    long total = 0;
    for (long i = 0; i < n; i++)
        total += busy_leaf(i);
    return total;
}

static void *busy(void *unused)
{
    (void)unused;
    while (!atomic_load(&stop))
        sink += busy_work(50);
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s LIBRARY SECONDS DIR\n", argv[0]);
        return 2;
    }
    library = argv[1];
    double seconds = atof(argv[2]);
    if (fntrace_init() != 0) {
        fprintf(stderr, "fntrace_init: %s\n", fntrace_last_error());
        return 2;
    }
    pthread_t threads[3];
    pthread_create(&threads[0], NULL, loader, NULL);
    pthread_create(&threads[1], NULL, loader, NULL);
    pthread_create(&threads[2], NULL, busy, NULL);

    long toggles = 0, failed = 0;
    double end = now() + seconds;
    struct timespec pause = {0, 2000000};
    while (now() < end) {
        int rc = toggles % 2 == 0 ? fntrace_enable("graph") : fntrace_disable("graph");
        toggles++;
        if (rc != 0) {
            failed++;
            fprintf(stderr, "toggle %ld failed: %s\n", toggles, fntrace_last_error());
        }
        nanosleep(&pause, NULL);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(threads[i], NULL);
    if (fntrace_disable("graph") != 0) {
        failed++;
        fprintf(stderr, "last disable failed: %s\n", fntrace_last_error());
    }
    /* What was recorded meanwhile is not checked: dumped out of the way. */
    char scratch[4096];
    snprintf(scratch, sizeof scratch, "%s.during", argv[3]);
    if (fntrace_dump(scratch) != 0)
        fprintf(stderr, "dump %s: %s\n", scratch, fntrace_last_error());

    /* Quiescent: one traced round of the library, dumped. */
    run_fn run;
    void *handle = open_library(&run);
    if (fntrace_enable("graph") != 0) {
        fprintf(stderr, "enable: %s\n", fntrace_last_error());
        return 1;
    }
    for (int i = 0; i < 300; i++)
        sink += run(1);
    if (fntrace_disable("graph") != 0 || fntrace_dump(argv[3]) != 0) {
        fprintf(stderr, "disable or dump: %s\n", fntrace_last_error());
        return 1;
    }
    dlclose(handle);
    printf("toggles %ld failed %ld loads %ld\n", toggles, failed, atomic_load(&loads));
    return failed ? 1 : 0;
}
