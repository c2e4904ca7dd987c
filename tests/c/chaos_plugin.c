/*
 * The plugin of the chaos benchmark (tests/common/chaos.rs): a small call
 * tree built as a shared object twice, `-DPREFIX=plug_a_` with
 * `gcc -pg -mfentry` and `-DPREFIX=plug_b_` with `gcc -pg`, so that both
 * kinds of call site come and go with dlopen/dlclose.
 *
 * PREFIX run(n) = sum over i < n of PREFIX mid(i); mid(x) = 12x + 22
 * (4 calls of leaf). run(1) = 22, run(2) = 56.
 */
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define FN(name) CAT(PREFIX, name)

__attribute__((noinline)) long FN(leaf)(long x)
{
    /* Keeps gcc from folding the call away: it cannot see through asm. */
    __asm__ volatile("" : "+r"(x));
    return x * 3 + 1;
}

__attribute__((noinline)) long FN(mid)(long x)
{
    long total = 0;
    for (int i = 0; i < 4; i++)
        total += FN(leaf)(x + i);
    return total;
}

__attribute__((noinline)) long FN(run)(long n)
{
    long total = 0;
    for (long i = 0; i < n; i++)
        total += FN(mid)(i);
    return total;
}
