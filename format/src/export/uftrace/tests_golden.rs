//! The writer's exact bytes: a trace with every case the writer treats
//! specially (calls running at the start, unwound calls, calls still
//! running, lost and too-deep events, a tid seen twice, functions outside
//! every mapping, mangled and missing names) is written and compared, file
//! by file, with `golden.txt`, which the whole-trace writer (a `Trace` in
//! memory, before `write_uftrace_dir_of` read events from any
//! [`EventSource`](crate::EventSource)) wrote. Regenerate (only for an
//! intended change of format) with `FNTRACE_BLESS=1`.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use super::tests::{ev, names, In, Out, TempDir};
use super::write_uftrace_dir;
use crate::trace::{ThreadTrace, Trace};

const BIN: usize = 0x5555_5555_0000;
const LIB: usize = 0x7f00_1234_0000;
const ANON: usize = 0x7f00_9000_0000;

/// The trace: fixed addresses, times and process description.
pub(super) fn golden_trace() -> Trace {
    let (main, mid, leaf, fib) = (BIN + 0x1100, BIN + 0x1200, BIN + 0x1290, BIN + 0x9000);
    let (cxx, nameless, jit) = (LIB + 0x2040, LIB + 0x2100, ANON + 0x10);
    let t0 = 7_000_000_000u64;
    let first = ThreadTrace {
        tid: 31,
        name: Some("main".into()),
        events: vec![
            ev(t0 + 5, leaf, 2, Out), // running at the start, with its callers
            ev(t0 + 9, mid, 1, Out),
            ev(t0 + 20, main, 0, In),
            ev(t0 + 30, mid, 1, In),
            ev(t0 + 40, leaf, 2, In), // unwound by the next entry
            ev(t0 + 50, cxx, 2, In),
            ev(t0 + 60, cxx, 2, Out),
            ev(t0 + 70, nameless, 2, In),
            ev(t0 + 80, jit, 3, In),
            ev(t0 + 85, fib, 1500, In), // deeper than uftrace reads
            ev(t0 + 86, fib, 1500, Out),
            ev(t0 + 90, jit, 3, Out),
            ev(t0 + 95, mid, 1, Out), // closes nameless on the way
            ev(t0 + 99, fib, 5, Out), // no entry, no explanation
            ev(t0 + 120, mid, 1, In), // still running
        ],
        lost: 4,
    };
    let second = ThreadTrace {
        tid: 32,
        name: None,
        events: vec![
            ev(t0 + 3, fib, 0, In),
            ev(t0 + 4, fib, 1, In),
            ev(t0 + 6, fib, 1, Out),
            ev(t0 + 8, fib, 0, Out),
        ],
        lost: 0,
    };
    // Tid 32 again (the kernel reused it), later: written after the first.
    let again = ThreadTrace {
        tid: 32,
        name: Some("reused".into()),
        events: vec![ev(t0 + 201, main, 0, In), ev(t0 + 202, main, 0, Out)],
        lost: 1,
    };
    let mut symbols = names(&[(cxx, "_ZN3foo3barEv"), (main, "main")]);
    symbols.insert(mid, "mid".into());
    Trace {
        pid: 31,
        exe: "/usr/bin/golden".into(),
        cmdline: "/usr/bin/golden --flag \"quoted\"".into(),
        threads: vec![again, first, second],
        names: names(&[
            (main, "main"),
            (mid, "mid"),
            (leaf, "leaf"),
            (cxx, "foo::bar"),
        ]),
        symbols,
        maps: format!(
            "{BIN:x}-{:x} r--p 00000000 08:01 1 /usr/bin/golden\n\
             {:x}-{:x} r-xp 00001000 08:01 1 /usr/bin/golden\n\
             {LIB:x}-{:x} r-xp 00000000 08:01 2 /usr/lib/libgolden.so\n\
             7ffc0000000-7ffc0021000 rw-p 00000000 00:00 0 [stack]\n",
            BIN + 0x1000,
            BIN + 0x1000,
            BIN + 0x3000,
            LIB + 0x4000
        ),
        libraries: Vec::new(),
        ..Trace::default()
    }
}

/// Every file of `dir`, by name: text as it is, `.dat` files in hex, a
/// record a line.
pub(super) fn listing(dir: &Path) -> String {
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(dir).expect("reading the directory") {
        let path = entry.expect("entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = fs::read(&path).expect("reading a file");
        let text = if name.ends_with(".dat") || name == "info" {
            bytes
                .chunks(16)
                .map(|c| c.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n")
                .collect()
        } else {
            String::from_utf8(bytes).expect("UTF-8")
        };
        files.insert(name, text);
    }
    files
        .into_iter()
        .map(|(name, text)| format!("=== {name}\n{text}"))
        .collect()
}

#[test]
fn the_writer_writes_the_bytes_it_always_wrote() {
    let dir = TempDir::new("golden");
    write_uftrace_dir(&golden_trace(), &dir.0, None).expect("writing");
    let got = listing(&dir.0);
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/export/uftrace/golden.txt");
    if std::env::var_os("FNTRACE_BLESS").is_some() {
        fs::write(&golden, &got).expect("writing golden.txt");
    }
    let expected = fs::read_to_string(&golden).expect("golden.txt (FNTRACE_BLESS=1 writes it)");
    assert_eq!(got, expected);
}
