// fntrace record on a C++ program built with g++ -pg (tests/record_command.rs).
#include <cstdlib>
#include <thread>
#include <vector>

namespace shapes {
struct Shape {
    virtual ~Shape() = default;
    virtual long area(long k) const = 0;
};
struct Square : Shape {
    long side;
    explicit Square(long s) : side(s) {}
    long area(long k) const override { return side * side + k; }
};
template <typename T> __attribute__((noinline)) long total(const T &shape, long n) {
    long sum = 0;
    for (long i = 0; i < n; i++)
        sum += shape.area(i);
    return sum;
}
} // namespace shapes

static volatile long sink;

__attribute__((noinline)) void work(long n) {
    shapes::Square square(3);
    sink += shapes::total(square, n);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? std::atol(argv[1]) : 1000;
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; t++)
        threads.emplace_back(work, n);
    for (auto &thread : threads)
        thread.join();
    return 0;
}
