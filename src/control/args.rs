//! Which functions record arguments and return values (`-A`, `-R`,
//! `FNTRACE_ARGS`, `FNTRACE_RETVAL`): the specs resolved against the
//! functions with a call site, whose sites are marked to stay off the plain
//! fast paths (those of functions with integer values alone take the
//! graph tracer's argument entries), and the graph tracer's table (`builtin::graph::args`). Set
//! before tracing starts, or replaced later (`fntrace ctl PID args`), at
//! most 64 times a process. Control path only.

use std::sync::atomic::Ordering;

use fntrace_format::argspec::{self, SpecKind};
use fntrace_format::{coroutine, glob};

use super::names::{unmatched, WITH_SITES};
use super::{control, init_locked, rescan_and_select, sync_text, traceable};
use crate::builtin::graph::arg_recipes;
use crate::builtin::graph::args::{self as graph_args, ArgTable};
use crate::error::Error;
use crate::rt::thread::Untraced;
use crate::sites::{self, flag};
use crate::symbols;

/// Records the values `arguments` (`-A` specs, joined by `;`) and
/// `retval` (`-R` specs) give the functions they select, with the graph
/// tracer. Returns one line per glob that selects no function with a call
/// site (the specs are kept: a library loaded later is not searched, so
/// such a glob records nothing). Specs set before are replaced (both
/// kinds: pass the ones to keep), the functions they no longer select put
/// back on the fast paths. Refused if a spec does not parse, or after 64
/// sets in the process. Call it while no recording or flight recorder
/// runs (this does not check; `fntrace ctl PID args` refuses): what one
/// wrote before would be read with the new specs.
pub fn set_arg_specs(arguments: &str, retval: &str) -> Result<Vec<String>, Error> {
    set_specs(arguments, retval, false)
}

/// The argument specs of `filter` ([`crate::Filter::args`],
/// [`crate::Filter::retval`]), set as [`set_arg_specs`] sets them unless
/// they are the ones in force already; refused, with nothing changed, if
/// a glob selects no function with a call site. A filter without specs
/// leaves the specs in force as they are.
pub(crate) fn set_filter_specs(filter: &crate::filter::Filter) -> Result<(), Error> {
    let (arguments, retval) = (filter.get_args().join(";"), filter.get_retval().join(";"));
    if arguments.is_empty() && retval.is_empty() {
        return Ok(());
    }
    let in_force =
        graph_args::table().is_some_and(|t| t.arguments == arguments && t.retval == retval);
    if !in_force {
        set_specs(&arguments, &retval, true)?;
    }
    Ok(())
}

/// [`set_arg_specs`]; with `refuse_unmatched`, a glob that selects no
/// function is an error and nothing is changed.
fn set_specs(arguments: &str, retval: &str, refuse_unmatched: bool) -> Result<Vec<String>, Error> {
    let invalid = Error::BadArgSpec;
    let mut specs = argspec::parse(arguments, SpecKind::Arguments).map_err(invalid)?;
    specs.extend(argspec::parse(retval, SpecKind::Retval).map_err(invalid)?);
    if specs.is_empty() && graph_args::table().is_none() {
        return Ok(Vec::new());
    }
    let _untraced = Untraced::begin();
    let mut state = control();
    init_locked(&mut state)?;
    let objects = symbols::current();
    rescan_and_select(&mut state, &objects);
    let mut functions = Vec::new();
    let mut marks = Vec::new();
    let mut fast_sites = Vec::new();
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
        // A future's drop function (`--async`) is linked by the Rust entry.
        let fast = !values.is_empty()
            && arg_recipes::eligible(&values)
            && coroutine::dropped_by(&name).is_none();
        marks.push((listed.site, !values.is_empty(), fast));
        if fast {
            fast_sites.push((listed.site.return_address(), function));
        }
        if !values.is_empty() {
            functions.push((function, values));
        }
        names.push(name);
    }
    names.sort();
    names.dedup();
    let unmatched = unmatched(specs.iter().map(|s| s.glob.as_str()), &names, WITH_SITES);
    if refuse_unmatched && !unmatched.is_empty() {
        return Err(invalid(unmatched.join("; ")));
    }
    for (site, with_args, fast) in marks {
        site.set_flag(flag::WITH_ARGS, with_args);
        site.set_flag(flag::ARGS_FAST, fast);
    }
    let table = ArgTable::new(
        functions,
        &fast_sites,
        arguments.to_string(),
        retval.to_string(),
    );
    if graph_args::set_table(table).is_err() {
        return Err(invalid(format!(
            "argument specs are set at most {} times a process",
            graph_args::MAX_TABLES
        )));
    }
    // Sites already on a fast path go back to the generic one, and those
    // no longer selected to theirs.
    sync_text(&mut state.sites, |_| {})?;
    Ok(unmatched)
}
