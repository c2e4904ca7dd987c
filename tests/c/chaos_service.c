/*
 * The service of the chaos benchmark (driven by
 * tests/common/chaos.rs for benches/chaos.rs and tests/programs/chaos.rs). Built
 * with `gcc -pg` and linked with libfntrace.a; run with FNTRACE_CONTROL,
 * FNTRACE_METRICS and FNTRACE_PATCH; the driver sends control requests to
 * its socket while the program does everything at once:
 *
 *   - WORKERS threads call chaos_work(20) (101 traced calls) twice a
 *     millisecond, checking every result (a clobbered register shows as a wrong one);
 *     worker 0 calls chaos_slow (3 ms) every 200 ms, for flight triggers;
 *   - 2 threads dlopen a plugin (plug_a_: -pg -mfentry; plug_b_: -pg;
 *     argv[1], argv[2]), call its run 20 times and dlclose it, every 5 ms;
 *   - a thread starts short-lived threads, 4 at a time every 10 ms, each
 *     making 10 calls of chaos_work(5), and joins them;
 *   - a thread forks every 100 ms; the child makes 100 calls of
 *     chaos_work(5) and leaves with _exit (0: right results);
 *   - a thread sends SIGUSR1 to the workers and the plugin threads every
 *     millisecond; the handler, chaos_on_signal, is traced and calls chaos_leaf;
 *   - a thread toggles the `function` tracer through the C API every 4 ms
 *     and writes the profile to /dev/null every 100 ms.
 *
 * Paced by its standard input:
 *   prints "ready" (fntrace_init done), then for each line:
 *   start     starts the threads above; prints "started"
 *   quiesce   stops and joins them all; prints "quiet NAME=COUNT ..."
 *   load      dlopens both plugins (kept until exit); prints "loaded"
 *   calls K   2 threads each call chaos_work(5) K times; then this thread
 *             calls plug_a_run(1) and plug_b_run(1) K times each; prints
 *             "called"
 *   exit      exits: 0 if nothing failed, 1 otherwise
 * Every failure is a line "chaos: ..." on stderr, and counted.
 * With CHAOS_NO_FUNCTION=1 in the environment the C API thread toggles the
 * `profile` tracer instead of `function`: see tests/common/chaos.rs,
 * Config::function.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fntrace.h"

#define WORKERS 2
#define LOADERS 2

static const char *plugin_paths[2];
static const char *plugin_prefix[2] = {"plug_a_", "plug_b_"};

/* Set to end the chaos threads; signals stop first (their targets must
 * still be alive). */
static atomic_int stop;
static atomic_int stop_signals;
static volatile long sink;

/* What was done, printed by `quiesce`. */
static atomic_long worker_calls, slow_calls, plugin_loads, plugin_calls, churn_threads,
    forks, signals_sent, signals_handled, capi_toggles, capi_profiles, failures;

static void fail(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    char line[512];
    vsnprintf(line, sizeof line, format, args);
    va_end(args);
    fprintf(stderr, "chaos: %s\n", line);
    atomic_fetch_add(&failures, 1);
}

static void pause_us(long us)
{
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

__attribute__((noinline)) long chaos_leaf(long x)
{
    __asm__ volatile("" : "+r"(x));
    return x * 3 + 1;
}

__attribute__((noinline)) long chaos_mid(long x)
{
    long total = 0;
    for (int i = 0; i < 4; i++)
        total += chaos_leaf(x + i);
    return total;
}

/* n calls of chaos_mid, 4 of chaos_leaf each. */
__attribute__((noinline)) long chaos_work(long n)
{
    long total = 0;
    for (long i = 0; i < n; i++)
        total += chaos_mid(i);
    return total;
}

/* What chaos_work(n) returns: mid(x) = 12x + 22. */
static long expected_work(long n) { return 6 * n * (n - 1) + 22 * n; }

/* chaos_work(n), checked. */
static void checked_work(long n, const char *who)
{
    long got = chaos_work(n);
    if (got != expected_work(n))
        fail("%s: chaos_work(%ld) returned %ld, not %ld", who, n, got, expected_work(n));
}

/* A slow call (3 ms): what a flight trigger on chaos_slow>2ms catches. */
__attribute__((noinline)) void chaos_slow(void) { pause_us(3000); }

/* The SIGUSR1 handler, traced like any function of the program. */
__attribute__((noinline)) void chaos_on_signal(int sig)
{
    int saved = errno;
    sink += chaos_leaf(sig);
    atomic_fetch_add(&signals_handled, 1);
    errno = saved;
}

static void *worker(void *arg)
{
    long index = (long)arg;
    struct timespec last_slow;
    clock_gettime(CLOCK_MONOTONIC, &last_slow);
    while (!atomic_load(&stop)) {
        for (int i = 0; i < 2; i++)
            checked_work(20, "worker");
        atomic_fetch_add(&worker_calls, 2 * 101);
        if (index == 0) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((now.tv_sec - last_slow.tv_sec) * 1000000000L + now.tv_nsec - last_slow.tv_nsec
                > 200000000L) {
                chaos_slow();
                atomic_fetch_add(&slow_calls, 1);
                last_slow = now;
            }
        }
        pause_us(1000);
    }
    return NULL;
}

