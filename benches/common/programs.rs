//! The real programs the benchmarks run, built once and cached under
//! `target/real-programs/`: the Lua 5.4 interpreter from the sources of the
//! crates.io package `lua-src` (built `gcc -O2` with the flags asked), and
//! ripgrep from crates.io (every crate `-Zinstrument-mcount`, or plain),
//! with a corpus of real text for it.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::run_ok;

/// ripgrep's version and what it searches for (2.4M matching lines of
/// the corpus, ≈ 73M calls).
pub const RIPGREP_VERSION: &str = "15.1.0";
pub const RIPGREP_REGEX: &str = r"\w+\(";
/// Size of the corpus ripgrep searches.
pub const CORPUS_BYTES: u64 = 500 << 20;

/// A program to measure: how to run it untraced and traced.
pub struct Program {
    pub name: String,
    /// The build without instrumentation, and its arguments.
    pub plain: Vec<String>,
    /// The instrumented build, and its arguments.
    pub traced: Vec<String>,
    /// The instrumented binary (its symbols tell its own functions from
    /// library calls).
    pub binary: PathBuf,
    /// Runs under `setarch -R`.
    pub no_aslr: bool,
}

/// The Lua interpreter built with `gcc -O2 FLAGS` (and without them for
/// the untraced run) in `dir`, running `work.lua` at `scale`.
pub fn lua(dir: &Path, name: &str, flags: &[&str], scale: &str) -> Program {
    let source = lua_source_dir();
    let build = |output: &str, flags: &[&str]| -> PathBuf {
        let binary = dir.join(output);
        let mut gcc = Command::new("gcc");
        gcc.arg("-O2")
            .args(flags)
            // A fixed string-hash seed; and an API string cache of one
            // slot: Lua's (53 x 2) is indexed by the C string's address,
            // and strings formatted in a stack buffer sit where the
            // environment's size puts the stack, so a tracer's environment
            // (LD_PRELOAD, its variables) changed which strings hit
            // (`uftrace record` with 3,000 more bytes of environment: one
            // `internshrstr` more).
            .args(["-DLUA_USE_LINUX", "-Dluai_makeseed(L)=0u"])
            .args(["-DSTRCACHE_N=1", "-DSTRCACHE_M=1", "-I"])
            .arg(&source)
            .arg(manifest_dir().join("benches/lua/main.c"));
        let mut sources: Vec<PathBuf> = std::fs::read_dir(&source)
            .unwrap_or_else(|e| panic!("{}: {e}", source.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|path| {
                let file = path.file_name().unwrap_or_default().to_string_lossy();
                // lua.c and luac.c hold main() (lua-src ships neither today).
                file.ends_with(".c") && file != "lua.c" && file != "luac.c"
            })
            .collect();
        sources.sort();
        gcc.args(&sources)
            .arg("-o")
            .arg(&binary)
            .args(["-lm", "-ldl"]);
        run_ok(&mut gcc);
        binary
    };
    let plain = build(&format!("{}-plain", name.replace(' ', "_")), &[]);
    let traced = build(&name.replace(' ', "_"), flags);
    let script = manifest_dir().join("benches/lua/work.lua");
    let args = |binary: &Path| {
        vec![
            binary.display().to_string(),
            script.display().to_string(),
            scale.to_string(),
        ]
    };
    Program {
        name: format!("{name} (Lua 5.4, work.lua {scale})"),
        plain: args(&plain),
        traced: args(&traced),
        binary: traced,
        no_aslr: true,
    }
}

/// Lua 5.4's sources in the `lua-src` package cargo downloaded (a
/// dev-dependency), found through `cargo metadata`.
pub fn lua_source_dir() -> PathBuf {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(manifest_dir().join("Cargo.toml"))
        .output()
        .expect("running cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata's JSON");
    let manifest = metadata["packages"]
        .as_array()
        .expect("cargo metadata lists packages")
        .iter()
        .find(|package| package["name"] == "lua-src")
        .and_then(|package| package["manifest_path"].as_str())
        .expect("lua-src is a dev-dependency: cargo metadata lists it");
    let package = Path::new(manifest).parent().expect("lua-src's directory");
    let mut versions: Vec<PathBuf> = std::fs::read_dir(package)
        .unwrap_or_else(|e| panic!("{}: {e}", package.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("lua-5.4"))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .unwrap_or_else(|| panic!("no lua-5.4* directory in {}", package.display()))
}

/// ripgrep, plain and with every crate instrumented, searching the corpus.
pub fn ripgrep() -> Program {
    let cache = cache_dir();
    let plain = install_ripgrep(&cache, "ripgrep-plain", "");
    let traced = install_ripgrep(
        &cache,
        "ripgrep-mcount",
        "-Zinstrument-mcount -Cforce-frame-pointers=yes",
    );
    let corpus = corpus(&cache);
    let args = |binary: &Path| {
        vec![
            binary.display().to_string(),
            "--no-config".to_string(),
            "-j1".to_string(),
            RIPGREP_REGEX.to_string(),
            corpus.display().to_string(),
        ]
    };
    Program {
        name: format!(
            "ripgrep {RIPGREP_VERSION} -Zinstrument-mcount (-j1 '{RIPGREP_REGEX}', {} MB)",
            CORPUS_BYTES >> 20
        ),
        plain: args(&plain),
        traced: args(&traced),
        binary: traced,
        no_aslr: false,
    }
}

/// `target/real-programs/`: the builds and the corpus kept between runs.
pub fn cache_dir() -> PathBuf {
    let target = super::profile_dir()
        .parent()
        .expect("target/")
        .to_path_buf();
    let dir = target.join("real-programs");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// `cargo install ripgrep` with `rustflags` into `cache/name` (its own
/// target directory beside it), unless already there; the `rg` binary.
pub fn install_ripgrep(cache: &Path, name: &str, rustflags: &str) -> PathBuf {
    let root = cache.join(name);
    let rg = root.join("bin/rg");
    if rg.is_file() {
        return rg;
    }
    println!(
        "building {name} (cargo install ripgrep {RIPGREP_VERSION}; once, cached in {cache:?})"
    );
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args([
            "install",
            "ripgrep",
            "--locked",
            "--version",
            RIPGREP_VERSION,
        ])
        // With --target, RUSTFLAGS reach the program's crates only, not
        // build scripts or proc-macros.
        .args(["--target", "x86_64-unknown-linux-gnu", "--root"])
        .arg(&root)
        .env("CARGO_TARGET_DIR", cache.join(format!("{name}-build")))
        .env("RUSTFLAGS", rustflags);
    if !rustflags.is_empty() {
        cargo.env("RUSTC_BOOTSTRAP", "1");
    }
    run_ok(&mut cargo);
    assert!(rg.is_file(), "cargo install left no {}", rg.display());
    rg
}

/// One file of real text, `CORPUS_BYTES` long: the `.rs` files of the
/// cargo registry's sources in path order, repeated as needed. Built once.
pub fn corpus(cache: &Path) -> PathBuf {
    let path = cache.join(format!("corpus-{}MB.txt", CORPUS_BYTES >> 20));
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == CORPUS_BYTES) {
        return path;
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let mut files = Vec::new();
    let mut pending = vec![home.join("registry/src")];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(path),
                Ok(kind) if kind.is_file() && path.extension().is_some_and(|e| e == "rs") => {
                    files.push(path)
                }
                _ => {}
            }
        }
    }
    files.sort();
    assert!(
        !files.is_empty(),
        "no .rs files under {}",
        home.join("registry/src").display()
    );
    let mut text = Vec::with_capacity(CORPUS_BYTES as usize);
    'fill: loop {
        for file in &files {
            let Ok(bytes) = std::fs::read(file) else {
                continue;
            };
            let room = CORPUS_BYTES as usize - text.len();
            text.extend_from_slice(&bytes[..bytes.len().min(room)]);
            if text.len() == CORPUS_BYTES as usize {
                break 'fill;
            }
        }
    }
    let partial = path.with_extension("partial");
    std::fs::write(&partial, &text).unwrap_or_else(|e| panic!("{}: {e}", partial.display()));
    std::fs::rename(&partial, &path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    println!(
        "built the corpus {} from {} .rs files of the cargo registry",
        path.display(),
        files.len()
    );
    path
}

pub fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}
