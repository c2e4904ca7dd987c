//! `fntrace report --by-arg VALUE -F GLOB`: the calls of the functions
//! GLOB selects, one row per distinct recorded value (`arg1`, `fparg2`,
//! `retval`, as `fntrace replay` shows it), the values with the most total
//! time first, the rest summed in a last `other` row.

use std::collections::HashMap;
use std::io::{self, Write};

use fntrace_tools::analysis::{human_duration, split_values};
use fntrace_tools::argspec::{self, ArgSlot, FunctionSpec, SpecKind};
use fntrace_tools::{glob, EventKind, EventSource};

use super::output::Output;

/// Rows shown without `--top`.
pub(super) const DEFAULT_ROWS: usize = 10;

/// One value's calls.
#[derive(Default)]
struct Row {
    calls: u64,
    total_ns: u64,
    durations: Vec<u64>,
}

impl Row {
    fn add(&mut self, other: &Row) {
        self.calls += other.calls;
        self.total_ns += other.total_ns;
        self.durations.extend(&other.durations);
    }
}

/// What the table is of: the value, the functions, and each value's calls.
pub struct ByArg {
    /// The value asked for (`arg1`, `retval`).
    value: String,
    /// The functions' globs (`-F`), joined.
    glob: String,
    rows: Vec<(String, Row)>,
    /// Calls whose value was not recorded (its event written without it).
    without: u64,
}

/// The slot `value` names (`arg1`, `fparg2`, `retval`), or why not.
fn slot_of(value: &str) -> Result<ArgSlot, String> {
    let specs = argspec::parse(&format!("f@{value}"), SpecKind::Any)
        .map_err(|e| format!("--by-arg {value}: {e}"))?;
    match specs.first().map(|s| &s.values[..]) {
        Some([one]) => Ok(one.slot),
        _ => Err(format!(
            "--by-arg {value}: name one value (arg1, fparg1, retval)"
        )),
    }
}

/// Where `slot` is among the values `specs` record for `name` (its place
/// in replay's list of arguments, or of return values), if recorded.
fn place_of(specs: &[FunctionSpec], name: &str, slot: ArgSlot) -> Option<usize> {
    let values = argspec::values_for(specs, |pattern| glob::matches(pattern, name));
    let retval = slot.at_exit();
    values
        .iter()
        .filter(|v| v.slot.at_exit() == retval)
        .position(|v| v.slot == slot)
}

