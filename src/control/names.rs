//! The function names a selection is checked against before it is taken:
//! a glob of live control (`filter`, `enable`, `patch`, a flight trigger)
//! or of the environment (`FNTRACE_FILTER`, `FNTRACE_FLIGHT_TRIGGER`,
//! `FNTRACE_PATCH_FUNCTIONS`) that matches none of them is a typo far more
//! often than a wish, and is said with the closest names
//! (`fntrace_format::glob::no_match`, the offline readers' wording).
//! Control path only: these walk every site and demangle names.

use std::sync::atomic::Ordering;

use super::{control, init_locked, rescan_and_select, sync_text, traceable};
use crate::error::Error;
use crate::patch::priority;
use crate::rt::thread::Untraced;
use crate::sites::{self, exclusion_flag};
use crate::symbols;

/// What every message about functions with sites says they are among.
pub(crate) const WITH_SITES: &str = "with a call site in this process";

/// What every message about functions to patch says they are among.
pub(crate) const PATCHABLE: &str = "of this process's symbol tables";

/// How to give a process call sites, for the message saying it has none.
pub(crate) const HOW_TO_GET_SITES: &str = "build Rust with `fntrace cargo build`, C or C++ with \
     `gcc -pg` (or -pg -mfentry); or patch functions built without instrumentation at run \
     time with -P GLOB: `fntrace record -P GLOB`, FNTRACE_PATCH_FUNCTIONS=GLOB, or \
     `fntrace ctl PID patch GLOB` (after `fntrace attach PID` for a program started without \
     fntrace)";

/// The demangled names of the functions that have a traceable call site
/// now, sorted, each once. Finds the sites first if no operation has (as
/// the first `enable` would), and scans libraries loaded since the last
/// operation (`dlopen`), so that their functions count.
pub(crate) fn traced_names() -> Result<Vec<String>, Error> {
    let _untraced = Untraced::begin();
    let _priority = priority::boost_for_text_change();
    let mut state = control();
    init_locked(&mut state)?;
    let objects = symbols::current();
    rescan_and_select(&mut state, &objects);
    // Sites the rescan found get their NOP now, as after any operation.
    sync_text(&mut state.sites, |_| {})?;
    let mut names: Vec<String> = sites::in_order(state.sites.current())
        .filter(|listed| traceable(listed.site))
        .filter_map(|listed| {
            let function = listed.site.function.load(Ordering::Relaxed);
            objects
                .function_at(function)
                .map(|f| symbols::demangle(&f.name))
        })
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// The demangled names of the functions of every loaded object but
/// fntrace's own code: what `-P` globs may select. Sorted, each once.
pub(crate) fn patchable_names() -> Vec<String> {
    let _untraced = Untraced::begin();
    let objects = symbols::current();
    // libfntrace.so, where it is loaded as a library: all of it is
    // fntrace's (as the patcher decides).
    let this = patchable_names as *const () as usize;
    let executable = std::fs::read_link("/proc/self/exe").ok();
    let mut names: Vec<String> = objects
        .objects
        .iter()
        .filter(|o| {
            !o.text.iter().any(|t| t.contains(&this))
                || executable.as_deref() == Some(std::path::Path::new(&o.path))
        })
        .flat_map(|o| &o.functions)
        .filter(|f| exclusion_flag(&f.name) == 0)
        .map(|f| symbols::demangle(&f.name))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// One message per glob of `globs` that selects none of `names`:
/// `GLOB: no function AMONG matches it (closest: …)`.
pub(crate) fn unmatched<'g>(
    globs: impl IntoIterator<Item = &'g str>,
    names: &[String],
    among: &str,
) -> Vec<String> {
    let globs: Vec<&str> = globs.into_iter().collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    fntrace_format::glob::unmatched(&globs, &names)
        .into_iter()
        .map(|glob| fntrace_format::glob::no_match(glob, among, names.iter().copied()))
        .collect()
}
