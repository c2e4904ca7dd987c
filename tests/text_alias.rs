//! Text written through a writable alias (`src/patch/alias.rs`, chosen with
//! `FNTRACE_TEXT_WRITES=alias`): the pages of `gcc -pg` code that hold
//! sites map a memfd, written through a second, never executable view.
//! Each case runs this test binary again as a child (fresh maps, its own
//! environment):
//! - after `fork`, parent and child each patch their own text only (exact
//!   bytes and counts on both sides, and the parent's text moves to a new
//!   memfd at its first operation after the fork);
//! - a library whose text moved is unloaded, and one loaded later gets its
//!   own alias;
//! - the trace's `maps` names the program's file, with the offsets the
//!   file had, not the memfd;
//! - by default, with `FNTRACE_TEXT_WRITES=proc-mem`, with a value it does
//!   not know (one stderr line), and with `alias` and a seccomp filter that
//!   refuses `memfd_create` (one stderr line), text is written through
//!   `/proc/self/mem`, with the same exact bytes and counts.

#[macro_use]
mod common;

use std::sync::atomic::Ordering;

use common::{text, Counter, NOP5, NOP6};
use fntrace::Filter;
use fntrace_fixtures::c_pie;

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("alias", &COUNTER);

const CHILD: &str = "FNTRACE_TEXT_ALIAS_CHILD";
const MEMFD: &str = "/memfd:fntrace-text";

/// The line of `maps` text covering `addr`, split into its fields
/// (range, perms, offset, device, inode, path).
fn line_at(maps: &str, addr: usize) -> Option<Vec<String>> {
    maps.lines().find_map(|line| {
        let (range, _) = line.split_once(' ')?;
        let (start, end) = range.split_once('-')?;
        let start = usize::from_str_radix(start, 16).ok()?;
        let end = usize::from_str_radix(end, 16).ok()?;
        let fields: Vec<String> = line.splitn(6, ' ').map(|f| f.trim().to_string()).collect();
        (start <= addr && addr < end).then_some(fields)
    })
}

fn own_maps() -> String {
    std::fs::read_to_string("/proc/self/maps").unwrap()
}

/// Whether the text at `addr` maps fntrace's memfd (R-X, shared), and its
/// inode.
fn memfd_inode_at(addr: usize) -> Option<String> {
    let line = line_at(&own_maps(), addr)?;
    (line[5].starts_with(MEMFD) && line[1] == "r-xs").then(|| line[4].clone())
}

/// The NOP of a site's length.
fn nop(site: &fntrace::SiteInfo) -> &'static [u8] {
    match site.original.len() {
        5 => &NOP5,
        _ => &NOP6,
    }
}

fn leaf_site() -> fntrace::SiteInfo {
    fntrace::site_of(c_pie::leaf_address()).expect("pie_leaf has a site")
}

fn pipe() -> [i32; 2] {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    fds
}

fn send(fd: i32) {
    // SAFETY: one byte from a live buffer to a pipe we own.
    assert_eq!(unsafe { libc::write(fd, b"x".as_ptr().cast(), 1) }, 1);
}

fn receive(fd: i32) {
    let mut byte = 0u8;
    // SAFETY: one byte into a live buffer from a pipe we own.
    let read = unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) };
    assert_eq!(read, 1);
}

/// Kills the forked child unless it was reaped: a failed check in the
/// parent must not leave it waiting on its pipe (it holds the test's
/// stdout, which the test runner reads to the end).
struct Reap(i32);

impl Reap {
    /// Waits for the child; its wait status.
    fn wait(self) -> i32 {
        let mut status = 0;
        // SAFETY: waitpid on our own child.
        assert_eq!(unsafe { libc::waitpid(self.0, &mut status, 0) }, self.0);
        std::mem::forget(self);
        status
    }
}

