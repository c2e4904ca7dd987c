/*
 * Functions whose first instruction jumps over the padding before a loop,
 * as gcc -O2 lays out a `while` loop that starts with its test (SQLite's
 * sqlite3ExprCanBeNull, sqlite3ExprCompareSkip,
 * sqlite3_database_file_object): `jmp TEST; nopw ...; BODY: ...; TEST:
 * ...; jne BODY`. Built with no instrumentation; tests/programs/runtime_patch.rs
 * patches them with -P and compares with uftrace's -P.
 *
 * Usage: rotated_loops N: N calls of each; prints what they returned.
 */
#include <stdio.h>
#include <stdlib.h>

struct node {
    unsigned char kind;
    struct node *next;
};

/* Skips the wrappers (kinds 1 and 2) down a chain: sqlite3ExprCanBeNull's
 * loop over TK_UPLUS/TK_UMINUS. */
__attribute__((noinline)) int rl_kind(struct node *p)
{
    while (p->kind == 1 || p->kind == 2)
        p = p->next;
    return p->kind;
}

/* Walks back to the string's start: sqlite3_database_file_object's loop. */
__attribute__((noinline)) const char *rl_back(const char *p)
{
    while (p[-1] != 0 || p[-2] != 0)
        p--;
    return p;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    struct node leaf = {7, NULL}, minus = {2, &leaf}, plus = {1, &minus};
    static const char text[] = "\0\0abc\0def";
    long sum = 0;
    for (long i = 0; i < n; i++) {
        sum += rl_kind(i % 2 ? &plus : &leaf);
        sum += rl_back(text + 9) - text;
    }
    printf("%ld\n", sum);
    return 0;
}
