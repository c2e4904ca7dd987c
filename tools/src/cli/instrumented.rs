//! Whether a program `fntrace record` is asked to run can be traced at all:
//! its executable must hold instrumented call sites, as uftrace refuses a
//! program without its `mcount` symbol. Checked before the program runs,
//! so a run that could record nothing is not made (`--force` runs it
//! anyway: a plugin it loads may be instrumented).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use fntrace_tools::elf::instrumentation_in;

/// What the check found.
#[derive(Debug, PartialEq, Eq)]
pub enum Instrumentation {
    /// Call sites of this kind (a symbol or section name).
    Found(String),
    /// An ELF file with none.
    None(PathBuf),
    /// Not an ELF file (a script, say): what it runs cannot be known here.
    Unknown,
}

/// Looks for instrumentation in the executable `program` names (found on
/// `PATH` when it has no `/`, as the shell would).
pub fn instrumentation_of(program: &OsStr) -> Result<Instrumentation, String> {
    let path = resolve(program).ok_or_else(|| {
        format!(
            "cannot run {}: no such file (nor on PATH)",
            Path::new(program).display()
        )
    })?;
    // Read as the parser asks (headers, symbol and string tables), not
    // whole: a large executable's text and debug information would cost
    // tens of milliseconds before the program even starts.
    let opened =
        std::fs::File::open(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let cache = object::ReadCache::new(opened);
    let Ok(file) = object::File::parse(&cache) else {
        return Ok(Instrumentation::Unknown);
    };
    if let Some(found) = instrumentation_in(&file) {
        return Ok(Instrumentation::Found(found.to_string()));
    }
    Ok(Instrumentation::None(path))
}

/// Whether the executable at `path` links fntrace's runtime itself (the
/// crate, or `libfntrace.a`): its global `fntrace_mcount_entry` in the
/// symbol table. The runtime cannot hook such a program's library calls
/// (they and its own share one GOT). A stripped executable reads as not.
pub(super) fn links_the_runtime(path: &Path) -> bool {
    use object::{Object, ObjectSymbol};
    let Ok(opened) = std::fs::File::open(path) else {
        return false;
    };
    let cache = object::ReadCache::new(opened);
    let Ok(file) = object::File::parse(&cache) else {
        return false;
    };
    file.symbols()
        .any(|symbol| symbol.is_global() && symbol.name() == Ok("fntrace_mcount_entry"))
}

/// The error `fntrace record` gives for a program without instrumentation.
pub fn refusal(path: &Path) -> String {
    format!(
        "{} has no instrumented functions (no mcount or __fentry__ call sites, no patchable \
         entries): nothing could be recorded. Rebuild it with `gcc -pg` (or `-pg -mfentry`, or \
         `-fpatchable-function-entry=5`), `rustc -Zinstrument-mcount` (`fntrace cargo build`), \
         or run it anyway with --force if a library it loads is instrumented",
        path.display()
    )
}

/// Names of a wrapped command tried at most by [`program_or_wrapped`].
const WRAPPED_CANDIDATES: usize = 64;

/// Bytes of a script read for the programs it names.
const SCRIPT_READ: u64 = 64 << 10;

/// Whether `path` is a script (it starts with `#!`): no ELF to read.
pub(super) fn is_script(path: &Path) -> bool {
    use std::io::Read;
    let mut start = [0u8; 2];
    std::fs::File::open(path).is_ok_and(|mut file| file.read_exact(&mut start).is_ok())
        && start == *b"#!"
}

/// The executable to read for `program` run with `args`: the program
/// itself if `accepts` it; else the first of the programs its arguments
/// name that `accepts` takes, each argument and each of its words tried
/// in order, then (a script) the words of its text (at most
/// [`WRAPPED_CANDIDATES`] names), so that `timeout 60 ./server`, `sh -c
/// './server --port 8080'` and a script that runs `./server` give
/// `./server` (whose process the runtime reaches through the wrapper's
/// `exec`). `None` when `program` is not found or nothing is accepted.
pub(super) fn program_or_wrapped(
    program: &OsStr,
    args: &[std::ffi::OsString],
    mut accepts: impl FnMut(&Path) -> bool,
) -> Option<PathBuf> {
    let path = resolve(program)?;
    if accepts(&path) {
        return Some(path);
    }
    let script = match is_script(&path) {
        true => {
            use std::io::Read;
            let mut text = String::new();
            let file = std::fs::File::open(&path).ok()?;
            let _ = file.take(SCRIPT_READ).read_to_string(&mut text);
            text
        }
        false => String::new(),
    };
    let quotes: &[char] = &['"', '\'', ';', '(', ')', '`'];
    let script_words = (script.lines())
        .filter(|line| !line.starts_with('#'))
        .flat_map(|line| line.split_whitespace())
        .map(|word| word.trim_matches(quotes).to_string());
    let names = (args.iter())
        .flat_map(|arg| {
            let text = arg.to_string_lossy().into_owned();
            let words: Vec<String> = text.split_whitespace().map(String::from).collect();
            let several = words.len() > 1;
            std::iter::once(text).chain(words.into_iter().filter(move |_| several))
        })
        .chain(script_words)
        .take(WRAPPED_CANDIDATES);
    for name in names {
        match resolve(OsStr::new(name.trim())) {
            Some(candidate) if accepts(&candidate) => return Some(candidate),
            _ => {}
        }
    }
    None
}

/// The file `program` names: itself when it holds a `/`, else the first
/// executable regular file of that name on `PATH`.
pub(super) fn resolve(program: &OsStr) -> Option<PathBuf> {
    let path = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return path.is_file().then(|| path.to_path_buf());
    }
    let search = std::env::var_os("PATH")?;
    std::env::split_paths(&search)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable_file(candidate))
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_system_program_has_no_instrumentation() {
        // /bin/true is built without -pg on every distribution.
        let found = instrumentation_of(OsStr::new("true")).unwrap();
        let Instrumentation::None(path) = found else {
            panic!("{found:?}");
        };
        assert!(path.ends_with("true"), "{}", path.display());
        assert!(refusal(&path).contains("--force"));
    }

    #[test]
    fn a_script_cannot_be_judged() {
        let dir = std::env::temp_dir().join(format!("fntrace-instrumented-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("run.sh");
        std::fs::write(&script, "#!/bin/sh\nexec true\n").unwrap();
        let found = instrumentation_of(script.as_os_str());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found, Ok(Instrumentation::Unknown));
    }

    /// Both places `mcount` is found: a dynamic `-pg` executable's imports
    /// (its dynamic symbols, read first) and, in a static one, the full
    /// symbol table (read last).
    #[test]
    fn mcount_is_found_in_dynamic_and_static_executables() {
        let dir = std::env::temp_dir().join(format!("fntrace-mcount-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("f.c");
        std::fs::write(
            &source,
            "int f(int x) { return x + 1; }\nint main(void) { return f(-1); }\n",
        )
        .unwrap();
        let found = |flags: &[&str], name: &str| {
            let binary = dir.join(name);
            let status = std::process::Command::new("gcc")
                .arg("-pg")
                .args(flags)
                .arg(&source)
                .arg("-o")
                .arg(&binary)
                .status()
                .expect("running gcc");
            assert!(status.success(), "gcc -pg {flags:?}");
            instrumentation_of(binary.as_os_str()).unwrap()
        };
        let dynamic = found(&[], "dynamic");
        let fully_static = found(&["-static"], "static");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(dynamic, Instrumentation::Found("mcount".into()));
        let Instrumentation::Found(name) = fully_static else {
            panic!("{fully_static:?}");
        };
        assert!(
            fntrace_tools::elf::SITE_SYMBOLS.contains(&name.as_str()),
            "{name}"
        );
    }

    #[test]
    fn a_missing_program_is_named() {
        let err = instrumentation_of(OsStr::new("fntrace-no-such-program")).unwrap_err();
        assert!(err.contains("fntrace-no-such-program"), "{err}");
    }
}
