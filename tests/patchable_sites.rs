//! Patchable entries as the in-process API sees them: a shared object
//! built with gcc `-O2 -fPIC -fpatchable-function-entry=5` (and no `-pg`,
//! `tests/c/patchable_lib.c`) is `dlopen`ed; the next operation finds its
//! entries in `__patchable_function_entries`, leaves the compiler's NOPs
//! alone until a tracer selects them, then writes a call (through a jump
//! stub: the library lies far from the trampolines in the test binary)
//! and the five-byte NOP when off. Counts are exact under both
//! protocols; the entry with three NOPs is refused and counted, never
//! written; the one with NOPs before its symbol is traced at its symbol.

#[macro_use]
mod common;

use std::ffi::CString;
use std::path::Path;

use common::{native, native::repo, Counter, NOP5};
use fntrace::{Filter, PatchProtocol, SiteForm, SiteKind};

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("patchable-counter", &COUNTER);

/// Builds `tests/c/patchable_lib.c` into `dir` and opens it; the
/// addresses of `names`.
fn open(dir: &Path, names: &[&str]) -> Vec<usize> {
    std::fs::create_dir_all(dir).unwrap();
    let library = dir.join("libpatchable.so");
    let source = repo().join("tests/c/patchable_lib.c");
    native::gcc(&[
        "-O2".as_ref(),
        "-fPIC".as_ref(),
        "-shared".as_ref(),
        "-fpatchable-function-entry=5".as_ref(),
        source.as_os_str(),
        "-o".as_ref(),
        library.as_os_str(),
    ]);
    let path = CString::new(library.to_str().unwrap()).unwrap();
    // SAFETY: dlopen/dlsym of a plain C library built just above.
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!handle.is_null(), "dlopen {}", library.display());
        names
            .iter()
            .map(|name| {
                let name = CString::new(*name).unwrap();
                let address = libc::dlsym(handle, name.as_ptr());
                assert!(!address.is_null());
                address as usize
            })
            .collect()
    }
}

/// The generic fentry trampoline (fntrace's `__fentry__`).
fn fentry_address() -> usize {
    extern "C" {
        fn __fentry__();
    }
    __fentry__ as *const () as usize
}

fn call(function: usize, x: i64) -> i64 {
    // SAFETY: every function of the library has the C signature long(long).
    let function: extern "C" fn(i64) -> i64 = unsafe { std::mem::transmute(function) };
    function(x)
}

#[test]
fn entries_are_found_patched_through_a_stub_toggled_and_refused_as_documented() {
    fntrace::init().unwrap();
    let base = common::temp_dir("patchable-sites");
    let names = ["pl_top", "pl_mid", "pl_leaf", "pl_before", "pl_short"];
    let [top, mid, leaf, before, short] = open(&base, &names)[..] else {
        unreachable!()
    };
    let refused_before = fntrace::stats().scan.patchable_refused;
    let found_before = fntrace::stats().scan.patchable_found;
    fntrace::flush().unwrap();
    let stats = fntrace::stats();
    assert_eq!(stats.scan.patchable_found - found_before, 4, "{stats:?}");
    assert_eq!(
        stats.scan.patchable_refused - refused_before,
        1,
        "{stats:?}"
    );
    assert!(fntrace::site_of(short).is_none(), "three NOPs: refused");
    assert_eq!(common::text(short, 3), [0x90; 3]);

    for function in [top, mid, leaf, before] {
        let site = fntrace::site_of(function).expect("a patchable entry's site");
        assert!(site.patchable_entry && !site.patched && !site.lazily_found);
        assert_eq!(
            (site.kind, site.form),
            (SiteKind::Fentry, Some(SiteForm::CallRel32))
        );
        // The symbol is the function; with NOPs before it, too.
        assert_eq!(site.address, function);
        assert_eq!(site.function, function);
        // Not written yet: the compiler's NOPs, two more before pl_before.
        assert_eq!(common::text(function, 5), [0x90; 5]);
    }
    assert_eq!(common::text(before - 2, 2), [0x90; 2]);

    for protocol in [PatchProtocol::StopTheWorld, PatchProtocol::Breakpoint] {
        fntrace::set_patch_protocol(protocol).unwrap();
        COUNTER.reset();
        for function in [top, mid, leaf, before] {
            COUNTER.watch(function);
        }
        fntrace::enable_with("patchable-counter", &Filter::new().include("pl_*")).unwrap();
        for function in [top, mid, leaf, before] {
            let site = fntrace::site_of(function).unwrap();
            assert!(site.patched, "{protocol:?}");
            assert_eq!(site.original[0], 0xe8);
            assert_eq!(common::text(function, 5), site.original);
            // The library lies more than 2 GiB from the trampoline: the
            // call goes to a jump stub near it (`jmp *0(%rip)` and the
            // trampoline's address).
            let fentry = fentry_address();
            assert!(function.abs_diff(fentry) > 1 << 31);
            let rel = i32::from_le_bytes(site.original[1..5].try_into().unwrap());
            let stub = (function as i64 + 5 + rel as i64) as usize;
            let mut jump = vec![0xff, 0x25, 0, 0, 0, 0];
            jump.extend((fentry as u64).to_le_bytes());
            assert_eq!(common::text(stub, 14), jump);
        }
        for i in 0..100 {
            assert_eq!(call(top, i), 4 * i + 6);
            assert_eq!(call(before, i), 3 * i);
            assert_eq!(call(short, i), 5 * i);
        }
        fntrace::disable("patchable-counter").unwrap();
        assert_eq!(call(top, 1), 10, "not counted: off");
        assert_eq!(COUNTER.count(top), 100, "{protocol:?}");
        assert_eq!(COUNTER.count(mid), 100, "{protocol:?}");
        assert_eq!(COUNTER.count(leaf), 200, "{protocol:?}");
        assert_eq!(COUNTER.count(before), 100, "{protocol:?}");
        assert_eq!(COUNTER.all.load(std::sync::atomic::Ordering::Relaxed), 500);
        for function in [top, mid, leaf, before] {
            assert!(!fntrace::site_of(function).unwrap().patched);
            // Off after the first write: the five-byte NOP, one instruction.
            assert_eq!(common::text(function, 5), NOP5);
        }
        assert_eq!(common::text(short, 3), [0x90; 3], "never written");
    }
    std::fs::remove_dir_all(&base).unwrap();
}
