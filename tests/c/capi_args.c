/*
 * Arguments and return values through the C ABI (tests/programs/capi_args.rs):
 * fntrace_set_arg_specs, then a recording (fntrace_record_start DIR ...
 * fntrace_record_stop). Built with gcc -pg, linked with libfntrace.a.
 * Prints one "what code" line per call of the C API, and the last error
 * of each failed one.
 */
#include <stdio.h>

#include "fntrace.h"

static volatile long sink;

__attribute__((noinline)) long handle_get(const char *key, long n) {
    sink += n;
    return key[0] + n;
}
__attribute__((noinline)) double half(double x) { return x / 2; }
__attribute__((noinline)) long plain(long k) { return k + 1; }

static void said(const char *what, int code) {
    printf("%s %d%s%s\n", what, code, code < 0 ? " " : "", code < 0 ? fntrace_last_error() : "");
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    said("bad", fntrace_set_arg_specs("handle_get@arg9", ""));
    said("unmatched", fntrace_set_arg_specs("handle_get@arg1/s,arg2;no_such_function@arg1",
                                            "handle_get@retval;half@retval/f"));
    said("set", fntrace_set_arg_specs("handle_get@arg1/s,arg2;half@fparg1",
                                      "handle_get@retval;half@retval/f"));
    said("start", fntrace_record_start(argv[1]));
    said("busy", fntrace_set_arg_specs("", ""));
    sink += handle_get("user:42", 1);
    sink += handle_get("user:7", 2);
    sink += (long)half(5.0);
    sink += plain(3);
    said("stop", fntrace_record_stop());
    return 0;
}
