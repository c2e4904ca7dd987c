/* Standalone program for the `uftrace record` comparisons in
 * benches/overhead.rs and benches/record.rs: the fixtures' call tree, from
 * the same source file (tests/fixtures/c/workload.c, found through `-I`),
 * with its own `main`. The benchmarks build it at run time with
 * `gcc -O2 -pg` (traced by uftrace) and with `gcc -O2` (the untraced
 * baseline).
 *
 * Usage:
 *   uftrace_workload N
 *       calls run(N) once: 2 + 5N calls with main; prints run's result.
 *   uftrace_workload N THREADS TURNS PACE_US
 *       THREADS threads each call run(N) TURNS times, one call every
 *       PACE_US microseconds (0: back to back), as benches/record.rs paces
 *       its threads. Prints one line:
 *         calls C bursts_cpu_ns B process_cpu_ns P threads_at_exit T
 *       C: calls of run's tree (not main, not the threads' start
 *       functions); B: the threads' CPU inside their calls of run(N) alone
 *       (without the sleeps between them); P: this process's whole CPU
 *       (under `uftrace record`, the recorder is another process and is not
 *       in it); T: the threads this process has at the end (a tracer that
 *       started threads of its own here would show).
 *
 * The helpers are not instrumented, so that under -pg the traced calls are
 * run's tree, main and one start function per thread. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#define PREFIX standalone_
#include "workload.c"

#define NOTRACE __attribute__((no_instrument_function))

struct worker {
    pthread_t thread;
    long n, turns, pace_us;
    unsigned long long calls, bursts_cpu_ns;
};

static NOTRACE unsigned long long clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static NOTRACE void sleep_until(unsigned long long deadline_ns)
{
    struct timespec ts = {
        .tv_sec = (time_t)(deadline_ns / 1000000000ull),
        .tv_nsec = (long)(deadline_ns % 1000000000ull),
    };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
        ;
}

static void *work(void *arg)
{
    struct worker *w = arg;
    unsigned long long begun = clock_ns(CLOCK_MONOTONIC);
    for (long turn = 1; turn <= w->turns; turn++) {
        unsigned long long cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        standalone_run(w->n);
        w->bursts_cpu_ns += clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
        w->calls += 1 + 5 * (unsigned long long)w->n;
        if (w->pace_us > 0)
            sleep_until(begun + (unsigned long long)turn * (unsigned long long)w->pace_us * 1000ull);
    }
    return NULL;
}

static NOTRACE unsigned long long process_cpu_ns(void)
{
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return ((unsigned long long)usage.ru_utime.tv_sec + (unsigned long long)usage.ru_stime.tv_sec) *
               1000000000ull +
           ((unsigned long long)usage.ru_utime.tv_usec + (unsigned long long)usage.ru_stime.tv_usec) *
               1000ull;
}

static NOTRACE int threads_now(void)
{
    DIR *dir = opendir("/proc/self/task");
    int count = 0;
    if (!dir)
        return -1;
    for (struct dirent *entry; (entry = readdir(dir)) != NULL;)
        count += entry->d_name[0] != '.';
    closedir(dir);
    return count;
}

static NOTRACE int paced(long n, long threads, long turns, long pace_us)
{
    struct worker *workers = calloc((size_t)threads, sizeof *workers);
    if (!workers || threads < 1 || turns < 0 || pace_us < 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    for (long i = 0; i < threads; i++) {
        workers[i] = (struct worker){.n = n, .turns = turns, .pace_us = pace_us};
        if (pthread_create(&workers[i].thread, NULL, work, &workers[i]) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    unsigned long long calls = 0, bursts = 0;
    for (long i = 0; i < threads; i++) {
        pthread_join(workers[i].thread, NULL);
        calls += workers[i].calls;
        bursts += workers[i].bursts_cpu_ns;
    }
    printf("calls %llu bursts_cpu_ns %llu process_cpu_ns %llu threads_at_exit %d\n", calls,
           bursts, process_cpu_ns(), threads_now());
    free(workers);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5)
        return paced(strtol(argv[1], NULL, 10), strtol(argv[2], NULL, 10),
                     strtol(argv[3], NULL, 10), strtol(argv[4], NULL, 10));
    if (argc != 2) {
        fprintf(stderr, "usage: %s ITERATIONS [THREADS TURNS PACE_US]\n", argv[0]);
        return 2;
    }
    long iterations = strtol(argv[1], NULL, 10);
    printf("%ld\n", standalone_run(iterations));
    return 0;
}
