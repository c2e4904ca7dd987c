//! A live profile's snapshot read from a file (`fntrace ctl PID profile
//! --save`, the C API's `fntrace_profile_write`), and what every command
//! that reads one says about it.

use fntrace_tools::analysis::ProfileSnapshot;

use super::output::Failure;
use super::select::{Demangle, SelectArgs};

/// The snapshot in the file at `path`.
pub fn read_snapshot(path: &std::path::Path) -> Result<ProfileSnapshot, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {shown}: {e}"))?;
    ProfileSnapshot::from_text(&text).map_err(|e| format!("{shown}: {e}"))
}

/// What the profile's memory budget left out, said before the numbers it
/// affects.
pub fn not_kept_lines(snapshot: &ProfileSnapshot) -> Vec<String> {
    let mut lines = Vec::new();
    if snapshot.not_kept.functions > 0 {
        lines.push(format!(
            "# {} calls of functions that found no row in the profile's memory budget are counted nowhere below",
            snapshot.not_kept.functions
        ));
    }
    if snapshot.not_kept.paths > 0 {
        lines.push(format!(
            "# {} calls found no room in the call tree: counted in their rows, missing from the flame graph",
            snapshot.not_kept.paths
        ));
    }
    lines
}

/// A snapshot holds the names the program gave its functions (C++ ones in
/// uftrace's simple form): `--demangle full` cannot apply.
pub fn refuse_full_names(select: &SelectArgs, shown: &str) -> Result<(), Failure> {
    if select.demangle == Demangle::Full {
        return Err(format!(
            "{shown} is a live profile's snapshot: it holds each function's name as the \
             program showed it (C++ names in the simple form); --demangle full applies to \
             trace directories"
        )
        .into());
    }
    Ok(())
}
