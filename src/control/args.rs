//! Which functions record arguments and return values (`-A`, `-R`,
//! `FNTRACE_ARGS`, `FNTRACE_RETVAL`): the specs resolved against the
//! functions with a call site, whose sites are marked to stay off the fast
//! paths, and the graph tracer's table (`builtin::graph::args`). Set once,
//! before tracing starts. Control path only.

use std::sync::atomic::Ordering;

use fntrace_format::argspec::{self, SpecKind};
use fntrace_format::glob;

use super::names::{unmatched, WITH_SITES};
use super::{control, init_locked, rescan_and_select, sync_text, traceable};
use crate::builtin::graph::args::{self as graph_args, ArgTable};
use crate::error::Error;
use crate::rt::thread::Untraced;
use crate::sites::{self, flag};
use crate::symbols;

/// Records the values `arguments` (`-A` specs, joined by `;`) and
/// `retval` (`-R` specs) give the functions they select, with the graph
/// tracer. Returns one line per glob that selects no function with a call
/// site (the specs are kept: a library loaded later is not searched, so
/// such a glob records nothing). Refused if a spec does not parse, or if
/// specs were set already.
pub fn set_arg_specs(arguments: &str, retval: &str) -> Result<Vec<String>, Error> {
    let invalid = |e: String| Error::BadFilter(format!("argument spec {e}"));
    let mut specs = argspec::parse(arguments, SpecKind::Arguments).map_err(invalid)?;
    specs.extend(argspec::parse(retval, SpecKind::Retval).map_err(invalid)?);
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    if graph_args::table().is_some() {
        return Err(invalid(
            "argument specs are set once per process".to_string(),
        ));
    }
    let _untraced = Untraced::begin();
    let mut state = control();
    init_locked(&mut state)?;
    let objects = symbols::current();
    rescan_and_select(&mut state, &objects);
    let mut functions = Vec::new();
    let mut names = Vec::new();
    for listed in sites::in_order(state.sites.current()) {
        if !traceable(listed.site) {
            continue;
        }
        let function = listed.site.function.load(Ordering::Relaxed);
        let Some(name) = objects
            .function_at(function)
            .map(|f| symbols::demangle(&f.name))
        else {
            continue;
        };
        let values = argspec::values_for(&specs, |pattern| glob::matches(pattern, &name));
        if !values.is_empty() {
            listed.site.set_flag(flag::WITH_ARGS, true);
            functions.push((function, values));
        }
        names.push(name);
    }
    let table = ArgTable::new(functions, arguments.to_string(), retval.to_string());
    if graph_args::set_table(table).is_err() {
        return Err(invalid(
            "argument specs are set once per process".to_string(),
        ));
    }
    // Sites already on a fast path go back to the generic one.
    sync_text(&mut state.sites, |_| {})?;
    names.sort();
    names.dedup();
    Ok(unmatched(
        specs.iter().map(|s| s.glob.as_str()),
        &names,
        WITH_SITES,
    ))
}
