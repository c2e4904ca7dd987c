/* tests/programs/libcalls.rs, --nest-libcall: n_main (built with -pg) calls
 * getppid 7 times itself, and libnest.so's n_lib_ppid (30 getppid each)
 * 10 times and n_lib_parse (strtol + strtoul) 5 times. By default the
 * executable's library calls are recorded: getppid 7, n_lib_ppid 10,
 * n_lib_parse 5, printf 1; with --nest-libcall also the library's:
 * getppid 300 more, strtol 5, strtoul 5. */
#include <stdio.h>
#include <unistd.h>

long n_lib_ppid(int times);
long n_lib_parse(const char *text);

__attribute__((noinline)) long n_main(void)
{
	long sum = 0;
	for (int i = 0; i < 7; i++)
		sum += getppid() != 0;
	for (int i = 0; i < 10; i++)
		sum += n_lib_ppid(30);
	for (int i = 0; i < 5; i++)
		sum += n_lib_parse("21");
	return sum;
}

int main(void)
{
	printf("%ld\n", n_main());
	return 0;
}
