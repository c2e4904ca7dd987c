/* A process family for `fntrace record` tests (tests/programs/record_command.rs).
 *
 *   family N          the parent: 4 threads call leaf() N times each, then
 *                     it forks a child that calls child_leaf() N times and
 *                     execs this program as "family exec N"; the parent
 *                     waits for it and calls leaf() N more times.
 *   family exec N     calls exec_leaf() N times, returns from main.
 *   family execl N    calls leaf() N times, then execl's this program as
 *                     "family exec N"; execlp and execle likewise (execle
 *                     with an environment of one variable, FAMILY=1).
 *   family _exit N    calls leaf() N times, then _exit(0): no atexit.
 *   family status K   exits with status K after one leaf() call.
 *   family dispositions 0
 *                     prints, for each fatal signal, its number and what
 *                     sigaction and signal report of its action (DFL: the
 *                     default; set: a handler), then calls leaf() once.
 *   family segv N     calls leaf() N times, then dereferences NULL inside
 *                     crash() (SIGSEGV).
 *   family abort N    calls leaf() N times, then abort() inside crash().
 *   family forklocked N
 *                     forks while another thread is inside a
 *                     dl_iterate_phdr callback (holding the loader's lock,
 *                     which the child inherits held); the child calls
 *                     child_leaf() N times and _exit(0)s.
 */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long sink;
static long n;

__attribute__((noinline)) void leaf(long i) { sink += i; }
__attribute__((noinline)) void child_leaf(long i) { sink += 2 * i; }
__attribute__((noinline)) void exec_leaf(long i) { sink += 3 * i; }

__attribute__((noinline)) void run(void (*f)(long), long count) {
    for (long i = 0; i < count; i++)
        f(i);
}

__attribute__((noinline)) void crash(int how) {
    if (how == 0)
        *(volatile int *)(long)sink = 0; /* sink is 0 here: a NULL store */
    abort();
}

__attribute__((noinline)) void *worker(void *arg) {
    (void)arg;
    run(leaf, n);
    return NULL;
}

static volatile int in_callback;

/* Holds the loader's lock (the callback runs under it) for half a second. */
static int hold_loader_lock(struct dl_phdr_info *info, size_t size, void *data) {
    (void)info;
    (void)size;
    (void)data;
    in_callback = 1;
    usleep(500 * 1000);
    return 1;
}

static void *loader_lock_holder(void *arg) {
    (void)arg;
    dl_iterate_phdr(hold_loader_lock, NULL);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 64;
    n = atol(argv[2]);
    if (strcmp(argv[1], "exec") == 0) {
        run(exec_leaf, n);
        return 0;
    }
    if (strncmp(argv[1], "execl", 5) == 0) {
        run(leaf, n);
        const char *self = "/proc/self/exe";
        if (strcmp(argv[1], "execl") == 0) {
            execl(self, argv[0], "exec", argv[2], (char *)NULL);
        } else if (strcmp(argv[1], "execlp") == 0) {
            execlp(self, argv[0], "exec", argv[2], (char *)NULL);
        } else {
            char *env[] = {"FAMILY=1", NULL};
            execle(self, argv[0], "exec", argv[2], (char *)NULL, env);
        }
        perror(argv[1]);
        return 127;
    }
    if (strcmp(argv[1], "_exit") == 0) {
        run(leaf, n);
        _exit(0);
    }
    if (strcmp(argv[1], "segv") == 0 || strcmp(argv[1], "abort") == 0) {
        run(leaf, n);
        sink = 0;
        crash(strcmp(argv[1], "segv") == 0 ? 0 : 1);
    }
    if (strcmp(argv[1], "dispositions") == 0) {
        int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
        for (int i = 0; i < 5; i++) {
            struct sigaction current;
            sigaction(fatal[i], NULL, &current);
            void (*handler)(int) = signal(fatal[i], SIG_DFL);
            signal(fatal[i], handler);
            printf("%d %s %s\n", fatal[i], current.sa_handler == SIG_DFL ? "DFL" : "set",
                   handler == SIG_DFL ? "DFL" : "set");
        }
        leaf(0);
        return 0;
    }
    if (strcmp(argv[1], "forklocked") == 0) {
        pthread_t holder;
        pthread_create(&holder, NULL, loader_lock_holder, NULL);
        while (!in_callback)
            usleep(1000);
        pid_t child = fork();
        if (child == 0) {
            run(child_leaf, n);
            _exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        pthread_join(holder, NULL);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    if (strcmp(argv[1], "status") == 0) {
        leaf(0);
        return (int)n;
    }
    pthread_t threads[4];
    for (int t = 0; t < 4; t++)
        pthread_create(&threads[t], NULL, worker, NULL);
    for (int t = 0; t < 4; t++)
        pthread_join(threads[t], NULL);
    pid_t pid = fork();
    if (pid == 0) {
        run(child_leaf, n);
        char *args[] = {argv[0], "exec", argv[2], NULL};
        execv("/proc/self/exe", args);
        perror("execv");
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    run(leaf, n);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