impl Drop for Reap {
    fn drop(&mut self) {
        // SAFETY: kill and reap our own child.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}

/// Calls `leaf` `calls` times and returns how many the tracer counted.
fn counted_leaf_calls(calls: usize) -> u64 {
    COUNTER.reset();
    for _ in 0..calls {
        c_pie::leaf(1);
    }
    COUNTER.count(c_pie::leaf_address())
}

/// In the forked child: its own text only. Returns a failure description.
fn forked_child(site: &fntrace::SiteInfo, to_parent: i32, from_parent: i32) -> Option<String> {
    let len = site.original.len();
    if text(site.address, len) != site.original {
        return Some("child: inherited text is not the call".into());
    }
    fntrace::disable("alias").ok()?;
    if text(site.address, len) != nop(site) || counted_leaf_calls(3) != 0 {
        return Some("child: disable did not NOP its text".into());
    }
    send(to_parent);
    receive(from_parent);
    if text(site.address, len) != nop(site) {
        return Some("child: the parent's writes reached the child's text".into());
    }
    fntrace::enable_with("alias", &Filter::new().include("pie_leaf")).ok()?;
    if text(site.address, len) != site.original || counted_leaf_calls(2) != 2 {
        return Some("child: enable did not restore the call".into());
    }
    None
}

fn fork_case() {
    fntrace::init().unwrap();
    COUNTER.watch(c_pie::leaf_address());
    let site = leaf_site();
    let len = site.original.len();
    // gcc -pg on PIE: `call *mcount@GOTPCREL(%rip)`, relaxed by the linker
    // to `67 e8 rel32`.
    assert_eq!(&site.original[..2], [0x67, 0xe8]);
    fntrace::enable_with("alias", &Filter::new().include("pie_leaf")).unwrap();
    assert_eq!(text(site.address, len), site.original);
    let before_fork = memfd_inode_at(site.address).expect("the site's page maps the memfd");

    let (to_parent, to_child) = (pipe(), pipe());
    // SAFETY: the child patches, checks and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let failure = forked_child(&site, to_parent[1], to_child[0]);
        if let Some(failure) = &failure {
            eprintln!("{failure}");
        }
        // SAFETY: ends the child without running the parent's atexit work.
        unsafe { libc::_exit(i32::from(failure.is_some())) };
    }
    let child = Reap(pid);
    receive(to_parent[0]);
    // The child's disable did not reach this text.
    assert_eq!(text(site.address, len), site.original);
    assert_eq!(counted_leaf_calls(4), 4);
    fntrace::disable("alias").unwrap();
    assert_eq!(text(site.address, len), nop(&site));
    assert_eq!(counted_leaf_calls(4), 0);
    // The first operation after the fork moved the text to a new memfd.
    let after_fork = memfd_inode_at(site.address).expect("still aliased");
    assert_ne!(after_fork, before_fork);
    fntrace::enable_with("alias", &Filter::new().include("pie_leaf")).unwrap();
    assert_eq!(text(site.address, len), site.original);
    send(to_child[1]);

    let status = child.wait();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed: {status:#x}"
    );
    // Nothing the child did reached this text either.
    assert_eq!(text(site.address, len), site.original);
    assert_eq!(counted_leaf_calls(3), 3);
    fntrace::disable("alias").unwrap();
    assert_eq!(text(site.address, len), nop(&site));
    println!("fork case done");
}

fn maps_case() {
    let function = c_pie::leaf_address();
    let original = line_at(&own_maps(), function).unwrap();
    assert!(!original[5].starts_with(MEMFD));
    let file_offset = |line: &[String]| {
        let start = usize::from_str_radix(line[0].split_once('-').unwrap().0, 16).unwrap();
        u64::from_str_radix(&line[2], 16).unwrap() + (function - start) as u64
    };

    fntrace::init().unwrap();
    fntrace::enable_with("graph", &Filter::new().include("pie_*")).unwrap();
    c_pie::run(2);
    fntrace::disable("graph").unwrap();
    assert!(memfd_inode_at(function).is_some(), "the text is aliased");

    let trace = fntrace::GRAPH_TRACER.take_trace();
    assert!(!trace.maps.contains(MEMFD), "{}", trace.maps);
    let named = line_at(&trace.maps, function).unwrap();
    assert_eq!(named[1], "r-xp");
    assert_eq!(named[3..6], original[3..6], "device, inode, path");
    assert_eq!(file_offset(&named), file_offset(&original));
    // The bytes before the site were never written: the file has them at
    // that offset.
    let site = leaf_site();
    let file = std::fs::read(&original[5]).unwrap();
    let at = file_offset(&named) as usize;
    assert_eq!(
        file[at..at + (site.address - function)],
        text(function, site.address - function)[..]
    );
    assert_eq!(common::call_counts(&trace).get("pie_leaf"), Some(&(8, 8)));
    println!("maps case done");
}

/// `dlopen`s `path`: the handle, and `{prefix}run`.
fn open(path: &str, prefix: &str) -> (*mut libc::c_void, usize) {
    let path = std::ffi::CString::new(path).unwrap();
    let name = std::ffi::CString::new(format!("{prefix}run")).unwrap();
    // SAFETY: dlopen/dlsym of a plain C library built by the fixtures.
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!handle.is_null(), "dlopen {path:?}");
        let run = libc::dlsym(handle, name.as_ptr());
        assert!(!run.is_null());
        (handle, run as usize)
    }
}

/// Calls the fixture's `run(n)`; checks its result.
fn call_run(function: usize, n: i64) {
    // SAFETY: the fixture's run has the C signature long(long).
    let function: extern "C" fn(i64) -> i64 = unsafe { std::mem::transmute(function) };
    let expected = [0, 22, 56][n as usize];
    assert_eq!(function(n), expected);
}

