//! Live selections checked before they are taken: a `filter`, the filter
//! an `enable` (or `record`, `flight start`) applies, a `patch` or a
//! flight trigger whose glob matches no function of the process is
//! refused with the closest names, as the offline readers refuse `-F`;
//! an `enable` in a process with no call site at all is refused, naming
//! the ways to get some. `--pending` (`filter --pending`, `enable
//! --pending`, `flight trigger --pending`) keeps such a selection for the
//! functions of a library loaded later (`dlopen`), and the reply says
//! what is pending. `functions [GLOB]` answers the same check (what
//! `fntrace top -F` asks first).

use std::sync::{Mutex, PoisonError};

use crate::control::names::{
    patchable_names, traced_names, unmatched, HOW_TO_GET_SITES, PATCHABLE, WITH_SITES,
};
use crate::error::Error;
use crate::filter::Filter;
use crate::session::{current_filter, current_globs, set_filter};
use crate::socket::Reply;
use crate::vars;

/// The globs of the last `filter --pending`: while they are the filter, an
/// `enable` takes them whatever they match.
static PENDING_FILTER: Mutex<Option<String>> = Mutex::new(None);

fn pending_filter() -> std::sync::MutexGuard<'static, Option<String>> {
    PENDING_FILTER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Whether the filter in force was set with `filter --pending`.
fn filter_is_pending() -> bool {
    let pending = pending_filter();
    pending.is_some() && *pending == current_globs()
}

/// What is said of a process with no call site.
fn no_sites(what: &str, pending: &str) -> String {
    format!(
        "{what}: no function of this process has a call site (it was built without \
         instrumentation): {HOW_TO_GET_SITES}; `{pending}` keeps it for a library loaded \
         later (dlopen)"
    )
}

/// The messages of the globs of `filter` that select no function with a
/// site, or that it selects none as a whole (`a*,!a*`).
fn unselected(filter: &Filter, globs: &str, names: &[String]) -> Vec<String> {
    let mut messages = unmatched(filter.name_globs(), names, WITH_SITES);
    if messages.is_empty() && !names.iter().any(|name| filter.selects(name)) {
        messages.push(format!(
            "{globs}: the filter selects no function {WITH_SITES}"
        ));
    }
    messages
}

/// `filter GLOBS` and `filter --pending GLOBS`.
pub(super) fn filter(globs: &str, pending: bool) -> Result<Reply, Error> {
    let filter = vars::parse_globs(globs)?;
    let names = traced_names()?;
    let messages = match names.is_empty() {
        true => vec![no_sites(
            &format!("filter {globs}"),
            "filter --pending GLOBS",
        )],
        false => unselected(&filter, globs, &names),
    };
    if !messages.is_empty() && !pending {
        return Ok(Reply::error(format!(
            "filter {}; the filter is unchanged (`filter --pending GLOBS` keeps globs for the \
             functions of a library loaded later)",
            messages.join("; ")
        )));
    }
    set_filter(globs)?;
    *pending_filter() = pending.then(|| globs.to_string());
    let reply = Reply::ok(format!(
        "filter {globs}: for the tracers enabled from now on, and recordings"
    ));
    Ok(with_pending(reply, &messages))
}

/// The reply with a `pending:` line per message.
pub(super) fn with_pending(reply: Reply, messages: &[String]) -> Reply {
    messages
        .iter()
        .fold(reply, |reply, message| reply.with("pending", message))
}

