/*
 * A multi-threaded C program that never calls fntrace: tests/control_socket.rs
 * builds it with `gcc -pg` (PIE) and `gcc -pg -mfentry`, links it with
 * libfntrace.a, starts it with FNTRACE_CONTROL and drives it with
 * `fntrace ctl` while it runs. It is paced by its standard input, so that
 * the test knows which calls happened between two commands:
 *
 *   prints "ready", then for each line read:
 *   work N    THREADS threads each make N iterations, then it prints "done"
 *   exit      exits 0 (so does the end of the input)
 *
 * With the filter "handle_*,parse_*,!handle_log*", each iteration of each
 * thread calls handle_get once, handle_put every 4th iteration, and
 * parse_key once per handle_get and twice per handle_put; handle_log_rotate
 * and log_line are not selected.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 4

static volatile long sink;

__attribute__((noinline)) long parse_key(long k) { sink += k; return k * 3; }
__attribute__((noinline)) long log_line(long k) { sink ^= k; return k; }
__attribute__((noinline)) long handle_get(long k) { return parse_key(k) + 1; }
__attribute__((noinline)) long handle_put(long k) { return parse_key(k) + parse_key(k + 1); }
__attribute__((noinline)) long handle_log_rotate(long k) { return log_line(k); }

static long iterations;

static void *worker(void *arg) {
    long base = (long)arg;
    for (long i = 0; i < iterations; i++) {
        sink += handle_get(base + i);
        if (i % 4 == 0)
            sink += handle_put(i);
        if (i % 10 == 0)
            sink += handle_log_rotate(i);
        log_line(i);
        /* Spread the calls over time, so that clients come meanwhile. */
        if (i % 100 == 99)
            usleep(100);
    }
    return NULL;
}

static void work(long n) {
    pthread_t threads[THREADS];
    iterations = n;
    for (long t = 0; t < THREADS; t++)
        if (pthread_create(&threads[t], NULL, worker, (void *)(t * 100000)) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(2);
        }
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
}

int main(void) {
    char line[64];
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin) != NULL) {
        long n;
        if (sscanf(line, "work %ld", &n) == 1) {
            work(n);
            printf("done\n");
            fflush(stdout);
        } else if (strcmp(line, "exit\n") == 0) {
            break;
        } else {
            fprintf(stderr, "ctl_prog: unknown line %s", line);
            return 2;
        }
    }
    return 0;
}
