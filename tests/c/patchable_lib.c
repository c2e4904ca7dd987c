/* A shared object built with -fpatchable-function-entry=5 and no -pg
 * (tests/patchable_sites.rs dlopens it): gcc's five one-byte NOPs at the
 * entry of pl_top, pl_mid and pl_leaf; two NOPs before the symbol and five
 * at the entry of pl_before (7,2); only three at the entry of pl_short
 * (3,0), which fntrace refuses. */
volatile long pl_sink;

__attribute__((noinline)) long pl_leaf(long x)
{
	pl_sink += x;
	return x + 1;
}

__attribute__((noinline)) long pl_mid(long x)
{
	return pl_leaf(x) + pl_leaf(x + 1);
}

__attribute__((noinline)) long pl_top(long x)
{
	return pl_mid(x) * 2;
}

__attribute__((noinline, patchable_function_entry(7, 2))) long pl_before(long x)
{
	pl_sink += x;
	return x * 3;
}

__attribute__((noinline, patchable_function_entry(3, 0))) long pl_short(long x)
{
	pl_sink += x;
	return x * 5;
}
