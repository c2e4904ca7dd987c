/* Calls through the PLT that return twice: `setjmp` (glibc's `_setjmp`),
 * as an interpreter's protected calls use it (Lua's luaD_rawrunprotected).
 * `setjmp ROUNDS EVERY`: ROUNDS protected calls of sj_work; every EVERY-th
 * one (0: none) leaves through `longjmp`, so that `setjmp` returns a
 * second time. Prints the sum of the results. Built with `gcc -pg`. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

static jmp_buf sj_env;

__attribute__((noinline)) int sj_work(int i, int every)
{
    if (every != 0 && i % every == 0)
        longjmp(sj_env, i);
    return i;
}

__attribute__((noinline)) int sj_protected(int i, int every)
{
    int thrown = setjmp(sj_env);
    if (thrown == 0)
        return sj_work(i, every);
    return -thrown;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    int every = argc > 2 ? atoi(argv[2]) : 0;
    long sum = 0;
    for (int i = 1; i <= rounds; i++)
        sum += sj_protected(i, every);
    printf("%ld\n", sum);
    return 0;
}
