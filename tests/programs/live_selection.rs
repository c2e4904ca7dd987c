//! Live selections that match nothing are errors naming the closest
//! functions, as the offline readers' `-F` is: `tests/c/ctl_prog.c` (its
//! functions: handle_get, handle_put, handle_log_rotate, parse_key,
//! log_line, work, worker, main), built with `gcc -pg` and linked with
//! `libfntrace.a`, or built plainly and preloaded with `libfntrace.so`,
//! runs with `FNTRACE_CONTROL` and is driven with `fntrace ctl` and
//! `fntrace top` while it runs (paced by its standard input). Each mistake
//! gets its exact message; `--pending` keeps a selection for a library
//! loaded later and says so, and the library's functions are selected
//! once it is loaded (`tests/c/plugin_host.c`); the environment's selections (which must
//! never stop the program) are warned of once at start-up.

use crate::common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::ctl_prog::Program;
use common::native::{build_c_program, build_libraries, cli, profile_dir, repo};

/// What a glob matching no function is compared with.
const AMONG: &str = "no function with a call site in this process matches it";

/// How a process gets call sites, as every refusal for want of them says.
const HOW: &str = "build Rust with `fntrace cargo build`, C or C++ with `gcc -pg` (or -pg \
                   -mfentry); or patch functions built without instrumentation at run time \
                   with -P GLOB: `fntrace record -P GLOB`, FNTRACE_PATCH_FUNCTIONS=GLOB, or \
                   `fntrace ctl PID patch GLOB` (after `fntrace attach PID` for a program \
                   started without fntrace)";

