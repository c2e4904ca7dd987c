/* A program that waits to be ended (tests/programs/record_signals.rs): it calls
 * leaf() 1,000 times, prints "ready PID" on stdout, and then waits for
 * signals for ever; only a signal's default action ends it.
 *
 *   waiter
 */
#include <stdio.h>
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

int main(void) {
    work();
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    for (;;)
        pause();
}
