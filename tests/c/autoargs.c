/* Arguments and return values typed from DWARF (-a; tests/programs/args_vs_uftrace.rs):
 * int, unsigned long and short, char *, char, unsigned char, bool, double,
 * float, pointers, an enum, structures by value (in one or two integer
 * registers, in two vector registers, returned), short, signed char and
 * int64_t, void. Built -g -pg at -O0 and -O2 (noinline keeps the calls),
 * -no-pie so that &counter is the same in every run. No library call
 * (tests/c/args.c has one). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
enum color { RED, GREEN = 5, BLUE };
struct pair { int a, b; };
struct big { long a, b; };
struct fp { double x, y; };
struct mix { int a; float f; };
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
__attribute__((noinline)) long two(struct big b, int x) { return b.a + b.b + x; }
__attribute__((noinline)) struct big ret2(long a) { struct big b = {a, a + 1}; return b; }
__attribute__((noinline)) struct mix retmix(int a) { struct mix m = {a, 1.5f}; return m; }
__attribute__((noinline)) double fps(struct fp p, int x) { return p.x + p.y + x; }
__attribute__((noinline)) long third(int x, struct big b, int y) { return b.a + x + y; }
__attribute__((noinline)) short neg(short s, signed char t, int64_t w) { return -s - t - (short)w; }

int main(void) {
    int s = 0;
    struct pair p = {1, 2};
    struct big b = {1, 2};
    struct fp f = {0.5, 0.25};
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
    s += two(b, 3);
    s += ret2(4).b;
    s += retmix(5).a;
    s += (int)fps(f, 1);
    s += third(7, b, 8);
    return s & 1;
}
