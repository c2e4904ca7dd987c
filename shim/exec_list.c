/* execl, execlp and execle: the exec functions that take their arguments
 * as a variadic list. glibc implements them with its internal execve,
 * which no wrapper sees, so fntrace defines them: each gathers the list
 * into an argv array and calls execv, execvp or execve, which are
 * fntrace's wrappers (src/preload/exec.rs: they finish this process's
 * session of the recording first). The exported names are Rust functions
 * (rustc exports from libfntrace.so only what Rust defines) that jump
 * here, leaving the variadic call's registers as the caller set them.
 *
 * Built without instrumentation: nothing here calls mcount. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

/* The arguments after `arg`, up to the NULL that ends them. */
static long count_rest(const char *arg, va_list ap) {
    long count = 0;
    if (arg == NULL)
        return 0;
    while (va_arg(ap, const char *) != NULL) {
        if (++count >= INT_MAX)
            return -1;
    }
    return count;
}

/* Fills argv with arg and the list, NULL-terminated (argv holds count + 2). */
static void gather(const char **argv, const char *arg, long count, va_list ap) {
    long i = 0;
    if (arg != NULL) {
        argv[i++] = arg;
        for (long k = 0; k < count; k++)
            argv[i++] = va_arg(ap, const char *);
    }
    argv[i] = NULL;
}

/* In a function whose last named parameter is `arg`: declares `argv`, the
 * list from `arg` to its NULL, NULL-terminated, and leaves `ap` started,
 * at that NULL (on x86-64 `gather` advances the caller's va_list; the
 * caller ends it). Returns -1 with
 * E2BIG from the function if the list is too long. A macro because a
 * va_list can only be started in the variadic function itself. */
#define GATHER_ARGV(argv, arg, ap)            \
    va_list ap;                               \
    va_start(ap, arg);                        \
    long count_##argv = count_rest(arg, ap);  \
    va_end(ap);                               \
    if (count_##argv < 0) {                   \
        errno = E2BIG;                        \
        return -1;                            \
    }                                         \
    const char *argv[count_##argv + 2];       \
    va_start(ap, arg);                        \
    gather(argv, arg, count_##argv, ap)

__attribute__((visibility("hidden"))) int fntrace_execl_list(const char *path, const char *arg, ...) {
    GATHER_ARGV(argv, arg, ap);
    va_end(ap);
    return execv(path, (char *const *)argv);
}

__attribute__((visibility("hidden"))) int fntrace_execlp_list(const char *file, const char *arg, ...) {
    GATHER_ARGV(argv, arg, ap);
    va_end(ap);
    return execvp(file, (char *const *)argv);
}

/* execle: the environment follows the NULL that ends the arguments. */
__attribute__((visibility("hidden"))) int fntrace_execle_list(const char *path, const char *arg, ...) {
    GATHER_ARGV(argv, arg, ap);
    if (arg != NULL)
        (void)va_arg(ap, const char *); /* the NULL */
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, (char *const *)argv, envp);
}
