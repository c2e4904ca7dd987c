/* The first library of tests/c/dlclose_reopen.c: lib_a calls lib_b, which
 * calls lib_c (uftrace's own test of a library unloaded and another loaded
 * in its place has the same three). */
static volatile long sink;

__attribute__((noinline)) long lib_c(long x) {
    sink += x;
    return x + 1;
}

__attribute__((noinline)) long lib_b(long x) { return lib_c(x) + 1; }

long lib_a(long x) { return lib_b(x) + 1; }
