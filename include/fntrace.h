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
 * FNTRACE_FILTER, FNTRACE_DEPTH, FNTRACE_OUTPUT=dir, FNTRACE_REPORT=1,
 * FNTRACE_FLIGHT=64M with FNTRACE_FLIGHT_TRIGGER='handle_*>20ms' (see
 * docs/environment.md).
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
 * Run-time entry patching (uftrace's -P): the functions built without
 * instrumentation whose names match the comma-separated `globs` ("w_*")
 * get a stub and a jump at their entry, and are traced like any other by
 * the tracers enabled (now and later). Returns how many functions matched
 * so far were refused as unsafe to patch (0: none; see
 * docs/runtime-patching.md), or -errno.
 */
int fntrace_patch_functions(const char *globs);

/*
 * The arguments and return values the graph tracer records from now on, in
 * uftrace's syntax, several specs joined by ';' (docs/arguments.md):
 * arguments "handle_get@arg1/s,arg2;lookup@arg1/x", retval
 * "handle_get@retval/d"; "" for none. Replaces the specs set before (both
 * kinds). Returns how many globs select no function with a call site (0:
 * all do), or -errno: -EINVAL (a spec that does not parse), -EBUSY (a
 * recording or the flight recorder runs: stop it first).
 */
int fntrace_set_arg_specs(const char *arguments, const char *retval);

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
 * fntrace_record_start with a mode: "lossless" (what fntrace_record_start
 * does: a thread whose buffer is full waits for the writer, nothing is
 * lost) or "drop" (the event is dropped and counted, a lost record marks
 * the gap: the program never waits on the disk). -EINVAL: another mode.
 */
int fntrace_record_start_mode(const char *dir, const char *mode);

/*
 * Stops the recording: disables the graph tracer, writes the remaining
 * events and finishes the directory. -ESRCH: no recording runs.
 */
int fntrace_record_stop(void);

/*
 * Starts the flight recorder: enables the graph tracer (with the current
 * filter) and keeps the most recent `budget_bytes` of events in memory (0:
 * 64 MiB; 16 bytes an event). Snapshots its triggers write go under `dir`
 * (made if missing; checked now, not when a snapshot is due), each in a
 * directory named by time and function with a trigger.txt saying what
 * fired it. -EBUSY: a flight recorder runs already. -EINVAL: `dir` cannot
 * hold snapshots.
 */
int fntrace_flight_start(const char *dir, unsigned long long budget_bytes);

/*
 * Adds a trigger to the running flight recorder, written as in
 * FNTRACE_FLIGHT_TRIGGER: "handle_*>5ms" (a call of a function matching
 * the glob lasting 5 ms or more; units ns, us, ms, s; with
 * "@trigger-thread" after it, its snapshot holds only the thread that made
 * the call), "panic" (a Rust panic), "SIGUSR1" (a signal). Several may
 * be set. At most 6 trigger snapshots a minute are written
 * (FNTRACE_FLIGHT_RATE); the others are counted. -EINVAL: not a trigger.
 * -ESRCH: no flight recorder runs.
 */
int fntrace_flight_trigger(const char *trigger);

/*
 * Removes the triggers with this glob ("handle_*"), "panic" or signal name;
 * NULL removes all. -ENOENT: no such trigger.
 */
int fntrace_flight_untrigger(const char *which);

/*
 * Writes the flight recorder's window now into `dir` (new or empty), a
 * uftrace data directory. -ESRCH: no flight recorder runs.
 */
int fntrace_flight_snapshot(const char *dir);

/*
 * Stops the flight recorder started by fntrace_flight_start (or
 * FNTRACE_FLIGHT); the snapshots its triggers have due are written first.
 * -ESRCH: none runs.
 */
int fntrace_flight_stop(void);

/*
 * Writes the profile tracer's snapshot (every thread's calls since the
 * tracer was first enabled or last reset, merged: per function, count,
 * total, self, min, max and a log-linear histogram of durations; the call
 * trie) to `fd` in fntrace's profile text form ("fntrace-profile 1" ...
 * "end", see docs/live-control.md), which `fntrace top`/`fntrace flame`
 * read. May be called while traced threads run. Errors: the negated errno
 * of write(2).
 */
int fntrace_profile_write(int fd);

/*
 * Forgets the calls the profile tracer counted so far (calls in progress
 * are not counted when they end).
 */
int fntrace_profile_reset(void);

/*
 * The message of the last failed fntrace call on this thread ("" if none
 * failed), naming the call and the problem. Never NULL; valid until this
 * thread's next failed fntrace call.
 */
const char *fntrace_last_error(void);

/*
 * Attach: what `fntrace attach PID` calls in a running process after
 * loading libfntrace.so into it with dlopen. Finds the call sites of every
 * loaded object (also those bound to glibc's mcount), makes them NOPs and
 * serves the default control socket (/tmp/fntrace-UID/PID.sock), as
 * FNTRACE_CONTROL=1 does at start-up. Again: changes nothing while the
 * socket is served; after `fntrace detach PID`, attaches again.
 */
int fntrace_attach_start(void);

/*
 * fntrace_attach_start for a thread `fntrace attach` started in the
 * process to load the library (no thread of it stopped): the call sites
 * are found and made NOPs on the calling thread before it returns, rather
 * than on a thread of fntrace's.
 */
int fntrace_attach_start_here(void);

#ifdef __cplusplus
}
#endif

#endif /* FNTRACE_H */