/// A library whose text was moved is unloaded; its twin loaded later gets
/// an alias of its own, with exact bytes and calls.
fn dlclose_case() {
    fntrace::init().unwrap();
    let (handle, run) = open(fntrace_fixtures::DLOPEN_LIBRARY, "dl_");
    // Its sites hold their calls until a batch writes their NOPs.
    fntrace::flush().unwrap();
    fntrace::enable_with("alias", &Filter::new().include("dl_*")).unwrap();
    let first = memfd_inode_at(run).expect("the library's text is aliased");
    COUNTER.reset();
    call_run(run, 1);
    assert_eq!(COUNTER.all.load(Ordering::Relaxed), 6);
    // SAFETY: nothing of the library is used after this.
    assert_eq!(unsafe { libc::dlclose(handle) }, 0);
    fntrace::disable("alias").unwrap();
    assert!(line_at(&own_maps(), run).is_none_or(|line| !line[5].starts_with(MEMFD)));

    let (handle2, run2) = open(fntrace_fixtures::DLOPEN_LIBRARY2, "dl2_");
    // Wherever it lands (also where the first one was), it maps its file.
    assert_eq!(memfd_inode_at(run2), None, "a fresh mapping of the file");
    fntrace::flush().unwrap();
    fntrace::enable_with("alias", &Filter::new().include("dl2_*")).unwrap();
    let second = memfd_inode_at(run2).expect("the twin's text is aliased");
    assert_ne!(second, first);
    let site = fntrace::site_of(run2).unwrap();
    assert_eq!(text(site.address, site.original.len()), site.original);
    COUNTER.reset();
    call_run(run2, 2);
    assert_eq!(COUNTER.all.load(Ordering::Relaxed), 11);
    fntrace::disable("alias").unwrap();
    assert_eq!(text(site.address, site.original.len()), nop(&site));
    call_run(run2, 1);
    assert_eq!(COUNTER.all.load(Ordering::Relaxed), 11);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::dlclose(handle2) }, 0);
    fntrace::flush().unwrap();
    println!("dlclose case done");
}

/// Three enable/disable pairs through `/proc/self/mem`: exact bytes and
/// counts, and no page maps the memfd.
fn proc_mem_case() {
    fntrace::init().unwrap();
    COUNTER.watch(c_pie::leaf_address());
    let site = leaf_site();
    for _ in 0..3 {
        fntrace::enable_with("alias", &Filter::new().include("pie_leaf")).unwrap();
        assert_eq!(text(site.address, site.original.len()), site.original);
        assert_eq!(counted_leaf_calls(2), 2);
        fntrace::disable("alias").unwrap();
        assert_eq!(text(site.address, site.original.len()), nop(&site));
        assert_eq!(counted_leaf_calls(2), 0);
    }
    assert!(!own_maps().contains(MEMFD));
    println!("proc-mem case done");
}

#[test]
fn child() {
    match std::env::var(CHILD).as_deref() {
        Ok("fork") => fork_case(),
        Ok("maps") => maps_case(),
        Ok("dlclose") => dlclose_case(),
        Ok("proc-mem") => proc_mem_case(),
        Ok("no-memfd") => {
            common::refuse_syscall(libc::SYS_memfd_create, libc::EPERM);
            proc_mem_case();
        }
        _ => {}
    }
}

/// Runs the child case `case`; its stdout and the `fntrace:` lines of its
/// stderr.
fn run_child(case: &str, writes: Option<&str>) -> (String, Vec<String>) {
    let ran = if case == "no-memfd" { "proc-mem" } else { case };
    common::run_child_test(
        CHILD,
        case,
        &[("FNTRACE_PATCH", None), ("FNTRACE_TEXT_WRITES", writes)],
        &format!("{ran} case done"),
    )
}

#[test]
fn parent_and_child_each_patch_their_own_text_after_fork() {
    let (_, complaints) = run_child("fork", Some("alias"));
    assert_eq!(complaints, Vec::<String>::new());
}

#[test]
fn the_trace_names_the_file_not_the_memfd() {
    let (_, complaints) = run_child("maps", Some("alias"));
    assert_eq!(complaints, Vec::<String>::new());
}

#[test]
fn a_library_loaded_after_an_aliased_one_was_unloaded_gets_its_own_alias() {
    let (_, complaints) = run_child("dlclose", Some("alias"));
    assert_eq!(complaints, Vec::<String>::new());
}

#[test]
fn proc_mem_is_used_by_default_when_chosen_or_when_memfd_is_refused() {
    let (_, complaints) = run_child("proc-mem", None);
    assert_eq!(complaints, Vec::<String>::new());

    let (_, complaints) = run_child("proc-mem", Some("proc-mem"));
    assert_eq!(complaints, Vec::<String>::new());

    let (_, complaints) = run_child("no-memfd", Some("alias"));
    assert_eq!(complaints.len(), 1, "{complaints:?}");
    assert!(
        complaints[0].contains("cannot alias program text")
            && complaints[0].contains("/proc/self/mem"),
        "{}",
        complaints[0]
    );

    let (_, complaints) = run_child("proc-mem", Some("sometimes"));
    assert_eq!(complaints.len(), 1, "{complaints:?}");
    assert!(
        complaints[0].contains("FNTRACE_TEXT_WRITES=sometimes"),
        "{}",
        complaints[0]
    );
}
