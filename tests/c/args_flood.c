/* Many calls of one function with an argument recorded (-A), faster than a
 * small buffer is written: tests/programs/args_values_lost.rs counts the calls that
 * kept their values and those that did not. */
#include <stdlib.h>

__attribute__((noinline)) long step(long x) { return x * 3 + 1; }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000, sum = 0;
    for (long i = 0; i < n; i++)
        sum += step(i);
    return (int)(sum & 1);
}
