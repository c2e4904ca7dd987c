// C++ functions for `fntrace record -a` (tests/auto_args_cxx.rs):
// std::string by value and by reference, returned (through a hidden
// first argument), enums of two sizes, a member function's `this`,
// integers, a pointer, floating-point values. Built with g++ -g -pg.
#include <string>

enum class Mode : unsigned char { Off, On, Auto = 7 };
enum Shade { Dark, Light = 3 };

struct Counter {
    long n;
    __attribute__((noinline)) long bump(long k) {
        n += k;
        return n;
    }
};

static volatile long sink;

__attribute__((noinline)) unsigned long measure(std::string s, const std::string &t) {
    return s.size() * 100 + t.size();
}

__attribute__((noinline)) std::string label(const std::string &prefix, int n) {
    return prefix + std::to_string(n);
}

__attribute__((noinline)) Mode toggle(Mode m) {
    return m == Mode::Off ? Mode::On : Mode::Auto;
}

__attribute__((noinline)) Shade flip(Shade s) { return s == Dark ? Light : Dark; }

__attribute__((noinline)) double mix(double a, float b, int c) { return a * b + c; }

__attribute__((noinline)) const char *pick(int i) { return i ? "yes" : "no"; }

int main() {
    std::string a = "first string, long enough for the heap";
    std::string b = "short";
    sink += measure(a, b);
    sink += label(b, 42).size();
    sink += (long)toggle(Mode::Off) + (long)toggle(Mode::On);
    sink += flip(Dark);
    sink += (long)mix(1.5, 2.0f, 3);
    sink += pick(1)[0];
    Counter counter{5};
    sink += counter.bump(4);
    return 0;
}
