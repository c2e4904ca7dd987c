/* The cost of recording a function's arguments and return value
 * (benches/args.rs): N calls of plain(a, b), then N of spec(a, b), each
 * loop timed with the thread's CPU clock; prints both per call. Built with
 * -pg -O2; the bench gives spec (only) an -A/-R spec in one case. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

__attribute__((noinline)) long plain(long a, long b) { return a * 3 + b; }
__attribute__((noinline)) long spec(long a, long b) { return a * 3 + b; }

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000, sum = 0;
	long t0 = ns();
	for (long i = 0; i < n; i++)
		sum += plain(i, 7);
	long t1 = ns();
	for (long i = 0; i < n; i++)
		sum += spec(i, 7);
	long t2 = ns();
	printf("%.3f %.3f %ld\n", (double)(t1 - t0) / n, (double)(t2 - t1) / n, sum);
	return 0;
}
