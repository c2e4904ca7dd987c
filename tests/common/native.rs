//! Native builds for the tests: the library's `staticlib` and `cdylib`
//! outputs, C programs linked with `libfntrace.a` as the README says, and
//! the `fntrace` command. A single `cargo test --test X` builds neither the
//! tools' binary nor (for tests of other packages) the library's native
//! outputs, so these are built here with the test's own profile and target
//! directory, once per test binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

/// The libraries a program linked with `libfntrace.a` needs besides it
/// (what `rustc --print native-static-libs` lists); the README's link line
/// names the same.
pub const LINK_LIBS: &[&str] = &["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s"];

/// The workspace's top directory.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `target/<profile>`: the directory holding this test's `deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// Builds the library (rlib, `libfntrace.a`, `libfntrace.so`) and the
/// `fntrace` command, once, with this test's profile and target directory.
///
/// `--test command` is there for its dependencies, not to be run: a target that
/// needs the dev-dependencies makes cargo resolve features as `cargo test`
/// does (the tools' dev-dependencies turn on features of `syn` and
/// `thiserror`). Without it this build differs from the one `cargo test`
/// has just made and compiles the proc macros and everything above them a
/// second time (about half a minute of a fresh CI run); with it, after
/// `cargo test`'s own build, it compiles nothing.
fn build_native() {
    static BUILT: Once = Once::new();
    BUILT.call_once(|| {
        let dir = profile_dir();
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .arg("build")
            .args(["-p", "fntrace", "-p", "fntrace-tools"])
            .args(["--lib", "--bin", "fntrace", "--test", "command"])
            .arg("--manifest-path")
            .arg(repo().join("Cargo.toml"));
        match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                cargo.arg("--release");
            }
            Some(profile) => {
                cargo.args(["--profile", profile]);
            }
            None => panic!("no profile directory above {}", dir.display()),
        }
        cargo.env("CARGO_TARGET_DIR", dir.parent().unwrap());
        let output = cargo.output().expect("cannot run cargo");
        assert!(
            output.status.success(),
            "cargo build of the library and the fntrace command: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
}

/// Builds the library's `staticlib` and `cdylib` outputs, once.
pub fn build_libraries() {
    build_native();
}

/// `libfntrace.a`, built.
pub fn static_lib() -> PathBuf {
    build_libraries();
    let lib = profile_dir().join("libfntrace.a");
    assert!(
        lib.exists(),
        "{} is missing: cargo builds it with the rlib (crate-type staticlib)",
        lib.display()
    );
    lib
}

/// The `fntrace` command (the tools crate's binary), built.
pub fn cli() -> PathBuf {
    build_native();
    profile_dir().join("fntrace")
}

/// Runs `gcc ARGS`, which must succeed (its stderr in the failure).
pub fn gcc<S: AsRef<std::ffi::OsStr>>(args: &[S]) {
    let output = Command::new("gcc")
        .args(args)
        .output()
        .expect("cannot run gcc; CI installs it (.ci/run)");
    assert!(
        output.status.success(),
        "gcc {:?}: {}",
        args.iter()
            .map(|a| a.as_ref().to_owned())
            .collect::<Vec<_>>(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Builds the C program `source` with `flags` (PIE) into `out`, linked
/// with `libfntrace.a` as the README says.
pub fn build_c_program(source: &Path, flags: &[&str], out: &Path) {
    let output = Command::new("gcc")
        .args(flags)
        .args(["-O0", "-fPIE", "-pie"])
        .arg(source)
        .arg("-I")
        .arg(repo().join("include"))
        .arg("-o")
        .arg(out)
        .arg(static_lib())
        .args(LINK_LIBS)
        .output()
        .expect("cannot run gcc; CI installs it (.ci/run)");
    assert!(
        output.status.success(),
        "gcc {flags:?} {}: {}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The `fntrace` command, with `libfntrace.so` built beside it (what
/// `fntrace record` preloads).
pub fn cli_with_library() -> PathBuf {
    build_libraries();
    assert!(profile_dir().join("libfntrace.so").is_file());
    cli()
}

/// `fntrace record ARGS` in `cwd`, with the library beside the command.
pub fn fntrace_record(cwd: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(cli_with_library())
        .arg("record")
        .args(args)
        .current_dir(cwd)
        .env_remove("FNTRACE_LIB")
        .output()
        .unwrap()
}

/// A command's standard error, as text.
pub fn stderr_of(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `tests/c/NAME.c` built by gcc with `flags` (and `link` after the
/// source) into `dir/NAME-LABEL`, not linked with fntrace (for `fntrace
/// record`; [`build_c_program`] links `libfntrace.a`).
pub fn build_c(dir: &Path, name: &str, label: &str, flags: &[&str], link: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let program = dir.join(format!("{name}-{label}"));
    let output = Command::new("gcc")
        .args(flags)
        .arg(repo().join(format!("tests/c/{name}.c")))
        .arg("-o")
        .arg(&program)
        .args(link)
        .output()
        .expect("cannot run gcc; CI installs it (.ci/run)");
    assert!(
        output.status.success(),
        "gcc {flags:?}: {}",
        stderr_of(&output)
    );
    program
}

/// A directory removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A fresh directory under the temporary directory, named after
    /// `name` and the calling file (tests of several files share one
    /// process in tests/programs).
    #[track_caller]
    pub fn new(name: &str) -> Scratch {
        let file = std::panic::Location::caller().file();
        let stem = Path::new(file).file_stem().unwrap_or_default();
        let dir = std::env::temp_dir().join(format!(
            "fntrace-{name}-{}-{}",
            stem.to_string_lossy(),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Mounts a tmpfs of `size` at `at`; unmounted when dropped.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    pub fn mount(at: &Path, size: &str) -> Tmpfs {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root,
            "this test mounts a small tmpfs to fill it: run it as root (CI does)"
        );
        std::fs::create_dir_all(at).unwrap();
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .expect("cannot run mount");
        assert!(status.success(), "mount -t tmpfs at {}", at.display());
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `function`'s address in the ELF file `program` (its symbol's value) and
/// where its bytes are in the file.
pub fn symbol_in_file(program: &Path, function: &str) -> (u64, u64) {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let image = std::fs::read(program).unwrap();
    let elf = object::File::parse(&*image).unwrap();
    let address = elf
        .symbols()
        .find(|s| s.name() == Ok(function))
        .unwrap_or_else(|| panic!("no symbol {function} in {}", program.display()))
        .address();
    let offset = elf
        .segments()
        .find_map(|segment| {
            let (offset, _) = segment.file_range();
            let range = segment.address()..segment.address() + segment.size();
            range
                .contains(&address)
                .then(|| offset + (address - segment.address()))
        })
        .unwrap_or_else(|| panic!("{function} is in no segment of {}", program.display()));
    (address, offset)
}

/// `tests/rust/NAME.rs` built by `rustc -Zinstrument-mcount` (stable rustc,
/// `RUSTC_BOOTSTRAP=1`) at `-C opt-level=LEVEL` with frame pointers, plus
/// `extra`, into `dir/NAME-O{LEVEL}`.
pub fn build_rust(dir: &Path, name: &str, level: u8, extra: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let program = dir.join(format!("{name}-O{level}"));
    let output = Command::new("rustc")
        .arg("-Zinstrument-mcount")
        .arg(format!("-Copt-level={level}"))
        .arg("-Cforce-frame-pointers=yes")
        .args(extra)
        .arg(repo().join(format!("tests/rust/{name}.rs")))
        .arg("-o")
        .arg(&program)
        .env("RUSTC_BOOTSTRAP", "1")
        .output()
        .expect("cannot run rustc");
    assert!(
        output.status.success(),
        "rustc {name}.rs -Copt-level={level}: {}",
        stderr_of(&output)
    );
    program
}

/// Asserts two `uftrace replay` texts equal, naming the first line that
/// differs (`what` says which run).
pub fn assert_same_lines(ours: &str, theirs: &str, what: &str) {
    for (n, (a, b)) in ours.lines().zip(theirs.lines()).enumerate() {
        assert_eq!(a, b, "{what}: line {} of uftrace replay", n + 1);
    }
    assert_eq!(ours, theirs, "{what}");
}

/// `fntrace replay` of `dir` as `uftrace replay -f none` shows it: the
/// TID and DURATION columns and the header gone, `}  /*` made `} /*`.
pub fn fntrace_replay_lines(dir: &Path) -> String {
    let output = Command::new(cli())
        .args(["replay", "--no-pager"])
        .arg(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let column = text.find("FUNCTION").unwrap() - text.find("    TID").unwrap();
    text.lines()
        .skip(2)
        .map(|line| format!("{}\n", line[column..].replace("}  /* ", "} /* ")))
        .collect()
}