impl ByArg {
    /// Reads the completed calls of the functions `globs` select in
    /// `source` (its selection already made), by `value`; refused if the
    /// trace records no such value for them.
    pub fn of<S: EventSource>(
        source: &S,
        specs: &[FunctionSpec],
        value: &str,
        globs: &[String],
    ) -> Result<ByArg, String>
    where
        S::Error: std::fmt::Display,
    {
        let slot = slot_of(value)?;
        let glob = globs.join(" -F ");
        let retval = slot.at_exit();
        // Per function address: its place among the values, if selected.
        let mut places: HashMap<usize, Option<Option<usize>>> = HashMap::new();
        let mut selected_any = false;
        let mut rows: HashMap<String, Row> = HashMap::new();
        let mut without = 0;
        for index in 0..source.threads().len() {
            let values = source.values_of(index).map_err(|e| e.to_string())?;
            let mut open: Vec<(u16, u64, usize, Option<String>)> = Vec::new();
            let mut read = |events: &mut dyn Iterator<Item = fntrace_tools::GraphEvent>| {
                for event in events {
                    let place = *places.entry(event.function).or_insert_with(|| {
                        let name = source.name_of(event.function);
                        glob::matches_any(globs, &name).then(|| place_of(specs, &name, slot))
                    });
                    let Some(place) = place else {
                        continue;
                    };
                    selected_any = true;
                    let Some(place) = place else {
                        continue;
                    };
                    let exit = event.kind == EventKind::Exit;
                    let shown = |exit| {
                        let text = values.get(&(event.time_ns, exit))?;
                        split_values(text).into_iter().nth(place)
                    };
                    if !exit {
                        open.retain(|&(depth, ..)| depth < event.depth);
                        let shown = if retval { None } else { shown(false) };
                        open.push((event.depth, event.time_ns, event.function, shown));
                        continue;
                    }
                    open.retain(|&(depth, ..)| depth <= event.depth);
                    if open.last().map(|&(d, _, f, _)| (d, f))
                        != Some((event.depth, event.function))
                    {
                        continue;
                    }
                    let Some((_, entry_ns, _, entered)) = open.pop() else {
                        continue;
                    };
                    let Some(shown) = (if retval { shown(true) } else { entered }) else {
                        without += 1;
                        continue;
                    };
                    let duration = event.time_ns.saturating_sub(entry_ns);
                    let row = rows.entry(shown).or_default();
                    row.calls += 1;
                    row.total_ns += duration;
                    row.durations.push(duration);
                }
            };
            source
                .read_thread(index, |events| read(events))
                .map_err(|e| e.to_string())?;
        }
        let recorded = places.values().any(|p| matches!(p, Some(Some(_))));
        if !recorded {
            let mut recorded: Vec<&str> = specs.iter().map(|s| s.glob.as_str()).collect();
            recorded.sort_unstable();
            recorded.dedup();
            let recorded = match recorded.is_empty() {
                true => "it holds no values: record them with -A/-R".to_string(),
                false => format!("it holds values of {} only", recorded.join(", ")),
            };
            let what = match selected_any {
                true => {
                    format!("the trace records no `{value}` of the functions `-F {glob}` selects")
                }
                false => format!("the trace has no call of a function `-F {glob}` selects"),
            };
            return Err(format!("--by-arg {value} -F {glob}: {what} ({recorded})"));
        }
        let mut rows: Vec<(String, Row)> = rows.into_iter().collect();
        rows.sort_by(|a, b| b.1.total_ns.cmp(&a.1.total_ns).then_with(|| a.0.cmp(&b.0)));
        Ok(ByArg {
            value: value.to_string(),
            glob,
            rows,
            without,
        })
    }

    /// Writes the table: the `top` values with the most total time, then
    /// `other` for the rest.
    pub fn write(mut self, top: usize, out: &mut Output) -> io::Result<()> {
        let calls: u64 = self.rows.iter().map(|(_, r)| r.calls).sum();
        writeln!(
            out,
            "# {} of {}: {calls} completed calls, {} distinct values",
            self.value,
            self.glob,
            self.rows.len()
        )?;
        if self.without > 0 {
            let line = format!(
                "# {} calls were recorded without their {} (their buffer was full): not counted",
                self.without, self.value
            );
            writeln!(out, "{}", out.warn(&line))?;
        }
        let rest = self.rows.split_off(top.min(self.rows.len()));
        if !rest.is_empty() {
            let mut other = Row::default();
            for (_, row) in &rest {
                other.add(row);
            }
            self.rows
                .push((format!("other ({} values)", rest.len()), other));
        }
        let header = ["calls", "total", "avg", "p50", "p99"];
        let width = self.rows.iter().map(|(v, _)| v.chars().count()).max();
        let width = width.unwrap_or(0).max(self.value.len());
        let mut line = format!("\n{:<width$}", self.value);
        for name in header {
            line += &format!("  {name:>10}");
        }
        writeln!(out, "{}", out.bold(&line))?;
        for (value, mut row) in self.rows {
            row.durations.sort_unstable();
            let rank = |p: u64| {
                let n = row.durations.len() as u64;
                row.durations[((n * p).div_ceil(100).max(1) - 1) as usize]
            };
            let avg = row.total_ns / row.calls.max(1);
            writeln!(
                out,
                "{value:<width$}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}",
                row.calls,
                human_duration(row.total_ns),
                human_duration(avg),
                human_duration(rank(50)),
                human_duration(rank(99)),
            )?;
        }
        Ok(())
    }
}
