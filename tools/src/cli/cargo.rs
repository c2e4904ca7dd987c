//! `fntrace cargo build|run|test|bench`: cargo, with only the workspace's own
//! crates compiled with `-Zinstrument-mcount` (or, with `--form patchable`,
//! `-Zpatchable-function-entry=5,0`), on the stable toolchain.
//!
//! Cargo runs its `RUSTC_WORKSPACE_WRAPPER` for workspace members only and
//! plain `rustc` for every dependency. `fntrace cargo` makes this binary
//! that wrapper ([`run_as_rustc_wrapper`] recognises the role from
//! [`WRAPPER_ENV`] and its first argument being rustc), which adds
//! `-Zinstrument-mcount` and `RUSTC_BOOTSTRAP=1` to the rustc calls of the
//! chosen crates and runs every other rustc call unchanged.
//!
//! Artifacts: the default target directory is cargo's own plus `fntrace/`,
//! so that a plain and an instrumented build never share one. Within it,
//! builds of different selections get different artifact hashes: the
//! wrapper adds a line naming the selection to `rustc -vV`, which cargo
//! hashes into the members' metadata, and `CARGO_CACHE_RUSTC_INFO=0` keeps
//! cargo from answering `-vV` from its cache (keyed by the wrapper's path,
//! which does not change).

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{Args, ValueEnum};

use super::output::Failure;

/// Set by `fntrace cargo` for the wrapper: `members` (instrument every
/// workspace member) or `selected ARGS` (only the packages cargo's
/// selection ARGS chose: those cargo marks with `CARGO_PRIMARY_PACKAGE`).
pub const WRAPPER_ENV: &str = "FNTRACE_RUSTC_WRAPPER";

/// Packages never instrumented: fntrace never traces itself.
const FNTRACE_PACKAGES: [&str; 3] = ["fntrace", "fntrace-format", "fntrace-tools"];

/// Set by `fntrace cargo` for the wrapper: the [`Form`]'s name.
pub const FORM_ENV: &str = "FNTRACE_RUSTC_FORM";

/// What the instrumented crates get at each function's entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Form {
    /// A call to mcount after the prologue (`-Zinstrument-mcount`).
    #[default]
    Mcount,
    /// Five bytes of NOP at the entry, listed in the section
    /// `__patchable_function_entries` (`-Zpatchable-function-entry=5,0`),
    /// which fntrace patches to a call like an fentry site: no frame
    /// pointers forced, no call to skip while untraced.
    Patchable,
}

impl Form {
    /// The flags added to an instrumented crate's rustc command line.
    fn flags(self) -> &'static [&'static str] {
        match self {
            Form::Mcount => &["-Zinstrument-mcount"],
            Form::Patchable => &["-Zpatchable-function-entry=5,0"],
        }
    }

    fn name(self) -> &'static str {
        match self {
            Form::Mcount => "mcount",
            Form::Patchable => "patchable",
        }
    }

    fn from_env(value: &str) -> Option<Form> {
        [Form::Mcount, Form::Patchable]
            .into_iter()
            .find(|form| form.name() == value)
    }
}

/// Help of `fntrace cargo`.
const CARGO_HELP: &str = "\
Runs `cargo COMMAND ARGS...` with the workspace's own crates compiled with
-Zinstrument-mcount (a call to mcount at every function's entry, which
fntrace patches): every member of the workspace, or, when ARGS select
packages (-p/--package, --workspace, --exclude), only those. Nothing else is
instrumented: no dependency (crates.io, git, or a path outside the
workspace), no build script, no proc-macro, and not fntrace itself (packages
fntrace, fntrace-format and fntrace-tools, members or not). RUSTC_BOOTSTRAP=1, which lets the
stable compiler accept the flag, is set for those rustc calls only.

build, run, test and bench are the same code: only the rustc calls change.
A program run by `run` or `test` sees RUSTC_WORKSPACE_WRAPPER and
FNTRACE_RUSTC_WRAPPER in its environment. The program must link fntrace (a
dependency on the fntrace crate) to be traced in process; `fntrace record`
traces it without.

