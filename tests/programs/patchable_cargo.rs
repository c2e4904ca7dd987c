//! `fntrace cargo build --form patchable`: the workspace members of
//! `tools/tests/cargo_workspace` (copied) are built with
//! `rustc -Zpatchable-function-entry=5,0` (and no mcount call), their
//! dependency outside the workspace is not; `fntrace record` of the
//! program then counts the members' functions exactly and nothing of the
//! outside crate's.

use crate::common;

use common::native::{self, repo};

use std::path::Path;
use std::process::Command;

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn members_built_with_patchable_entries_are_traced_exactly() {
    let base = common::temp_dir("patchable-cargo");
    let fixtures = repo().join("tools/tests");
    copy_tree(&fixtures.join("cargo_outside"), &base.join("cargo_outside"));
    let workspace = base.join("cargo_workspace");
    copy_tree(&fixtures.join("cargo_workspace"), &workspace);

    let output = Command::new(native::cli_with_library())
        .args(["cargo", "build", "--form", "patchable"])
        .current_dir(&workspace)
        .env_remove("RUSTC_BOOTSTRAP")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .output()
        .unwrap();
    let stderr = native::stderr_of(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.starts_with(
            "fntrace: instrumenting every workspace member (-Zpatchable-function-entry=5,0)"
        ),
        "{stderr}"
    );
    let program = workspace.join("target/fntrace/debug/app");
    let sections = Command::new("objdump")
        .arg("-h")
        .arg(&program)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&sections.stdout).contains("__patchable_function_entries"));
    let symbols = Command::new("objdump")
        .arg("-d")
        .arg(&program)
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&symbols.stdout).contains("<mcount"),
        "no mcount call"
    );

    let data = base.join("fntrace.data");
    let output = native::fntrace_record(
        &base,
        &["-o", data.to_str().unwrap(), program.to_str().unwrap()],
    );
    assert!(output.status.success(), "{}", native::stderr_of(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("work 163"));
    let counts = common::uftrace_calls(&data);
    let ours = common::call_counts(&common::read_trace_dir(&data));
    for function in ["app::main", "app::app_work", "helper::helper_work"] {
        assert_eq!(counts.get(function), Some(&1), "{function}: {counts:?}");
        assert_eq!(ours.get(function), Some(&(1, 1)), "{function}: {ours:?}");
    }
    assert!(
        !counts.keys().any(|name| name.starts_with("outside::")),
        "the crate outside the workspace is not instrumented: {counts:?}"
    );
    std::fs::remove_dir_all(&base).unwrap();
}
