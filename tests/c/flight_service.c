/*
 * A service's shape for the flight recorder's tests (tests/env_vars.rs):
 * THREADS workers each handle REQUESTS requests (handle_request ->
 * parse_request, lookup), pausing now and then as a server waits for
 * clients. The request numbered SLOW (if any) also calls slow_path, which
 * sleeps 20 ms: the one slow request among thousands of short ones.
 *
 * Usage: flight_service THREADS REQUESTS [SLOW]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

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
    pthread_t tids[16];
    struct work work[16];
    for (long k = 0; k < threads; k++) {
        work[k].first = k * requests;
        work[k].count = requests;
        pthread_create(&tids[k], NULL, worker, &work[k]);
    }
    for (long k = 0; k < threads; k++)
        pthread_join(tids[k], NULL);
    printf("handled %ld\n", threads * requests);
    return 0;
}
