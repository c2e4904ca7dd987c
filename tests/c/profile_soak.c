/*
 * The service of the profile soak (memory must stay flat over a
 * 10-minute run; driven by tests/common/soak.rs for benches/profile_soak.rs
 * and tests/programs/profile_soak.rs). Built with `gcc -pg` and NOT linked with
 * fntrace: the driver preloads libfntrace.so and switches the profile
 * tracer with `fntrace ctl`. While started it runs, paced (a service, not
 * a spin loop):
 *
 *   - WORKERS threads, each serving a "request" every REQUEST_US
 *     microseconds: soak_request picks get, put, scan or walk from a
 *     pseudo-random number, so the calls take several call paths
 *     (soak_parse under get and put, soak_hash under parse and store,
 *     soak_walk recursing 1..6 deep: a path per depth) and durations from
 *     tens of ns to about a millisecond (soak_spin's variable loop, and
 *     soak_slow's sleep, once a second per worker);
 *   - a churn thread starting CHURN_AT_ONCE short-lived threads every
 *     CHURN_EVERY_US and joining them; each serves CHURN_REQUESTS requests
 *     and exits (its profile block is retired and reused).
 *
 * Every traced function counts its own calls in a per-thread array,
 * added to the totals when its thread stops, so the totals are exact once
 * the threads are joined.
 *
 * Paced by its standard input: prints "ready", then for each line:
 *   start   starts the threads; prints "started"
 *   stop    stops and joins them; prints "stopped NAME=CALLS ..." (the
 *           calls made since the program started, per function)
 *   exit    exits 0 (so does the end of the input)
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WORKERS 2
#define REQUEST_US 100
#define CHURN_AT_ONCE 2
#define CHURN_EVERY_US 10000
#define CHURN_REQUESTS 40

enum {
    F_WORKER,
    F_CHURNER,
    F_CHURN_THREAD,
    F_REQUEST,
    F_GET,
    F_PUT,
    F_SCAN,
    F_WALK,
    F_PARSE,
    F_HASH,
    F_STORE,
    F_SPIN,
    F_SLOW,
    FUNCTIONS
};

static const char *names[FUNCTIONS] = {
    "soak_worker", "soak_churner", "soak_churn_thread", "soak_request", "soak_get",
    "soak_put",    "soak_scan",    "soak_walk",         "soak_parse",   "soak_hash",
    "soak_store",  "soak_spin",    "soak_slow",
};

static __thread long calls[FUNCTIONS];
static atomic_long totals[FUNCTIONS];
static atomic_int stop;
static volatile long sink;

#define COUNT(f) (calls[f]++)

/* This thread's counts into the totals (before it returns). */
static void flush(void)
{
    for (int f = 0; f < FUNCTIONS; f++) {
        atomic_fetch_add(&totals[f], calls[f]);
        calls[f] = 0;
    }
}

