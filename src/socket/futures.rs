//! The runtime future linker's rows on the control socket (`futures`): per
//! async function of a process recording with `fntrace record --async`'s
//! values, the futures completed so far, their polls, latency (total, p50,
//! p99: first poll to Ready), busy and waiting time, in the columns of
//! `fntrace report`'s async rows, those dropped before Ready; and the
//! futures it follows now and those it could not follow.

use fntrace_format::analysis::{human_duration, FutureRow};

use super::reply::Reply;
use crate::builtin::futures;
use crate::builtin::graph::args;
use crate::control;

/// The linker's rows by name (demangled here, off the traced path);
/// `None` if no async function's polls are recorded. The `profile` reply
/// carries them too, one `future` line each (`FutureRow::to_line`), for
/// `fntrace top` and `ctl profile`.
pub(crate) fn rows() -> Option<Vec<FutureRow>> {
    let table = args::table()?;
    table.futures.addresses().next()?;
    let mut rows = table.futures.rows(control::function_name);
    rows.sort_by(|a, b| a.function.cmp(&b.function));
    Some(rows)
}

/// The `futures` request's reply.
pub(super) fn futures() -> Reply {
    let Some(mut rows) = rows() else {
        return Reply::error(
            "no async function's polls are recorded: record with `fntrace record --async` \
             (which sets their -A/-R values)",
        );
    };
    // The most total latency first, as the report's rows.
    rows.sort_by_key(|row| std::cmp::Reverse(row.latency_ns));
    let mut table = format!(
        "{:>9} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11}  async function\n",
        "futures", "polls", "total", "p50", "p99", "busy", "waiting"
    );
    for row in rows.iter().filter(|row| row.completed != 0) {
        table.push_str(&format!(
            "{:>9} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11}  {}\n",
            row.completed,
            row.polls,
            human_duration(row.latency_ns),
            human_duration(row.quantile(0.5)),
            human_duration(row.quantile(0.99)),
            human_duration(row.busy_ns),
            human_duration(row.latency_ns.saturating_sub(row.busy_ns)),
            row.function
        ));
    }
    for row in rows.iter().filter(|row| row.dropped != 0) {
        table.push_str(&format!(
            "# {}: {} dropped before Ready (not in the row)\n",
            row.function, row.dropped
        ));
    }
    Reply::ok(format!(
        "futures completed per async function, first poll to Ready (p50/p99 within 6.25 %); \
         {} pending now; {} untracked (first polled while the linker's table of {} was full)",
        futures::pending(),
        futures::untracked(),
        futures::capacity()
    ))
    .with_lines(table.trim_end())
}
