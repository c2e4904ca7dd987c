/* A shared library built plainly (no -pg) for tests/programs/libcalls.rs's
 * --nest-libcall case: its functions call into the C library through the
 * library's own PLT, calls only `--nest-libcall` records. */
#include <stdlib.h>
#include <unistd.h>

long n_lib_ppid(int times)
{
	long sum = 0;
	for (int i = 0; i < times; i++)
		sum += getppid() != 0;
	return sum;
}

long n_lib_parse(const char *text)
{
	return strtol(text, NULL, 10) + (long)strtoul(text, NULL, 10);
}