typedef long (*run_fn)(long);

/* dlopens plugin `which`; its run function in *run. */
static void *open_plugin(int which, run_fn *run)
{
    void *handle = dlopen(plugin_paths[which], RTLD_NOW);
    if (!handle) {
        fail("dlopen %s: %s", plugin_paths[which], dlerror());
        return NULL;
    }
    char name[32];
    snprintf(name, sizeof name, "%srun", plugin_prefix[which]);
    *run = (run_fn)dlsym(handle, name);
    if (!*run) {
        fail("dlsym %s: %s", name, dlerror());
        dlclose(handle);
        return NULL;
    }
    return handle;
}

static void *loader(void *arg)
{
    int which = (int)(long)arg;
    static const long expected[3] = {0, 22, 56};
    while (!atomic_load(&stop)) {
        run_fn run;
        void *handle = open_plugin(which, &run);
        if (handle) {
            for (long i = 0; i < 20; i++) {
                long got = run(i % 3);
                if (got != expected[i % 3])
                    fail("%srun(%ld) returned %ld, not %ld", plugin_prefix[which], i % 3, got,
                         expected[i % 3]);
            }
            atomic_fetch_add(&plugin_calls, 20);
            if (dlclose(handle) != 0)
                fail("dlclose: %s", dlerror());
            atomic_fetch_add(&plugin_loads, 1);
        }
        which ^= 1; /* each thread loads both, the other one's too */
        pause_us(5000);
    }
    return NULL;
}

static void *churned(void *unused)
{
    (void)unused;
    for (int i = 0; i < 10; i++)
        checked_work(5, "short-lived thread");
    return NULL;
}

static void *churner(void *unused)
{
    (void)unused;
    while (!atomic_load(&stop)) {
        pthread_t batch[4];
        int started = 0;
        for (int i = 0; i < 4; i++) {
            int rc = pthread_create(&batch[started], NULL, churned, NULL);
            if (rc != 0)
                fail("pthread_create: %s", strerror(rc));
            else
                started++;
        }
        for (int i = 0; i < started; i++)
            pthread_join(batch[i], NULL);
        atomic_fetch_add(&churn_threads, started);
        pause_us(10000);
    }
    return NULL;
}

/* The forked child's work: its exit code says whether results were right. */
__attribute__((noinline)) int chaos_child(void)
{
    for (int i = 0; i < 100; i++)
        if (chaos_work(5) != expected_work(5))
            return 3;
    return 0;
}

static void *forker(void *unused)
{
    (void)unused;
    while (!atomic_load(&stop)) {
        pid_t pid = fork();
        if (pid < 0) {
            fail("fork: %s", strerror(errno));
        } else if (pid == 0) {
            _exit(chaos_child());
        } else {
            int status = 0;
            int waited_ms = 0;
            pid_t done;
            while ((done = waitpid(pid, &status, WNOHANG)) == 0 && waited_ms < 10000) {
                pause_us(1000);
                waited_ms++;
            }
            if (done == 0) {
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
                fail("forked child %d hung (killed after 10 s)", pid);
            } else if (done < 0) {
                fail("waitpid %d: %s", pid, strerror(errno));
            } else if (WIFSIGNALED(status)) {
                fail("forked child %d crashed: signal %d", pid, WTERMSIG(status));
            } else if (WEXITSTATUS(status) != 0) {
                fail("forked child %d exited %d (wrong results)", pid, WEXITSTATUS(status));
            }
            atomic_fetch_add(&forks, 1);
        }
        pause_us(100000);
    }
    return NULL;
}

static pthread_t targets[WORKERS + LOADERS];

static void *signaller(void *unused)
{
    (void)unused;
    unsigned long n = 0;
    while (!atomic_load(&stop_signals)) {
        int rc = pthread_kill(targets[n % (WORKERS + LOADERS)], SIGUSR1);
        if (rc != 0)
            fail("pthread_kill: %s", strerror(rc));
        else
            atomic_fetch_add(&signals_sent, 1);
        n++;
        pause_us(1000);
    }
    return NULL;
}

