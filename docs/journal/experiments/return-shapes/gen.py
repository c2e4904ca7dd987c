# Writes shapes.S for main.c: see docs/journal/return-prediction-2026-11-26.md.
# Generates shapes.S: the same callers/callees instrumented three ways:
#  N: no instrumentation
#  A: fntrace's current shape: site `call entryA`, slot <- T_A, return via `jmp *`
#  B: balanced return-stack: site `jmp thunk`, thunk calls entry, then `call` plants T
K = 16
out = []
w = out.append
w('.text')
# shadow stack (single-threaded prototype)
w('.bss\n.p2align 6\nshadow: .zero 16*4096\ndepth: .zero 8\nsink: .zero 8\n.text')

def site(shape, name):
    if shape == 'N':
        return ''
    if shape == 'A':
        return '  call entryA\n'
    return f'  jmp thunk_{name}\n{name}_body:\n'

def thunk(name):
    return f'''thunk_{name}:
  call entryB
  call 1f
  jmp exitB
1: add $8, %rsp
  jmp {name}_body
'''

for shape in 'NAB':
    fn = f'f_{shape}'
    w(f'.globl {fn}\n.p2align 4\n{fn}:\n{site(shape, fn)}  mov $1, %eax\n  ret')
    if shape == 'B': w(thunk(fn))
    for k in range(K):
        c = f'c{k}_{shape}'
        w(f'.globl {c}\n.p2align 4\n{c}:\n{site(shape, c)}  sub $8, %rsp\n  call {fn}\n  add ${k}, %eax\n  add $8, %rsp\n  ret')
        if shape == 'B': w(thunk(c))
    # recursion: fib(rdi)
    fb = f'fib_{shape}'
    w(f'''.globl {fb}
.p2align 4
{fb}:
{site(shape, fb)}  cmp $2, %rdi
  jb 9f
  push %rbx
  push %rdi
  dec %rdi
  call {fb}
  mov %rax, %rbx
  pop %rdi
  sub $2, %rdi
  sub $8, %rsp
  call {fb}
  add $8, %rsp
  add %rbx, %rax
  pop %rbx
  ret
9: mov %rdi, %rax
  ret''')
    if shape == 'B': w(thunk(fb))

# The entry and exit work, the same for both shapes; only what the entry
# writes in the slot and how the exit leaves differ. Both start by saving
# three registers and reading the TSC into %rax.
SAVE_AND_READ_TSC = '''  push %rax
  push %rdx
  push %rcx
  rdtsc
  shl $32, %rdx
  or %rdx, %rax
'''

def entry(name, hook):
    return f"""
.p2align 4
{name}:
{SAVE_AND_READ_TSC}  mov depth(%rip), %rcx
  shl $4, %rcx
  lea shadow(%rip), %rdx
  add %rcx, %rdx
  mov %rax, 8(%rdx)
  mov 32(%rsp), %rax        /* the slot: the caller's return address */
  mov %rax, (%rdx)
  incq depth(%rip)
{hook}
  mov %rax, 32(%rsp)
  pop %rcx
  pop %rdx
  pop %rax
  ret
"""

def exit(name, leave):
    return f"""
.p2align 4
{name}:
  sub $8, %rsp
{SAVE_AND_READ_TSC}  decq depth(%rip)
  mov depth(%rip), %rcx
  shl $4, %rcx
  lea shadow(%rip), %rdx
  add %rcx, %rdx
  sub 8(%rdx), %rax
  add %rax, sink(%rip)
  mov (%rdx), %rax
  mov %rax, 24(%rsp)
  pop %rcx
  pop %rdx
  pop %rax
{leave}
"""

# A: the slot gets the one return trampoline, left with an indirect jump.
w(entry('entryA', '  lea T_A(%rip), %rax'))
w(exit('T_A', '  add $8, %rsp\n  jmp *-8(%rsp)'))
# B: the slot gets the stub's own T (its return address + 5), left with ret.
w(entry('entryB', '  mov 24(%rsp), %rax\n  add $5, %rax'))
w(exit('exitB', '  ret'))
w('.section .note.GNU-stack,"",@progbits')
open('shapes.S', 'w').write('\n'.join(out) + '\n')
