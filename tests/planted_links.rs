//! Nothing fntrace writes goes through a link another user planted, or
//! into a directory another user can swap (the rules are in
//! `docs/safe-writes.md`). Run as root, as a service would run: a
//! mode-1777 directory `shared` (root's, like `/tmp`) and a directory
//! `theirs` of `nobody` (mode 0777) get, planted by `nobody` itself
//! (`runuser -u nobody -- ln -s`), links at every name and every parent
//! component fntrace uses: the output directory (`shared/out`), a parent
//! (`shared/sub`), the export and `--save` files, `trigger.txt` and the
//! names `record` and the flight recorder would use in `theirs`. Each
//! points into `root-only` (mode 0700, root's), which holds a sentinel
//! file. Then every path runs on a `gcc -pg` C program preloaded with
//! `libfntrace.so`: `fntrace record -o`, the flight recorder's snapshots
//! (a trigger's, with its `trigger.txt`, and the one at exit, set by
//! `FNTRACE_FLIGHT*`), `fntrace flame`, `chrome`, `perfetto`, `pprof -o`,
//! `fntrace ctl PID profile --save` and `--pprof`, `fntrace::dump` and the control
//! socket (`FNTRACE_CONTROL=PATH`). Each must refuse
//! with one line naming the path and why, and `root-only` must be exactly
//! as it was (same names, same bytes). The same paths into places no one
//! else can reach (and into `shared` itself, under a new name) still
//! work.
//!
//! `fs.protected_symlinks` would stop the kernel from following such
//! links for root: the test sets it to 0 while it runs (and puts it back),
//! so that fntrace's own defences are what is tested. Not root: the test
//! fails, saying so.

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::native;

const SENTINEL: &[u8] = b"root's 0600 file: no trace, export or snapshot may touch it\n";
const NOBODY: u32 = 65534;

/// The traced program: a few calls, one slow (the flight trigger's), a
/// pause for the flight recorder's writer; then, for each line read, ten
/// calls and `done` (for `ctl profile`), until the end of its input.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static volatile long sink;
__attribute__((noinline)) long leaf(long x) { sink += x; return x * 3; }
__attribute__((noinline)) long slow_fn(long x) { usleep(20000); return leaf(x) + 1; }
int main(void) {
    for (long i = 0; i < 10; i++) sink += leaf(i);
    sink += slow_fn(1);
    usleep(300000);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        for (long i = 0; i < 10; i++) sink += leaf(i);
        printf("done\n");
        fflush(stdout);
    }
    return 0;
}
"#;

/// Sets `fs.protected_symlinks` to 0 while alive, as it was after.
struct ProtectedSymlinksOff(Option<String>);

impl ProtectedSymlinksOff {
    const PATH: &'static str = "/proc/sys/fs/protected_symlinks";

    fn new() -> ProtectedSymlinksOff {
        let was = std::fs::read_to_string(Self::PATH)
            .expect("reading /proc/sys/fs/protected_symlinks")
            .trim()
            .to_string();
        if was == "0" {
            return ProtectedSymlinksOff(None);
        }
        eprintln!("fs.protected_symlinks was {was}: set to 0 for this test");
        std::fs::write(Self::PATH, "0").expect("setting fs.protected_symlinks to 0");
        ProtectedSymlinksOff(Some(was))
    }
}

impl Drop for ProtectedSymlinksOff {
    fn drop(&mut self) {
        if let Some(was) = &self.0 {
            let _ = std::fs::write(Self::PATH, was);
        }
    }
}

/// Runs `args` as `nobody` (it must succeed).
fn as_nobody(args: &[&str]) {
    let output = Command::new("runuser")
        .args(["-u", "nobody", "--"])
        .args(args)
        .output()
        .expect("cannot run runuser");
    assert!(
        output.status.success(),
        "runuser -u nobody -- {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `nobody` plants the link `link` -> `target`.
fn plant(link: &Path, target: &Path) {
    as_nobody(&["ln", "-s", target.to_str().unwrap(), link.to_str().unwrap()]);
    let meta = std::fs::symlink_metadata(link).unwrap();
    assert!(meta.file_type().is_symlink() && meta.uid() == NOBODY);
}

/// Every name under `dir`, with its bytes (files) or `None`
/// (directories), and its mode: what must not change.
fn contents(dir: &Path) -> BTreeMap<PathBuf, (u32, Option<Vec<u8>>)> {
    let mut all = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            all.insert(path.clone(), (meta.mode(), None));
            all.extend(contents(&path));
        } else {
            all.insert(
                path.clone(),
                (meta.mode(), Some(std::fs::read(&path).unwrap())),
            );
        }
    }
    all
}

