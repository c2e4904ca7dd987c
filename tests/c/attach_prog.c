/*
 * A server-like C program for tests/programs/attach.rs: built with `gcc -pg` (PIE,
 * -O2), NOT linked with fntrace, started with no fntrace variable; the test
 * attaches to it with `fntrace attach PID` while its threads are blocked
 * in system calls or busy in libc.
 *
 * Threads (named as below, for the test to find each): one blocked in read (a pipe), one in accept (a Unix socket), one
 * in epoll_wait (an eventfd), one in nanosleep (a loop of 20 ms sleeps),
 * one in pthread_cond_wait (a futex), one looping malloc/free; with the
 * argument `dl`, one more looping dlopen/dlclose of a library. Named
 * reader, acceptor, epoller, sleeper, waiter, mallocer, dlopener. Each counts
 * the calls that failed with EINTR and reports them at exit.
 *
 * It prints "ready" once every thread runs, then for each line read on
 * its standard input:
 *   work N   calls handle_request N times (each calls parse_key once, and
 *            store_put every 4th time), then prints "done H P S" (the
 *            calls of handle_request, parse_key and store_put it made)
 *   exit     stops the threads, prints "eintr read=R accept=A epoll=E
 *            nanosleep=N cond=C malloc=M dl=D loops=L rt=S" and exits 0 (also
 *            at the end of its input)
 *
 * S counts the SIGRTMIN+1 signals it handled (SA_RESTART; the test sends
 * them to a thread while fntrace borrows it).
 *
 * gprof's profiling timer (started by gcc -pg's start-up) is switched off
 * with moncontrol(0): its SIGPROF would land in the blocked calls and make
 * EINTR counts that are not the attach's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* glibc's gprof control (no header declares it). */
extern void moncontrol(int mode);

static volatile long sink;
static volatile int stop;

static long calls_handle, calls_parse, calls_put;
static long eintr_read, eintr_accept, eintr_epoll, eintr_nanosleep, cond_errors, eintr_malloc,
    dl_errors, loops;

static int pipe_fds[2];
static int listen_fd;
static int event_fd;
static struct sockaddr_un address;
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int ready_count;
static volatile sig_atomic_t rt_signals;

static void on_rt_signal(int sig) {
    (void)sig;
    rt_signals++;
}

__attribute__((noinline)) long parse_key(long k) {
    calls_parse++;
    sink += k;
    asm volatile("" ::: "memory");
    return k * 3;
}

__attribute__((noinline)) long store_put(long k) {
    calls_put++;
    sink ^= k;
    asm volatile("" ::: "memory");
    return k + 1;
}

__attribute__((noinline)) long handle_request(long k) {
    calls_handle++;
    long r = parse_key(k);
    if (k % 4 == 0)
        r += store_put(k);
    asm volatile("" ::: "memory");
    return r;
}

__attribute__((noinline)) void *alloc_round(long n) {
    void *p = malloc(16 + (n % 512));
    if (p != NULL)
        memset(p, (int)n, 16);
    asm volatile("" ::: "memory");
    return p;
}

static void started(const char *name) {
    pthread_setname_np(pthread_self(), name);
    pthread_mutex_lock(&mutex);
    ready_count++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&mutex);
}

static void *reader(void *arg) {
    (void)arg;
    started("reader");
    for (;;) {
        char c;
        ssize_t n = read(pipe_fds[0], &c, 1);
        if (n < 0 && errno == EINTR) {
            eintr_read++;
            continue;
        }
        if (n <= 0 || c == 'q')
            return NULL;
    }
}

static void *acceptor(void *arg) {
    (void)arg;
    started("acceptor");
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0 && errno == EINTR) {
            eintr_accept++;
            continue;
        }
        if (fd >= 0)
            close(fd);
        return NULL;
    }
}

static void *epoller(void *arg) {
    (void)arg;
    int ep = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, event_fd, &event);
    started("epoller");
    for (;;) {
        struct epoll_event got;
        int n = epoll_wait(ep, &got, 1, -1);
        if (n < 0 && errno == EINTR) {
            eintr_epoll++;
            continue;
        }
        close(ep);
        return NULL;
    }
}

