/* Many calls with a string argument and a return value, for counting the
 * events written without their values (tests/args_dropped.rs). */
#include <stdlib.h>

static volatile long sink;

__attribute__((noinline)) long lookup(const char *key, long n) {
    sink += n;
    return key[0] + n;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    for (long i = 0; i < n; i++)
        sink += lookup("user:42", i);
    return 0;
}