/// The test's directories, as described at the top.
struct World {
    base: PathBuf,
    root_only: PathBuf,
    shared: PathBuf,
    theirs: PathBuf,
    program: PathBuf,
    before: BTreeMap<PathBuf, (u32, Option<Vec<u8>>)>,
    /// What went wrong, case by case: every case runs, the test fails at
    /// the end with the whole list.
    failures: RefCell<Vec<String>>,
}

impl World {
    fn new() -> World {
        let base = common::temp_dir("planted-links");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();

        let root_only = base.join("root-only");
        std::fs::create_dir(&root_only).unwrap();
        std::fs::set_permissions(&root_only, std::fs::Permissions::from_mode(0o700)).unwrap();
        let victim = root_only.join("victim");
        std::fs::write(&victim, SENTINEL).unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        // Names fntrace would write, were it sent into root-only.
        std::fs::write(root_only.join("trigger.txt"), SENTINEL).unwrap();
        std::fs::write(root_only.join("info"), SENTINEL).unwrap();

        let shared = base.join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let theirs = base.join("theirs");
        // nobody's own directory, open to all (made here: base is root's).
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o777)).unwrap();

        // The output directory itself, a parent, and every file name.
        plant(&shared.join("out"), &root_only);
        plant(&shared.join("sub"), &root_only);
        for file in [
            "f.svg",
            "c.json",
            "p.pftrace",
            "p.pb.gz",
            "p.txt",
            "trigger.txt",
        ] {
            plant(&shared.join(file), &victim);
        }
        plant(&theirs.join("t"), &root_only);
        plant(&theirs.join("trigger.txt"), &root_only.join("trigger.txt"));
        plant(&theirs.join("p.txt"), &victim);

        let program = build_program(&base);
        let before = contents(&root_only);
        World {
            base,
            root_only,
            shared,
            theirs,
            program,
            before,
            failures: RefCell::new(Vec::new()),
        }
    }

    /// `root-only` is as it was; if not, the failure is noted and
    /// `root-only` put back as it was for the next case.
    fn assert_untouched(&self, what: &str) {
        let now = contents(&self.root_only);
        if now == self.before {
            return;
        }
        let changed: Vec<String> = now
            .iter()
            .filter(|(path, entry)| self.before.get(*path) != Some(entry))
            .map(|(path, _)| path.display().to_string())
            .collect();
        self.fail(format!(
            "{what}: the root-only directory changed: {changed:?} written"
        ));
        for path in now.keys().filter(|p| !self.before.contains_key(*p)) {
            if path.is_dir() {
                let _ = std::fs::remove_dir_all(path);
            } else {
                let _ = std::fs::remove_file(path);
            }
        }
        for (path, (mode, bytes)) in &self.before {
            if let Some(bytes) = bytes {
                std::fs::write(path, bytes).unwrap();
            }
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode)).unwrap();
        }
        assert_eq!(contents(&self.root_only), self.before);
    }

    /// The command failed, and its stderr says `why` about `path`.
    fn assert_refused(&self, output: &Output, path: &Path, why: &str, what: &str) {
        if output.status.success() {
            self.fail(format!("{what}: it succeeded\n{}", text(output)));
        } else {
            self.assert_says(&String::from_utf8_lossy(&output.stderr), path, why, what);
        }
    }

    /// `said` names `path` and says `why`.
    fn assert_says(&self, said: &str, path: &Path, why: &str, what: &str) {
        if !(said.contains(&path.display().to_string()) && said.contains(why)) {
            self.fail(format!(
                "{what}: expected {why:?} about {}, got: {said}",
                path.display()
            ));
        }
    }

    fn fail(&self, failure: String) {
        eprintln!("FAILED: {failure}");
        self.failures.borrow_mut().push(failure);
    }
}

fn build_program(dir: &Path) -> PathBuf {
    let source = dir.join("prog.c");
    std::fs::write(&source, PROGRAM).unwrap();
    let program = dir.join("prog");
    native::gcc(&[
        "-pg".as_ref(),
        "-O0".as_ref(),
        "-o".as_ref(),
        program.as_os_str(),
        source.as_os_str(),
    ]);
    program
}

