#!/bin/sh
# Per-call cost of hot() (no spec) and spec() (with -A/-R specs or not),
# under fntrace record and uftrace record; 3 runs, N calls per loop.
# Run from a scratch directory holding loop (gcc -pg -O2 -o loop loop.c);
# FNTRACE_CLI: the fntrace command (its libfntrace.so beside it). Not FNTRACE:
# that is the runtime's tracer selector, which the recorded program inherits.
F=${FNTRACE_CLI:-fntrace}
unset FNTRACE
n=${1:-500000}
for run in 1 2 3; do
  rm -rf m1 m1.old m2 m2.old m3
  printf 'fntrace, no spec:    '; $F record -o m1 ./loop $n 2>&1 | grep ns/call
  printf 'fntrace, -A/-R spec: '; $F record -o m2 -A 'spec@arg1,arg2/s' -R 'spec@retval' ./loop $n 2>&1 | grep ns/call
  printf 'uftrace, -A/-R spec: '; uftrace record --no-pager --no-sched -d m3 -A 'spec@arg1,arg2/s' -R 'spec@retval' ./loop $n 2>&1 | grep ns/call
done
rm -rf m1 m1.old m2 m2.old m3
