//! `fntrace record`'s selection globs (`-F`, `-N`, `-P`) checked against
//! the program's functions before it runs: a glob that matches none of
//! them would record nothing of what was asked (a typo recorded 0 events
//! without a word), so it is refused, naming the closest names, as the
//! readers refuse a glob that matches no function of a trace.
//!
//! The names are those the program can be known to have before it runs:
//! the functions its executable defines, the library functions it imports
//! (the library calls `-F` and `-N` select, unless `--no-libcall`), and
//! the functions of the shared libraries it links that are found where its
//! `RUNPATH`/`RPATH` or `LD_LIBRARY_PATH` say (a project's own libraries;
//! the system's are not instrumented, and their calls from the program are
//! its imports). A library opened later (`dlopen`) is not known: `--force`
//! runs the program anyway.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use fntrace_tools::{demangle, glob};
use object::{Object, ObjectSymbol, ReadCache, ReadRef, SymbolKind};

/// The globs asked for, with the option each came from.
pub struct Globs<'a> {
    /// `-F` globs.
    pub filter: &'a [String],
    /// `-N` globs.
    pub notrace: &'a [String],
    /// `-P` globs.
    pub patch: &'a [String],
    /// The globs of `-A` and `-R` specs (library calls have values too).
    pub args: &'a [String],
    /// Whether library calls are recorded (their names are selectable).
    pub libcall: bool,
}

/// Fails, one line per glob, when a glob matches no function of the
/// program at `path` (a file that is not ELF, a script, is not judged).
pub fn check(path: &Path, globs: &Globs<'_>) -> Result<(), String> {
    if globs.filter.is_empty()
        && globs.notrace.is_empty()
        && globs.patch.is_empty()
        && globs.args.is_empty()
    {
        return Ok(());
    }
    let Some(names) = Names::of(path)? else {
        return Ok(());
    };
    let selectable: Vec<&str> = names
        .defined
        .iter()
        .chain(if globs.libcall {
            &names.imported
        } else {
            &names.none
        })
        .map(String::as_str)
        .collect();
    let patchable: Vec<&str> = names.defined.iter().map(String::as_str).collect();
    let mut errors = Vec::new();
    let asked = (globs.filter.iter().map(|g| ("-F", g, &selectable)))
        .chain(globs.notrace.iter().map(|g| ("-N", g, &selectable)))
        .chain(globs.patch.iter().map(|g| ("-P", g, &patchable)))
        .chain(globs.args.iter().map(|g| ("-A/-R", g, &selectable)));
    for (option, glob, names) in asked {
        if names.iter().any(|name| glob::matches(glob, name)) {
            continue;
        }
        let closest = glob::closest(glob, names.iter().copied(), 3);
        let closest = if closest.is_empty() {
            String::new()
        } else {
            format!(" (closest: {})", closest.join(", "))
        };
        errors.push(format!(
            "{option} {glob}: no function of {} matches it{closest}",
            path.display()
        ));
    }
    if errors.is_empty() {
        return Ok(());
    }
    errors.push(
        "nothing was run: a function of a library the program opens later (dlopen) is not \
         known before it runs; --force records anyway"
            .to_string(),
    );
    Err(errors.join("\nfntrace record: "))
}

/// The demangled names of a program's functions.
struct Names {
    /// Defined in the executable or a library it links that was found.
    defined: BTreeSet<String>,
    /// Imported by the executable (its library calls).
    imported: BTreeSet<String>,
    /// Empty: what library calls add when they are not recorded.
    none: BTreeSet<String>,
}

impl Names {
    /// The names in the executable `path` and its libraries, or `None`
    /// if it is not ELF.
    fn of(path: &Path) -> Result<Option<Names>, String> {
        let mut names = Names {
            defined: BTreeSet::new(),
            imported: BTreeSet::new(),
            none: BTreeSet::new(),
        };
        // Read as the parser asks (headers, symbol and string tables), not
        // whole: text and debug information are most of a big executable.
        let opened = std::fs::File::open(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let cache = ReadCache::new(opened);
        let Ok(file) = object::File::parse(&cache) else {
            return Ok(None);
        };
        names.add(&file, true);
        let origin = path.parent().unwrap_or(Path::new("/"));
        for library in linked_libraries(&file, origin) {
            let Ok(opened) = std::fs::File::open(&library) else {
                continue;
            };
            let cache = ReadCache::new(opened);
            if let Ok(file) = object::File::parse(&cache) {
                names.add(&file, false);
            }
        }
        Ok(Some(names))
    }

    /// Adds the functions `file` defines (and, for the executable, those
    /// it imports).
    fn add<'data, R: ReadRef<'data>>(&mut self, file: &object::File<'data, R>, executable: bool) {
        for symbol in file.symbols().chain(file.dynamic_symbols()) {
            let Ok(name) = symbol.name() else {
                continue;
            };
            if name.is_empty() || symbol.kind() != SymbolKind::Text {
                continue;
            }
            if symbol.is_definition() {
                self.defined.insert(demangle(name));
            } else if executable && symbol.is_undefined() {
                self.imported.insert(demangle(name));
            }
        }
    }
}

/// The files of `file`'s `DT_NEEDED` libraries found in its `RUNPATH` or
/// `RPATH` (`$ORIGIN` being `origin`) or in `LD_LIBRARY_PATH`.
fn linked_libraries<'data, R: ReadRef<'data>>(
    file: &object::File<'data, R>,
    origin: &Path,
) -> Vec<PathBuf> {
    let object::File::Elf64(elf) = file else {
        return Vec::new();
    };
    let (mut needed, mut search) = (Vec::new(), Vec::new());
    let endian = elf.endian();
    let data = elf.data();
    let Ok(Some((entries, link))) = elf.elf_section_table().dynamic(endian, data) else {
        return Vec::new();
    };
    let Ok(strings) = elf.elf_section_table().strings(endian, data, link) else {
        return Vec::new();
    };
    use object::read::elf::Dyn as _;
    for entry in entries {
        let tag = entry.tag32(endian);
        if !matches!(
            tag,
            Some(object::elf::DT_NEEDED | object::elf::DT_RUNPATH | object::elf::DT_RPATH)
        ) {
            continue;
        }
        let Ok(text) = strings.get(entry.d_val(endian) as u32) else {
            continue;
        };
        let text = String::from_utf8_lossy(text).into_owned();
        if tag == Some(object::elf::DT_NEEDED) {
            needed.push(text);
        } else {
            search.extend(
                text.split(':')
                    .map(|dir| dir.replace("$ORIGIN", &origin.to_string_lossy()))
                    .map(PathBuf::from),
            );
        }
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        search.extend(std::env::split_paths(&paths));
    }
    needed
        .iter()
        .filter_map(|name| {
            if name.contains('/') {
                return Some(PathBuf::from(name));
            }
            search
                .iter()
                .map(|dir| dir.join(OsStr::new(name)))
                .find(|candidate| candidate.is_file())
        })
        .collect()
}
