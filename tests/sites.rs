//! Call sites of real instrumented code: the exact bytes after `init`,
//! `enable` and `disable`, and the exact calls a tracer sees in each phase,
//! for every site form (gcc -pg PIE/non-PIE, -mfentry PIE/non-PIE, a -pg
//! shared object, rustc -Zinstrument-mcount).

#[macro_use]
mod common;

use common::{text, Counter, NOP5, NOP6};
use fntrace::{SiteForm, SiteKind};
use fntrace_fixtures::{c_fentry, c_fentry_nopie, c_nopie, c_pie, c_shared, rust};

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("count", &COUNTER);

struct Variant {
    name: &'static str,
    leaf: usize,
    mid: usize,
    run: usize,
    cold: usize,
    call_run: fn(i64) -> i64,
    call_cold: fn(i64) -> i64,
    form: SiteForm,
    kind: SiteKind,
    /// Offset of the site from the function entry.
    offset: usize,
}

fn rust_run(n: i64) -> i64 {
    rust::run(n as u64) as i64
}
fn rust_cold(x: i64) -> i64 {
    rust::cold(x as u64) as i64
}

fn variants() -> Vec<Variant> {
    macro_rules! c {
        ($m:ident, $form:expr, $kind:expr, $offset:expr) => {
            Variant {
                name: stringify!($m),
                leaf: $m::leaf_address(),
                mid: $m::mid_address(),
                run: $m::run_address(),
                cold: $m::cold_address(),
                call_run: $m::run,
                call_cold: $m::cold,
                form: $form,
                kind: $kind,
                offset: $offset,
            }
        };
    }
    vec![
        // gcc -pg, PIE: `call *mcount@GOTPCREL` relaxed by ld to `67 e8`.
        c!(c_pie, SiteForm::Addr32CallRel32, SiteKind::Mcount, 4),
        c!(c_nopie, SiteForm::CallRel32, SiteKind::Mcount, 4),
        c!(c_fentry, SiteForm::Addr32CallRel32, SiteKind::Fentry, 0),
        c!(c_fentry_nopie, SiteForm::CallRel32, SiteKind::Fentry, 0),
        // In a shared object the GOT call stays `ff 15`.
        c!(c_shared, SiteForm::CallGotRip, SiteKind::Mcount, 4),
        Variant {
            name: "rust",
            leaf: addr!(rust::leaf),
            mid: addr!(rust::mid),
            run: addr!(rust::run),
            cold: addr!(rust::cold),
            call_run: rust_run,
            call_cold: rust_cold,
            form: SiteForm::CallRel32,
            kind: SiteKind::Mcount,
            offset: usize::MAX, // after rustc's prologue: checked by decoding
        },
    ]
}

fn nop_of(form: SiteForm) -> Vec<u8> {
    match form {
        SiteForm::CallRel32 => NOP5.to_vec(),
        _ => NOP6.to_vec(),
    }
}