--form patchable (before cargo's arguments) compiles them with
-Zpatchable-function-entry=5,0 instead: five bytes of NOP at each function's
entry, listed in the section __patchable_function_entries, which fntrace
patches to a call like an __fentry__ site (no frame pointers forced).

How: cargo runs this fntrace binary as its RUSTC_WORKSPACE_WRAPPER, which
cargo uses for workspace members only; the wrapper adds the flag to the
chosen crates' rustc command lines. RUSTC_WORKSPACE_WRAPPER must not be set
already.

Target directory: cargo's target directory plus fntrace/ (e.g.
target/fntrace/release/NAME), unless ARGS give --target-dir: an instrumented
and a plain build never share artifacts. Builds of different selections in
one directory get different artifact hashes (the wrapper names the selection
in `rustc -vV`, which cargo hashes), so none reuses another's.

Examples:
  fntrace cargo build --release                    every crate of the workspace
  fntrace cargo build --release -p kv-service      only the package kv-service
  fntrace cargo run --release -p kv-service -- --listen 127.0.0.1:7000
  fntrace cargo test -p mycrate -- --nocapture
  fntrace cargo build --target-dir /tmp/t          artifacts in /tmp/t/debug
  fntrace cargo build --form patchable --release   NOPs fntrace patches";

/// `fntrace cargo`.
#[derive(Debug, Args)]
#[command(after_help = CARGO_HELP)]
pub struct CargoArgs {
    /// What instrumented functions get at their entry: `mcount` (a call to
    /// mcount, -Zinstrument-mcount) or `patchable` (five NOP bytes fntrace
    /// patches, -Zpatchable-function-entry=5,0). Before cargo's arguments
    /// (`fntrace cargo build --form patchable --release`).
    #[arg(long, value_enum, default_value_t = Form::Mcount)]
    pub form: Form,
    /// The cargo command.
    #[arg(value_enum)]
    pub command: CargoCommand,
    /// Cargo's arguments, passed on unchanged (--release, -p NAME,
    /// --target-dir DIR, `-- ARGS` for the program or tests).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

/// The cargo commands `fntrace cargo` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CargoCommand {
    /// cargo build.
    Build,
    /// cargo run.
    Run,
    /// cargo test.
    Test,
    /// cargo bench.
    Bench,
}

impl CargoCommand {
    fn name(self) -> &'static str {
        match self {
            CargoCommand::Build => "build",
            CargoCommand::Run => "run",
            CargoCommand::Test => "test",
            CargoCommand::Bench => "bench",
        }
    }
}

/// What the wrapper is to instrument.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Selection {
    /// Every workspace member.
    Members,
    /// The packages the cargo arguments (kept for the `-vV` line) select.
    Selected(String),
}

impl Selection {
    fn to_env(&self) -> String {
        match self {
            Selection::Members => "members".into(),
            Selection::Selected(args) => format!("selected {args}"),
        }
    }

    fn from_env(value: &str) -> Option<Self> {
        match value.split_once(' ') {
            None if value == "members" => Some(Selection::Members),
            Some(("selected", args)) => Some(Selection::Selected(args.into())),
            _ => None,
        }
    }
}

/// What `fntrace cargo` needs from cargo's arguments (those before `--`).
#[derive(Debug, Default, PartialEq, Eq)]
struct CargoOptions {
    /// Package selection flags and their values, as given.
    selection: Vec<String>,
    target_dir: Option<OsString>,
    manifest_path: Option<OsString>,
}

/// Reads the package selection, `--target-dir` and `--manifest-path` from
/// cargo's arguments.
fn scan_cargo_args(args: &[OsString]) -> CargoOptions {
    let mut options = CargoOptions::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        if text == "--" {
            break;
        }
        let (flag, inline) = match text.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_string(), Some(value)),
            _ => (text.to_string(), None),
        };
        let mut value = || -> Option<OsString> {
            match inline {
                Some(value) => Some(value.into()),
                None => args.next().cloned(),
            }
        };
        match flag.as_str() {
            "-p" | "--package" | "--exclude" => {
                if let Some(package) = value() {
                    options
                        .selection
                        .push(format!("{flag} {}", package.to_string_lossy()));
                }
            }
            "--workspace" | "--all" => options.selection.push(flag),
            "--target-dir" => options.target_dir = value(),
            "--manifest-path" => options.manifest_path = value(),
            short if short.starts_with("-p") && !short.starts_with("--") => {
                options.selection.push(format!("-p {}", &short[2..]));
            }
            _ => {}
        }
    }
    options
}

