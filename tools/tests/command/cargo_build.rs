//! `fntrace cargo`: on a copy of the workspace in `tests/cargo_workspace`
//! (members app, helper and the proc-macro macros; app has a build script
//! and a path dependency outside the workspace, `tests/cargo_outside`),
//! only the members' crates get a call to mcount at their functions'
//! entries — all members, or the packages `-p` names — and only their rustc
//! saw RUSTC_BOOTSTRAP (each crate captures it with `option_env!`, and the
//! program prints them). Plain and instrumented builds, and builds of
//! different selections, do not reuse one another's artifacts.

use crate::common;
use crate::instrumented;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::TempDir;
use instrumented::{callers, mcount_calls};

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");

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

/// The fixture copied under `temp`; its workspace directory.
fn fixture(temp: &TempDir) -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    copy_tree(&tests.join("cargo_outside"), &temp.0.join("cargo_outside"));
    let workspace = temp.0.join("cargo_workspace");
    copy_tree(&tests.join("cargo_workspace"), &workspace);
    workspace
}

/// `program args` in `dir`, without the variables that would change what
/// cargo builds or where (the outer build's, or the user's).
fn run_in(dir: &Path, program: &str, args: &[&str]) -> Output {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env_remove("RUSTC_BOOTSTRAP")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    output
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// `fntrace cargo ARGS` in `dir`, which must succeed; its stdout, and
/// the first line of its stderr (fntrace's).
fn fntrace_cargo(dir: &Path, args: &[&str]) -> (String, String) {
    let mut all = vec!["cargo"];
    all.extend(args);
    let output = run_in(dir, CLI, &all);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "fntrace {all:?}:\n{stderr}");
    let first = stderr.lines().next().unwrap_or_default().to_string();
    (String::from_utf8(output.stdout).unwrap(), first)
}

/// What the fixture program printed: crate → RUSTC_BOOTSTRAP its rustc saw.
fn probes(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

fn run_program(path: &Path) -> BTreeMap<String, String> {
    let output = Command::new(path).output().expect("running the fixture");
    assert!(output.status.success());
    probes(&String::from_utf8(output.stdout).unwrap())
}

fn expected_probes(helper_instrumented: bool) -> BTreeMap<String, String> {
    let helper = if helper_instrumented {
        "Some(\"1\")"
    } else {
        "None"
    };
    [
        ("app", "Some(\"1\")"),
        ("helper", helper),
        ("outside", "None"),
        ("macros", "None"),
        ("build-script", "None"),
        ("work", "163"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The one build script binary of `app` under `target`.
fn build_script(target: &Path) -> PathBuf {
    let scripts: Vec<PathBuf> = std::fs::read_dir(target.join("build"))
        .unwrap()
        .map(|e| e.unwrap().path().join("build-script-build"))
        .filter(|p| p.exists())
        .collect();
    assert_eq!(scripts.len(), 1, "{scripts:?}");
    scripts.into_iter().next().unwrap()
}

/// The proc-macro's shared objects under `target`.
fn proc_macros(target: &Path) -> Vec<PathBuf> {
    let found: Vec<PathBuf> = std::fs::read_dir(target.join("deps"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("libmacros-") && name.ends_with(".so")
        })
        .collect();
    assert!(!found.is_empty());
    found
}

/// Checks which fixture functions of `binary` call mcount.
fn check_instrumented(binary: &Path, helper_instrumented: bool) {
    let functions = mcount_calls(binary);
    let calls = |name: &str| {
        *functions
            .get(name)
            .unwrap_or_else(|| panic!("{name} not in {}", binary.display()))
    };
    assert!(calls("app::app_work"), "{:?}", callers(&functions));
    assert!(calls("app::main"));
    assert_eq!(calls("helper::helper_work"), helper_instrumented);
    assert!(!calls("outside::outside_work"));
    // Nothing of std (prebuilt) or of a dependency; generic code
    // instantiated in app's crate (std's `lang_start::<()>`) is app's.
    for name in callers(&functions) {
        assert!(
            !name.starts_with("outside::") && !name.starts_with("macros::"),
            "{name} calls mcount"
        );
        if !helper_instrumented {
            assert!(!name.starts_with("helper::"), "{name} calls mcount");
        }
    }
}

#[test]
fn instruments_only_the_workspace_members_or_the_selected_packages() {
    let temp = TempDir::new("members");
    let workspace = fixture(&temp);
    let target = workspace.join("target/fntrace/debug");

    // Every member; into target/fntrace by default.
    let (_, said) = fntrace_cargo(&workspace, &["build"]);
    assert_eq!(
        said,
        format!(
            "fntrace: instrumenting every workspace member (-Zinstrument-mcount); \
             target directory {}",
            workspace.join("target/fntrace").display()
        )
    );
    assert_eq!(run_program(&target.join("app")), expected_probes(true));
    check_instrumented(&target.join("app"), true);
    assert_eq!(
        callers(&mcount_calls(&build_script(&target))),
        Vec::<&str>::new(),
        "the build script calls mcount"
    );
    for proc_macro in proc_macros(&target) {
        assert_eq!(
            callers(&mcount_calls(&proc_macro)),
            Vec::<&str>::new(),
            "{} calls mcount",
            proc_macro.display()
        );
    }

    // Only app: helper is built again, plain (not reused instrumented).
    let (_, said) = fntrace_cargo(&workspace, &["build", "-p", "app"]);
    assert!(
        said.starts_with("fntrace: instrumenting the packages of -p app "),
        "{said}"
    );
    assert_eq!(run_program(&target.join("app")), expected_probes(false));
    check_instrumented(&target.join("app"), false);

    // And back: helper instrumented again.
    fntrace_cargo(&workspace, &["build"]);
    assert_eq!(run_program(&target.join("app")), expected_probes(true));
    check_instrumented(&target.join("app"), true);

    // A plain build instruments nothing and leaves the instrumented one.
    let output = run_in(&workspace, &cargo(), &["build"]);
    assert!(output.status.success());
    let plain = workspace.join("target/debug/app");
    assert_eq!(callers(&mcount_calls(&plain)), Vec::<&str>::new());
    let mut plain_probes = expected_probes(false);
    plain_probes.insert("app".into(), "None".into());
    assert_eq!(run_program(&plain), plain_probes);
    check_instrumented(&target.join("app"), true);

    // `run`, and an explicit --target-dir, used as given.
    let elsewhere = temp.0.join("elsewhere");
    let (stdout, _) = fntrace_cargo(
        &workspace,
        &[
            "run",
            "-q",
            "-p",
            "app",
            "--target-dir",
            elsewhere.to_str().unwrap(),
        ],
    );
    assert_eq!(probes(&stdout), expected_probes(false));
    check_instrumented(&elsewhere.join("debug/app"), false);
}

#[test]
fn refuses_to_replace_a_workspace_wrapper() {
    let output = Command::new(CLI)
        .args(["cargo", "build"])
        .env("RUSTC_WORKSPACE_WRAPPER", "/usr/bin/sccache")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "fntrace: RUSTC_WORKSPACE_WRAPPER is already set (/usr/bin/sccache); fntrace cargo \
         needs it: unset it\n"
    );
}

#[test]
fn rejects_other_cargo_commands() {
    let output = Command::new(CLI)
        .args(["cargo", "clippy"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("invalid value 'clippy'") && stderr.contains("build, run, test, bench"),
        "{stderr}"
    );
}
