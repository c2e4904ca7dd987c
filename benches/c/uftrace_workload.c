/* Standalone program for the `uftrace record` comparison in
 * benches/overhead.rs: the fixtures' call tree, from the same source file
 * (tests/fixtures/c/workload.c, found through `-I`), with its own `main`.
 * The benchmark builds it at run time with `gcc -O2 -pg` (traced by
 * uftrace) and with `gcc -O2` (the untraced baseline).
 *
 * Usage: uftrace_workload N    calls run(N): 2 + 5N calls with main. */
#include <stdio.h>
#include <stdlib.h>

#define PREFIX standalone_
#include "workload.c"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s ITERATIONS\n", argv[0]);
        return 2;
    }
    long iterations = strtol(argv[1], NULL, 10);
    printf("%ld\n", standalone_run(iterations));
    return 0;
}
