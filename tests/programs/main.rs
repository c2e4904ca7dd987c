//! The tests that run fntrace on other programs (C and Rust programs it
//! builds, traced through `LD_PRELOAD`, `fntrace record`, `attach` or the C
//! ABI) and read what they wrote, with uftrace beside it where both can
//! trace a program. They share one test binary: one link instead of 41, and
//! libtest runs two of them at a time, one's waits beside the other's work.
//! Three (cancel_and_backtrace, signals_vs_uftrace, threads_vs_uftrace) trace
//! C code loaded into this very process; they do it only through
//! `common::trace_and_dump`, which runs one such trace at a time, and a test
//! below keeps every other file off the process-wide tracing calls.
//!
//! `cargo test --test programs MODULE::` runs one file's tests.

#[path = "../common/mod.rs"]
mod common;
// The chaos and soak harnesses (shared with their benches) name `crate::native`.
use common::native;

mod args_formats;
mod args_patched_vs_uftrace;
mod args_rust_vs_uftrace;
mod args_values_lost;
mod args_vs_uftrace;
mod async_poll_stress;
mod attach;
mod attach_cycles;
mod attach_done_when;
mod auto_args_cxx;
mod auto_args_rust;
mod cancel_and_backtrace;
mod capi_args;
mod chaos;
mod control_gave_up;
mod ctl_args;
mod flight_args;
mod flight_control;
mod forked_child_frames;
mod forked_children;
mod instrumented_build;
mod layers;
mod libcalls;
mod live_selection;
mod loss_said;
mod lossless;
mod metrics_chaos;
mod other_tools;
mod patchable_cargo;
mod patchable_stress;
mod patchable_vs_uftrace;
mod profile_soak;
mod record_command;
mod record_output_safety;
mod record_selection;
mod record_signals;
mod report_by_arg;
mod runtime_patch;
mod runtime_patch_rust;
mod signals_vs_uftrace;
mod threads_vs_uftrace;
mod unloaded_library_names;

/// A file in one of the gathered test directories that no `mod` line of
/// its `main.rs` names is compiled by no one, and its tests would never
/// run: this one's and the `fntrace` command's (tools/tests/command).
#[test]
fn every_file_of_a_gathered_test_binary_is_one_of_its_modules() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["tests/programs", "tools/tests/command"] {
        let main = std::fs::read_to_string(root.join(dir).join("main.rs")).unwrap();
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if let Some(module) = name.strip_suffix(".rs").filter(|m| *m != "main") {
                assert!(
                    main.contains(&format!("\nmod {module};\n")),
                    "{dir}/{name} is not a module of {dir}/main.rs"
                );
            }
        }
    }
}

/// Tracing this process is process-wide state (patched sites, the graph
/// tracer's buffers, dumps): two files of one binary doing it at once read
/// each other's calls. So the gathered files reach it only through
/// `common::trace_and_dump`, which serialises them.
#[test]
fn no_gathered_file_traces_this_process_but_through_trace_and_dump() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let process_wide = [
        "fntrace::init(",
        "fntrace::enable",
        "fntrace::disable",
        "fntrace::dump",
        "fntrace::record",
        "fntrace::flight_record",
        "fntrace::patch_functions",
        "fntrace::GRAPH_TRACER",
        "fntrace::PROFILE_TRACER",
    ];
    for dir in ["tests/programs", "tools/tests/command"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.ends_with("main.rs") {
                continue; // this list
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for call in process_wide {
                assert!(
                    !text.contains(call),
                    "{} calls {call} itself",
                    path.display()
                );
            }
        }
    }
}
