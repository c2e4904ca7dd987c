/*
 * A small TCP request/response server for tests/programs/attach_cycles.rs and
 * benches/attach.rs: built with `gcc -pg` (PIE, -O2), NOT linked with
 * fntrace, started with no fntrace variable; the test attaches to it,
 * records and detaches, again and again, while clients hammer it.
 *
 * Usage: attach_server [WORKERS]   (default 4)
 *
 * It listens on 127.0.0.1 (a port the kernel picks) and prints
 * "ready PORT" once every thread runs. WORKERS threads ("worker") each
 * block in accept, then serve their connection until the client closes
 * it: every line "K\n" (a decimal number) is answered "K V\n", V computed
 * by handle_request(K) (value_of below, which the client computes too).
 * Besides: a thread blocked in epoll_wait on a timerfd firing every 5 ms
 * ("epoller"), one looping 5 ms nanosleeps ("sleeper"); the main thread
 * blocks in read on its standard input. Every one of those calls counts
 * the times it failed with EINTR.
 *
 * Standard input, one command a line:
 *   stats   prints "stats served=N eintr=E" (requests answered, EINTRs)
 *   exit    stops, prints "eintr accept=A read=R write=W epoll=P
 *           nanosleep=S stdin=I served=N" and exits 0 (also at the end of
 *           its input)
 *
 * gprof's profiling timer (started by gcc -pg's start-up) is switched off
 * with moncontrol(0): its SIGPROF would land in the blocked calls and make
 * EINTR counts that are not fntrace's.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* glibc's gprof control (no header declares it). */
extern void moncontrol(int mode);

static volatile int stop;
static long served;
static long eintr_accept, eintr_read, eintr_write, eintr_epoll, eintr_nanosleep, eintr_stdin;
static int listen_fd;
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int ready_count;
static volatile long sink;

static void count(long *counter) { __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED); }

__attribute__((noinline)) long parse_key(const char *line) {
    long k = strtol(line, NULL, 10);
    asm volatile("" ::: "memory");
    return k;
}

__attribute__((noinline)) long mix(long k) {
    unsigned long x = (unsigned long)k * 2654435761UL;
    x ^= x >> 13;
    asm volatile("" ::: "memory");
    return (long)(x % 1000003UL);
}

__attribute__((noinline)) void store_put(long k) {
    sink ^= k;
    asm volatile("" ::: "memory");
}

/* The value answered for key k: mix(k) + 7 (the client checks it). */
__attribute__((noinline)) long handle_request(const char *line) {
    long k = parse_key(line);
    long v = mix(k) + 7;
    if (k % 4 == 0)
        store_put(k);
    asm volatile("" ::: "memory");
    return v;
}

static void started(const char *name) {
    pthread_setname_np(pthread_self(), name);
    pthread_mutex_lock(&mutex);
    ready_count++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&mutex);
}

/* Writes all of buf; 0, or -1 when the connection is gone. */
static int write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) {
            count(&eintr_write);
            continue;
        }
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static void serve(int fd) {
    char in[4096];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(fd, in + have, sizeof in - 1 - have);
        if (n < 0 && errno == EINTR) {
            count(&eintr_read);
            continue;
        }
        if (n <= 0)
            return;
        have += (size_t)n;
        in[have] = 0;
        char out[65536];
        size_t out_len = 0;
        char *line = in;
        char *end;
        while ((end = memchr(line, '\n', have - (size_t)(line - in))) != NULL) {
            *end = 0;
            long k = strtol(line, NULL, 10);
            long v = handle_request(line);
            out_len += (size_t)snprintf(out + out_len, sizeof out - out_len, "%ld %ld\n", k, v);
            count(&served);
            line = end + 1;
        }
        have -= (size_t)(line - in);
        memmove(in, line, have);
        if (out_len > 0 && write_all(fd, out, out_len) != 0)
            return;
    }
}

static void *worker(void *arg) {
    (void)arg;
    started("worker");
    while (!stop) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0 && errno == EINTR) {
            count(&eintr_accept);
            continue;
        }
        if (fd < 0)
            return NULL;
        serve(fd);
        close(fd);
    }
    return NULL;
}

static void *epoller(void *arg) {
    (void)arg;
    int tfd = timerfd_create(CLOCK_MONOTONIC, 0);
    struct itimerspec every = {{0, 5000000}, {0, 5000000}};
    timerfd_settime(tfd, 0, &every, NULL);
    int ep = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &event);
    started("epoller");
    while (!stop) {
        struct epoll_event got;
        int n = epoll_wait(ep, &got, 1, -1);
        if (n < 0 && errno == EINTR) {
            count(&eintr_epoll);
            continue;
        }
        unsigned long long ticks;
        if (read(tfd, &ticks, sizeof ticks) < 0 && errno == EINTR)
            count(&eintr_epoll);
    }
    return NULL;
}

static void *sleeper(void *arg) {
    (void)arg;
    started("sleeper");
    while (!stop) {
        struct timespec t = {0, 5000000};
        if (nanosleep(&t, NULL) != 0 && errno == EINTR)
            count(&eintr_nanosleep);
    }
    return NULL;
}

static long eintr_total(void) {
    return eintr_accept + eintr_read + eintr_write + eintr_epoll + eintr_nanosleep + eintr_stdin;
}

int main(int argc, char **argv) {
    moncontrol(0);
    signal(SIGPIPE, SIG_IGN);
    int workers = argc > 1 ? atoi(argv[1]) : 4;
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = 0};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listen_fd, (struct sockaddr *)&address, sizeof address) != 0 ||
        listen(listen_fd, 64) != 0) {
        perror("bind/listen");
        return 1;
    }
    socklen_t len = sizeof address;
    getsockname(listen_fd, (struct sockaddr *)&address, &len);

    int threads = workers + 2;
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    for (int i = 0; i < workers; i++)
        pthread_create(&ids[i], NULL, worker, NULL);
    pthread_create(&ids[workers], NULL, epoller, NULL);
    pthread_create(&ids[workers + 1], NULL, sleeper, NULL);
    pthread_mutex_lock(&mutex);
    while (ready_count < threads)
        pthread_cond_wait(&cond, &mutex);
    pthread_mutex_unlock(&mutex);
    printf("ready %d\n", ntohs(address.sin_port));
    fflush(stdout);

    char line[256];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(0, line + have, sizeof line - 1 - have);
        if (n < 0 && errno == EINTR) {
            count(&eintr_stdin);
            continue;
        }
        if (n <= 0)
            break;
        have += (size_t)n;
        line[have] = 0;
        char *end = memchr(line, '\n', have);
        if (end == NULL)
            continue;
        *end = 0;
        if (strcmp(line, "stats") == 0) {
            printf("stats served=%ld eintr=%ld\n", __atomic_load_n(&served, __ATOMIC_RELAXED),
                   eintr_total());
            fflush(stdout);
        } else if (strcmp(line, "exit") == 0) {
            break;
        }
        have -= (size_t)(end + 1 - line);
        memmove(line, end + 1, have);
    }
    stop = 1;
    printf("eintr accept=%ld read=%ld write=%ld epoll=%ld nanosleep=%ld stdin=%ld served=%ld\n",
           eintr_accept, eintr_read, eintr_write, eintr_epoll, eintr_nanosleep, eintr_stdin,
           served);
    fflush(stdout);
    /* Workers blocked in accept or read are not joined: exit ends them. */
    _exit(0);
}