/// Before `enable TRACER` (`pending`: `enable --pending`) or another
/// command that applies the filter (`what`: `record DIR`, `flight
/// start`): the `pending:` messages to add to its reply, or why it is
/// refused.
pub(super) fn check_enable(what: &str, pending: Option<bool>) -> Result<Vec<String>, String> {
    let names = traced_names().map_err(|e| e.to_string())?;
    let filter = current_filter();
    let globs = current_globs().unwrap_or_default();
    let pending_ok = filter_is_pending();
    if names.is_empty() {
        // Only `enable` is refused for this (it has `--pending`); a
        // recording starts, its reply saying why it will be empty.
        return match pending {
            // A filter set pending was meant for sites to come.
            Some(false) if !pending_ok => Err(no_sites(
                what,
                &what.replacen("enable ", "enable --pending ", 1),
            )),
            _ if filter.has_name_rules() => Ok(unselected(&filter, &globs, &names)),
            _ => Ok(vec![format!(
                "no function of this process has a call site yet: {HOW_TO_GET_SITES}"
            )]),
        };
    }
    if !filter.has_name_rules() {
        return Ok(Vec::new());
    }
    let messages = unselected(&filter, &globs, &names);
    if messages.is_empty() || pending_ok || pending == Some(true) {
        return Ok(messages);
    }
    let pending_form = match pending {
        Some(_) => format!(
            "`{}` enables it all the same",
            what.replacen("enable ", "enable --pending ", 1)
        ),
        None => "`filter --pending GLOBS` keeps globs for the functions of a library loaded \
                 later"
            .to_string(),
    };
    Err(format!(
        "{what}: the filter matches nothing: {}; `filter` sets another, {pending_form}",
        messages.join("; ")
    ))
}

/// The filter line of `status`: pending globs are said.
pub(super) fn status_filter() -> String {
    match current_globs() {
        Some(globs) if filter_is_pending() => {
            format!("{globs} (pending; for tracers enabled from now on, and recordings)")
        }
        Some(globs) => format!("{globs} (for tracers enabled from now on, and recordings)"),
        None => "none (every function)".to_string(),
    }
}

/// `functions [GLOB]`: how many functions with a call site GLOB selects
/// (all of them without one), and their names; an error naming the
/// closest when none.
pub(super) fn functions(glob: Option<&str>) -> Result<Reply, Error> {
    let names = traced_names()?;
    if names.is_empty() {
        return Ok(Reply::error(format!(
            "no function of this process has a call site (it was built without \
             instrumentation): {HOW_TO_GET_SITES}"
        )));
    }
    let selected: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|name| glob.is_none_or(|glob| fntrace_format::glob::matches(glob, name)))
        .collect();
    if let Some(glob) = glob.filter(|_| selected.is_empty()) {
        let message = unmatched([glob], &names, WITH_SITES).join("; ");
        return Ok(Reply::error(message));
    }
    let summary = match glob {
        Some(glob) => format!("{} functions {WITH_SITES} match {glob}", selected.len()),
        None => format!("{} functions {WITH_SITES}", selected.len()),
    };
    Ok(Reply::ok(summary).with_lines(&selected.join("\n")))
}

/// Before `patch GLOBS`: the error reply if a glob selects no function of
/// the symbol tables (patched already or not: a glob naming functions
/// patched before is no typo).
pub(super) fn check_patch(globs: &[String]) -> Option<Reply> {
    let messages = unmatched(
        globs.iter().map(String::as_str),
        &patchable_names(),
        PATCHABLE,
    );
    (!messages.is_empty()).then(|| {
        Reply::error(format!(
            "patch {}; nothing was patched (an inlined function has no entry of its own)",
            messages.join("; ")
        ))
    })
}

/// The message for a trigger's glob that matches no function with a
/// call site now, if it does not (`None` for a panic or signal trigger,
/// or before the sites are looked for).
pub(super) fn trigger_unmatched(spec: &vars::TriggerSpec) -> Result<Option<String>, Error> {
    let vars::TriggerSpec::Slow(glob, ..) = spec else {
        return Ok(None);
    };
    let names = traced_names()?;
    Ok(unmatched([glob.as_str()], &names, WITH_SITES).pop())
}

/// `status`'s note on the running recorder's triggers: those whose glob
/// matches no function with a call site now.
pub(super) fn trigger_notes(triggers: &[String]) -> Vec<String> {
    let Ok(names) = traced_names() else {
        return Vec::new();
    };
    triggers
        .iter()
        .filter_map(|trigger| match vars::parse_trigger(trigger) {
            Ok(vars::TriggerSpec::Slow(glob, ..)) => {
                unmatched([glob.as_str()], &names, WITH_SITES).pop()
            }
            _ => None,
        })
        .collect()
}
