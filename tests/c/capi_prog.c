/*
 * A multi-threaded C program that drives fntrace through its C ABI
 * (include/fntrace.h); built with `gcc -pg` (and `-pg -mfentry`) by
 * tests/capi.rs, linked with libfntrace.a.
 *
 *   capi_prog dump DIR     trace with the graph tracer, fntrace_dump(DIR)
 *   capi_prog record DIR   fntrace_record_start(DIR) ... fntrace_record_stop
 *   capi_prog errors DIR   bad values (DIR: a non-empty directory); prints
 *                          "name code message" lines
 *   capi_prog plain        works without calling fntrace
 *
 * With the filter "handle_*,parse_*,!handle_log*", each of THREADS threads
 * makes ITERATIONS calls of handle_get, ITERATIONS/4 of handle_put, and
 * parse_key once per handle_get and twice per handle_put; handle_log_rotate
 * and log_line are not selected.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fntrace.h"

#define THREADS 4
#define ITERATIONS 1000

static volatile long sink;

__attribute__((noinline)) long parse_key(long k) { sink += k; return k * 3; }
__attribute__((noinline)) long log_line(long k) { sink ^= k; return k; }
__attribute__((noinline)) long handle_get(long k) { return parse_key(k) + 1; }
__attribute__((noinline)) long handle_put(long k) { return parse_key(k) + parse_key(k + 1); }
__attribute__((noinline)) long handle_log_rotate(long k) { return log_line(k); }

static void *worker(void *arg) {
    long base = (long)arg;
    for (long i = 0; i < ITERATIONS; i++) {
        sink += handle_get(base + i);
        if (i % 4 == 0)
            sink += handle_put(i);
        if (i % 10 == 0)
            sink += handle_log_rotate(i);
        log_line(i);
    }
    return NULL;
}

static void work(void) {
    pthread_t threads[THREADS];
    for (long t = 0; t < THREADS; t++)
        if (pthread_create(&threads[t], NULL, worker, (void *)(t * 100000)) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(2);
        }
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
}

static void check(const char *what, int rc) {
    if (rc != 0) {
        fprintf(stderr, "%s returned %d: %s\n", what, rc, fntrace_last_error());
        exit(1);
    }
}

static void *other_thread_error(void *out) {
    /* Another thread's failure is not this thread's. */
    *(const char **)out = strdup(fntrace_last_error());
    return NULL;
}

static void report(const char *name, int rc) {
    printf("%s %d %s\n", name, rc, fntrace_last_error());
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "plain";
    const char *dir = argc > 2 ? argv[2] : NULL;
    if (strcmp(mode, "plain") == 0) {
        work();
    } else if (strcmp(mode, "dump") == 0) {
        check("fntrace_init", fntrace_init());
        check("fntrace_set_filter", fntrace_set_filter("handle_*,parse_*,!handle_log*"));
        check("fntrace_enable", fntrace_enable("graph"));
        work();
        check("fntrace_disable", fntrace_disable("graph"));
        check("fntrace_dump", fntrace_dump(dir));
    } else if (strcmp(mode, "record") == 0) {
        check("fntrace_set_filter", fntrace_set_filter("handle_*,parse_*,!handle_log*"));
        check("fntrace_record_start", fntrace_record_start(dir));
        work();
        check("fntrace_record_stop", fntrace_record_stop());
    } else if (strcmp(mode, "record_drop") == 0) {
        check("fntrace_set_filter", fntrace_set_filter("handle_*,parse_*,!handle_log*"));
        report("record_bad_mode", fntrace_record_start_mode(dir, "sometimes"));
        check("fntrace_record_start_mode", fntrace_record_start_mode(dir, "drop"));
        work();
        check("fntrace_record_stop", fntrace_record_stop());
    } else if (strcmp(mode, "errors") == 0) {
        report("last_error_before", 0);
        report("enable_function", fntrace_enable("function"));
        report("disable_function", fntrace_disable("function"));
        report("enable_unknown", fntrace_enable("no_such_tracer"));
        const char *other = NULL;
        pthread_t t;
        pthread_create(&t, NULL, other_thread_error, &other);
        pthread_join(t, NULL);
        printf("other_thread [%s]\n", other);
        report("disable_unknown", fntrace_disable("no_such_tracer"));
        report("enable_null", fntrace_enable(NULL));
        report("filter_empty_item", fntrace_set_filter("handle_*,,parse_*"));
        report("filter_bare_bang", fntrace_set_filter("handle_*,!"));
        /* A space is a name's own (`<a::F as b::T>::poll`); a tab is not. */
        report("filter_control", fntrace_set_filter("handle\tget"));
        report("dump_not_empty", fntrace_dump(dir));
        report("record_stop_none", fntrace_record_stop());
        report("record_not_empty", fntrace_record_start(dir));
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
