/* A CPU-bound program that makes `uftrace record` lose records for real
 * (tests/flight_loss.rs): it caps its own address space (RLIMIT_AS) at what
 * it uses plus EXTRA_KB, so that libmcount soon cannot map another trace
 * buffer (`uftrace record -b 4K`) while the recorder falls behind, and
 * counts the records it could not write in a lost record, as it does when
 * shared memory runs out.
 *
 * Usage: uftrace_loses N EXTRA_KB */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

__attribute__((noinline)) long leaf(long x)
{
	__asm__ volatile("" : "+r"(x));
	return x * 3 + 1;
}

__attribute__((noinline)) long mid(long x)
{
	long total = 0;
	for (int i = 0; i < 4; i++)
		total += leaf(x + i);
	return total;
}

__attribute__((noinline)) long run(long n)
{
	long total = 0;
	for (long i = 0; i < n; i++)
		total += mid(i);
	return total;
}

/* Caps the address space at its current size plus extra_kb. */
static void cap_address_space(long extra_kb)
{
	long pages = 0;
	FILE *statm = fopen("/proc/self/statm", "r");
	if (!statm || fscanf(statm, "%ld", &pages) != 1)
		exit(2);
	fclose(statm);
	struct rlimit limit;
	limit.rlim_cur = limit.rlim_max = (rlim_t)pages * 4096 + (rlim_t)extra_kb * 1024;
	if (setrlimit(RLIMIT_AS, &limit) != 0)
		exit(3);
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 1;
	cap_address_space(atol(argv[2]));
	volatile long result = run(atol(argv[1]));
	(void)result;
	return 0;
}
