/* w_top -> w_mid -> 2 x w_leaf, 1000 times, built with no instrumentation
 * at all (tests/programs/runtime_patch.rs): traced by `fntrace record -P 'w_*'` and
 * `uftrace record -P 'w_.*'`. The volatile sink keeps gcc -O2 from
 * deleting or merging the calls. r_short and r_spin are functions fntrace
 * must refuse to patch (written in assembly so that every -O level gives
 * the same bytes): r_short is 3 bytes long; r_spin's loop jumps back to
 * its first instruction. With an argument, main runs the calls from
 * THREADS threads until the file named by the argument exists
 * (tests/programs/runtime_patch.rs's stress test), each thread counting its calls. */
#include <pthread.h>
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

long r_short(void);
long r_spin(long n);
__asm__(".text\n"
	".globl r_short\n.type r_short,@function\n"
	"r_short:\n\txor %eax,%eax\n\tret\n.size r_short, .-r_short\n"
	".globl r_spin\n.type r_spin,@function\n"
	"r_spin:\n1:\tdec %rdi\n\tnop\n\tnop\n\tnop\n\tjne 1b\n"
	"\tmov %rdi,%rax\n\tret\n.size r_spin, .-r_spin\n");

#define THREADS 16

static const char *stop_file;
static long calls[THREADS];

static void *busy(void *arg)
{
	long me = (long)arg;
	while (access(stop_file, F_OK) != 0) {
		for (int i = 0; i < 100; i++)
			w_top(i);
		calls[me] += 100;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long sum = 0;
	if (argc > 1) {
		pthread_t threads[THREADS];
		stop_file = argv[1];
		for (long i = 0; i < THREADS; i++)
			pthread_create(&threads[i], NULL, busy, (void *)i);
		long total = 0;
		for (int i = 0; i < THREADS; i++) {
			pthread_join(threads[i], NULL);
			total += calls[i];
		}
		printf("%ld\n", total);
		return 0;
	}
	for (long i = 0; i < 1000; i++)
		sum += w_top(i);
	sum += r_short() + r_spin(3);
	printf("%ld\n", sum);
	return 0;
}
