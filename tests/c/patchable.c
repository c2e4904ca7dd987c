/* w_top -> w_mid -> 2 x w_leaf, 1000 times: built without -pg, with
 * -fpatchable-function-entry (tests/programs/patchable_vs_uftrace.rs), and traced
 * by `fntrace record` and `uftrace record -P .`. The volatile sink keeps
 * gcc -O2 from deleting or merging the calls. */
#include <stdio.h>

volatile long sink;

__attribute__((noinline)) long w_leaf(long x)
{
	sink += x;
	return x + 1;
}

__attribute__((noinline)) long w_mid(long x)
{
	return w_leaf(x) + w_leaf(x + 1);
}

__attribute__((noinline)) long w_top(long x)
{
	return w_mid(x) * 2;
}

int main(void)
{
	long sum = 0;
	for (long i = 0; i < 1000; i++)
		sum += w_top(i);
	printf("%ld\n", sum);
	return 0;
}