static void pause_us(long us)
{
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

static unsigned long next_random(unsigned long *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

__attribute__((noinline)) long soak_hash(long x)
{
    COUNT(F_HASH);
    return x * 0x9e3779b97f4a7c15L ^ (x >> 7);
}

/* A loop of `n` rounds: durations spread over many histogram buckets. */
__attribute__((noinline)) long soak_spin(long n)
{
    COUNT(F_SPIN);
    long x = n;
    for (long i = 0; i < n; i++)
        __asm__ volatile("" : "+r"(x));
    return x;
}

__attribute__((noinline)) long soak_parse(long key)
{
    COUNT(F_PARSE);
    return soak_hash(key) + soak_spin(key & 15);
}

__attribute__((noinline)) long soak_store(long key)
{
    COUNT(F_STORE);
    sink += soak_hash(key + 1);
    return key;
}

__attribute__((noinline)) long soak_get(long key)
{
    COUNT(F_GET);
    return soak_parse(key) + 1;
}

__attribute__((noinline)) long soak_put(long key)
{
    COUNT(F_PUT);
    return soak_parse(key) + soak_parse(key + 1) + soak_store(key);
}

__attribute__((noinline)) long soak_scan(long key)
{
    COUNT(F_SCAN);
    long total = 0;
    for (long i = 0; i < 4; i++)
        total += soak_get(key + i);
    return total + soak_spin(key & 1023);
}

/* Recursion: one call path per depth. */
__attribute__((noinline)) long soak_walk(long depth, long key)
{
    COUNT(F_WALK);
    if (depth <= 1)
        return soak_get(key);
    return soak_walk(depth - 1, key + 1) + soak_hash(key);
}

/* A slow call (200 us to 1.2 ms): the higher histogram chunks. */
__attribute__((noinline)) void soak_slow(long us)
{
    COUNT(F_SLOW);
    pause_us(us);
}

__attribute__((noinline)) long soak_request(unsigned long r)
{
    COUNT(F_REQUEST);
    long key = (long)(r >> 8);
    switch (r & 7) {
    case 0:
    case 1:
    case 2:
        return soak_get(key);
    case 3:
    case 4:
        return soak_put(key);
    case 5:
        return soak_scan(key);
    default:
        return soak_walk(1 + (long)((r >> 3) % 6), key);
    }
}

__attribute__((noinline)) void *soak_worker(void *arg)
{
    COUNT(F_WORKER);
    unsigned long state = 0x2545f4914f6cdd1dUL + (unsigned long)arg;
    long served = 0;
    while (!atomic_load(&stop)) {
        for (int i = 0; i < 10; i++)
            sink += soak_request(next_random(&state));
        served += 10;
        /* About once a second per worker. */
        if (served % 10000 == 0)
            soak_slow(200 + (long)(next_random(&state) % 1000));
        pause_us(10 * REQUEST_US);
    }
    flush();
    return NULL;
}

__attribute__((noinline)) void *soak_churn_thread(void *arg)
{
    COUNT(F_CHURN_THREAD);
    unsigned long state = 0x9e3779b97f4a7c15UL ^ (unsigned long)arg;
    for (int i = 0; i < CHURN_REQUESTS; i++)
        sink += soak_request(next_random(&state));
    flush();
    return NULL;
}

__attribute__((noinline)) void *soak_churner(void *arg)
{
    COUNT(F_CHURNER);
    long made = 0;
    (void)arg;
    while (!atomic_load(&stop)) {
        pthread_t threads[CHURN_AT_ONCE];
        for (int t = 0; t < CHURN_AT_ONCE; t++)
            if (pthread_create(&threads[t], NULL, soak_churn_thread, (void *)++made) != 0) {
                fprintf(stderr, "profile_soak: pthread_create failed\n");
                exit(2);
            }
        for (int t = 0; t < CHURN_AT_ONCE; t++)
            pthread_join(threads[t], NULL);
        pause_us(CHURN_EVERY_US);
    }
    flush();
    return NULL;
}

static pthread_t workers[WORKERS], churner;

static void start(void)
{
    atomic_store(&stop, 0);
    for (long w = 0; w < WORKERS; w++)
        if (pthread_create(&workers[w], NULL, soak_worker, (void *)(w + 1)) != 0) {
            fprintf(stderr, "profile_soak: pthread_create failed\n");
            exit(2);
        }
    if (pthread_create(&churner, NULL, soak_churner, NULL) != 0) {
        fprintf(stderr, "profile_soak: pthread_create failed\n");
        exit(2);
    }
}

static void stop_and_join(void)
{
    atomic_store(&stop, 1);
    for (int w = 0; w < WORKERS; w++)
        pthread_join(workers[w], NULL);
    pthread_join(churner, NULL);
}

int main(void)
{
    char line[64];
    int running = 0;
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin) != NULL) {
        if (strcmp(line, "start\n") == 0 && !running) {
            start();
            running = 1;
            printf("started\n");
        } else if (strcmp(line, "stop\n") == 0 && running) {
            stop_and_join();
            running = 0;
            printf("stopped");
            for (int f = 0; f < FUNCTIONS; f++)
                printf(" %s=%ld", names[f], atomic_load(&totals[f]));
            printf("\n");
        } else if (strcmp(line, "exit\n") == 0) {
            break;
        } else {
            fprintf(stderr, "profile_soak: unexpected line %s", line);
            return 2;
        }
        fflush(stdout);
    }
    if (running)
        stop_and_join();
    return 0;
}