/// `fntrace ARGS` in `cwd`: exit code, stdout, stderr.
fn fntrace(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(cli())
        .current_dir(cwd)
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().expect("fntrace was killed"),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// `fntrace ctl TARGET ARGS`, which must succeed: what it printed.
fn ctl_ok(cwd: &Path, target: &str, args: &[&str]) -> String {
    let mut all = vec!["ctl", target];
    all.extend(args);
    let (code, stdout, stderr) = fntrace(cwd, &all);
    assert_eq!((code, stderr.as_str()), (0, ""), "ctl {args:?}: {stdout}");
    stdout
}

/// `fntrace ctl TARGET ARGS`, which the program must refuse (exit 1): its
/// message.
fn ctl_refused(cwd: &Path, target: &str, args: &[&str]) -> String {
    let mut all = vec!["ctl", target];
    all.extend(args);
    let (code, stdout, stderr) = fntrace(cwd, &all);
    assert_eq!((code, stdout.as_str()), (1, ""), "ctl {args:?}: {stderr}");
    stderr
}

/// The value of the `key: ` line of `status`.
fn status_line(cwd: &Path, target: &str, key: &str) -> String {
    let status = ctl_ok(cwd, target, &["status"]);
    let prefix = format!("{key}: ");
    status
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {key} in {status}"))
        .to_string()
}

/// A fresh directory for one test, and `ctl_prog` built into it with gcc
/// `flags`, linked with `libfntrace.a`.
fn build(name: &str, flags: &[&str]) -> (PathBuf, PathBuf) {
    let base = common::temp_dir(name);
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("ctl_prog");
    build_c_program(&repo().join("tests/c/ctl_prog.c"), flags, &program);
    (base, program)
}

#[test]
fn filter_enable_functions_and_top_refuse_a_glob_that_matches_nothing() {
    let (base, program) = build("sel-filter", &["-pg"]);
    let socket = base.join("ctl.sock");
    let mut p = Program::start(&program, &[("FNTRACE_CONTROL", socket.as_os_str())], &base);
    let target = socket.to_str().unwrap();

    // A typo: refused, the filter unchanged; `enable` then takes the
    // filter in force (none), not the typo.
    assert_eq!(
        ctl_refused(&base, target, &["filter", "hadle_*"]),
        format!(
            "fntrace: filter hadle_*: {AMONG} (closest: handle_get, handle_log_rotate, \
             handle_put); the filter is unchanged (`filter --pending GLOBS` keeps globs for the \
             functions of a library loaded later)\n"
        )
    );
    assert_eq!(
        ctl_refused(&base, target, &["filter", "handle_*,!lgo_line"]),
        format!(
            "fntrace: filter lgo_line: {AMONG} (closest: log_line, main, work); the filter is unchanged (`filter --pending GLOBS` keeps globs for the \
             functions of a library loaded later)\n"
        )
    );
    assert_eq!(
        ctl_refused(&base, target, &["filter", "handle_*,!handle_*"]),
        "fntrace: filter handle_*,!handle_*: the filter selects no function with a call site \
         in this process; the filter is unchanged (`filter --pending GLOBS` keeps globs for \
         the functions of a library loaded later)\n"
    );
    assert_eq!(
        status_line(&base, target, "filter"),
        "none (every function)"
    );

    // What the globs are checked against.
    assert_eq!(
        ctl_ok(&base, target, &["functions", "handle_*"]),
        "3 functions with a call site in this process match handle_*\nhandle_get\n\
         handle_log_rotate\nhandle_put\n"
    );
    assert_eq!(
        ctl_refused(&base, target, &["functions", "hadle*"]),
        format!("fntrace: hadle*: {AMONG} (closest: handle_get, handle_log_rotate, handle_put)\n")
    );

    // `--pending`: kept, and said, by filter, status and enable.
    let pending_line =
        format!("pending: hadle_*: {AMONG} (closest: handle_get, handle_log_rotate, handle_put)\n");
    assert_eq!(
        ctl_ok(&base, target, &["filter", "--pending", "hadle_*"]),
        format!(
            "filter hadle_*: for the tracers enabled from now on, and recordings\n{pending_line}"
        )
    );
    assert_eq!(
        status_line(&base, target, "filter"),
        "hadle_* (pending; for tracers enabled from now on, and recordings)"
    );
    assert_eq!(
        ctl_ok(&base, target, &["enable", "profile"]),
        format!("enabled profile (hadle_*)\n{pending_line}")
    );
    assert_eq!(status_line(&base, target, "sites"), "8 (0 patched)");
    ctl_ok(&base, target, &["disable", "profile"]);

    ctl_ok(&base, target, &["filter", "handle_*"]);
    assert_eq!(
        ctl_ok(&base, target, &["enable", "profile"]),
        "enabled profile (handle_*)\n"
    );
    assert_eq!(status_line(&base, target, "sites"), "8 (3 patched)");
    p.work(100);

    // `top -F` / `-N`: refused before the first frame, not an empty screen.
    let top = |args: &[&str]| {
        let mut all = vec!["top", target, "--once", "--interval", "100ms"];
        all.extend(args);
        fntrace(&base, &all)
    };
    assert_eq!(
        top(&["-F", "hadle*"]),
        (
            2,
            String::new(),
            format!(
                "fntrace: top: -F hadle*: {AMONG} (closest: handle_get, handle_log_rotate, \
                 handle_put)\n"
            )
        )
    );
    assert_eq!(
        top(&["-F", "handle_*", "-N", "handle_pt"]),
        (
            2,
            String::new(),
            format!(
                "fntrace: top: -N handle_pt: {AMONG} (closest: handle_put, handle_get, parse_key)\n"
            )
        )
    );
    let (code, frame, stderr) = top(&["-F", "handle_*", "-N", "handle_put"]);
    assert_eq!((code, stderr.as_str()), (0, ""), "{frame}");
    assert!(
        frame.starts_with(&format!("fntrace top {target}: ")),
        "{frame}"
    );
    assert!(
        frame
            .lines()
            .next()
            .unwrap()
            .contains(", functions handle_*, not handle_put"),
        "{frame}"
    );

    // `ctl profile -F` with `--save`: checked as the table's, and what it
    // selects is what is saved.
    let saved = base.join("get.profile");
    let saved_arg = saved.to_str().unwrap();
    let (code, stdout, stderr) = fntrace(
        &base,
        &[
            "ctl",
            target,
            "profile",
            "-F",
            "hadle_get",
            "--save",
            saved_arg,
        ],
    );
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            2,
            "",
            "fntrace: ctl: -F hadle_get: no function of the profile matches it (closest: \
             handle_get, handle_put, handle_log_rotate)\n"
        )
    );
    assert!(!saved.exists());
    let (code, _, stderr) = fntrace(
        &base,
        &[
            "ctl",
            target,
            "profile",
            "-F",
            "handle_get",
            "--save",
            saved_arg,
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let text = std::fs::read_to_string(&saved).unwrap();
    let functions: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("function "))
        .map(|line| line.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(functions, ["handle_get"], "{text}");
    // The saved selection reads back: 400 calls of handle_get (100 on
    // each of 4 threads).
    let (code, report, stderr) = fntrace(&base, &["report", saved_arg]);
    assert_eq!(code, 0, "{stderr}");
    let row = report
        .lines()
        .find(|line| line.ends_with(" handle_get"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(row.split_whitespace().any(|cell| cell == "400"), "{row}");
    assert!(!report.contains("handle_put"), "{report}");

    assert_eq!(p.finish(), "");
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn flight_triggers_matching_nothing_are_refused_or_kept_pending() {
    let (base, program) = build("sel-flight", &["-pg"]);
    let socket = base.join("ctl.sock");
    let p = Program::start(&program, &[("FNTRACE_CONTROL", socket.as_os_str())], &base);
    let target = socket.to_str().unwrap();
    let snaps = base.join("snaps");
    ctl_ok(&base, target, &["flight", "start", snaps.to_str().unwrap()]);
    let message = format!("rq: {AMONG} (closest: work, main, worker)");
    assert_eq!(
        ctl_refused(&base, target, &["flight", "trigger", "rq", "10ms"]),
        format!(
            "fntrace: flight trigger rq>10ms: {message}; no trigger set (`flight trigger \
             --pending rq>10ms` keeps it for the functions of a library loaded later)\n"
        )
    );
    assert_eq!(
        ctl_ok(&base, target, &["flight", "triggers"]),
        "0 trigger(s)\n"
    );
    assert_eq!(
        ctl_ok(
            &base,
            target,
            &["flight", "trigger", "--pending", "rq", "10ms"]
        ),
        format!("trigger set: rq>10ms\npending: {message}\n")
    );
    ctl_ok(&base, target, &["flight", "trigger", "handle_get", "10ms"]);
    assert_eq!(
        status_line(&base, target, "flight trigger matches nothing"),
        message
    );
    ctl_ok(&base, target, &["flight", "stop"]);
    assert_eq!(p.finish(), "");
    std::fs::remove_dir_all(&base).unwrap();
}

/// `FNTRACE_FILTER` and `FNTRACE_FLIGHT_TRIGGER` must never stop the
/// program: a glob matching nothing is said once on stderr at start-up,
/// with the closest names, and kept; `status` shows the trigger's.
#[test]
fn environment_selections_matching_nothing_are_warned_of_once_at_start_up() {
    let (base, program) = build("sel-env", &["-pg"]);
    let socket = base.join("ctl.sock");
    let output = base.join("flight");
    let mut p = Program::start(
        &program,
        &[
            ("FNTRACE_CONTROL", socket.as_os_str()),
            ("FNTRACE_FILTER", OsStr::new("hadle_*,parse_*")),
            ("FNTRACE_OUTPUT", output.as_os_str()),
            ("FNTRACE_FLIGHT", OsStr::new("8M")),
            ("FNTRACE_FLIGHT_TRIGGER", OsStr::new("rq>10ms,SIGUSR1")),
        ],
        &base,
    );
    let target = socket.to_str().unwrap();
    p.work(10);
    let trigger = format!("rq: {AMONG} (closest: work, main, worker)");
    assert_eq!(
        status_line(&base, target, "flight trigger matches nothing"),
        trigger
    );
    let stderr = p.finish();
    let kept = "kept (a library loaded later may match it)";
    assert_eq!(
        stderr,
        format!(
            "fntrace: FNTRACE_FILTER: hadle_*: {AMONG} (closest: handle_get, \
             handle_log_rotate, handle_put); {kept}\n\
             fntrace: FNTRACE_FLIGHT_TRIGGER: {trigger}; {kept}\n\
             fntrace: flight recorder: 0 trigger snapshot(s) in {}, 0 trigger(s) skipped \
             (over the rate limit)\n",
            output.display()
        )
    );
    std::fs::remove_dir_all(&base).unwrap();
}

/// The program built without `-pg` and preloaded with `libfntrace.so`: no
/// call site to find, so none is looked for before `main` (a shell that
/// inherited `FNTRACE_CONTROL=1` starts as fast as without it); the first
/// command that needs them looks, finds none, and `enable` and `top` say
/// how to get some; `patch` refuses a typo and patches what it names.
#[test]
fn a_process_with_no_call_site_says_how_to_get_some() {
    let base = common::temp_dir("sel-plain");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("ctl_prog");
    let built = Command::new("gcc")
        .args(["-O1", "-pthread"])
        .arg(repo().join("tests/c/ctl_prog.c"))
        .arg("-o")
        .arg(&program)
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    let socket = base.join("ctl.sock");
    build_libraries();
    let library = profile_dir().join("libfntrace.so");
    let mut p = Program::start(
        &program,
        &[
            ("LD_PRELOAD", library.as_os_str()),
            ("FNTRACE_CONTROL", socket.as_os_str()),
        ],
        &base,
    );
    let target = socket.to_str().unwrap();
    assert_eq!(
        status_line(&base, target, "sites"),
        "not looked for yet (the first enable, record or patch finds them)"
    );
    p.work(100);
    let none = "no function of this process has a call site (it was built without \
                instrumentation)";
    assert_eq!(
        ctl_refused(&base, target, &["enable", "profile"]),
        format!(
            "fntrace: enable profile: {none}: {HOW}; `enable --pending profile` keeps it for a \
             library loaded later (dlopen)\n"
        )
    );
    assert_eq!(status_line(&base, target, "sites"), "0 (0 patched)");
    // In registration order, which the link order of their constructors
    // decides: compared as a set.
    let tracers = status_line(&base, target, "tracers");
    let mut tracers: Vec<&str> = tracers.split(", ").collect();
    tracers.sort_unstable();
    assert_eq!(tracers, ["function", "graph", "profile"]);
    assert_eq!(
        fntrace(&base, &["top", target, "--once", "--interval", "100ms"]),
        (2, String::new(), format!("fntrace: top: {none}: {HOW}\n"))
    );
    assert_eq!(
        ctl_refused(&base, target, &["functions"]),
        format!("fntrace: {none}: {HOW}\n")
    );
    assert_eq!(
        ctl_ok(&base, target, &["enable", "--pending", "function"]),
        format!(
            "enabled function (every function)\npending: no function of this process has a \
             call site yet: {HOW}\n"
        )
    );
    ctl_ok(&base, target, &["disable", "function"]);

    // Run-time patching: a typo is refused with the closest names of the
    // symbol tables, nothing patched; then the functions it meant.
    assert_eq!(
        ctl_refused(&base, target, &["patch", "hadle_*"]),
        "fntrace: patch hadle_*: no function of this process's symbol tables matches it \
         (closest: handle_get, handle_log_rotate, handle_put); nothing was patched (an inlined \
         function has no entry of its own)\n"
    );
    assert_eq!(status_line(&base, target, "sites"), "0 (0 patched)");
    assert_eq!(
        ctl_ok(&base, target, &["patch", "handle_*"]),
        "patch handle_*: 3 functions patched, 0 refused\n"
    );
    assert_eq!(
        ctl_ok(&base, target, &["enable", "profile"]),
        "enabled profile (every function)\n"
    );
    assert_eq!(status_line(&base, target, "sites"), "3 (3 patched)");
    p.work(100);
    assert_eq!(p.finish(), "");
    std::fs::remove_dir_all(&base).unwrap();
}

/// A selection made before the library it names is loaded: refused as a
/// typo would be, kept with `--pending` (said), and its functions traced
/// once `dlopen` brought them (the next command's rescan selects them).
#[test]
fn a_pending_filter_selects_the_functions_of_a_library_loaded_later() {
    let base = common::temp_dir("sel-dlopen");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("plugin_host");
    build_c_program(&repo().join("tests/c/plugin_host.c"), &["-pg"], &program);
    let plugin = base.join("libplugin.so");
    common::native::gcc(&[
        "-pg".as_ref(),
        "-O0".as_ref(),
        "-fPIC".as_ref(),
        "-shared".as_ref(),
        repo().join("tests/c/dlclosed_plugin.c").as_os_str(),
        "-o".as_ref(),
        plugin.as_os_str(),
    ]);
    let socket = base.join("ctl.sock");
    let mut p = Program::start(&program, &[("FNTRACE_CONTROL", socket.as_os_str())], &base);
    let target = socket.to_str().unwrap();

    assert_eq!(
        ctl_refused(&base, target, &["filter", "plug_*"]),
        format!(
            "fntrace: filter plug_*: {AMONG} (closest: main); the filter is unchanged \
             (`filter --pending GLOBS` keeps globs for the functions of a library loaded \
             later)\n"
        )
    );
    let pending = format!("pending: plug_*: {AMONG} (closest: main)\n");
    assert_eq!(
        ctl_ok(&base, target, &["filter", "--pending", "plug_*"]),
        format!("filter plug_*: for the tracers enabled from now on, and recordings\n{pending}")
    );
    assert_eq!(
        ctl_ok(&base, target, &["enable", "profile"]),
        format!("enabled profile (plug_*)\n{pending}")
    );

    p.ask(&format!("load {}", plugin.display()), "loaded");
    assert_eq!(
        ctl_ok(&base, target, &["functions", "plug_*"]),
        "3 functions with a call site in this process match plug_*\nplug_leaf\nplug_mid\n\
         plug_run\n"
    );
    p.ask("run 10", "done");
    let saved = base.join("plug.profile");
    let saved_arg = saved.to_str().unwrap();
    assert_eq!(
        fntrace(&base, &["ctl", target, "profile", "--save", saved_arg]),
        (0, String::new(), format!("fntrace: wrote {saved_arg}\n"))
    );
    let text = std::fs::read_to_string(&saved).unwrap();
    // `function INDEX ADDRESS CALLS ... NAME`.
    let mut calls: Vec<(String, u64)> = text
        .lines()
        .filter_map(|line| line.strip_prefix("function "))
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (
                fields[fields.len() - 1].to_string(),
                fields[2].parse().unwrap(),
            )
        })
        .collect();
    calls.sort();
    assert_eq!(
        calls,
        [
            ("plug_leaf".to_string(), 20),
            ("plug_mid".to_string(), 10),
            ("plug_run".to_string(), 1)
        ],
        "{text}"
    );
    assert_eq!(p.finish(), "");
    std::fs::remove_dir_all(&base).unwrap();
}
