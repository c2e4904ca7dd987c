//! `fntrace record --async`: the futures' drop functions. rustc's drop
//! glue for an async state machine, `core::ptr::drop_in_place::<F>` (F
//! named as its resume function's symbol is), takes the future's address
//! first (rdi); where it is a function of its own with a call site (the
//! future dropped through a vtable: `Box<dyn Future>`, `BoxFuture`,
//! async-trait; or not inlined into its owner's drop), recording the
//! future's address and its state at its entry, as a poll's entry does,
//! has the runtime linker free the slot of a future dropped before Ready,
//! and count it (docs/async.md). Glue inlined into the owner's (tokio's
//! task cell for a future spawned unboxed, a `select!` that drops a
//! branch) has no call site: such a future still leaves the table only
//! when another of its function is first polled at its address.

use std::path::Path;

use fntrace_format::coroutine;
use object::{Object, ObjectSymbol};

use super::async_fns::AsyncFn;

/// What `--async` sets on a running process `pid` (`fntrace record -p`,
/// `fntrace top --async`), from its executable's DWARF (`/proc/PID/exe`):
/// the `-A` specs (its futures' drop functions, then its polls) and the
/// `-R` specs (its polls); `deps`: dependencies' hand-written futures too.
pub fn specs_of_process(pid: u32, deps: bool) -> Result<(Vec<String>, Vec<String>), String> {
    let exe = std::path::PathBuf::from(format!("/proc/{pid}/exe"));
    let found = super::async_fns::find(&exe, deps)?;
    if found.is_empty() {
        return Err(format!(
            "--async: process {pid}'s executable has no async fn or block with a symbol in \
             its DWARF (built without debug info, or all inlined?)"
        ));
    }
    let (resumes, retval) = super::async_fns::specs(&found);
    let mut arguments = specs(&exe, &found, &resumes);
    arguments.extend(resumes);
    Ok((arguments, retval))
}

/// The `-A` specs for the drop functions of `functions`' futures that the
/// executable at `path` has, for those whose polls `entry_specs` (the
/// polls' `-A` specs, `NAME@...`) record: the future's address and state
/// at the drop's entry, `DROP@arg1/x,arg1[OFF]/uN` (a hand-written
/// future's address alone, `DROP@arg1/x`).
pub fn specs(path: &Path, functions: &[AsyncFn], entry_specs: &[String]) -> Vec<String> {
    let Ok(bytes) = std::fs::read(path) else {
        return Vec::new();
    };
    let Ok(file) = object::File::parse(&*bytes) else {
        return Vec::new();
    };
    let drops: std::collections::BTreeSet<String> = (file.symbols())
        .filter(|symbol| symbol.kind() == object::SymbolKind::Text && symbol.address() != 0)
        .filter_map(|symbol| symbol.name().ok())
        .filter(|name| name.contains("drop_in_place"))
        .map(fntrace_tools::demangle)
        .collect();
    let mut specs = Vec::new();
    for spec in entry_specs {
        let Some((name, _)) = spec.rsplit_once('@') else {
            continue;
        };
        let Some(f) = functions.iter().find(|f| f.name == name) else {
            continue;
        };
        let drop = coroutine::drop_function_name(coroutine::future_type(name));
        if !drops.contains(&drop) {
            continue;
        }
        // A hand-written future has no state: its address alone.
        if f.pending.is_some() {
            specs.push(format!("{drop}@arg1/x"));
        } else {
            let bits = u32::from(f.state_size) * 8;
            specs.push(format!("{drop}@arg1/x,arg1[{:#x}]/u{bits}", f.state_offset));
        }
    }
    specs
}
