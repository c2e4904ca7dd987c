//! The runtime's modules depend on each other one way: every `crate::…`
//! path in a module's code names a module listed before it in `LAYERS`
//! (or the module itself), never an item re-exported at the crate root,
//! which would hide the direction. The crate root (`lib.rs`) is the public
//! API on top and may use everything. Doc comments and comments are not
//! code and are not checked. And no library source file (runtime or tools)
//! is over 800 lines.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Bottom first. Each module may use only those before it (and itself).
const LAYERS: &[&str] = &[
    "error", "filter", "arch", "sys", "symbols", "sites", "patch", "tracer", "rt", "tracers",
    "control", "record", "flight", "socket", "capi",
];

/// Root items that are macros exported by a module (`#[macro_export]`
/// puts them at the root), with the module that defines them.
const ROOT_MACROS: &[(&str, &str)] = &[("register_tracer", "tracer")];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The first path segment after each `crate::` in `code` (for a group,
/// `crate::{a, b::c}`, each member's first segment).
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c == '$' || c.is_alphanumeric() || c == '_') {
            continue; // `$crate::` (macro hygiene) or another identifier
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for member in group[..end].split(',') {
                let name: String = member
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push(name);
                }
            }
        } else {
            found.push(
                rest.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect(),
            );
        }
    }
    found
}

/// `code` without comments (line comments and doc comments; fntrace's
/// sources use no block comments), leaving string contents alone.
fn strip_comments(source: &str) -> String {
    let mut out = String::new();
    for line in source.lines() {
        let mut in_string = false;
        let mut previous = ' ';
        let mut cut = line.len();
        for (i, c) in line.char_indices() {
            if c == '"' && previous != '\\' {
                in_string = !in_string;
            }
            if !in_string && c == '/' && previous == '/' {
                cut = i - 1;
                break;
            }
            previous = c;
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|&m| m == module)
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut modules_seen = BTreeSet::new();
    let mut violations = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_str().unwrap().trim_end_matches(".rs");
        if module == "lib" || module == "bin" {
            continue; // the public API on top; binaries are crate users
        }
        modules_seen.insert(module.to_string());
        let Some(own) = rank(module) else {
            violations.push(format!(
                "{}: module {module} is in no layer",
                relative.display()
            ));
            continue;
        };
        let code = strip_comments(&std::fs::read_to_string(file).unwrap());
        for used in crate_paths(&code) {
            let used_module = ROOT_MACROS
                .iter()
                .find(|(name, _)| *name == used)
                .map_or(used.as_str(), |(_, defined_in)| defined_in);
            match rank(used_module) {
                Some(r) if r <= own => {}
                Some(_) => violations.push(format!(
                    "{}: {module} uses crate::{used}, a layer above it",
                    relative.display()
                )),
                None => violations.push(format!(
                    "{}: {module} uses crate::{used} (through the crate root, or a module in no layer)",
                    relative.display()
                )),
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    // Every layer exists (a renamed module must be renamed here too).
    for layer in LAYERS {
        assert!(modules_seen.contains(*layer), "no module {layer} in src/");
    }
}

/// Library source files stay readable: none over this many lines.
const MAX_LINES: usize = 800;

#[test]
fn no_library_source_file_is_over_800_lines() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&top.join("src"), &mut files);
    rust_files(&top.join("tools/src"), &mut files);
    assert!(files.len() > 40, "found only {} files", files.len());
    let long: Vec<String> = files
        .iter()
        .map(|file| (file, std::fs::read_to_string(file).unwrap().lines().count()))
        .filter(|&(_, lines)| lines > MAX_LINES)
        .map(|(file, lines)| format!("{}: {lines} lines", file.display()))
        .collect();
    assert!(long.is_empty(), "{}", long.join("\n"));
}

#[test]
fn the_checker_sees_what_it_must() {
    let code = strip_comments(
        "use crate::{error::Error, GRAPH_TRACER};\n\
         let x = crate::rt::ops::operation(); // crate::control::lock()\n\
         $crate::register(); /// [`crate::tracers`]\n\
         let s = \"// not a comment\"; crate::sys::clock::now_ticks();\n",
    );
    assert_eq!(crate_paths(&code), ["error", "GRAPH_TRACER", "rt", "sys"]);
}

/// A service that links the runtime compiles no CLI: `cargo tree` of the
/// runtime's normal dependencies names none of the command's crates.
#[test]
fn the_runtime_pulls_in_no_cli_crate() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = std::process::Command::new(cargo)
        .args(["tree", "-p", "fntrace", "-e", "normal", "--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo tree");
    assert!(output.status.success(), "{output:?}");
    let tree = String::from_utf8_lossy(&output.stdout);
    let crates: BTreeSet<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(crates.contains("fntrace-tools"), "{tree}");
    for cli in [
        "clap",
        "clap_complete",
        "indicatif",
        "inferno",
        "quick-xml",
        "flate2",
        "serde_json",
    ] {
        assert!(!crates.contains(cli), "the runtime pulls in {cli}:\n{tree}");
    }
}
