/* A -pg library that tests/programs/unloaded_library_names.rs loads with dlopen,
 * calls and unloads with dlclose while a recording runs:
 * plug_run(n) calls plug_mid n times, each calling plug_leaf twice. */
static volatile long sink;

__attribute__((noinline)) long plug_leaf(long x) {
    sink += x;
    return x * 2;
}

__attribute__((noinline)) long plug_mid(long x) { return plug_leaf(x) + plug_leaf(x + 1); }

long plug_run(long n) {
    long sum = 0;
    for (long i = 0; i < n; i++)
        sum += plug_mid(i);
    return sum;
}
