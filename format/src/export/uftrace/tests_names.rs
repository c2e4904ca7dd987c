//! Tests of what names and command line fntrace gives uftrace: C++ symbols
//! mangled (so uftrace's own demangling and filters work), Rust symbols
//! readable (uftrace 0.13 cannot demangle v0 names), and an `info` command
//! line that keeps `uftrace dump --chrome` valid JSON.

use std::collections::HashMap;
use std::fs;

use super::read_uftrace_dir;
use super::tests::{ev, names, replay_lines, uftrace, written, In, Out, T0};
use crate::names::demangle;
use crate::trace::{ThreadTrace, Trace};

const MAIN: usize = 0x40_1000;
const CTOR: usize = 0x40_2000;
const BAR: usize = 0x40_3000;
const RUST_V0: usize = 0x40_4000;
const RUST_LEGACY: usize = 0x40_5000;

/// ELF names: C, C++ (`ns::ns1::foo::foo(int)` and `ns::ns1::foo::bar(int)`),
/// Rust v0 and Rust legacy with `$…$` escapes.
const SYMBOLS: [(usize, &str); 5] = [
    (MAIN, "main"),
    (CTOR, "_ZN2ns3ns13fooC1Ei"),
    (BAR, "_ZN2ns3ns13foo3barEi"),
    (RUST_V0, "_RNvCs2dGlcl3A6Of_21fixture_rust_workload4leaf"),
    (
        RUST_LEGACY,
        "_ZN48_$LT$demo..Token$u20$as$u20$core..fmt..Debug$GT$3fmt17h0123456789abcdefE",
    ),
];

/// A command line with what a JSON string cannot hold raw.
const CMDLINE: &str = "/opt/prog --name \"a b\" C:\\dir\ttab";

/// main calls each function once, and `bar` twice; the runtime's model:
/// readable names and ELF symbols. No maps: all in the pseudo-module.
fn mixed_trace() -> Trace {
    let mut events = vec![ev(T0, MAIN, 0, In)];
    let mut t = T0;
    for f in [CTOR, BAR, RUST_V0, RUST_LEGACY, BAR] {
        events.push(ev(t + 100, f, 1, In));
        events.push(ev(t + 150, f, 1, Out));
        t += 100;
    }
    events.push(ev(t + 100, MAIN, 0, Out));
    Trace {
        pid: 77,
        exe: "/opt/prog".into(),
        cmdline: CMDLINE.into(),
        threads: vec![ThreadTrace {
            tid: 77,
            name: None,
            events,
            lost: 0,
        }],
        names: SYMBOLS.iter().map(|&(f, s)| (f, demangle(s))).collect(),
        symbols: names(&SYMBOLS),
        ..Trace::default()
    }
}

#[test]
fn sym_files_hold_cxx_symbols_mangled_and_rust_ones_readable() {
    let trace = mixed_trace();
    assert_eq!(trace.names[&BAR], "ns::ns1::foo::bar");
    let dir = written(&trace, "names-sym");
    let sym = fs::read_to_string(dir.0.join("fntrace-unmapped.sym")).unwrap();
    assert_eq!(
        sym,
        "# symbols: 5\n\
         # path name: fntrace-unmapped\n\
         0000000000000000 T main\n\
         0000000000001000 T _ZN2ns3ns13fooC1Ei\n\
         0000000000002000 T _ZN2ns3ns13foo3barEi\n\
         0000000000003000 T fixture_rust_workload::leaf\n\
         0000000000004000 T <demo::Token as core::fmt::Debug>::fmt\n\
         0000000000014000 ? __func_end\n"
    );

    let out = uftrace(&["replay"], &dir.0);
    assert_eq!(
        replay_lines(&out),
        [
            "            [    77] | main() {",
            "   0.050 us [    77] |   ns::ns1::foo::foo();",
            "   0.050 us [    77] |   ns::ns1::foo::bar();",
            "   0.050 us [    77] |   fixture_rust_workload::leaf();",
            "   0.050 us [    77] |   <demo::Token as core::fmt::Debug>::fmt();",
            "   0.050 us [    77] |   ns::ns1::foo::bar();",
            "   0.600 us [    77] | } /* main */",
        ],
        "uftrace replay printed:\n{out}"
    );
}