/// Runs `fntrace cargo`: replaces this process with cargo, so that cargo's
/// exit status is the command's. Returns only on failure.
pub fn run(args: &CargoArgs) -> Result<(), Failure> {
    if let Some(wrapper) = std::env::var_os("RUSTC_WORKSPACE_WRAPPER") {
        return Err(format!(
            "RUSTC_WORKSPACE_WRAPPER is already set ({}); fntrace cargo needs it: unset it",
            wrapper.to_string_lossy()
        )
        .into());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let options = scan_cargo_args(&args.args);
    let selection = if options.selection.is_empty() {
        Selection::Members
    } else {
        Selection::Selected(options.selection.join(" "))
    };
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find this fntrace binary's path: {e}"))?;

    let mut command = Command::new(&cargo);
    command.arg(args.command.name());
    let target_dir = match &options.target_dir {
        Some(dir) => PathBuf::from(dir),
        None => {
            let dir = cargo_target_dir(&cargo, options.manifest_path.as_deref())?.join("fntrace");
            command.arg("--target-dir").arg(&dir);
            dir
        }
    };
    let what = match &selection {
        Selection::Members => "every workspace member".to_string(),
        Selection::Selected(args) => format!("the packages of {args}"),
    };
    eprintln!(
        "fntrace: instrumenting {what} ({}); target directory {}",
        args.form.flags().join(" "),
        target_dir.display()
    );
    command
        .args(&args.args)
        .env("RUSTC_WORKSPACE_WRAPPER", &exe)
        .env(WRAPPER_ENV, selection.to_env())
        .env(FORM_ENV, args.form.name())
        .env("CARGO_CACHE_RUSTC_INFO", "0");
    let err = command.exec();
    Err(format!("cannot run {}: {err}", cargo.to_string_lossy()).into())
}

/// Cargo's target directory for the workspace (`CARGO_TARGET_DIR` and
/// `build.target-dir` included), from `cargo metadata`.
fn cargo_target_dir(cargo: &OsStr, manifest_path: Option<&OsStr>) -> Result<PathBuf, Failure> {
    let mut command = Command::new(cargo);
    command.args(["metadata", "--format-version", "1", "--no-deps"]);
    if let Some(path) = manifest_path {
        command.arg("--manifest-path").arg(path);
    }
    let output = command
        .output()
        .map_err(|e| format!("cannot run {}: {e}", cargo.to_string_lossy()))?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed (finding the target directory):\n{}",
            String::from_utf8_lossy(&output.stderr).trim_end()
        )
        .into());
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cargo metadata printed no JSON: {e}"))?;
    metadata["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| {
            "cargo metadata named no target_directory"
                .to_string()
                .into()
        })
}

/// When cargo runs this binary as its rustc wrapper (`fntrace cargo` set
/// [`WRAPPER_ENV`], and the first argument is rustc), runs rustc as
/// `fntrace cargo` wants and returns its exit code; `None` otherwise.
pub fn run_as_rustc_wrapper() -> Option<ExitCode> {
    let selection = std::env::var(WRAPPER_ENV).ok()?;
    let mut argv = std::env::args_os().skip(1);
    let rustc = argv.next()?;
    if !is_rustc(Path::new(&rustc)) {
        return None;
    }
    let args: Vec<OsString> = argv.collect();
    let Some(selection) = Selection::from_env(&selection) else {
        eprintln!("fntrace: {WRAPPER_ENV}={selection:?}: not `members` or `selected ARGS`");
        return Some(ExitCode::FAILURE);
    };
    let form = match std::env::var(FORM_ENV) {
        Err(_) => Form::Mcount,
        Ok(value) => match Form::from_env(&value) {
            Some(form) => form,
            None => {
                eprintln!("fntrace: {FORM_ENV}={value:?}: not `mcount` or `patchable`");
                return Some(ExitCode::FAILURE);
            }
        },
    };
    if args == ["-vV"] {
        return Some(print_version(&rustc, &selection, form));
    }
    let package = std::env::var("CARGO_PKG_NAME").unwrap_or_default();
    let primary = std::env::var_os("CARGO_PRIMARY_PACKAGE").is_some();
    let mut command = Command::new(&rustc);
    command.args(&args);
    if instruments(&args, &package, primary, &selection) {
        command.args(form.flags()).env("RUSTC_BOOTSTRAP", "1");
    }
    let err = command.exec();
    eprintln!("fntrace: cannot run {}: {err}", rustc.to_string_lossy());
    Some(ExitCode::FAILURE)
}

