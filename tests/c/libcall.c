/* Library calls through the executable's PLT (tests/programs/libcalls.rs): l_main
 * -> l_ppid -> getppid() 300 times, l_text -> snprintf + strtol + strtoul
 * 50 times, l_mem -> malloc/free 20 times, all from functions built with
 * -pg (or, built plainly, patched with -P 'l_*'). `fntrace record
 * --libcall` and `uftrace record` (libcalls by default) of the same
 * binary must count the same calls. Results are printed and the buffer
 * escapes through a volatile pointer, so that gcc -O2 keeps every call
 * (atoi would become a call of strtol there: glibc's inline version). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) long l_ppid(void)
{
	long sum = 0;
	for (int i = 0; i < 300; i++)
		sum += getppid() != 0;
	return sum;
}

__attribute__((noinline)) long l_text(long x)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%ld", x);
	return strtol(buf, NULL, 10) + (long)strtoul(buf, NULL, 10);
}

char *volatile escaped;

__attribute__((noinline)) long l_mem(long n)
{
	char *p = malloc(n + 1);
	escaped = p;
	p[n] = (char)n;
	long v = p[n];
	free(p);
	return v;
}

__attribute__((noinline)) long l_main(void)
{
	long sum = l_ppid();
	for (long i = 0; i < 50; i++)
		sum += l_text(i);
	for (long i = 0; i < 20; i++)
		sum += l_mem(i);
	return sum;
}

int main(void)
{
	printf("%ld\n", l_main());
	return 0;
}
