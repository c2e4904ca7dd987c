/* The second library of tests/c/dlclose_reopen.c, loaded where the first
 * was: foo calls bar n times. Its functions start where the first
 * library's do. */
static volatile long sink;

__attribute__((noinline)) long bar(long x) {
    sink += x;
    return x * 3;
}

long foo(long n) {
    long sum = 0;
    for (long i = 0; i < n; i++)
        sum += bar(i);
    return sum;
}