static void *sleeper(void *arg) {
    (void)arg;
    started("sleeper");
    while (!stop) {
        struct timespec t = {0, 20 * 1000 * 1000};
        if (nanosleep(&t, NULL) != 0 && errno == EINTR)
            eintr_nanosleep++;
    }
    return NULL;
}

static void *waiter(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "waiter");
    pthread_mutex_lock(&mutex);
    ready_count++;
    pthread_cond_broadcast(&cond);
    while (!stop) {
        if (pthread_cond_wait(&cond, &mutex) != 0)
            cond_errors++;
    }
    pthread_mutex_unlock(&mutex);
    return NULL;
}

static void *mallocer(void *arg) {
    (void)arg;
    started("mallocer");
    for (long i = 0; !stop; i++) {
        errno = 0;
        void *p = alloc_round(i);
        if (p == NULL && errno == EINTR)
            eintr_malloc++;
        free(p);
        __atomic_add_fetch(&loops, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void *dlopener(void *arg) {
    (void)arg;
    started("dlopener");
    while (!stop) {
        void *h = dlopen("libutil.so.1", RTLD_NOW);
        if (h == NULL) {
            dl_errors++;
            continue;
        }
        dlclose(h);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int with_dl = argc > 1 && strcmp(argv[1], "dl") == 0;
    moncontrol(0);
    struct sigaction action = {.sa_handler = on_rt_signal, .sa_flags = SA_RESTART};
    sigemptyset(&action.sa_mask);
    sigaction(SIGRTMIN + 1, &action, NULL);
    if (pipe(pipe_fds) != 0)
        return 2;
    event_fd = eventfd(0, 0);
    listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    address.sun_family = AF_UNIX;
    /* An abstract socket: no file to clean up. */
    snprintf(address.sun_path + 1, sizeof address.sun_path - 1, "fntrace-attach-%d", getpid());
    socklen_t len = offsetof(struct sockaddr_un, sun_path) + 1 + strlen(address.sun_path + 1);
    if (bind(listen_fd, (struct sockaddr *)&address, len) != 0 || listen(listen_fd, 1) != 0)
        return 2;

    void *(*bodies[])(void *) = {reader, acceptor, epoller, sleeper, waiter, mallocer, dlopener};
    int count = with_dl ? 7 : 6;
    pthread_t threads[7];
    for (int i = 0; i < count; i++)
        if (pthread_create(&threads[i], NULL, bodies[i], NULL) != 0)
            return 2;
    pthread_mutex_lock(&mutex);
    while (ready_count < count)
        pthread_cond_wait(&cond, &mutex);
    pthread_mutex_unlock(&mutex);
    printf("ready\n");
    fflush(stdout);

    char line[64];
    while (fgets(line, sizeof line, stdin) != NULL) {
        long n;
        if (sscanf(line, "work %ld", &n) == 1) {
            long before_h = calls_handle, before_p = calls_parse, before_s = calls_put;
            for (long i = 0; i < n; i++)
                sink += handle_request(i);
            printf("done %ld %ld %ld\n", calls_handle - before_h, calls_parse - before_p,
                   calls_put - before_s);
            fflush(stdout);
        } else if (strcmp(line, "exit\n") == 0) {
            break;
        }
    }

    stop = 1;
    if (write(pipe_fds[1], "q", 1) != 1)
        return 3;
    int client = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(client, (struct sockaddr *)&address, len) != 0)
        return 3;
    unsigned long long one = 1;
    if (write(event_fd, &one, sizeof one) != sizeof one)
        return 3;
    pthread_mutex_lock(&mutex);
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&mutex);
    for (int i = 0; i < count; i++)
        pthread_join(threads[i], NULL);
    close(client);
    printf("eintr read=%ld accept=%ld epoll=%ld nanosleep=%ld cond=%ld malloc=%ld dl=%ld "
           "loops=%ld rt=%ld\n",
           eintr_read, eintr_accept, eintr_epoll, eintr_nanosleep, cond_errors, eintr_malloc,
           dl_errors, loops, (long)rt_signals);
    return 0;
}
