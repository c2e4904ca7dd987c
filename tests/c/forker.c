/* A pre-fork program (tests/programs/forked_children.rs): the parent forks N
 * children at once; each child calls leaf() 1,000 times and then ends as
 * MODE says; the parent waits for them all and calls leaf() 1,000 times
 * itself.
 *
 *   forker N _exit|exit|exec|return|term|kill|kill-at-once
 *
 *   _exit         the child leaves with _exit(0): no atexit handler runs;
 *   exit          the child leaves with exit(0);
 *   exec          the child execs /bin/true (nothing of it is traced);
 *   return        the child returns from main;
 *   term          the child raises SIGTERM (its default action);
 *   kill          the child waits until the recording holds all its
 *                 records (its TID.dat in $FNTRACE_OUTPUT has 2,002 of
 *                 them: work and 1,000 leaf calls), then raises SIGKILL:
 *                 killed after its last drain;
 *   kill-at-once  the child raises SIGKILL at once: what it held after its
 *                 last drain is lost.
 *
 * So a complete recording holds exactly (N + 1) * 1,000 calls of leaf.
 * Exit status: 0 when every child ended with status 0, or was killed by
 * the signal its MODE raises.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CALLS 1000

static volatile long sink;

__attribute__((noinline)) void leaf(long i) {
    sink += i;
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void work(void) {
    for (long i = 0; i < CALLS; i++)
        leaf(i);
}

/* Waits (at most a minute) until this process's records are in the
 * recording: 2 per leaf call, 2 for work, 16 bytes each. Not traced. */
__attribute__((no_instrument_function)) static void wait_drained(void) {
    const char *dir = getenv("FNTRACE_OUTPUT");
    char path[4096];
    struct stat st;
    struct timespec pause = {0, 1000000};
    if (!dir)
        return;
    snprintf(path, sizeof path, "%s/%d.dat", dir, (int)getpid());
    for (int i = 0; i < 60000; i++) {
        if (stat(path, &st) == 0 && st.st_size >= (2 * CALLS + 2) * 16)
            return;
        nanosleep(&pause, NULL);
    }
    fprintf(stderr, "forker: %s never held the child's records\n", path);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: forker N _exit|exit|exec|return|term|kill|kill-at-once\n");
        return 2;
    }
    int children = atoi(argv[1]);
    const char *mode = argv[2];
    for (int i = 0; i < children; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            work();
            if (!strcmp(mode, "_exit"))
                _exit(0);
            if (!strcmp(mode, "exit"))
                exit(0);
            if (!strcmp(mode, "exec")) {
                execl("/bin/true", "true", (char *)NULL);
                perror("exec");
                _exit(1);
            }
            if (!strcmp(mode, "term"))
                raise(SIGTERM);
            if (!strcmp(mode, "kill")) {
                wait_drained();
                raise(SIGKILL);
            }
            if (!strcmp(mode, "kill-at-once"))
                raise(SIGKILL);
            return 0;
        }
    }
    int expected = !strcmp(mode, "term") ? SIGTERM : !strncmp(mode, "kill", 4) ? SIGKILL : 0;
    int failed = 0, status;
    while (wait(&status) > 0)
        if (WIFSIGNALED(status) ? WTERMSIG(status) != expected : WEXITSTATUS(status) != 0)
            failed++;
    work();
    if (failed) {
        fprintf(stderr, "forker: %d children failed\n", failed);
        return 1;
    }
    return 0;
}
