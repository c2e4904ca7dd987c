/*
 * The per-call floor of an entry+exit hook on this host (the journal's
 * attach-2026-12-02.md, "The per-call floor"): ns per call of a leaf
 * function called in a loop, with its 5-byte site (as gcc -pg
 * -mrecord-mcount leaves it, patched) being
 *
 *   nop        a 5-byte NOP (an untraced, NOPed site: the baseline)
 *   call-ret   a call to an entry that returns at once
 *   entry-tsc  a call to an entry that reads the TSC (rdtsc) and stores it
 *   hook       a call to an entry that reads the TSC, keeps it and the
 *              return address on a shadow stack and replaces the return
 *              address with an exit that reads the TSC again, adds the
 *              duration to a sum, counts the call and jumps back: the
 *              least an entry+exit hook can do (no lookup of the
 *              function, no histogram, no checks)
 *
 * and the cost of one rdtsc, rdtscp and lfence;rdtsc back to back.
 * Build and run: gcc -O2 -o floor floor.c && ./floor
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>

#define CALLS 20000000L

uint64_t shadow[2 * 1024];
uint64_t *shadow_top = shadow;
uint64_t sum, count;

void entry_ret(void);
void entry_tsc(void);
void entry_hook(void);
void exit_hook(void);
__asm__(".text\n"
        "entry_ret: ret\n"
        "entry_tsc: rdtsc\n"
        "  mov %eax, sum(%rip)\n"
        "  ret\n"
        /* rdtsc clobbers rax, rdx; rcx, r11 are free at a function's
         * first instruction (caller-saved, not arguments here: leaf
         * takes its argument in rdi). */
        "entry_hook: rdtsc\n"
        "  shl $32, %rdx\n"
        "  or %rdx, %rax\n"
        "  mov shadow_top(%rip), %rcx\n"
        "  mov 8(%rsp), %r11\n" /* leaf's return address */
        "  mov %r11, (%rcx)\n"
        "  mov %rax, 8(%rcx)\n"
        "  add $16, %rcx\n"
        "  mov %rcx, shadow_top(%rip)\n"
        "  lea exit_hook(%rip), %r11\n"
        "  mov %r11, 8(%rsp)\n"
        "  ret\n"
        "exit_hook: push %rax\n" /* leaf's return value */
        "  rdtsc\n"
        "  shl $32, %rdx\n"
        "  or %rdx, %rax\n"
        "  mov shadow_top(%rip), %rcx\n"
        "  sub $16, %rcx\n"
        "  mov %rcx, shadow_top(%rip)\n"
        "  sub 8(%rcx), %rax\n"
        "  add %rax, sum(%rip)\n"
        "  incq count(%rip)\n"
        "  pop %rax\n"
        "  jmp *(%rcx)\n");

/* The leaf: its first 5 bytes are the site, written by main. */
__attribute__((noinline)) long leaf(long x);
__asm__(".text\n"
        ".globl leaf\n"
        "leaf: .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
        "  lea 1(%rdi), %rax\n"
        "  ret\n");

#include <sys/mman.h>
#include <unistd.h>

static void site(void *target) {
    uint8_t *at = (uint8_t *)leaf;
    uintptr_t page = (uintptr_t)at & ~4095UL;
    mprotect((void *)page, 8192, PROT_READ | PROT_WRITE | PROT_EXEC);
    if (!target) {
        uint8_t nop[5] = {0x0f, 0x1f, 0x44, 0x00, 0x00};
        for (int i = 0; i < 5; i++) at[i] = nop[i];
    } else {
        int32_t rel = (int32_t)((uint8_t *)target - (at + 5));
        at[0] = 0xe8;
        __builtin_memcpy(at + 1, &rel, 4);
    }
    mprotect((void *)page, 8192, PROT_READ | PROT_EXEC);
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static double per_call(void) {
    long (*volatile f)(long) = leaf;
    double best = 1e9;
    for (int round = 0; round < 5; round++) {
        long acc = 0;
        double t0 = now_ns();
        for (long i = 0; i < CALLS; i++) acc += f(i);
        double t = (now_ns() - t0) / CALLS;
        if (acc == 42) puts("");
        if (t < best) best = t;
    }
    return best;
}

#define READS(name, code)                                                  \
    static double name(void) {                                             \
        double best = 1e9;                                                 \
        for (int round = 0; round < 5; round++) {                          \
            uint64_t s = 0;                                                \
            double t0 = now_ns();                                          \
            for (long i = 0; i < CALLS; i++) { code; }                     \
            double t = (now_ns() - t0) / CALLS;                            \
            if (s == 42) puts("");                                         \
            if (t < best) best = t;                                        \
        }                                                                  \
        return best;                                                       \
    }
READS(rdtsc_cost, s += __rdtsc())
READS(rdtscp_cost, unsigned aux; s += __rdtscp(&aux))
READS(lfence_rdtsc_cost, _mm_lfence(); s += __rdtsc())

int main(void) {
    printf("one read, ns (best of 5 x %ld, thread CPU time): rdtsc %.2f, rdtscp %.2f, "
           "lfence;rdtsc %.2f\n",
           CALLS, rdtsc_cost(), rdtscp_cost(), lfence_rdtsc_cost());
    site(NULL);
    double nop = per_call();
    site((void *)entry_ret);
    double call_ret = per_call();
    site((void *)entry_tsc);
    double tsc = per_call();
    site((void *)entry_hook);
    count = 0;
    double hook = per_call();
    site(NULL);
    printf("leaf, ns per call (best of 5 x %ld): nop site %.2f; over it: call-ret %.2f, "
           "entry-tsc %.2f, hook (entry+exit, 2 TSC reads) %.2f (%ld exits counted, "
           "%ld expected)\n",
           CALLS, nop, call_ret - nop, tsc - nop, hook - nop, (long)count, 5 * CALLS);
    return count == 5 * CALLS ? 0 : 1;
}
