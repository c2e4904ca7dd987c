/* A pre-fork program (tests/fork_loss.rs): the parent forks N children at
 * once; each child calls leaf() 1,000 times and then ends as MODE says;
 * the parent waits for them all and calls leaf() 1,000 times itself.
 *
 *   forker N _exit|exit|exec|return
 *
 *   _exit   the child leaves with _exit(0): no atexit handler runs;
 *   exit    the child leaves with exit(0);
 *   exec    the child execs /bin/true (nothing of it is traced);
 *   return  the child returns from main.
 *
 * So a complete recording holds exactly (N + 1) * 1,000 calls of leaf.
 * Exit status: 0 when every child ended with status 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: forker N _exit|exit|exec|return\n");
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
            return 0;
        }
    }
    int failed = 0, status;
    while (wait(&status) > 0)
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed++;
    work();
    if (failed) {
        fprintf(stderr, "forker: %d children failed\n", failed);
        return 1;
    }
    return 0;
}
