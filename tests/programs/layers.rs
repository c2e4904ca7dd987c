//! The modules of each crate depend on each other one way.
//!
//! Runtime (`src/`): every path a module's code writes from the crate root
//! (`crate::…`, `$crate::…`, and `super::…`/`self::…` once resolved against
//! the file's module) names a module listed at or before the module's own
//! in `LAYERS`, never an item re-exported at the crate root, which would
//! hide the direction. The crate root (`lib.rs`) is the public API on top
//! and may use everything. `use` trees are parsed whole, nested groups
//! included; comments and string and character literals are not code and
//! are not checked.
//!
//! Inside one top-level module, submodules import each other without a
//! cycle, except the cycles `KNOWN_CYCLES` lists (each with why it stands),
//! so that a new one fails. A module's own use of its descendants (how a
//! parent declares and re-exports its children) is not an edge.
//!
//! Format (`format/src`, what the runtime and the CLI share): its modules
//! follow `FORMAT_LAYERS` the same way. Tools (`tools/src`): the library's
//! modules follow `TOOLS_LAYERS`, the library never names the CLI (`cli/`,
//! a module of the binary only), and the CLI reaches the library only as
//! `fntrace_tools`.
//!
//! The runtime's build pulls in only the crates `RUNTIME_CRATES` lists
//! (none of the CLI's), fewer than before the format crate was split out.
//!
//! And no library source file (runtime, format, tools or inject) is over
//! 800 lines.
//! And `asm/x86_64/layout.h`, the offsets the trampolines use, says what
//! the Rust structures' compile-time layout assertions say.
//!
//! What is not seen: a path written without a leading `crate`/`super`/
//! `self` (an item or child module already in scope, e.g. through `use
//! super::*`): the `use` that brought the name into scope is what is checked;
//! and files pulled in by `#[path]` or `include!`. Test code (`mod tests`)
//! counts like any other: its edges are edges too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom first. Each module may use only those before it (and itself).
const LAYERS: &[&str] = &[
    "error", "filter", "arch", "sys", "symbols", "sites", "patch", "tracer", "rt", "builtin",
    "control", "record", "flight", "vars", "session", "capi", "socket", "preload",
];

/// Root items that are macros exported by a module (`#[macro_export]`
/// puts them at the root), with the module that defines them.
const ROOT_MACROS: &[(&str, &str)] = &[("register_tracer", "tracer")];

/// Root re-exports that an exported macro must name as `$crate::…` (it
/// expands in other crates, which see only the public API), with the module
/// that defines them. Only through `$crate::` are these allowed.
const MACRO_ROOT_ITEMS: &[(&str, &str)] = &[("Tracer", "tracer"), ("register", "tracer")];

/// Module-level import cycles among the submodules of one top-level module
/// that stand today. A cycle found is accepted if all its modules are in one
/// entry (a cycle that shrank is progress); any other fails.
const KNOWN_CYCLES: &[(&[&str], &str)] = &[(
    &["rt::thread", "rt::shadow", "rt::contexts", "rt::ring"],
    "The thread block embeds the shadow stack (thread -> shadow), the shadow \
         stack finds its thread block and saves errno with thread's \
         PreservedErrno (shadow -> thread), and checks the stack with \
         contexts::same_stack (shadow -> contexts), while contexts saves errno \
         too (contexts -> thread). All three are one per-thread structure read \
         from the trampolines without locks; it would break by moving \
         PreservedErrno down to sys and ShadowStack's type into a module that \
         does not name the thread block. The rings joined it with the \
         thread-exit hook: a ring records its owner's thread block and \
         preserves errno (ring -> thread), and a thread marks its rings \
         exited when it ends (thread -> ring); it would break by giving \
         the exit hook a callback the rings register.",
)];

/// The same for the tools library.
const TOOLS_KNOWN_CYCLES: &[(&[&str], &str)] = &[(
    &["export::chrome", "export::spool"],
    "The Chrome writer streams through the spool (chrome -> spool) and the \
     spool writes its calls as Chrome JSON with chrome's byte writers \
     (spool -> chrome). Breaks by moving chrome_call_bytes, \
     chrome_frame_bytes and json_string into a leaf module both use.",
)];

/// The same for the format crate.
const FORMAT_KNOWN_CYCLES: &[(&[&str], &str)] = &[(
    &["export::uftrace::stream", "export::uftrace::stream_thread"],
    "The streaming writer drives one StreamThread per thread (stream -> \
     stream_thread), which adds to the StreamTotals that stream defines \
     (stream_thread -> stream). Breaks by moving StreamTotals into \
     stream_thread or format.",
)];

/// The format crate's modules, bottom first.
const FORMAT_LAYERS: &[&str] = &[
    "elf",
    "protobuf",
    "maps",
    "wire",
    "units",
    "argspec",
    "coroutine",
    "glob",
    "names",
    "trace",
    "source",
    "analysis",
    "export",
];

/// The tools library's modules, bottom first (the CLI is not among them:
/// it is a module of the binary; what it shares with the runtime is the
/// format crate, named `fntrace_format::…`).
const TOOLS_LAYERS: &[&str] = &["analysis", "export"];

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

