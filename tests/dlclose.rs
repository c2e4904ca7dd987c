//! Unloading an instrumented library (`dlclose`) while a tracer is on: its
//! sites leave the table at the next control operation, so `disable`,
//! `flush` and `enable` keep working (they used to fail for the rest of the
//! process: "address is not mapped", or `SiteBytesChanged` once another
//! object was mapped there), and a library loaded at the same address is
//! traced with its own functions.

mod common;

use std::ffi::CString;

use common::{render, thread_events};
use fntrace::GRAPH_TRACER;

/// `dlopen`s `path`: the handle, and `run` with `prefix`.
fn open(path: &str, prefix: &str) -> (*mut libc::c_void, usize) {
    let path = CString::new(path).unwrap();
    let name = CString::new(format!("{prefix}run")).unwrap();
    // SAFETY: dlopen/dlsym of a plain C library built by the fixtures.
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!handle.is_null(), "dlopen {path:?}");
        let run = libc::dlsym(handle, name.as_ptr());
        assert!(!run.is_null());
        (handle, run as usize)
    }
}

/// The addresses `path` is mapped at, first to last (`/proc/self/maps`).
fn mapped_range(path: &str) -> (usize, usize) {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let ranges: Vec<(usize, usize)> = maps
        .lines()
        .filter(|line| line.ends_with(path))
        .map(|line| {
            let (start, end) = line.split(' ').next().unwrap().split_once('-').unwrap();
            let hex = |text| usize::from_str_radix(text, 16).unwrap();
            (hex(start), hex(end))
        })
        .collect();
    assert!(!ranges.is_empty(), "{path} is not mapped:\n{maps}");
    let start = ranges.iter().map(|r| r.0).min().unwrap();
    let end = ranges.iter().map(|r| r.1).max().unwrap();
    (start, end)
}

/// The lines of /proc/self/maps within a MiB of `range`.
fn maps_near((start, end): (usize, usize)) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let near = |line: &&str| {
        let (from, to) = line.split(' ').next().unwrap().split_once('-').unwrap();
        let hex = |text| usize::from_str_radix(text, 16).unwrap();
        hex(to) + (1 << 20) > start && hex(from) < end + (1 << 20)
    };
    maps.lines().filter(near).collect::<Vec<_>>().join("\n")
}

/// An inaccessible mapping over a freed range, so that nothing else is
/// mapped there until it is dropped.
struct Held(usize, usize);

impl Held {
    /// Holds `start..end`, or `None` if any of it is mapped.
    fn try_new((start, end): (usize, usize)) -> Option<Held> {
        // SAFETY: a new anonymous mapping at a range the test just freed;
        // MAP_FIXED_NOREPLACE never replaces an existing one.
        let at = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                end - start,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return None;
        }
        // Kernels before 4.17 take the flag as a hint only.
        let held = Held(at as usize, end - start);
        (at as usize == start).then_some(held)
    }

    fn new(range: (usize, usize)) -> Held {
        Held::try_new(range).expect("the library's range is free after dlclose")
    }
}

/// Holds every unmapped gap between `from` and the highest mapping below
/// the stack. The kernel places a new mapping at the top of the highest gap
/// that fits, so with these held the range just below `from` is where the
/// next library of its size goes — whatever else was unmapped above it
/// meanwhile (in a fresh-clone CI run something 88 KiB above the freed
/// range was, and the twin library landed there).
fn hold_gaps_above(from: usize) -> Vec<Held> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let hex = |text| usize::from_str_radix(text, 16).unwrap();
    let mut ranges: Vec<(usize, usize)> = maps
        .lines()
        .filter(|line| !line.ends_with("[stack]") && !line.ends_with("[vsyscall]"))
        .map(|line| {
            let (start, end) = line.split(' ').next().unwrap().split_once('-').unwrap();
            (hex(start), hex(end))
        })
        .filter(|&(_, end)| end > from)
        .collect();
    ranges.sort_unstable();
    let mut held = Vec::new();
    let mut free_from = from;
    for (start, end) in ranges {
        if start > free_from {
            held.extend(Held::try_new((free_from, start)));
        }
        free_from = free_from.max(end);
    }
    held
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Held::new`, used by nothing.
        unsafe { libc::munmap(self.0 as *mut libc::c_void, self.1) };
    }
}

fn call(function: usize, x: i64) -> i64 {
    // SAFETY: the fixture's run has the C signature long(long).
    let function: extern "C" fn(i64) -> i64 = unsafe { std::mem::transmute(function) };
    function(x)
}

/// The events of `run(1)`: one `mid` of four `leaf`s.
const RUN_1: &str = "E0 run E1 mid E2 leaf X2 leaf E2 leaf X2 leaf E2 leaf X2 leaf \
                     E2 leaf X2 leaf X1 mid X0 run";

#[test]
fn control_operations_work_after_dlclose_and_a_library_at_the_same_address_is_traced() {
    fntrace::init().unwrap();
    let before = fntrace::stats().sites;
    let (handle, run) = open(fntrace_fixtures::DLOPEN_LIBRARY, "dl_");
    fntrace::enable("graph").unwrap();
    let with_library = fntrace::stats().sites;
    assert!(with_library > before, "the library's sites were scanned");
    assert!(fntrace::site_of(run).unwrap().patched);
    assert_eq!(call(run, 1), 22);
    let tid = fntrace::current_tid();
    let events = thread_events(&GRAPH_TRACER.take_trace(), tid);
    assert_eq!(render(&events, "dl_"), RUN_1);

    let range = mapped_range(fntrace_fixtures::DLOPEN_LIBRARY);
    // SAFETY: nothing of the library is used after this.
    assert_eq!(unsafe { libc::dlclose(handle) }, 0);
    // The range stays held while the control operations run: they may map
    // pages near the libraries (stubs for library calls), which would push
    // the twin below off the freed range.
    let held = Held::new(range);
    fntrace::disable("graph").expect("disable after dlclose");
    assert_eq!(fntrace::stats().sites, before, "the library's sites left");
    assert_eq!(fntrace::site_of(run), None);
    fntrace::enable("graph").expect("enable after dlclose");
    fntrace::flush().expect("flush after dlclose");
    let above = hold_gaps_above(range.1);
    drop(held);

    // The twin library, opened while tracing, lands where the first one was
    // (the kernel maps it into the range just freed, the highest gap now):
    // its sites have the old sites' return addresses, and are found by
    // their first calls.
    let (handle2, run2) = open(fntrace_fixtures::DLOPEN_LIBRARY2, "dl2_");
    drop(above);
    assert_eq!(
        run2,
        run,
        "the second library is mapped at the first's address; the mappings \
         around the freed range {:#x}-{:#x}:\n{}",
        range.0,
        range.1,
        maps_near(range)
    );
    assert_eq!(call(run2, 1), 22);
    fntrace::disable("graph").expect("disable with the second library");
    let events = thread_events(&GRAPH_TRACER.take_trace(), tid);
    assert_eq!(render(&events, "dl2_"), RUN_1);
    assert_eq!(fntrace::stats().sites, with_library);
    fntrace::enable("graph").unwrap();
    assert!(fntrace::site_of(run2).unwrap().patched);
    fntrace::disable("graph").unwrap();
    assert!(!fntrace::site_of(run2).unwrap().patched);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::dlclose(handle2) }, 0);
    fntrace::flush().expect("flush after the second dlclose");
    assert_eq!(fntrace::stats().sites, before);
}
