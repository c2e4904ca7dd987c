/*
 * The target of benches/attach.rs: built with `gcc -O2 -pg` (PIE), not
 * linked with fntrace.
 *
 * attach_bench calls    the main thread reads commands on standard input:
 *   run N    calls leaf() N times, timed with CLOCK_MONOTONIC; prints
 *            "ns X" (nanoseconds per call, fractional)
 *   exit     exits 0 (also at the end of its input)
 *   It prints "ready" first.
 *
 * attach_bench stamp    a thread ("stamper") reads CLOCK_MONOTONIC in a
 *   loop and keeps the largest gap between two readings (how long it was
 *   kept from running: stopped by ptrace, preempted...); it prints
 *   "ready TID" (the stamper's thread id). Commands:
 *   gap      prints "gap NS" (the largest gap since the last "gap") and
 *            starts a new interval
 *   exit     exits 0
 *
 * gprof's profiling timer (started by gcc -pg's start-up) is switched off
 * with moncontrol(0).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern void moncontrol(int mode);

static volatile long sink;

__attribute__((noinline)) long leaf(long x) {
    sink += x;
    asm volatile("" ::: "memory");
    return x + 1;
}

static unsigned long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ULL + (unsigned long long)t.tv_nsec;
}

static volatile unsigned long long largest_gap;
static volatile int stamper_tid;

static void *stamper(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "stamper");
    stamper_tid = (int)syscall(SYS_gettid);
    unsigned long long last = now_ns();
    for (;;) {
        unsigned long long now = now_ns();
        unsigned long long gap = now - last;
        if (gap > largest_gap)
            largest_gap = gap;
        last = now;
    }
    return NULL;
}

int main(int argc, char **argv) {
    moncontrol(0);
    int stamp = argc > 1 && strcmp(argv[1], "stamp") == 0;
    if (stamp) {
        pthread_t id;
        pthread_create(&id, NULL, stamper, NULL);
        while (stamper_tid == 0)
            usleep(1000);
        printf("ready %d\n", stamper_tid);
    } else {
        printf("ready\n");
    }
    fflush(stdout);
    char line[128];
    while (fgets(line, sizeof line, stdin) != NULL) {
        if (strncmp(line, "run ", 4) == 0) {
            long n = atol(line + 4);
            unsigned long long start = now_ns();
            long x = 0;
            for (long i = 0; i < n; i++)
                x = leaf(x);
            unsigned long long took = now_ns() - start;
            printf("ns %.3f\n", (double)took / (double)n);
        } else if (strncmp(line, "gap", 3) == 0) {
            printf("gap %llu\n", largest_gap);
            largest_gap = 0;
        } else if (strncmp(line, "exit", 4) == 0) {
            break;
        }
        fflush(stdout);
    }
    _exit(0);
}