fn text(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The preloaded program, with `vars`, input closed; it runs untraced
/// when fntrace refuses, so it succeeds either way.
fn run_preloaded(world: &World, vars: &[(&str, &Path)]) -> Output {
    native::build_libraries();
    let mut command = Command::new(&world.program);
    for (name, _) in std::env::vars() {
        if name.starts_with("FNTRACE") {
            command.env_remove(name);
        }
    }
    command
        .env("LD_PRELOAD", native::profile_dir().join("libfntrace.so"))
        .current_dir(&world.base)
        .stdin(Stdio::null());
    for (name, value) in vars {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    assert!(output.status.success(), "{vars:?}: {}", text(&output));
    output
}

fn fntrace(world: &World, args: &[&str]) -> Output {
    Command::new(native::cli_with_library())
        .args(args)
        .current_dir(&world.base)
        .env_remove("FNTRACE_LIB")
        .output()
        .unwrap()
}

const LINK: &str = "is a symbolic link";
const THEIRS: &str = "is owned by uid 65534";

#[test]
fn no_path_writes_through_a_link_or_into_another_users_directory() {
    // SAFETY: geteuid takes no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert!(
        euid == 0,
        "this test plants links as another user and needs root (CI runs it as root); run it \
         with sudo"
    );
    assert!(
        Command::new("id")
            .arg("nobody")
            .output()
            .is_ok_and(|o| o.status.success()),
        "the test needs the user nobody (uid 65534)"
    );
    let _protected = ProtectedSymlinksOff::new();
    let world = World::new();
    let prog = world.program.to_str().unwrap();
    let s = |p: PathBuf| p.to_str().unwrap().to_string();

    // fntrace record -o: the output directory, a parent, another user's
    // directory.
    for (dir, bad, why) in [
        (world.shared.join("out"), world.shared.join("out"), LINK),
        (world.shared.join("sub/t"), world.shared.join("sub"), LINK),
        (world.theirs.join("t"), world.theirs.clone(), THEIRS),
        (world.theirs.join("new"), world.theirs.clone(), THEIRS),
    ] {
        let output = fntrace(&world, &["record", "-o", &s(dir.clone()), prog]);
        world.assert_refused(&output, &bad, why, &format!("record -o {}", dir.display()));
        world.assert_untouched(&format!("record -o {}", dir.display()));
    }
    // A new directory in the sticky one: recorded.
    let recorded = world.shared.join("rec");
    let output = fntrace(&world, &["record", "-o", &s(recorded.clone()), prog]);
    assert!(output.status.success(), "{}", text(&output));
    assert!(recorded.join("info").is_file());

    // The flight recorder: a trigger's snapshot (and its trigger.txt),
    // and the snapshot at exit.
    for trigger in [Some("slow_fn>5ms"), None] {
        for (dir, bad, why) in [
            (world.shared.join("out"), world.shared.join("out"), LINK),
            (world.shared.join("sub/fl"), world.shared.join("sub"), LINK),
            (world.theirs.clone(), world.theirs.clone(), THEIRS),
            (world.theirs.join("fl"), world.theirs.clone(), THEIRS),
        ] {
            let what = format!("flight {trigger:?} into {}", dir.display());
            let mut vars: Vec<(&str, &Path)> = vec![("FNTRACE_OUTPUT", &dir)];
            if let Some(trigger) = trigger {
                vars.push(("FNTRACE_FLIGHT_TRIGGER", Path::new(trigger)));
            }
            vars.push(("FNTRACE_FLIGHT", Path::new("1M")));
            let output = run_preloaded(&world, &vars);
            world.assert_says(&String::from_utf8_lossy(&output.stderr), &bad, why, &what);
            world.assert_untouched(&what);
        }
    }
    // Into a new directory in the sticky one: both written.
    let flights = world.shared.join("flights");
    let output = run_preloaded(
        &world,
        &[
            ("FNTRACE_OUTPUT", &flights),
            ("FNTRACE_FLIGHT", Path::new("1M")),
            ("FNTRACE_FLIGHT_TRIGGER", Path::new("slow_fn>5ms")),
        ],
    );
    let snapshots: Vec<PathBuf> = std::fs::read_dir(&flights)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(snapshots.len(), 1, "{snapshots:?}\n{}", text(&output));
    let trigger_txt = std::fs::read_to_string(snapshots[0].join("trigger.txt")).unwrap();
    assert!(trigger_txt.contains("slow_fn"), "{trigger_txt}");
    assert!(snapshots[0].join("info").is_file());
    let at_exit = world.shared.join("at-exit");
    let output = run_preloaded(
        &world,
        &[
            ("FNTRACE_OUTPUT", &at_exit),
            ("FNTRACE_FLIGHT", Path::new("1M")),
        ],
    );
    assert!(at_exit.join("info").is_file(), "{}", text(&output));
    world.assert_untouched("flight into new directories");

    // Exports: the file, a parent, another user's directory.
    let trace = s(recorded.clone());
    for (command, file) in [
        ("flame", "f.svg"),
        ("chrome", "c.json"),
        ("perfetto", "p.pftrace"),
        ("pprof", "p.pb.gz"),
    ] {
        for (out, bad, why) in [
            (world.shared.join(file), world.shared.join(file), LINK),
            (
                world.shared.join("sub").join(file),
                world.shared.join("sub"),
                LINK,
            ),
            (world.theirs.join(file), world.theirs.clone(), THEIRS),
        ] {
            let what = format!("{command} -o {}", out.display());
            let output = fntrace(&world, &[command, &trace, "-o", &s(out.clone())]);
            world.assert_refused(&output, &bad, why, &what);
            world.assert_untouched(&what);
        }
        let good = world.base.join(file);
        let output = fntrace(&world, &[command, &trace, "-o", &s(good.clone())]);
        assert!(output.status.success(), "{command}: {}", text(&output));
        assert!(std::fs::metadata(&good).unwrap().len() > 0);
        // Replaced whole, a second time.
        let output = fntrace(&world, &[command, &trace, "-o", &s(good.clone())]);
        assert!(
            output.status.success(),
            "{command} again: {}",
            text(&output)
        );
    }

    // The control socket (FNTRACE_CONTROL=PATH): made through its
    // directory's descriptor, that directory checked as any other.
    for (socket, bad, why) in [
        (
            world.shared.join("sub/ctl.sock"),
            world.shared.join("sub"),
            LINK,
        ),
        (world.theirs.join("ctl.sock"), world.theirs.clone(), THEIRS),
    ] {
        let what = format!("FNTRACE_CONTROL={}", socket.display());
        let output = run_preloaded(&world, &[("FNTRACE_CONTROL", &socket)]);
        world.assert_says(&String::from_utf8_lossy(&output.stderr), &bad, why, &what);
        world.assert_untouched(&what);
    }

    // fntrace ctl PID profile --save (the socket in a directory of root's).
    save_profile(&world);

    // fntrace::dump (the C API's fntrace_dump is the same function).
    for (dir, bad, why) in [
        (world.shared.join("out"), world.shared.join("out"), LINK),
        (world.shared.join("sub/d"), world.shared.join("sub"), LINK),
        (world.theirs.join("d"), world.theirs.clone(), THEIRS),
    ] {
        let what = format!("dump {}", dir.display());
        match fntrace::dump(&dir) {
            Ok(_) => world.fail(format!("{what}: it succeeded")),
            Err(err) => world.assert_says(&err.to_string(), &bad, why, &what),
        }
        world.assert_untouched(&what);
    }
    let dumped = world.shared.join("dumped");
    fntrace::dump(&dumped).unwrap();
    assert!(dumped.join("info").is_file());

    world.assert_untouched("the end");
    let failures = world.failures.take();
    assert!(
        failures.is_empty(),
        "{} case(s) wrote through a link or into another user's directory, or did not \
         say why they refused:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // theirs belongs to nobody: fine to leave its links behind with the rest.
    let _ = std::fs::remove_dir_all(&world.base);
}

/// `fntrace ctl SOCKET profile --save FILE` against the preloaded program
/// serving its control socket.
fn save_profile(world: &World) {
    let socket = world.base.join("ctl.sock");
    let mut command = Command::new(&world.program);
    for (name, _) in std::env::vars() {
        if name.starts_with("FNTRACE") {
            command.env_remove(name);
        }
    }
    let mut child = command
        .env("LD_PRELOAD", native::profile_dir().join("libfntrace.so"))
        .env("FNTRACE_CONTROL", &socket)
        .current_dir(&world.base)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "no control socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let target = socket.to_str().unwrap();
    let output = fntrace(world, &["ctl", target, "enable", "profile"]);
    assert!(output.status.success(), "{}", text(&output));
    writeln!(stdin, "work").unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "done\n");

    let s = |p: &Path| p.to_str().unwrap().to_string();
    let cases = [
        (world.shared.join("p.txt"), world.shared.join("p.txt"), LINK),
        (
            world.shared.join("sub/p.txt"),
            world.shared.join("sub"),
            LINK,
        ),
        (world.theirs.join("p.txt"), world.theirs.clone(), THEIRS),
        (world.theirs.join("q.txt"), world.theirs.clone(), THEIRS),
    ];
    for option in ["--save", "--pprof"] {
        for (file, bad, why) in &cases {
            let what = format!("ctl profile {option} {}", file.display());
            let output = fntrace(world, &["ctl", target, "profile", option, &s(file)]);
            world.assert_refused(&output, bad, why, &what);
            world.assert_untouched(&what);
        }
    }
    let pprof = world.base.join("p.pb.gz");
    let output = fntrace(world, &["ctl", target, "profile", "--pprof", &s(&pprof)]);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(std::fs::read(&pprof).unwrap()[..2], [0x1f, 0x8b]);
    let good = world.base.join("p.txt");
    let output = fntrace(world, &["ctl", target, "profile", "--save", &s(&good)]);
    assert!(output.status.success(), "{}", text(&output));
    assert!(std::fs::read_to_string(&good)
        .unwrap()
        .starts_with("fntrace-profile "));
    drop(stdin);
    assert!(child.wait().unwrap().success());
}
