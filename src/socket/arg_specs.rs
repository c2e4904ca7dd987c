//! `fntrace ctl PID args SPECS` and `retval SPECS`: the arguments and
//! return values the graph tracer records, replaced while the program
//! runs (see `control::set_arg_specs`).

use std::sync::atomic::Ordering;

use super::reply::Reply;
use crate::control;
use crate::record::RECORDER_RUNNING;

/// `args SPECS` (`arguments`) or `retval SPECS` (`retval`): replaces the
/// specs of that kind, keeping the other's; refused while a recorder runs
/// (what it wrote would be read with the new specs).
pub(super) fn set(arguments: Option<&str>, retval: Option<&str>) -> Reply {
    let shown = |specs: &str| match specs {
        "" => "--clear".to_string(),
        specs => specs.to_string(),
    };
    let command = match arguments {
        Some(specs) => format!("args {}", shown(specs)),
        None => format!("retval {}", shown(retval.unwrap_or_default())),
    };
    if RECORDER_RUNNING.load(Ordering::Acquire) {
        return Reply::error(format!(
            "{command}: a recorder runs (a recording or the flight recorder): stop it first"
        ));
    }
    let current = crate::builtin::graph::args::table();
    let kept = |kept: Option<&String>| kept.map_or(String::new(), String::clone);
    let arguments = arguments.map_or_else(|| kept(current.map(|t| &t.arguments)), String::from);
    let retval = retval.map_or_else(|| kept(current.map(|t| &t.retval)), String::from);
    match control::set_arg_specs(&arguments, &retval) {
        Ok(unmatched) => {
            let reply = Reply::ok(format!(
                "{command}: recorded from now on (arguments: {}; return values: {})",
                none_if_empty(&arguments),
                none_if_empty(&retval)
            ));
            match unmatched.is_empty() {
                true => reply,
                false => reply.with_lines(&unmatched.join("\n")),
            }
        }
        Err(e) => Reply::error(format!("{command}: {e}")),
    }
}

/// `text`, or `none` for an empty one.
fn none_if_empty(text: &str) -> &str {
    match text {
        "" => "none",
        text => text,
    }
}