/// One test: the phases share process-wide state and must run in order.
#[test]
fn sites_are_nopped_patched_and_reverted_with_exact_counts() {
    let variants = variants();
    // Some functions run before init: the lazy hook finds their sites.
    for v in &variants {
        (v.call_run)(2);
    }
    fntrace::init().expect("init");
    fntrace::init().expect("init is idempotent");

    let stats = fntrace::stats();
    assert!(stats.initialized);
    assert_eq!(stats.unrecognized_sites, 0, "{stats:?}");

    for v in &variants {
        for (what, function) in [
            ("leaf", v.leaf),
            ("mid", v.mid),
            ("run", v.run),
            ("cold", v.cold),
        ] {
            let site = fntrace::site_of(function)
                .unwrap_or_else(|| panic!("{}::{what}: no site found", v.name));
            assert_eq!(site.form, Some(v.form), "{}::{what}: {site:?}", v.name);
            assert_eq!(site.kind, v.kind, "{}::{what}", v.name);
            // The site's offset is fixed for fentry (0) and for gcc's leaf
            // (after push %rbp; mov %rsp,%rbp); elsewhere it follows the
            // prologue, which depends on the registers the function saves.
            if v.offset == 0 || (what == "leaf" && v.offset != usize::MAX) {
                assert_eq!(site.address - function, v.offset, "{}::{what}", v.name);
            } else {
                assert!(site.address > function && site.address < function + 64);
            }
            let len = v.form.instruction_len();
            assert_eq!(site.original.len(), len);
            let expected_head: &[u8] = match v.form {
                SiteForm::CallRel32 => &[0xe8],
                SiteForm::Addr32CallRel32 => &[0x67, 0xe8],
                SiteForm::CallGotRip => &[0xff, 0x15],
            };
            assert!(
                site.original.starts_with(expected_head),
                "{}::{what}",
                v.name
            );
            assert_eq!(
                text(site.address, len),
                nop_of(v.form),
                "{}::{what} after init",
                v.name
            );
            assert!(!site.patched && !site.excluded);
            // cold never ran: only the ELF scan can have found it.
            if what == "cold" {
                assert!(!site.lazily_found, "{}::cold", v.name);
            }
        }
        COUNTER.watch(v.leaf);
        COUNTER.watch(v.mid);
        COUNTER.watch(v.run);
        COUNTER.watch(v.cold);
    }

    // Phase 1: NOPs, nothing is counted.
    for v in &variants {
        (v.call_run)(10);
    }
    assert_eq!(COUNTER.all.load(std::sync::atomic::Ordering::Relaxed), 0);

    // Phase 2: enabled. Exact counts, from 4 threads at once.
    assert!(matches!(
        fntrace::enable("no-such-tracer"),
        Err(fntrace::Error::UnknownTracer(_))
    ));
    fntrace::enable("count").expect("enable");
    for v in &variants {
        let site = fntrace::site_of(v.leaf).unwrap();
        assert_eq!(
            text(site.address, site.original.len()),
            site.original,
            "{} enabled",
            v.name
        );
        assert!(site.patched);
        assert_eq!(site.enabled_tracers, 1);
    }
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for v in &variants {
                    (v.call_run)(25);
                    (v.call_cold)(1);
                }
            });
        }
    });
    for v in &variants {
        assert_eq!(COUNTER.count(v.run), 4, "{} run", v.name);
        assert_eq!(COUNTER.count(v.mid), 4 * 25, "{} mid", v.name);
        assert_eq!(COUNTER.count(v.leaf), 4 * 25 * 4, "{} leaf", v.name);
        assert_eq!(
            COUNTER.count(v.cold),
            4,
            "{} cold (never ran before enable)",
            v.name
        );
    }

    // Arguments in registers survive the trampolines (ints and doubles).
    let expected = (1 + 2 * 2 + 3 * 3 + 4 * 4 + 5 * 5 + 6 * 6) as f64 + 1.5 * 4.0;
    assert_eq!(c_pie::many_args(1, 2, 3, 4, 5, 6, 1.5, 4.0), expected);
    assert_eq!(c_fentry::many_args(1, 2, 3, 4, 5, 6, 1.5, 4.0), expected);
    assert_eq!(c_shared::many_args(1, 2, 3, 4, 5, 6, 1.5, 4.0), expected);
    assert_eq!(rust::many_args(1, 2, 3, 4, 5, 6, 1.5, 4.0), expected);

    // Phase 3: disabled. NOPs again, nothing more counted.
    fntrace::disable("count").expect("disable");
    COUNTER.reset();
    for v in &variants {
        let site = fntrace::site_of(v.leaf).unwrap();
        assert_eq!(
            text(site.address, site.original.len()),
            nop_of(v.form),
            "{} disabled",
            v.name
        );
        assert_eq!(site.enabled_tracers, 0);
        (v.call_run)(10);
    }
    assert_eq!(COUNTER.all.load(std::sync::atomic::Ordering::Relaxed), 0);
}