#[test]
fn uftrace_filters_on_the_names_it_shows() {
    let dir = written(&mixed_trace(), "names-filter");
    let out = uftrace(&["replay", "-F", "ns::ns1::foo::bar"], &dir.0);
    assert_eq!(
        replay_lines(&out),
        [
            "   0.050 us [    77] | ns::ns1::foo::bar();",
            "   0.050 us [    77] | ns::ns1::foo::bar();",
        ],
        "uftrace replay -F printed:\n{out}"
    );
    let out = uftrace(&["replay", "-F", "fixture_rust_workload::leaf"], &dir.0);
    assert_eq!(
        replay_lines(&out),
        ["   0.050 us [    77] | fixture_rust_workload::leaf();"],
        "uftrace replay -F printed:\n{out}"
    );
    // `--demangle=full` shows C++ parameters: uftrace demangled the name.
    let out = uftrace(&["replay", "--demangle=full"], &dir.0);
    assert!(
        out.contains("|   ns::ns1::foo::bar(int);"),
        "uftrace replay --demangle=full printed:\n{out}"
    );

    let out = uftrace(&["report", "-s", "func"], &dir.0);
    let rows: Vec<(String, String)> = out
        .lines()
        .skip(2)
        .filter_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            Some((parts.get(4)?.to_string(), parts.get(5..)?.join(" ")))
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("1", "<demo::Token as core::fmt::Debug>::fmt"),
        ("1", "fixture_rust_workload::leaf"),
        ("1", "main"),
        ("2", "ns::ns1::foo::bar"),
        ("1", "ns::ns1::foo::foo"),
    ]
    .iter()
    .map(|&(n, f)| (n.to_string(), f.to_string()))
    .collect();
    assert_eq!(rows, expected, "uftrace report printed:\n{out}");
}

#[test]
fn uftrace_dump_chrome_is_json_with_the_command_line() {
    let dir = written(&mixed_trace(), "names-chrome");
    let out = uftrace(&["dump", "--chrome"], &dir.0);
    let json: serde_json::Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("{e}\nuftrace dump --chrome printed:\n{out}"));
    // The tab, which JSON cannot hold raw, became a space.
    assert_eq!(
        json["metadata"]["command_line"], "/opt/prog --name \"a b\" C:\\dir tab",
        "{out}"
    );
    let names: Vec<&str> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "B")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "main",
            "ns::ns1::foo::foo",
            "ns::ns1::foo::bar",
            "fixture_rust_workload::leaf",
            "<demo::Token as core::fmt::Debug>::fmt",
            "ns::ns1::foo::bar",
        ]
    );

    // Without a command line, the executable's path stands in. (Not
    // `sample_trace`: uftrace 0.13 writes an empty array element for a lost
    // record, whatever the command line.)
    let trace = Trace {
        cmdline: String::new(),
        ..mixed_trace()
    };
    let dir = written(&trace, "names-chrome-exe");
    let out = uftrace(&["dump", "--chrome"], &dir.0);
    let json: serde_json::Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("{e}\nuftrace dump --chrome printed:\n{out}"));
    assert_eq!(json["metadata"]["command_line"], trace.exe.as_str());
    let out = uftrace(&["info"], &dir.0);
    assert!(
        out.contains(&format!("# cmdline             : {}\n", trace.exe)),
        "{out}"
    );
}

#[test]
fn reading_back_gives_readable_names_and_the_command_line() {
    let trace = mixed_trace();
    let dir = written(&trace, "names-read");
    let back = read_uftrace_dir(&dir.0).unwrap();
    assert_eq!(back.names, trace.names);
    assert_eq!(back.threads, trace.threads);
    assert_eq!(back.cmdline, "/opt/prog --name \"a b\" C:\\dir tab");
    // The symbols as the .sym file holds them.
    let mut expected: HashMap<usize, String> = names(&SYMBOLS);
    expected.insert(RUST_V0, "fixture_rust_workload::leaf".into());
    expected.insert(RUST_LEGACY, "<demo::Token as core::fmt::Debug>::fmt".into());
    assert_eq!(back.symbols, expected);
}