static void *capi(void *unused)
{
    (void)unused;
    const char *off = getenv("CHAOS_NO_FUNCTION");
    const char *tracer = off && strcmp(off, "1") == 0 ? "profile" : "function";
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull < 0)
        fail("open /dev/null: %s", strerror(errno));
    long n = 0;
    while (!atomic_load(&stop)) {
        int rc = n % 2 == 0 ? fntrace_enable(tracer) : fntrace_disable(tracer);
        if (rc != 0)
            fail("C API %s %s: %s", n % 2 == 0 ? "enable" : "disable", tracer,
                 fntrace_last_error());
        atomic_fetch_add(&capi_toggles, 1);
        if (n % 25 == 0 && devnull >= 0) {
            if (fntrace_profile_write(devnull) != 0)
                fail("fntrace_profile_write: %s", fntrace_last_error());
            atomic_fetch_add(&capi_profiles, 1);
        }
        n++;
        pause_us(4000);
    }
    if (fntrace_disable(tracer) != 0)
        fail("C API disable %s: %s", tracer, fntrace_last_error());
    if (devnull >= 0)
        close(devnull);
    return NULL;
}

static void start_thread(pthread_t *thread, void *(*body)(void *), void *arg)
{
    int rc = pthread_create(thread, NULL, body, arg);
    if (rc != 0) {
        fprintf(stderr, "chaos: pthread_create: %s\n", strerror(rc));
        exit(2);
    }
}

static pthread_t others[4];
static void *quiet_handles[2];

static void *quiet_caller(void *arg)
{
    long k = (long)arg;
    for (long i = 0; i < k; i++)
        checked_work(5, "quiescent thread");
    return NULL;
}

static void reply(const char *line)
{
    printf("%s\n", line);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PLUGIN_A PLUGIN_B\n", argv[0]);
        return 2;
    }
    plugin_paths[0] = argv[1];
    plugin_paths[1] = argv[2];
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = chaos_on_signal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(SIGUSR1, &action, NULL);
    if (fntrace_init() != 0) {
        fprintf(stderr, "chaos: fntrace_init: %s\n", fntrace_last_error());
        return 2;
    }
    reply("ready");

    char line[128];
    while (fgets(line, sizeof line, stdin) != NULL) {
        long k;
        if (strcmp(line, "start\n") == 0) {
            for (long i = 0; i < WORKERS; i++)
                start_thread(&targets[i], worker, (void *)i);
            for (long i = 0; i < LOADERS; i++)
                start_thread(&targets[WORKERS + i], loader, (void *)i);
            start_thread(&others[0], churner, NULL);
            start_thread(&others[1], forker, NULL);
            start_thread(&others[2], capi, NULL);
            start_thread(&others[3], signaller, NULL);
            reply("started");
        } else if (strcmp(line, "quiesce\n") == 0) {
            atomic_store(&stop_signals, 1);
            pthread_join(others[3], NULL);
            atomic_store(&stop, 1);
            for (int i = 0; i < WORKERS + LOADERS; i++)
                pthread_join(targets[i], NULL);
            for (int i = 0; i < 3; i++)
                pthread_join(others[i], NULL);
            printf("quiet worker_calls=%ld slow_calls=%ld plugin_loads=%ld plugin_calls=%ld "
                   "churn_threads=%ld forks=%ld signals_sent=%ld signals_handled=%ld "
                   "capi_toggles=%ld capi_profiles=%ld failures=%ld\n",
                   atomic_load(&worker_calls), atomic_load(&slow_calls),
                   atomic_load(&plugin_loads), atomic_load(&plugin_calls),
                   atomic_load(&churn_threads), atomic_load(&forks),
                   atomic_load(&signals_sent), atomic_load(&signals_handled),
                   atomic_load(&capi_toggles), atomic_load(&capi_profiles),
                   atomic_load(&failures));
            fflush(stdout);
        } else if (strcmp(line, "load\n") == 0) {
            run_fn unused;
            quiet_handles[0] = open_plugin(0, &unused);
            quiet_handles[1] = open_plugin(1, &unused);
            reply("loaded");
        } else if (sscanf(line, "calls %ld", &k) == 1) {
            pthread_t callers[2];
            for (int i = 0; i < 2; i++)
                start_thread(&callers[i], quiet_caller, (void *)k);
            for (int i = 0; i < 2; i++)
                pthread_join(callers[i], NULL);
            for (int which = 0; which < 2; which++) {
                char name[32];
                snprintf(name, sizeof name, "%srun", plugin_prefix[which]);
                run_fn run = quiet_handles[which] ? (run_fn)dlsym(quiet_handles[which], name)
                                                  : NULL;
                if (!run) {
                    fail("no %s for the quiescent calls", name);
                    continue;
                }
                for (long i = 0; i < k; i++)
                    if (run(1) != 22)
                        fail("%s(1) != 22 in the quiescent calls", name);
            }
            reply("called");
        } else if (strcmp(line, "exit\n") == 0) {
            break;
        } else {
            fprintf(stderr, "chaos: unknown line %s", line);
            return 2;
        }
    }
    for (int i = 0; i < 2; i++)
        if (quiet_handles[i])
            dlclose(quiet_handles[i]);
    return atomic_load(&failures) == 0 ? 0 : 1;
}
