//! The breakpoint protocol's SIGTRAP handler takes only its own traps: a
//! program's own handler, installed before fntrace's, still gets the
//! program's `int3` instructions and SIGTRAPs sent with `raise`, after
//! any number of breakpoint batches.

#[macro_use]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Counter, NOP5};
use fntrace::PatchProtocol;
use fntrace_fixtures::rust;

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("chain", &COUNTER);

static PROGRAM_TRAPS: AtomicUsize = AtomicUsize::new(0);
static LAST_CODE: AtomicUsize = AtomicUsize::new(0);

extern "C" fn program_handler(
    _signo: i32,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    PROGRAM_TRAPS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    LAST_CODE.store(code as usize, Ordering::SeqCst);
}

#[test]
fn a_programs_own_sigtrap_handler_still_gets_its_traps() {
    // SAFETY: installs an SA_SIGINFO handler that only touches atomics.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = program_handler as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGTRAP, &action, std::ptr::null_mut()),
            0
        );
    }
    fntrace::set_patch_protocol(PatchProtocol::Breakpoint).unwrap();
    fntrace::init().unwrap();
    COUNTER.watch(addr!(rust::leaf));
    for _ in 0..10 {
        fntrace::enable("chain").unwrap();
        rust::leaf(1);
        fntrace::disable("chain").unwrap();
    }
    assert_eq!(COUNTER.count(addr!(rust::leaf)), 10);
    let site = fntrace::site_of(addr!(rust::leaf)).unwrap();
    assert_eq!(common::text(site.address, 5), NOP5);

    // fntrace's handler is in front now.
    // SAFETY: queries the disposition only.
    let installed = unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGTRAP, std::ptr::null(), &mut current);
        current.sa_sigaction
    };
    assert_ne!(installed, program_handler as *const () as usize);

    // The program's own int3: SI_KERNEL, at an address that is no site.
    // SAFETY: int3 traps into the handler chain, which returns after it.
    unsafe { std::arch::asm!("int3") };
    assert_eq!(PROGRAM_TRAPS.load(Ordering::SeqCst), 1);
    assert_eq!(LAST_CODE.load(Ordering::SeqCst), libc::SI_KERNEL as usize);

    // A SIGTRAP sent to the thread.
    // SAFETY: raise with a handled signal.
    unsafe { libc::raise(libc::SIGTRAP) };
    assert_eq!(PROGRAM_TRAPS.load(Ordering::SeqCst), 2);
    assert_eq!(LAST_CODE.load(Ordering::SeqCst), libc::SI_TKILL as usize);
}
