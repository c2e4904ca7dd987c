/*
 * A service's shape for the flight recorder's tests (tests/env_vars.rs):
 * THREADS workers each handle REQUESTS requests (handle_request ->
 * parse_request, lookup), pausing now and then as a server waits for
 * clients. The request numbered SLOW (if any) also calls slow_path, which
 * sleeps 20 ms: the one slow request among thousands of short ones.
 *
 * Usage: flight_service THREADS REQUESTS [SLOW [DIR]]
 *
 * With DIR, the program runs its own flight recorder through the C ABI
 * (include/fntrace.h; the functions come from the preloaded
 * libfntrace.so, weak here so that the program also runs without it):
 * snapshots of handle_request calls of 15 ms or more go under DIR.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int fntrace_flight_start(const char *dir, unsigned long long budget_bytes)
    __attribute__((weak));
int fntrace_flight_trigger(const char *trigger) __attribute__((weak));
int fntrace_flight_untrigger(const char *which) __attribute__((weak));
int fntrace_flight_stop(void) __attribute__((weak));
const char *fntrace_last_error(void) __attribute__((weak));

static volatile long sink;
static long slow_request = -1;

__attribute__((noinline)) long parse_request(long i) { sink += i; return i * 3; }

__attribute__((noinline)) long lookup(long key) { sink += key; return key ^ 0x55; }

__attribute__((noinline)) void slow_path(void) {
    struct timespec t = {0, 20 * 1000 * 1000};
    nanosleep(&t, NULL);
}

__attribute__((noinline)) long handle_request(long i) {
    long key = parse_request(i);
    if (i == slow_request)
        slow_path();
    return lookup(key);
}

struct work { long first, count; };

static void *worker(void *arg) {
    struct work *w = arg;
    for (long i = w->first; i < w->first + w->count; i++) {
        handle_request(i);
        if (i % 50 == 0)
            usleep(100);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s THREADS REQUESTS [SLOW]\n", argv[0]);
        return 2;
    }
    long threads = atol(argv[1]), requests = atol(argv[2]);
    if (argc > 3)
        slow_request = atol(argv[3]);
    if (threads < 1 || threads > 16)
        return 2;
    if (argc > 4) {
        if (!fntrace_flight_start) {
            fprintf(stderr, "no libfntrace\n");
            return 3;
        }
        int bad = fntrace_flight_trigger("handle_request>15");
        printf("bad trigger: %d %s\n", bad, fntrace_last_error());
        if (fntrace_flight_start(argv[4], 32 << 20) != 0
            || fntrace_flight_trigger("handle_request>15ms") != 0
            || fntrace_flight_trigger("lookup>1s") != 0
            || fntrace_flight_untrigger("lookup") != 0) {
            fprintf(stderr, "%s\n", fntrace_last_error());
            return 4;
        }
        int again = fntrace_flight_untrigger("lookup");
        printf("untrigger again: %d %s\n", again, fntrace_last_error());
    }
    pthread_t tids[16];
    struct work work[16];
    for (long k = 0; k < threads; k++) {
        work[k].first = k * requests;
        work[k].count = requests;
        pthread_create(&tids[k], NULL, worker, &work[k]);
    }
    for (long k = 0; k < threads; k++)
        pthread_join(tids[k], NULL);
    if (argc > 4 && fntrace_flight_stop() != 0) {
        fprintf(stderr, "%s\n", fntrace_last_error());
        return 5;
    }
    printf("handled %ld\n", threads * requests);
    return 0;
}
