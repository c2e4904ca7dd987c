//! Whether an ELF executable has instrumented call sites: the `mcount` or
//! `__fentry__` it calls, or a section listing its sites. `fntrace record`
//! refuses a program without any before running it (as uftrace does); the
//! runtime, started in a program that waits for live control, finds and
//! NOPs its sites before `main` only when it has some.

use object::{Object, ObjectSection, ObjectSymbol, ReadRef};

/// The instrumentation symbols a traceable executable references or
/// defines: `mcount` (`gcc -pg`, `rustc -Zinstrument-mcount`; glibc's is
/// `mcount`/`_mcount`) and `__fentry__` (`gcc -pg -mfentry`).
pub const SITE_SYMBOLS: [&str; 3] = ["mcount", "_mcount", "__fentry__"];

/// Sections that list call sites: `-mrecord-mcount` builds (the sites may
/// call nothing when `-mnop-mcount` made them NOPs) and
/// `-fpatchable-function-entry`.
pub const SITE_SECTIONS: [&str; 2] = ["__mcount_loc", "__patchable_function_entries"];

/// The first sign of instrumentation in `file` (a symbol or section name),
/// looked for cheapest first: a dynamic executable imports `mcount` (its
/// dynamic symbols, a few hundred); a `-mrecord-mcount` or patchable build
/// has a section; only then the full symbol table, for static ones (and
/// programs linked with `libfntrace.a`, which define `mcount`).
pub fn instrumentation_in<'data, R: ReadRef<'data>>(
    file: &object::File<'data, R>,
) -> Option<&'static str> {
    (file.dynamic_symbols())
        .find_map(|symbol| named(symbol.name(), &SITE_SYMBOLS))
        .or_else(|| (file.sections()).find_map(|section| named(section.name(), &SITE_SECTIONS)))
        .or_else(|| (file.symbols()).find_map(|symbol| named(symbol.name(), &SITE_SYMBOLS)))
}

/// `name`, if it is one of `among`.
fn named(name: Result<&str, object::Error>, among: &[&'static str]) -> Option<&'static str> {
    name.ok()
        .and_then(|n| among.iter().copied().find(|known| *known == n))
}

/// Whether the shared object `file` has instrumented call sites of its
/// own: it imports `mcount` or `__fentry__` (an undefined dynamic symbol:
/// glibc, which defines them, has none), or has a section listing sites.
pub fn library_instrumentation_in<'data, R: ReadRef<'data>>(
    file: &object::File<'data, R>,
) -> Option<&'static str> {
    (file.dynamic_symbols())
        .filter(|symbol| symbol.is_undefined())
        .find_map(|symbol| named(symbol.name(), &SITE_SYMBOLS))
        .or_else(|| (file.sections()).find_map(|section| named(section.name(), &SITE_SECTIONS)))
}
