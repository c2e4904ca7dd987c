//! Without `membarrier` (a seccomp filter makes it fail with ENOSYS, as on
//! a kernel before 4.16): operations under the default breakpoint protocol
//! print one line naming what is missing and patch with the stop-the-world
//! protocol (3 enable/disable pairs, exact counts), and choosing the
//! breakpoint protocol explicitly is refused with an error saying so. Runs
//! in a child process (the filter cannot be removed).

#[macro_use]
mod common;

use common::{text, Counter, NOP5};
use fntrace::PatchProtocol;
use fntrace_fixtures::rust;

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("nomb", &COUNTER);

const CHILD: &str = "FNTRACE_NO_MEMBARRIER_CHILD";

/// In the child: no membarrier, then init, enable, disable.
#[test]
fn child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    common::refuse_syscall(libc::SYS_membarrier, libc::ENOSYS);
    // The default protocol is breakpoint: the first operation falls back
    // (one line on stderr), and so does every later one (no more lines).
    assert_eq!(fntrace::patch_protocol(), PatchProtocol::Breakpoint);
    fntrace::init().unwrap();
    COUNTER.watch(addr!(rust::leaf));
    let site = fntrace::site_of(addr!(rust::leaf)).unwrap();
    for _ in 0..3 {
        fntrace::enable("nomb").unwrap();
        rust::leaf(1);
        fntrace::disable("nomb").unwrap();
        assert_eq!(text(site.address, 5), NOP5);
    }
    assert_eq!(COUNTER.count(addr!(rust::leaf)), 3);

    // Choosing it explicitly is refused, and stop-the-world stays.
    let error = fntrace::set_patch_protocol(PatchProtocol::Breakpoint)
        .expect_err("breakpoint needs membarrier");
    println!("refused: {error}");
    assert_eq!(fntrace::patch_protocol(), PatchProtocol::StopTheWorld);
    println!("child done");
}

#[test]
fn without_membarrier_the_stop_protocol_takes_over_with_one_line_saying_so() {
    let (stdout, lines) =
        common::run_child_test(CHILD, "1", &[("FNTRACE_PATCH", None)], "child done");
    assert!(
        stdout.contains("refused:")
            && stdout.contains("MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE"),
        "{stdout}"
    );
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("membarrier"), "{}", lines[0]);
}
