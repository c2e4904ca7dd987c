/* Cost per call: N calls of hot() (no spec) and of spec() (-A/-R), each
 * timed with the monotonic clock around its loop. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
__attribute__((noinline)) int hot(int x) { return x + 1; }
__attribute__((noinline)) int spec(int x, const char *s) { return x + (s != 0); }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000000, s = 0;
    double t0 = now();
    for (int i = 0; i < n; i++) s += hot(i);
    double t1 = now();
    for (int i = 0; i < n; i++) s += spec(i, "key");
    double t2 = now();
    fprintf(stderr, "hot %.1f ns/call, spec %.1f ns/call (%d)\n", (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9, s & 1);
    return 0;
}
