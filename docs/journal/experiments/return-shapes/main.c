/* Driver for shapes.S (made by gen.py): see docs/journal/return-prediction-2026-11-26.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef long (*fnp)(void);
#define K 16
#define DECL(s) extern long c0_##s(void), c1_##s(void), c2_##s(void), c3_##s(void), c4_##s(void), c5_##s(void), c6_##s(void), c7_##s(void), c8_##s(void), c9_##s(void), c10_##s(void), c11_##s(void), c12_##s(void), c13_##s(void), c14_##s(void), c15_##s(void); extern long fib_##s(long);
DECL(N) DECL(A) DECL(B)
#define TAB(s) {c0_##s,c1_##s,c2_##s,c3_##s,c4_##s,c5_##s,c6_##s,c7_##s,c8_##s,c9_##s,c10_##s,c11_##s,c12_##s,c13_##s,c14_##s,c15_##s}
static fnp tabs[3][K] = {TAB(N), TAB(A), TAB(B)};
static long (*fibs[3])(long) = {fib_N, fib_A, fib_B};
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    long n = 20000000; int rounds = 5;
    unsigned char *seq = malloc(n);
    unsigned x = 12345; for (long i = 0; i < n; i++) { x = x * 1103515245 + 12345; seq[i] = getenv("CYCLE") ? i % atoi(getenv("CYCLE")) : (x >> 16) % K; }
    const char *names = "NAB";
    double best[2][3]; for (int a = 0; a < 2; a++) for (int s = 0; s < 3; s++) best[a][s] = 1e9;
    for (int r = 0; r < rounds; r++) for (int s = 0; s < 3; s++) {
        double t0 = now(); long acc = 0;
        for (long i = 0; i < n; i++) acc += tabs[s][seq[i]]();
        double t1 = now();
        if (acc < 0) puts("");
        if (t1 - t0 < best[0][s]) best[0][s] = t1 - t0;
        t0 = now(); long f = fibs[s](32); t1 = now();   /* 7,049,155 calls */
        if (f != 2178309) { printf("fib wrong %ld\n", f); return 1; }
        if (t1 - t0 < best[1][s]) best[1][s] = t1 - t0;
    }
    for (int s = 1; s < 3; s++)
        printf("shape %c: 16 callers (2 traced calls each): %.2f ns per traced call over untraced; fib(32): %.2f ns per call\n",
            names[s], (best[0][s] - best[0][0]) * 1e9 / (2.0 * n), (best[1][s] - best[1][0]) * 1e9 / 7049155.0);
    printf("untraced: %.2f ns per iteration, fib %.2f ns per call\n", best[0][0] * 1e9 / n, best[1][0] * 1e9 / 7049155.0);
    return 0;
}
