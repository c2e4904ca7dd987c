// C++ functions whose names take many shapes, each called at least once
// (tools/tests/cpp_names.rs): members, constructors and destructors,
// operators (a conversion operator and a call operator too), templates,
// overloads, a function of an anonymous namespace, lambdas, virtual
// functions, and the standard containers' own functions.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include <algorithm>
#include <functional>

namespace shapes {
struct Point {
    int x, y;
    Point(int a, int b) : x(a), y(b) {}
    ~Point() { sink += x; }
    Point operator+(const Point &o) const { return Point(x + o.x, y + o.y); }
    bool operator<(const Point &o) const { return x < o.x; }
    bool operator==(const Point &o) const { return x == o.x && y == o.y; }
    int operator()(int k) const { return x * k; }
    explicit operator bool() const { return x != 0; }
    static int sink;
};
int Point::sink = 0;

template <typename T, int N> struct Grid {
    T cells[N];
    T &at(int i) { return cells[i % N]; }
    template <typename F> void each(F f) { for (int i = 0; i < N; i++) f(cells[i]); }
};

namespace {
int hidden(int v) { return v * 3; }
}

int overloaded(int v) { return v + 1; }
int overloaded(double v) { return (int)v + 2; }
int overloaded(const std::string &s) { return (int)s.size(); }

struct Base { virtual ~Base() {} virtual int area() const = 0; };
struct Square : Base { int s; explicit Square(int v) : s(v) {} int area() const override { return s * s; } };

template <typename T> T twice(T v) { return v + v; }
std::ostream *nothing() { return nullptr; }
}  // namespace shapes

int run() {
    using namespace shapes;
    int total = 0;
    Point a(1, 2), b(3, 4);
    Point c = a + b;
    total += (a < b) + (a == b) + c(2) + (bool)c;
    Grid<int, 4> g{};
    g.at(1) = 5;
    g.each([&total](int v) { total += v; });
    total += hidden(2) + overloaded(1) + overloaded(2.5) + overloaded(std::string("abc"));
    std::unique_ptr<Base> sq(new Square(3));
    total += sq->area();
    total += twice(3) + (int)twice(1.5);
    std::vector<Point> pts;
    for (int i = 0; i < 5; i++) pts.emplace_back(5 - i, i);
    std::sort(pts.begin(), pts.end());
    std::map<std::string, int> m;
    m["x"] = 1;
    std::function<int(int)> fn = [](int v) { return v * 2; };
    total += fn(4) + m["x"] + (nothing() == nullptr);
    return total;
}

int main() { printf("%d\n", run()); return 0; }
