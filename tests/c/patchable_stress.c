/* Call sites toggled under load, linked with libfntrace.a, no -pg: built
 * with -fpatchable-function-entry=5 (patchable entries,
 * tests/programs/patchable_stress.rs), or with no instrumentation at all and
 * -DPATCH_AT_RUN_TIME (run-time entry patches, tests/programs/runtime_patch.rs:
 * main patches the w_* entries with fntrace_patch_functions while the
 * threads run, prints "refused N", its result, and w_tiny, a bare `ret`,
 * must be among the refused).
 *
 * usage: patchable_stress THREADS TOGGLES K DIR_FAST DIR_GENERIC
 *
 * THREADS threads call w_top (-> w_mid -> 2 x w_leaf) in a loop from
 * before the first enable (so the first write over gcc's one-byte NOPs
 * happens while they run) while main switches tracers on and off TOGGLES
 * times: graph alone (its fast fentry entry), graph with function (the
 * generic __fentry__ trampoline), function alone. Then, quiescent, each
 * thread makes exactly K calls of w_top with graph alone, dumped into
 * DIR_FAST, and K more with graph and function, dumped into DIR_GENERIC.
 * The busy threads also call w_tiny, whose body is little more than its
 * NOPs, 8 times per w_top. Prints "calls N" (the calls of w_top made in
 * the toggling phase) and "done". */
#include <fntrace.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile long sink;

__attribute__((noinline)) long w_leaf(long x)
{
	sink += x;
	return x + 1;
}

__attribute__((noinline)) long w_mid(long x)
{
	return w_leaf(x) + w_leaf(x + 1);
}

__attribute__((noinline)) long w_top(long x)
{
	return w_mid(x) * 2;
}

/* Almost nothing but its entry NOPs: a busy thread is often stopped
 * between two of them, where the first write must not happen. */
__attribute__((noinline)) void w_tiny(void)
{
	__asm__ volatile("");
}

static atomic_int stop;
static atomic_long calls;
static long k;

static void *busy(void *arg)
{
	long n = 0;
	(void)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		sink += w_top(n++);
		for (int i = 0; i < 8; i++)
			w_tiny();
	}
	atomic_fetch_add(&calls, n);
	return NULL;
}

static void *exactly_k(void *arg)
{
	(void)arg;
	for (long i = 0; i < k; i++)
		sink += w_top(i);
	return NULL;
}

static void check(int rc, const char *what)
{
	if (rc != 0) {
		fprintf(stderr, "%s: %d %s\n", what, rc, fntrace_last_error());
		exit(1);
	}
}

static void run_threads(int n, void *(*body)(void *))
{
	pthread_t *threads = calloc(n, sizeof *threads);
	for (int i = 0; i < n; i++)
		pthread_create(&threads[i], NULL, body, NULL);
	for (int i = 0; i < n; i++)
		pthread_join(threads[i], NULL);
	free(threads);
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: %s THREADS TOGGLES K DIR_FAST DIR_GENERIC\n", argv[0]);
		return 2;
	}
	int nthreads = atoi(argv[1]);
	int toggles = atoi(argv[2]);
	k = atol(argv[3]);
	check(fntrace_init(), "init");

	pthread_t *threads = calloc(nthreads, sizeof *threads);
	for (int i = 0; i < nthreads; i++)
		pthread_create(&threads[i], NULL, busy, NULL);
	usleep(20000);
#ifdef PATCH_AT_RUN_TIME
	int refused = fntrace_patch_functions("w_*");
	if (refused < 0)
		check(refused, "patch");
	printf("refused %d\n", refused);
#endif
	for (int t = 0; t < toggles; t++) {
		switch (t % 3) {
		case 0:
			check(fntrace_enable("graph"), "enable graph");
			usleep(200);
			check(fntrace_disable("graph"), "disable graph");
			break;
		case 1:
			check(fntrace_enable("graph"), "enable graph");
			check(fntrace_enable("function"), "enable function");
			usleep(200);
			check(fntrace_disable("function"), "disable function");
			check(fntrace_disable("graph"), "disable graph");
			break;
		default:
			check(fntrace_enable("function"), "enable function");
			usleep(200);
			check(fntrace_disable("function"), "disable function");
			break;
		}
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < nthreads; i++)
		pthread_join(threads[i], NULL);
	free(threads);
	printf("calls %ld\n", atomic_load(&calls));

	/* Forget what the toggling phase recorded. */
	char discard[4096];
	snprintf(discard, sizeof discard, "%s.toggling", argv[4]);
	check(fntrace_dump(discard), "dump toggling");

	check(fntrace_enable("graph"), "enable graph");
	run_threads(nthreads, exactly_k);
	check(fntrace_disable("graph"), "disable graph");
	check(fntrace_dump(argv[4]), "dump fast");

	check(fntrace_enable("graph"), "enable graph");
	check(fntrace_enable("function"), "enable function");
	run_threads(nthreads, exactly_k);
	check(fntrace_disable("function"), "disable function");
	check(fntrace_disable("graph"), "disable graph");
	check(fntrace_dump(argv[5]), "dump generic");
	printf("done\n");
	return 0;
}
