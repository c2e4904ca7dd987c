/*
 * Functions made of a tail call, as SQLite has them at -O2 (built with no
 * instrumentation; tests/programs/runtime_patch.rs patches them with -P and
 * compares with uftrace's -P):
 *
 *   tc_bind_int   movslq %edx,%rdx; jmp tc_bind_int64   (sqlite3_bind_int)
 *   tc_free       jmp *config+8(%rip)                    (sqlite3_free)
 *
 * Usage: tail_entries N: N calls of each; prints the sum of what they
 * returned and did.
 */
#include <stdio.h>
#include <stdlib.h>

struct config {
    long allocated;
    void (*free_fn)(void *);
};

/* Set at run time: the compiler cannot follow the pointer. */
struct config config;

__attribute__((noinline)) long tc_bind_int64(long *slot, int index, long value)
{
    slot[index & 7] += value;
    return slot[index & 7];
}

__attribute__((noinline)) long tc_bind_int(long *slot, int index, int value)
{
    return tc_bind_int64(slot, index, value);
}

__attribute__((noinline)) void tc_release(void *p)
{
    config.allocated--;
    free(p);
}

__attribute__((noinline)) void tc_free(void *p)
{
    config.free_fn(p);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    long slots[8] = {0};
    long sum = 0;
    config.free_fn = tc_release;
    for (long i = 0; i < n; i++) {
        sum += tc_bind_int(slots, (int)i, (int)i);
        config.allocated++;
        tc_free(malloc(16));
    }
    printf("%ld %ld\n", sum, config.allocated);
    return 0;
}
