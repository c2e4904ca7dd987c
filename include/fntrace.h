/*
 * fntrace.h: the C ABI of fntrace, an in-process function tracer for
 * x86-64 Linux.
 *
 * Build the program with `gcc -pg` (or `gcc -pg -mfentry`) and link the
 * static library (see the README, "From C"):
 *
 *   gcc -pg prog.c -o prog /path/to/target/release/libfntrace.a \
 *       -lpthread -ldl -lm -lrt -lutil -lgcc_s
 *
 * Linked with fntrace, a `-pg` program no longer profiles itself with gprof
 * nor writes gmon.out: fntrace replaces glibc's __monstartup and _mcleanup.
 *
 * Without any call, the environment can trace the program: FNTRACE=graph,
 * FNTRACE_FILTER, FNTRACE_DEPTH, FNTRACE_OUTPUT=dir, FNTRACE_REPORT=1 (see
 * the README, "From C").
 *
 * Every function returning int returns 0 on success or a negative
 * errno-style code (-EINVAL, -ENOENT, ...) on failure; then
 * fntrace_last_error() says what went wrong. Every function may be called
 * from any thread; control calls are serialised.
 */
#ifndef FNTRACE_H
#define FNTRACE_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Finds every instrumented call site of the process (the executable and
 * every loaded shared object) and turns each into a NOP. Idempotent;
 * fntrace_enable and fntrace_record_start call it when needed.
 */
int fntrace_init(void);

/*
 * Switches the tracer named `tracer` on: "function", "graph", or the name
 * of a tracer registered from Rust. It traces the functions selected by the
 * last fntrace_set_filter (every function if none); on an enabled tracer,
 * replaces its selection.
 * -ENOENT: no tracer has this name. -EINVAL: `tracer` is NULL or not UTF-8.
 */
int fntrace_enable(const char *tracer);

/*
 * Switches the tracer named `tracer` off; its events stay for
 * fntrace_dump. -ENOENT: no tracer has this name.
 */
int fntrace_disable(const char *tracer);

/*
 * Sets the functions that tracers enabled from now on (and recordings)
 * trace: a comma-separated list of globs on function names, `*` any run of
 * characters, `?` one character; `!glob` excludes. Example:
 * "handle_*,!log_*" traces the functions whose name starts with handle_
 * except those starting with log_. "" selects every function.
 * -EINVAL: an empty glob (",," or "!") or one with spaces or control
 * characters; the filter is unchanged.
 */
int fntrace_set_filter(const char *globs);

/*
 * Writes the graph tracer's events recorded so far into `dir`, a uftrace
 * data directory (`uftrace replay -d dir`, `fntrace report dir`), and
 * forgets them. `dir` must not exist or be empty: -ENOTEMPTY otherwise,
 * nothing written.
 */
int fntrace_dump(const char *dir);

/*
 * Starts the streaming recorder: enables the graph tracer (with the current
 * filter) and streams its events into the uftrace data directory `dir`
 * (which must not exist or be empty) until fntrace_record_stop. Memory
 * stays bounded however long it runs. -EBUSY: a recording runs already.
 */
int fntrace_record_start(const char *dir);

/*
 * Stops the recording: disables the graph tracer, writes the remaining
 * events and finishes the directory. -ESRCH: no recording runs.
 */
int fntrace_record_stop(void);

/*
 * The message of the last failed fntrace call on this thread ("" if none
 * failed), naming the call and the problem. Never NULL; valid until this
 * thread's next failed fntrace call.
 */
const char *fntrace_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* FNTRACE_H */