/// Whether `program` is a rustc (cargo passes its path, or `rustc`).
fn is_rustc(program: &Path) -> bool {
    program
        .file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|name| name.starts_with("rustc"))
}

/// `rustc -vV`, plus a line naming the selection and the flags: cargo
/// hashes this text into the workspace members' artifact names, so builds
/// of different selections, forms (and fntrace versions) do not reuse one
/// another's.
fn print_version(rustc: &OsStr, selection: &Selection, form: Form) -> ExitCode {
    let output = match Command::new(rustc).arg("-vV").output() {
        Ok(output) => output,
        Err(err) => {
            eprintln!("fntrace: cannot run {}: {err}", rustc.to_string_lossy());
            return ExitCode::FAILURE;
        }
    };
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    if !output.status.success() {
        return ExitCode::FAILURE;
    }
    print!("{}", String::from_utf8_lossy(&output.stdout));
    println!(
        "fntrace-instrument: fntrace {} {} ({})",
        env!("CARGO_PKG_VERSION"),
        selection.to_env(),
        form.flags().join(" ")
    );
    ExitCode::SUCCESS
}

/// Whether the rustc call with `args`, of package `package` (primary:
/// selected on cargo's command line), compiles a crate to instrument.
fn instruments(args: &[OsString], package: &str, primary: bool, selection: &Selection) -> bool {
    let Some(crate_name) = option_value(args, "--crate-name") else {
        return false;
    };
    let probe = crate_name == "___"
        || args
            .iter()
            .any(|a| a.to_string_lossy().starts_with("--print"));
    let build_script = crate_name.starts_with("build_script_");
    let proc_macro = option_values(args, "--crate-type")
        .iter()
        .any(|types| types.split(',').any(|t| t == "proc-macro"));
    let fntrace = FNTRACE_PACKAGES.contains(&package)
        || FNTRACE_PACKAGES
            .iter()
            .any(|name| name.replace('-', "_") == crate_name);
    let chosen = match selection {
        Selection::Members => true,
        Selection::Selected(_) => primary,
    };
    chosen && !probe && !build_script && !proc_macro && !fntrace
}

/// The value of the first `option VALUE` or `option=VALUE` in `args`.
fn option_value(args: &[OsString], option: &str) -> Option<String> {
    option_values(args, option).into_iter().next()
}

