/* The cost of a library call through the PLT (benches/libcall.rs): lc_loop
 * calls lc_cheap, a function of a shared library of its own
 * (libcall_cheap.c), N times through the executable's PLT, and prints
 * the thread's CPU time and the wall time per call. Built with -pg (so
 * that an fntrace start-up finds call sites: main and lc_loop, called
 * once), -O2: nothing but the N library calls runs in the loop. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

long lc_cheap(long x);

static long ns(clockid_t clock)
{
	struct timespec t;
	clock_gettime(clock, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

__attribute__((noinline)) long lc_loop(long n)
{
	long sum = 0;
	for (long i = 0; i < n; i++)
		sum += lc_cheap(i);
	return sum;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 10000000;
	lc_loop(n / 10); /* warm: binds the slot, faults the pages */
	long cpu = ns(CLOCK_THREAD_CPUTIME_ID), wall = ns(CLOCK_MONOTONIC);
	long sum = lc_loop(n);
	cpu = ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
	wall = ns(CLOCK_MONOTONIC) - wall;
	printf("%.3f %.3f %ld\n", (double)cpu / n, (double)wall / n, sum);
	return 0;
}
