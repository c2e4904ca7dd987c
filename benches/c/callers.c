/*
 * 16 traced callers of one traced leaf, called through a table in a
 * pseudo-random order: every hooked return of the leaf goes back to one of
 * 16 callers (docs/journal/return-prediction-2026-11-26.md, "Measured"; section 6
 * of benches/overhead.rs runs it).
 *
 *   gcc -O2 -pg -o callers callers.c
 *   fntrace record --flight 16M -o /dev/shm/c -- ./callers 20000000
 */
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long leaf(long x) { return x * 3 + 1; }
__attribute__((noinline)) long caller0(long x) { return leaf(x) + 0; }
__attribute__((noinline)) long caller1(long x) { return leaf(x) + 1; }
__attribute__((noinline)) long caller2(long x) { return leaf(x) + 2; }
__attribute__((noinline)) long caller3(long x) { return leaf(x) + 3; }
__attribute__((noinline)) long caller4(long x) { return leaf(x) + 4; }
__attribute__((noinline)) long caller5(long x) { return leaf(x) + 5; }
__attribute__((noinline)) long caller6(long x) { return leaf(x) + 6; }
__attribute__((noinline)) long caller7(long x) { return leaf(x) + 7; }
__attribute__((noinline)) long caller8(long x) { return leaf(x) + 8; }
__attribute__((noinline)) long caller9(long x) { return leaf(x) + 9; }
__attribute__((noinline)) long caller10(long x) { return leaf(x) + 10; }
__attribute__((noinline)) long caller11(long x) { return leaf(x) + 11; }
__attribute__((noinline)) long caller12(long x) { return leaf(x) + 12; }
__attribute__((noinline)) long caller13(long x) { return leaf(x) + 13; }
__attribute__((noinline)) long caller14(long x) { return leaf(x) + 14; }
__attribute__((noinline)) long caller15(long x) { return leaf(x) + 15; }
static long (*const table[16])(long) = {caller0, caller1, caller2, caller3, caller4, caller5, caller6, caller7, caller8, caller9, caller10, caller11, caller12, caller13, caller14, caller15};
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000, total = 0;
    unsigned seed = 1;
    for (long i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        total += table[(seed >> 16) & 15](i);
    }
    printf("%ld\n", total);
    return 0;
}