/// The values of every `option VALUE` or `option=VALUE` in `args`.
fn option_values(args: &[OsString], option: &str) -> Vec<String> {
    let mut values = Vec::new();
    let mut args = args.iter().map(|a| a.to_string_lossy());
    while let Some(arg) = args.next() {
        if arg == option {
            if let Some(value) = args.next() {
                values.push(value.into_owned());
            }
        } else if let Some(value) = arg
            .strip_prefix(option)
            .and_then(|rest| rest.strip_prefix('='))
        {
            values.push(value.to_string());
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn cargo_arguments() {
        let options = scan_cargo_args(&os(&[
            "--release",
            "-p",
            "kv-service",
            "--package=b",
            "-pc",
            "--target-dir",
            "/t",
            "--manifest-path=x/Cargo.toml",
            "--",
            "-p",
            "not-cargo",
        ]));
        assert_eq!(
            options,
            CargoOptions {
                selection: vec!["-p kv-service".into(), "--package b".into(), "-p c".into()],
                target_dir: Some("/t".into()),
                manifest_path: Some("x/Cargo.toml".into()),
            }
        );
        let options = scan_cargo_args(&os(&["--workspace", "--exclude", "x", "--target-dir=/u"]));
        assert_eq!(options.selection, ["--workspace", "--exclude x"]);
        assert_eq!(options.target_dir, Some("/u".into()));
        assert_eq!(
            scan_cargo_args(&os(&["--release"])),
            CargoOptions::default()
        );
    }

    #[test]
    fn which_rustc_calls_are_instrumented() {
        let members = Selection::Members;
        let selected = Selection::Selected("-p app".into());
        let lib = os(&["--crate-name", "app", "--crate-type", "lib", "src/lib.rs"]);
        assert!(instruments(&lib, "app", false, &members));
        assert!(instruments(&lib, "app", true, &selected));
        assert!(!instruments(&lib, "app", false, &selected));
        let build_script = os(&["--crate-name", "build_script_build", "build.rs"]);
        assert!(!instruments(&build_script, "app", true, &members));
        let proc_macro = os(&["--crate-name=m", "--crate-type=proc-macro"]);
        assert!(!instruments(&proc_macro, "m", true, &members));
        let fntrace = os(&["--crate-name", "fntrace", "--crate-type", "rlib"]);
        assert!(!instruments(&fntrace, "fntrace", true, &members));
        let tools = os(&["--crate-name", "fntrace_tools"]);
        assert!(!instruments(&tools, "other-name", true, &members));
        let format = os(&["--crate-name", "fntrace_format"]);
        assert!(!instruments(&format, "other-name", true, &members));
        let probe = os(&["-", "--crate-name", "___", "--print=file-names"]);
        assert!(!instruments(&probe, "", true, &members));
        assert!(!instruments(&os(&["-vV"]), "", true, &members));
        let test_harness = os(&["--crate-name", "app", "--test", "src/lib.rs"]);
        assert!(instruments(&test_harness, "app", true, &selected));
    }

    #[test]
    fn form_is_an_option_before_cargos_arguments_and_round_trips() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            cargo: CargoArgs,
        }
        let cli = Cli::try_parse_from(["t", "--form", "patchable", "build", "--release"]).unwrap();
        assert_eq!(cli.cargo.form, Form::Patchable);
        assert_eq!(cli.cargo.command, CargoCommand::Build);
        assert_eq!(cli.cargo.args, os(&["--release"]));
        // Right after the command too; after cargo's first argument, or
        // `--`, it is cargo's (or the program's).
        let cli = Cli::try_parse_from(["t", "build", "--form", "patchable", "-q"]).unwrap();
        assert_eq!(cli.cargo.form, Form::Patchable);
        assert_eq!(cli.cargo.args, os(&["-q"]));
        let cli = Cli::try_parse_from(["t", "build", "-q", "--form", "patchable"]).unwrap();
        assert_eq!(cli.cargo.form, Form::Mcount);
        assert_eq!(cli.cargo.args, os(&["-q", "--form", "patchable"]));
        let cli = Cli::try_parse_from(["t", "run", "--", "--form", "patchable"]).unwrap();
        assert_eq!(cli.cargo.form, Form::Mcount);
        assert!(cli.cargo.args.ends_with(&os(&["--form", "patchable"])));
        assert!(Cli::try_parse_from(["t", "--form", "xray", "build"]).is_err());
        for form in [Form::Mcount, Form::Patchable] {
            assert_eq!(Form::from_env(form.name()), Some(form));
        }
        assert_eq!(Form::from_env("pg"), None);
        assert_eq!(Form::Patchable.flags(), ["-Zpatchable-function-entry=5,0"]);
    }

    #[test]
    fn selection_round_trips_through_the_environment() {
        for selection in [
            Selection::Members,
            Selection::Selected("-p a --exclude b".into()),
        ] {
            assert_eq!(Selection::from_env(&selection.to_env()), Some(selection));
        }
        assert_eq!(Selection::from_env("everything"), None);
        assert!(is_rustc(Path::new("/x/bin/rustc")));
        assert!(is_rustc(Path::new("rustc")));
        assert!(!is_rustc(Path::new("report")));
    }
}
