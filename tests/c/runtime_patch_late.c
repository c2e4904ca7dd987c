/* Run-time entry patching while a tracer is already enabled
 * (tests/programs/runtime_patch.rs), linked with libfntrace.a, no instrumentation:
 * the graph tracer, enabled first, selects the new site at once; calls
 * before the patch and after the disable are not recorded.
 *
 * usage: runtime_patch_late DIR */
#include <fntrace.h>
#include <stdio.h>

volatile long sink;

__attribute__((noinline)) long w_leaf(long x)
{
	sink += x;
	return x + 1;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	if (fntrace_enable("graph") != 0)
		return 1;
	for (int i = 0; i < 10; i++)
		w_leaf(i);
	printf("refused %d\n", fntrace_patch_functions("w_*"));
	for (int i = 0; i < 100; i++)
		w_leaf(i);
	fntrace_disable("graph");
	for (int i = 0; i < 10; i++)
		w_leaf(i);
	printf("dump %d\n", fntrace_dump(argv[1]));
	return 0;
}
