/* Arguments and return values typed from DWARF (-a; tests/args_vs_uftrace.rs):
 * int, unsigned long and short, char *, char, unsigned char, bool, double,
 * float, pointers, an enum, a structure by value, short, signed char and
 * int64_t, void. Built -g -pg at -O0 and -O2 (noinline keeps the calls),
 * -no-pie so that &counter is the same in every run. No library call: the
 * prototypes uftrace knows for libc's are not fntrace's (docs/arguments.md). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
enum color { RED, GREEN = 5, BLUE };
struct pair { int a, b; };
int counter;

__attribute__((noinline)) int add(int a, int b) { return a + b + counter; }
__attribute__((noinline)) unsigned long uadd(unsigned long a, unsigned short b) { return a + b; }
__attribute__((noinline)) long lookup(const char *key, long fallback) { return key ? key[0] + fallback : fallback; }
__attribute__((noinline)) const char *pick(int which) { return which ? "hello" : NULL; }
__attribute__((noinline)) char shout(char c) { return c - 32; }
__attribute__((noinline)) unsigned char ushout(unsigned char c) { return c + 1; }
__attribute__((noinline)) bool is_odd(bool force, int x) { return force || (x & 1); }
__attribute__((noinline)) double scale(double x, int times) { return x * times; }
__attribute__((noinline)) float halve(float x) { return x / 2; }
__attribute__((noinline)) int *where(int *p) { counter++; return p; }
__attribute__((noinline)) enum color next(enum color c) { return c == RED ? GREEN : c == GREEN ? BLUE : RED; }
__attribute__((noinline)) int sum(struct pair p) { return p.a + p.b; }
__attribute__((noinline)) int sump(const struct pair *p) { return p->a + p->b; }
__attribute__((noinline)) void nothing(void) { counter++; }
__attribute__((noinline)) short neg(short s, signed char t, int64_t w) { return -s - t - (short)w; }

int main(void) {
    int s = 0;
    struct pair p = {1, 2};
    s += add(40, 2);
    s += uadd(1UL << 40, 7);
    s += lookup("key", 100);
    s += pick(1) != NULL;
    s += shout('a');
    s += ushout(200);
    s += is_odd(false, 3);
    s += (int)scale(2.5, 4);
    s += (int)halve(3.0f);
    s += *where(&counter);
    s += next(GREEN);
    s += next(BLUE);
    s += sum(p);
    s += sump(&p);
    nothing();
    s += neg(-3, -4, -100000000000LL);
    return s & 1;
}