/// `source` without comments (line, doc and nested block comments) and
/// with every string, raw string, byte string and character literal
/// emptied (`""`, `' '`), so that neither a comment nor a literal can hold
/// a path. Line breaks are kept. Lifetimes (`'a`) are left as they are.
fn strip_comments(source: &str) -> String {
    let s: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if s[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
            out.push(' ');
        } else if (c == 'r' || c == 'b') && (i == 0 || !ident(s[i - 1])) && {
            // A raw string: r"…", r#"…"#, br"…", br#"…"#.
            let mut j = i + 1;
            if c == 'b' && s.get(j) == Some(&'r') {
                j += 1;
            }
            (c == 'r' || j == i + 2) && {
                while s.get(j) == Some(&'#') {
                    j += 1;
                }
                s.get(j) == Some(&'"')
            }
        } {
            let mut j = i + 1;
            if s[j] == 'r' {
                j += 1;
            }
            let hashes = s[j..].iter().take_while(|&&h| h == '#').count();
            j += hashes + 1;
            // The closing quote followed by as many hashes.
            while j < s.len()
                && !(s[j] == '"'
                    && s[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes)
            {
                if s[j] == '\n' {
                    out.push('\n');
                }
                j += 1;
            }
            i = j + 1 + hashes;
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < s.len() && s[i] != '"' {
                if s[i] == '\\' {
                    i += 1;
                }
                if s.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal: '\n', '\'', '\u{1F600}'.
            i += 3;
            while i < s.len() && s[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c == '\'' && s.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `code`'s tokens: identifiers (`$crate` is one), `::`, and every other
/// non-blank character alone.
fn tokens(code: &str) -> Vec<String> {
    let s: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < s.len() {
        let c = s[i];
        if c.is_whitespace() {
            i += 1;
        } else if ident(c) || (c == '$' && s.get(i + 1).is_some_and(|&n| ident(n))) {
            let start = i;
            i += 1;
            while i < s.len() && ident(s[i]) {
                i += 1;
            }
            out.push(s[start..i].iter().collect());
        } else if c == ':' && s.get(i + 1) == Some(&':') {
            out.push("::".to_string());
            i += 2;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

/// The module a source file is, as path segments from the crate root:
/// `a/b.rs` and `a/b/mod.rs` are `a::b`, `lib.rs` and `main.rs` the root.
fn module_of(relative: &Path) -> Vec<String> {
    let mut segments: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_str().unwrap().to_string())
        .collect();
    if segments.last().is_some_and(|l| l == "mod") {
        segments.pop();
    }
    if segments.len() == 1 && (segments[0] == "lib" || segments[0] == "main") {
        segments.clear();
    }
    segments
}

/// One path written from the crate root, resolved.
#[derive(Debug, PartialEq)]
struct Used {
    /// Segments from the crate root (the last may be an item).
    path: Vec<String>,
    /// Written as `$crate::…` (in a macro).
    dollar: bool,
}

fn is_ident(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Parses a path or `use` tree at `t[*i..]` below `prefix` (a segment, a
/// `{…}` group, `*` or `self`), pushing each complete path to `out`.
fn parse_tree(t: &[String], i: &mut usize, prefix: Vec<String>, dollar: bool, out: &mut Vec<Used>) {
    let at = |k: usize| t.get(k).map_or("", String::as_str);
    match at(*i) {
        "{" => {
            *i += 1;
            while *i < t.len() && at(*i) != "}" {
                parse_tree(t, i, prefix.clone(), dollar, out);
                if at(*i) == "," {
                    *i += 1;
                } else if at(*i) != "}" {
                    *i += 1; // not a use tree after all: step on
                }
            }
            *i += 1;
        }
        "*" | "self" => {
            *i += 1;
            out.push(Used {
                path: prefix,
                dollar,
            });
        }
        segment if is_ident(segment) => {
            let mut path = prefix;
            path.push(segment.to_string());
            *i += 1;
            let continues =
                at(*i) == "::" && (is_ident(at(*i + 1)) || matches!(at(*i + 1), "{" | "*"));
            if continues {
                *i += 1;
                parse_tree(t, i, path, dollar, out);
            } else {
                out.push(Used { path, dollar });
            }
        }
        _ => out.push(Used {
            path: prefix,
            dollar,
        }),
    }
}

/// Every path in `code` (comments and literals stripped) that starts at
/// `crate::`, `$crate::`, `super::` or `self::`, resolved against `module`
/// (the file's module) and against the inline modules (`mod tests { … }`)
/// the path is written in. A `super::` above the crate root is an error.
fn crate_paths(code: &str, module: &[String]) -> Result<Vec<Used>, String> {
    let t = tokens(code);
    let at = |k: usize| t.get(k).map_or("", String::as_str);
    let mut out = Vec::new();
    // Inline modules open here, with the brace depth they opened at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < t.len() {
        let token = at(i);
        let starts_path = matches!(token, "crate" | "$crate" | "super" | "self")
            && at(i + 1) == "::"
            && (i == 0 || at(i - 1) != "::")
            // `pub(in crate::a)` is a visibility, not a use.
            && !(i >= 2 && at(i - 1) == "in" && at(i - 2) == "(");
        if starts_path {
            let mut here: Vec<String> = module.to_vec();
            here.extend(inline.iter().map(|(name, _)| name.clone()));
            let dollar = token == "$crate";
            let mut prefix = match token {
                "crate" | "$crate" => Vec::new(),
                _ => here,
            };
            i += 2;
            if token == "super" {
                prefix.pop().ok_or("super:: above the crate root")?;
            }
            // `super::super::…`, `self::super::…`.
            if matches!(token, "super" | "self") {
                while at(i) == "super" && at(i + 1) == "::" {
                    prefix.pop().ok_or("super::super:: above the crate root")?;
                    i += 2;
                }
            }
            parse_tree(&t, &mut i, prefix, dollar, &mut out);
            continue;
        }
        match token {
            "mod" if is_ident(at(i + 1)) && at(i + 2) == "{" => {
                inline.push((at(i + 1).to_string(), depth));
                depth += 1;
                i += 3;
                continue;
            }
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(out)
}

/// What one crate's checks found.
#[derive(Default)]
struct Findings {
    /// Paths against the layer order, one line each.
    violations: Vec<String>,
    /// Top-level modules seen.
    modules_seen: BTreeSet<String>,
    /// Module-level edges inside one top-level module, `a::b` → `a::c`.
    edges: BTreeMap<String, BTreeSet<String>>,
}

/// Checks the files under `src` (skipping those `skip` says) against
/// `layers`; also gathers the import edges among submodules.
fn check_crate(src: &Path, layers: &[&str], skip: impl Fn(&Path) -> bool) -> Findings {
    let rank = |m: &str| layers.iter().position(|&l| l == m);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .map(|f| module_of(f.strip_prefix(src).unwrap()))
        .collect();
    let mut found = Findings::default();
    for file in &files {
        let relative = file.strip_prefix(src).unwrap();
        let module = module_of(relative);
        if module.is_empty() || skip(relative) {
            continue; // the crate root is the API on top
        }
        let top = module[0].as_str();
        found.modules_seen.insert(top.to_string());
        let Some(own) = rank(top) else {
            found.violations.push(format!(
                "{}: module {top} is in no layer",
                relative.display()
            ));
            continue;
        };
        let code = strip_comments(&std::fs::read_to_string(file).unwrap());
        let used = match crate_paths(&code, &module) {
            Ok(used) => used,
            Err(e) => {
                found
                    .violations
                    .push(format!("{}: {e}", relative.display()));
                continue;
            }
        };
        for Used { path, dollar } in used {
            let written = format!("crate::{}", path.join("::"));
            let first = path.first().map_or("", String::as_str);
            let target = if rank(first).is_some() {
                Some(first)
            } else {
                ROOT_MACROS
                    .iter()
                    .chain(if dollar { MACRO_ROOT_ITEMS } else { &[] })
                    .find(|(name, _)| *name == first && path.len() == 1)
                    .map(|&(_, defined_in)| defined_in)
            };
            match target.and_then(&rank) {
                Some(r) if r <= own => {}
                Some(_) => found.violations.push(format!(
                    "{}: {top} uses {written}, a layer above it",
                    relative.display()
                )),
                None => found.violations.push(format!(
                    "{}: {top} uses {written} (through the crate root, or a module in no layer)",
                    relative.display()
                )),
            }
            // The module the path reaches: its longest prefix that is a file.
            let reached = (1..=path.len())
                .rev()
                .map(|n| &path[..n])
                .find(|p| modules.contains(*p));
            if let Some(reached) = reached {
                let descendant = reached.starts_with(&module);
                if reached[0] == top && !descendant {
                    found
                        .edges
                        .entry(module.join("::"))
                        .or_default()
                        .insert(reached.join("::"));
                }
            }
        }
    }
    found
}

/// The strongly connected sets of more than one module in `edges` (each a
/// module-level import cycle), found by mutual reachability.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for next in edges.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|m| (m, reach(m))).collect();
    let mut found: Vec<BTreeSet<String>> = Vec::new();
    for (m, from_m) in &reachable {
        if !from_m.contains(*m) || found.iter().any(|c| c.contains(*m)) {
            continue;
        }
        let set: BTreeSet<String> = from_m
            .iter()
            .filter(|n| reachable.get(n).is_some_and(|r| r.contains(*m)))
            .cloned()
            .collect();
        found.push(set);
    }
    found
}

/// The cycles in `edges` that no entry of `known` covers.
fn new_cycles(
    edges: &BTreeMap<String, BTreeSet<String>>,
    known: &[(&[&str], &str)],
) -> Vec<String> {
    cycles(edges)
        .into_iter()
        .filter(|c| {
            !known
                .iter()
                .any(|(k, _)| c.iter().all(|m| k.contains(&m.as_str())))
        })
        .map(|c| c.into_iter().collect::<Vec<_>>().join(" <-> "))
        .collect()
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // Binaries are crate users.
    let found = check_crate(&src, LAYERS, |f| f.starts_with("bin"));
    assert!(
        found.violations.is_empty(),
        "{}",
        found.violations.join("\n")
    );
    // Every layer exists (a renamed module must be renamed here too).
    for layer in LAYERS {
        assert!(
            found.modules_seen.contains(*layer),
            "no module {layer} in src/"
        );
    }
}

#[test]
fn no_new_import_cycle_inside_a_runtime_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = check_crate(&src, LAYERS, |f| f.starts_with("bin"));
    let new = new_cycles(&found.edges, KNOWN_CYCLES);
    assert!(
        new.is_empty(),
        "import cycles:\n{}\nedges: {:#?}",
        new.join("\n"),
        found.edges
    );
}

#[test]
fn the_tools_library_is_layered_and_never_uses_the_cli() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/src");
    // No library file declares or names the CLI module (a `mod cli` or
    // `#[path]` pulling it in would make `crate::cli` reachable).
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for file in files.iter().filter(|f| !f.starts_with(src.join("cli"))) {
        if file.ends_with("main.rs") {
            continue; // the binary: it holds the CLI
        }
        let t = tokens(&strip_comments(&std::fs::read_to_string(file).unwrap()));
        assert!(
            !t.windows(2)
                .any(|w| (w[0] == "mod" && w[1] == "cli") || (w[0] == "cli" && w[1] == "::")),
            "{} names the CLI module",
            file.display()
        );
    }
    let found = check_crate(&src, TOOLS_LAYERS, |f| f.starts_with("cli"));
    assert!(
        found.violations.is_empty(),
        "{}",
        found.violations.join("\n")
    );
    for layer in TOOLS_LAYERS {
        assert!(
            found.modules_seen.contains(*layer),
            "no module {layer} in tools/src/"
        );
    }
    let new = new_cycles(&found.edges, TOOLS_KNOWN_CYCLES);
    assert!(
        new.is_empty(),
        "import cycles:\n{}\nedges: {:#?}",
        new.join("\n"),
        found.edges
    );
    // The CLI (a module of the binary) reaches the library as an outside
    // user, `fntrace_tools::…`; `crate::` there can only name the CLI.
    let cli = check_crate(&src, &["cli"], |f| !f.starts_with("cli"));
    assert!(cli.violations.is_empty(), "{}", cli.violations.join("\n"));
    // Each command owns its arguments: no two CLI modules import each other,
    // however indirectly.
    let cli_cycles = new_cycles(&cli.edges, &[]);
    assert!(
        cli_cycles.is_empty(),
        "import cycles in the CLI:\n{}\nedges: {:#?}",
        cli_cycles.join("\n"),
        cli.edges
    );
    assert!(
        cli.modules_seen.contains("cli"),
        "no module cli in tools/src/"
    );
}

#[test]
fn the_format_crate_is_layered() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("format/src");
    let found = check_crate(&src, FORMAT_LAYERS, |_| false);
    assert!(
        found.violations.is_empty(),
        "{}",
        found.violations.join("\n")
    );
    for layer in FORMAT_LAYERS {
        assert!(
            found.modules_seen.contains(*layer),
            "no module {layer} in format/src/"
        );
    }
    let new = new_cycles(&found.edges, FORMAT_KNOWN_CYCLES);
    assert!(
        new.is_empty(),
        "import cycles:\n{}\nedges: {:#?}",
        new.join("\n"),
        found.edges
    );
}

/// Library source files stay readable: none over this many lines.
const MAX_LINES: usize = 800;

#[test]
fn no_library_source_file_is_over_800_lines() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&top.join("src"), &mut files);
    rust_files(&top.join("format/src"), &mut files);
    rust_files(&top.join("tools/src"), &mut files);
    // The injector too (`shim/` holds C only).
    let before_inject = files.len();
    rust_files(&top.join("inject/src"), &mut files);
    assert!(files.len() > before_inject, "no file under inject/src");
    assert!(files.len() > 40, "found only {} files", files.len());
    let long: Vec<String> = files
        .iter()
        .map(|file| (file, std::fs::read_to_string(file).unwrap().lines().count()))
        .filter(|&(_, lines)| lines > MAX_LINES)
        .map(|(file, lines)| format!("{}: {lines} lines", file.display()))
        .collect();
    assert!(long.is_empty(), "{}", long.join("\n"));
}

/// The paths `crate_paths` resolves in `code`, written in the module of
/// `file` (relative to `src/`), as `a::b` strings (`$` marks `$crate`).
fn resolved(file: &str, code: &str) -> Vec<String> {
    crate_paths(&strip_comments(code), &module_of(Path::new(file)))
        .unwrap()
        .into_iter()
        .map(|u| format!("{}{}", if u.dollar { "$" } else { "" }, u.path.join("::")))
        .collect()
}

/// Runs the runtime's layer check on one made-up source tree.
fn check_tree(files: &[(&str, &str)]) -> Findings {
    let dir = std::env::temp_dir().join(format!(
        "fntrace-layers-{}-{}",
        std::process::id(),
        files[0].0.replace('/', "_")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, code) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, code).unwrap();
    }
    let found = check_crate(&dir, LAYERS, |_| false);
    std::fs::remove_dir_all(&dir).unwrap();
    found
}

#[test]
fn the_checker_sees_what_it_must() {
    // Paths, groups nested in groups, comments and literals.
    assert_eq!(
        resolved(
            "sys/x.rs",
            "use crate::{error::Error, GRAPH_TRACER};\n\
             let x = crate::rt::ops::operation(); // crate::control::lock()\n\
             /* crate::capi /* nested */ crate::capi */ let c = '\"'; let l: &'a str;\n\
             $crate::register(); /// [`crate::builtin`]\n\
             let s = \"// not a comment crate::capi\"; crate::sys::clock::now_ticks();\n\
             let r = r#\"crate::capi \" crate::socket\"#; let q = '\\''; let b = b\"crate::capi\";\n\
             use crate::{filter, capi::{live::{self, x}, env}, arch::*};\n",
        ),
        [
            "error::Error",
            "GRAPH_TRACER",
            "rt::ops::operation",
            "$register",
            "sys::clock::now_ticks",
            "filter",
            "capi::live",
            "capi::live::x",
            "capi::env",
            "arch",
        ]
    );
    // `super::` and `self::`, from a file and from an inline module in it.
    assert_eq!(
        resolved(
            "sys/a/b.rs",
            "use super::super::capi::x; use super::super::super::capi::y;\n\
             use self::c::D; use super::{e, f::G};\n\
             mod tests { use super::*; fn t() { super::super::h(); } }\n\
             pub(in crate::sys) fn i() { crate::rt::j() }",
        ),
        [
            "sys::capi::x",
            "capi::y",
            "sys::a::b::c::D",
            "sys::a::e",
            "sys::a::f::G",
            "sys::a::b",
            "sys::a::h",
            "rt::j"
        ]
    );
    assert_eq!(
        resolved("rt/ring/mod.rs", "use super::ring::room;"),
        ["rt::ring::room"]
    );
    assert!(crate_paths("use super::x;", &[]).is_err());

    // An upward import fails however it is written; the same text in a
    // comment or a literal does not.
    let upward = [
        ("sys/x.rs", "use crate::capi::live;"),
        ("sys/x.rs", "use crate::{filter, capi::{live}};"),
        (
            "sys/x.rs",
            "use crate::{filter::{self, Filter}, capi::live};",
        ),
        ("sys/x.rs", "fn f() { $crate::capi::x(); }"),
        ("sys/x.rs", "fn f() { crate::SOMETHING_AT_THE_ROOT }"),
        ("sys/x.rs", "fn f() { $crate::not_for_macros() }"),
        // `super::` from module sys (sys.rs or sys/mod.rs) is the root.
        ("sys/mod.rs", "use super::capi;"),
        ("sys.rs", "use super::{filter, capi::live};"),
        // From sys::x, `super::super` is the root; from sys::a::b it is sys,
        // and it takes three.
        ("sys/x.rs", "use super::super::capi;"),
        ("sys/a/b.rs", "use super::super::super::capi::x;"),
        (
            "sys/x.rs",
            "mod tests { use super::super::super::capi::x; }",
        ),
        ("sys/x.rs", "use self::super::super::capi;"),
    ];
    for (file, code) in upward {
        let found = check_tree(&[(file, code)]);
        assert_eq!(
            found.violations.len(),
            1,
            "{file}: {code}: {:?}",
            found.violations
        );
    }
    let fine = [
        (
            "sys/x.rs",
            "use crate::{error::Error, filter::{self, Filter}, sys::{clock}};",
        ),
        (
            "sys/x.rs",
            "const S: &str = \"crate::capi\"; // crate::capi\n/* use crate::capi; */",
        ),
        ("sys/x.rs", "/// [`crate::capi`]\nfn f() {}"),
        (
            "sys/x.rs",
            "const C: char = '\"'; const S: &str = \"crate::capi\";",
        ),
        (
            "tracer/mod.rs",
            "fn f() { $crate::Tracer; $crate::register(); }",
        ),
        ("rt/x.rs", "fn f() { crate::register_tracer!(x, y); }"),
        (
            "sys/mod.rs",
            "use super::error; mod tests { use super::*; }",
        ),
        ("sys/x.rs", "use super::super::filter; use super::capi::x;"),
        (
            "sys/x.rs",
            "pub(super) fn f() {} pub(in crate::sys) fn g() {}",
        ),
    ];
    for (file, code) in fine {
        let found = check_tree(&[(file, code)]);
        assert!(
            found.violations.is_empty(),
            "{file}: {code}: {:?}",
            found.violations
        );
    }

    // Cycles inside a module: found, covered by an allow-list entry only if
    // it holds all their modules; a parent's use of its children is none.
    let found = check_tree(&[
        ("rt/mod.rs", "use self::a::X; use crate::rt::b;"),
        ("rt/a.rs", "use super::b::Y;"),
        ("rt/b.rs", "use crate::rt::c::Z; use super::X;"),
        ("rt/c.rs", "use super::a::W;"),
        ("rt/d/mod.rs", "use self::e::V;"),
        ("rt/d/e.rs", "use super::D;"),
    ]);
    assert!(found.violations.is_empty(), "{:?}", found.violations);
    assert_eq!(new_cycles(&found.edges, &[]), ["rt::a <-> rt::b <-> rt::c"]);
    assert!(new_cycles(&found.edges, &[(&["rt::a", "rt::b", "rt::c"], "")]).is_empty());
    assert_eq!(
        new_cycles(&found.edges, &[(&["rt::a", "rt::b"], "")]),
        ["rt::a <-> rt::b <-> rt::c"]
    );
}

/// What a service that links the runtime builds: the runtime, the format
/// crate it shares with the CLI, and their dependencies. Adding one is a
/// choice (every service compiles it), so it is made here; the CLI's crates
/// (clap, indicatif, inferno, serde_json, ...) and fntrace-tools are never
/// among them.
const RUNTIME_CRATES: &[&str] = &[
    "fntrace",
    "fntrace-format",
    // Call-site discovery, patching, locks (the runtime's own).
    "libc",
    "region",
    "bitflags",
    "once_cell",
    "parking_lot",
    "parking_lot_core",
    "lock_api",
    "scopeguard",
    "smallvec",
    "cfg-if",
    "object",
    "memchr",
    "iced-x86",
    "lazy_static",
    // The format crate's: names, safe trace directories.
    "rustc-demangle",
    "cpp_demangle",
    "rustix",
    "linux-raw-sys",
];

/// How many crates (name and version) the runtime's build held when the
/// format crate was split out of fntrace-tools, which it used to link:
/// 22 then, and it must stay fewer.
const RUNTIME_CRATES_BEFORE_THE_SPLIT: usize = 22;

/// A service that links the runtime compiles no CLI: `cargo tree` of the
/// runtime's normal dependencies names only the crates of
/// [`RUNTIME_CRATES`], and fewer (name and version) than the runtime built
/// when it linked fntrace-tools.
#[test]
fn the_runtime_pulls_in_no_cli_crate() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = std::process::Command::new(cargo)
        .args([
            "tree",
            "-p",
            "fntrace",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--no-dedupe",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo tree");
    assert!(output.status.success(), "{output:?}");
    let tree = String::from_utf8_lossy(&output.stdout);
    // "name vX.Y.Z (path)" or "name vX.Y.Z": name and version.
    let versions: BTreeSet<(&str, &str)> = tree
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some((words.next()?, words.next()?))
        })
        .collect();
    let crates: BTreeSet<&str> = versions.iter().map(|&(name, _)| name).collect();
    assert!(crates.contains("fntrace-format"), "{tree}");
    let unexpected: Vec<&&str> = crates
        .iter()
        .filter(|name| !RUNTIME_CRATES.contains(name))
        .collect();
    assert!(
        unexpected.is_empty(),
        "the runtime pulls in {unexpected:?}, which RUNTIME_CRATES does not list \
         (every service would compile them):\n{tree}"
    );
    assert!(
        versions.len() < RUNTIME_CRATES_BEFORE_THE_SPLIT,
        "the runtime pulls in {} crates, {RUNTIME_CRATES_BEFORE_THE_SPLIT} or more:\n{versions:?}",
        versions.len()
    );
    for cli in [
        "fntrace-tools",
        "clap",
        "clap_complete",
        "indicatif",
        "inferno",
        "quick-xml",
        "flate2",
        "serde_json",
        "rustc-hash",
    ] {
        assert!(!RUNTIME_CRATES.contains(&cli), "{cli} is the CLI's");
    }
}

/// The structures the trampolines read, with the prefix their offsets
/// have in `asm/x86_64/layout.h` (`THREAD_` + field name in capitals),
/// the `#define` of their size, and the file that asserts their layout.
const ASM_STRUCTURES: &[(&str, &str, &str, &str)] = &[
    (
        "ThreadBlock",
        "THREAD",
        "THREAD_BLOCK_SIZE",
        "src/rt/thread.rs",
    ),
    ("ShadowStack", "SHADOW", "", "src/rt/shadow/mod.rs"),
    ("Frame", "FRAME", "FRAME_SIZE", "src/rt/shadow/mod.rs"),
    ("AnyRing", "RING", "", "src/rt/ring/mod.rs"),
    (
        "RawEvent",
        "EVENT",
        "EVENT_SIZE",
        "src/builtin/graph/mod.rs",
    ),
    ("Header", "PB", "", PROFILE_BLOCK),
    ("Block", "BLOCK", "", PROFILE_BLOCK),
    ("Open", "OPEN", "OPEN_SIZE", PROFILE_BLOCK),
    ("TableSlot", "TABLE", "TABLE_SLOT_SIZE", PROFILE_BLOCK),
    ("PathSlot", "PATH", "PATH_SLOT_SIZE", PROFILE_BLOCK),
    ("Row", "ROW", "ROW_SIZE", PROFILE_BLOCK),
    ("Node", "NODE", "NODE_SIZE", PROFILE_BLOCK),
    (
        "SavedRegs",
        "SAVED",
        "SAVED_REGS_SIZE",
        "src/arch/x86_64/mod.rs",
    ),
    ("Recipes", "RECIPES", "", ARG_RECIPES),
    ("Recipe", "RECIPE", "RECIPE_SIZE", ARG_RECIPES),
    ("RecipeOp", "OP", "OP_SIZE", ARG_RECIPES),
];

/// Where the graph tracer's argument entries' recipes are defined.
const ARG_RECIPES: &str = "src/builtin/graph/arg_recipes.rs";

/// Where the graph tracer's argument capture (its kept words) is defined.
const GRAPH_ARGS: &str = "src/builtin/graph/args.rs";

/// Where the profile tracer's per-thread block is defined.
const PROFILE_BLOCK: &str = "src/builtin/profile/block/mod.rs";

/// Constants of `layout.h` that are Rust constants, not offsets: the
/// `#define`, the file, the Rust `const`.
const ASM_CONSTANTS: &[(&str, &str, &str)] = &[
    (
        "SHADOW_MAX_DEPTH",
        "src/rt/shadow/mod.rs",
        "MAX_HOOKED_DEPTH",
    ),
    ("EVENT_DEPTH_SHIFT", "src/builtin/graph/mod.rs", "SITE_BITS"),
    ("EVENT_EXIT_BIT", "src/builtin/graph/mod.rs", "EXIT_BIT"),
    ("PROFILE_TABLE_BITS", PROFILE_BLOCK, "TABLE_BITS"),
    ("PROFILE_PATH_TABLE_BITS", PROFILE_BLOCK, "PATH_TABLE_BITS"),
    ("CHUNK_SHIFT", PROFILE_BLOCK, "CHUNK_SHIFT"),
    ("CHUNK_BUCKETS", PROFILE_BLOCK, "CHUNK_BUCKETS"),
    ("PENDING_ROW_SHIFT", PROFILE_BLOCK, "PENDING_ROW_SHIFT"),
    ("EVENT_MORE_BIT", ARG_RECIPES, "EVENT_MORE_BIT"),
    ("KEPT_FUTURE_BIT", GRAPH_ARGS, "KEPT_FUTURE_BIT"),
    ("KEPT_ARG_SHIFT", GRAPH_ARGS, "KEPT_ARG_SHIFT"),
    ("KEPT_SET_BIT", GRAPH_ARGS, "KEPT_SET_BIT"),
    ("EVENT_DATA_DEPTH", ARG_RECIPES, "EVENT_DATA_DEPTH"),
    ("RECIPE_HASH_SHIFT", ARG_RECIPES, "HASH_SHIFT"),
    ("MARK_ARGS_BIT", ARG_RECIPES, "MARK_ARGS_BIT"),
    ("MARK_FAST_RETVAL_BIT", ARG_RECIPES, "MARK_FAST_RETVAL_BIT"),
    ("MARK_RETVAL_SHIFT_AT", ARG_RECIPES, "MARK_RETVAL_SHIFT_AT"),
    ("MARK_POLL_KEY_AT", ARG_RECIPES, "MARK_POLL_KEY_AT"),
    ("MARK_POLL_OFFSET_AT", ARG_RECIPES, "MARK_POLL_OFFSET_AT"),
    ("MARK_POLL_CLEAR", ARG_RECIPES, "MARK_POLL_CLEAR"),
    ("POLL_FROM_RAX", ARG_RECIPES, "POLL_FROM_RAX"),
    ("PIN_KEEP_ONLY", ARG_RECIPES, "PIN_KEEP_ONLY"),
    ("STUB_ARENAS", RETURN_STUBS, "ARENAS"),
    ("STUB_HOOK_IN_LINE", RETURN_STUBS, "HOOK_AT"),
    ("STUB_HOOK_FROM_RETURN", RETURN_STUBS, "HOOK_FROM_RETURN"),
    (
        "STUB_SITE_END_FROM_RETURN",
        RETURN_STUBS,
        "SITE_END_FROM_RETURN",
    ),
];
const RETURN_STUBS: &str = "src/patch/return_stubs.rs";

/// A number as written in Rust or C: decimal, hexadecimal (`0x4000_ffff`),
/// `1 << N` or `(1 << N) - 1`.
fn number(text: &str) -> Option<u64> {
    let text = text.trim();
    if let Some(shifted) = text.strip_prefix('(').and_then(|t| t.strip_suffix(") - 1")) {
        return number(shifted)?.checked_sub(1);
    }
    if let Some(hex) = text.strip_prefix("0x") {
        return u64::from_str_radix(&hex.replace('_', ""), 16).ok();
    }
    match text.split_once("<<") {
        Some((one, shift)) if one.trim() == "1" => Some(1 << shift.trim().parse::<u32>().ok()?),
        _ => text.parse().ok(),
    }
}

/// The tokens of the `const _: () = { … };` blocks (compile-time
/// assertions) among `t`.
fn const_blocks(t: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let opens = ["const", "_", ":", "(", ")", "=", "{"];
        if t.len() - i >= opens.len() && t[i..i + opens.len()].iter().eq(opens.iter()) {
            i += opens.len();
            let mut depth = 1;
            while i < t.len() && depth > 0 {
                match t[i].as_str() {
                    "{" => depth += 1,
                    "}" => depth -= 1,
                    _ => {}
                }
                out.push(t[i].clone());
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// What `layout.h` must hold, from the Rust side: each `offset_of!` and
/// `size_of` a const block asserts, and each constant of
/// [`ASM_CONSTANTS`] (an `EXIT_BIT` of `1 << 63` is the bit number 63).
fn rust_layout(read: impl Fn(&str) -> String) -> BTreeMap<String, u64> {
    let mut expected = BTreeMap::new();
    for (ty, prefix, size_name, file) in ASM_STRUCTURES {
        let t = const_blocks(&tokens(&strip_comments(&read(file))));
        for (i, w) in t.windows(7).enumerate() {
            // offset_of ! ( Ty , field ) == N
            if w[0] == "offset_of" && w[1] == "!" && w[3] == *ty && w[4] == "," {
                let (field, close, eq) = (&w[5], &w[6], t.get(i + 7).zip(t.get(i + 8)));
                assert_eq!(close, ")", "{file}: offset_of!({ty}, {field}");
                let value = match eq {
                    Some((a, b)) if a == "=" && b == "=" => t[i + 9].parse().unwrap(),
                    _ => panic!("{file}: offset_of!({ty}, {field}) not compared with =="),
                };
                expected.insert(format!("{prefix}_{}", field.to_uppercase()), value);
            }
            // size_of :: < Ty > ( ) == N (or 1 << N); other comparisons
            // (`<= PAGE`) say nothing the assembly reads.
            let compared = t.get(i + 7).zip(t.get(i + 8)) == Some((&"=".into(), &"=".into()));
            if w[0] == "size_of"
                && w[1] == "::"
                && w[2] == "<"
                && w[3] == *ty
                && w[4] == ">"
                && compared
            {
                assert!(
                    !size_name.is_empty(),
                    "{file}: size_of::<{ty}> has no #define"
                );
                let shifted = t.get(i + 10).zip(t.get(i + 11)) == Some((&"<".into(), &"<".into()));
                let value: u64 = if t[i + 9] == "1" && shifted {
                    1 << t[i + 12].parse::<u32>().unwrap()
                } else {
                    t[i + 9].parse().unwrap()
                };
                expected.insert(size_name.to_string(), value);
            }
        }
    }
    for (define, file, constant) in ASM_CONSTANTS {
        let code = strip_comments(&read(file));
        let at = code
            .find(&format!("const {constant}:"))
            .unwrap_or_else(|| panic!("{file}: no const {constant}"));
        let value = &code[at..];
        let value = &value[value.find('=').unwrap() + 1..value.find(';').unwrap()];
        let value = number(value).unwrap_or_else(|| panic!("{file}: {constant} = {value}"));
        let value = if constant.ends_with("_BIT") {
            u64::from(value.trailing_zeros())
        } else {
            value
        };
        expected.insert(define.to_string(), value);
    }
    expected
}

/// `layout.h`'s `#define NAME NUMBER` lines (`EVENT_SIZE_SHIFT` read as
/// `EVENT_SIZE`, the size it encodes); hexadecimal ones only where
/// [`ASM_CONSTANTS`] names them (the others are masks and multipliers no
/// Rust constant spells alike).
fn asm_layout(header: &str) -> BTreeMap<String, u64> {
    header
        .lines()
        .filter_map(|line| line.trim().strip_prefix("#define"))
        .filter_map(|rest| {
            let mut words = rest.split_whitespace();
            let (name, written) = (words.next()?, words.next()?);
            let listed = ASM_CONSTANTS.iter().any(|(define, ..)| *define == name);
            if written.starts_with("0x") && !listed {
                return None;
            }
            let value = number(written)?;
            Some(match name.strip_suffix("_SHIFT") {
                Some(size) if size.ends_with("_SIZE") => (size.to_string(), 1 << value),
                _ => (name.to_string(), value),
            })
        })
        .collect()
}

/// The offsets the assembly reads (`layout.h`) are the ones the Rust
/// structures have: every `#define` of it equals what a const block next
/// to the structure asserts (which the compiler checks against the
/// structure), and every such assertion has its `#define`.
#[test]
fn layout_h_says_what_the_rust_structures_are() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |file: &str| std::fs::read_to_string(top.join(file)).unwrap();
    let rust = rust_layout(read);
    let asm = asm_layout(&read("asm/x86_64/layout.h"));
    assert!(rust.len() >= 25 && asm.len() >= 25, "{rust:?}\n{asm:?}");
    assert_eq!(asm, rust, "layout.h (left) and the Rust structures (right)");

    // And the comparison sees a difference.
    let header = read("asm/x86_64/layout.h").replace(
        "#define RING_SLOTS            176",
        "#define RING_SLOTS            168",
    );
    assert_ne!(asm_layout(&header), rust);
    let thread = read("src/rt/thread.rs").replace(
        "offset_of!(ThreadBlock, stack_low) == 32",
        "offset_of!(ThreadBlock, stack_low) == 40",
    );
    let changed = rust_layout(|file| {
        if file == "src/rt/thread.rs" {
            thread.clone()
        } else {
            read(file)
        }
    });
    assert_ne!(asm, changed);
}
