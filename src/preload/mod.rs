//! What a program gets from fntrace without a code change, linked with
//! `libfntrace.a` or preloaded as `libfntrace.so`: start-up from the
//! environment ([`env`](mod@env): `FNTRACE=graph` ..., before `main`), and the C
//! library functions fntrace defines in glibc's place: the exec family and
//! `_exit` ([`exec`]: a recording survives them), `sigaction` and `signal`
//! ([`fatal`]: a recording survives a crash), `dlclose` ([`dlclose`]: a
//! library's functions keep their names after it), looked up in glibc with
//! [`next`]; glibc's gprof start-up and exit, replaced by nothing; and
//! [`attach`]'s `fntrace_attach_start`, which `fntrace attach` calls in a
//! process that loaded the library with `dlopen`.
//!
//! The top layer: start-up uses the C ABI's process-wide state (the
//! filter, the recording, the flight recorder), live control and the
//! table of `FNTRACE_*` variables ([`crate::vars`]).

mod attach;
mod dlclose;
mod env;
mod exec;
mod fatal;
mod next;

/// glibc's gprof start-up, called by `gcrt1.o` before `main` in a program
/// built with `gcc -pg`: replaced by nothing (no profiling timer). Being
/// always called, it also keeps the environment start-up's constructor in a
/// program linked with `libfntrace.a` (the linker takes an archive's
/// objects only for the symbols they define).
#[unsafe(no_mangle)]
pub extern "C" fn __monstartup(_low_pc: usize, _high_pc: usize) {
    std::hint::black_box(&env::START);
}

/// glibc's gprof exit handler, which writes `gmon.out`: replaced by
/// nothing.
#[unsafe(no_mangle)]
pub extern "C" fn _mcleanup() {}
