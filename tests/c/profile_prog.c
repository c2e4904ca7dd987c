/*
 * The live profile through the C API (tests/profile_capi.rs): built with
 * `gcc -pg` and linked with libfntrace.a. Enables the profile tracer for
 * "handle_*,parse_*,fib", runs THREADS threads of ITERATIONS iterations
 * (each: handle_get once, handle_put every 4th iteration; parse_key once
 * per handle_get and twice per handle_put; fib(10) every 100th, 177
 * calls of fib each; log_line not selected), disables it, then writes:
 *
 *   the profile (fntrace_profile_write(1)), a line "--", the profile after
 *   fntrace_profile_reset(), a line "--", and the code fntrace_profile_write
 *   returns for a closed descriptor.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fntrace.h"

#define THREADS 4
#define ITERATIONS 1000

static volatile long sink;

__attribute__((noinline)) long parse_key(long k) { sink += k; return k * 3; }
__attribute__((noinline)) long log_line(long k) { sink ^= k; return k; }
__attribute__((noinline)) long handle_get(long k) { return parse_key(k) + 1; }
__attribute__((noinline)) long handle_put(long k) { return parse_key(k) + parse_key(k + 1); }
__attribute__((noinline)) long fib(long n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

static void *worker(void *arg) {
    long base = (long)arg;
    for (long i = 0; i < ITERATIONS; i++) {
        sink += handle_get(base + i);
        if (i % 4 == 0)
            sink += handle_put(i);
        if (i % 100 == 0)
            sink += fib(10);
        log_line(i);
    }
    return NULL;
}

static void check(int rc, const char *what) {
    if (rc != 0) {
        fprintf(stderr, "%s: %d %s\n", what, rc, fntrace_last_error());
        exit(2);
    }
}

int main(void) {
    pthread_t threads[THREADS];
    check(fntrace_set_filter("handle_*,parse_*,fib"), "fntrace_set_filter");
    check(fntrace_enable("profile"), "fntrace_enable");
    for (long t = 0; t < THREADS; t++)
        if (pthread_create(&threads[t], NULL, worker, (void *)(t * 100000)) != 0)
            return 2;
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    check(fntrace_disable("profile"), "fntrace_disable");
    fflush(stdout);
    check(fntrace_profile_write(1), "fntrace_profile_write");
    printf("--\n");
    fflush(stdout);
    check(fntrace_profile_reset(), "fntrace_profile_reset");
    check(fntrace_profile_write(1), "fntrace_profile_write after reset");
    printf("--\n");
    int fds[2];
    if (pipe(fds) != 0)
        return 2;
    close(fds[0]);
    close(fds[1]);
    printf("%d\n", fntrace_profile_write(fds[1]));
    return 0;
}
