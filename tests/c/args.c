/* Arguments and return values for -A/-R (tests/programs/args_vs_uftrace.rs): ints,
 * a negative int, a pointer, strings (one NULL, one unreadable, one longer
 * than uftrace's 98 bytes), a char, doubles; returning ints, a pointer, a
 * char and a double; one call with values around another; a library call.
 * Built -O0 and -O2 (noinline keeps the calls), -no-pie
 * so that the pointers printed are the same in every run. */
#include <stddef.h>
#include <stdlib.h>

static const char greeting[] = "hello, world";
static const char long_text[] =
    "0123456789012345678901234567890123456789012345678901234567890123456789"
    "0123456789012345678901234567890123456789";
int counter;

__attribute__((noinline)) int add(int a, int b) { return a + b + counter; }
__attribute__((noinline)) long lookup(const char *key, long fallback) {
    return key ? (long)key[0] + fallback : fallback;
}
__attribute__((noinline)) const char *pick(int which) {
    return which ? greeting : NULL;
}
__attribute__((noinline)) char shout(char c) { return c - 32; }
__attribute__((noinline)) double scale(double x, int times) { return x * times; }
__attribute__((noinline)) int *where(int *p) { counter++; return p; }
__attribute__((noinline)) int untraced_args(int a) { return a * 3; }
__attribute__((noinline)) int ignore(const char *s) { return s != NULL; }
__attribute__((noinline)) int twice(int x) { return add(x, x); }

int main(void) {
    int s = 0;
    s += add(40, 2);
    s += add(-7, 3);
    s += (int)lookup("key", 100);
    s += (int)lookup(NULL, -1);
    s += (int)lookup(long_text, 0);
    s += pick(1) != NULL;
    s += pick(0) != NULL;
    s += shout('a');
    s += (int)scale(2.5, 4);
    s += (int)scale(-0.125, 8);
    s += *where(&counter);
    s += untraced_args(5);
    s += ignore((const char *)16);
    s += twice(3);
    s += getenv("FNTRACE_ARGS_TEST_UNSET") != NULL; /* a library call */
    return s & 1;
}
