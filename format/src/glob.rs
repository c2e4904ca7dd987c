//! Function-name globs: the one matcher behind every name selection of
//! fntrace — the runtime's `Filter` and `FNTRACE_FILTER`, and the CLI's
//! `-F`/`-N` — so that a glob selects the same functions wherever it is
//! typed.
//!
//! # Rules
//!
//! Names are demangled ([`demangle`](crate::demangle)): `crate::module::fn`,
//! `<Type as Trait>::method`, `core::ptr::drop_in_place::<demo::Foo>`, C++
//! `ns::Class::f` (uftrace's form: no template arguments, no parameters),
//! C `f`.
//!
//! - `*` matches any run of characters (`::` included), `?` any one
//!   character; everything else matches itself.
//! - A glob matches a name if it matches the whole name, **or the end of the
//!   name from any point where a path starts inside it**: just after `<`,
//!   `(`, `[`, `&`, `,` or a space. So `serde_json::*` selects
//!   `serde_json::to_string`, and also the trait impls and generic
//!   instances that name the crate's types:
//!   `<serde_json::value::Value as serde::Deserialize>::deserialize`
//!   (the path after `<`) and `core::ptr::drop_in_place::<serde_json::Value>`;
//!   `serde::*` selects that `deserialize` too (the path after ` as `).
//! - A path does not start in the middle of another one: `demo::*` does not
//!   select `core::demo::x` (use `*demo::*` for that).
//! - A glob without `::` (a bare name, as GDB's `break sleeper`) also
//!   matches the last segment of a path: `sleeper` selects
//!   `acc_graph::sleeper` and `ns::sleeper`, `fmt` selects
//!   `<demo::Token as core::fmt::Display>::fmt`, `bar` selects the C++
//!   `foo::bar`. The last segment is what follows the last `::` outside
//!   `<…>`, `(…)`, `[…]` and `{…}`, without a trailing C++ parameter list or
//!   generic arguments (`drop_in_place` for
//!   `core::ptr::drop_in_place::<demo::Foo>`).
//!
//! Why: Rust puts the type of an impl, not its crate, first in the name, so
//! a glob anchored at the start of the name misses every method of every
//! trait impl — which is what a user means by "everything in `serde_json`".

/// Whether `glob` selects the function called `name`, by the
/// [rules](self#rules) of this module.
///
/// ```
/// use fntrace_format::glob::matches;
/// assert!(matches("serde_json::*", "serde_json::de::from_str"));
/// assert!(matches(
///     "serde_json::*",
///     "<serde_json::value::Value as serde::Deserialize>::deserialize"
/// ));
/// assert!(!matches("demo::*", "core::demo::x"));
/// assert!(matches("*demo::*", "core::demo::x"));
/// ```
pub fn matches(glob: &str, name: &str) -> bool {
    // A glob without wildcards against a name with no path, brackets or
    // spaces (a C name): only equality can match, as below, but without
    // allocating (`record -a` gives each function a glob of its own name,
    // each matched against every function at start).
    if !glob.bytes().any(|b| b == b'*' || b == b'?')
        && !name.bytes().any(|b| {
            matches!(
                b,
                b':' | b'<' | b'>' | b'(' | b')' | b'[' | b']' | b'&' | b',' | b' '
            )
        })
    {
        return glob == name;
    }
    let bare = !glob.contains("::");
    let glob: Vec<char> = glob.chars().collect();
    let name: Vec<char> = name.chars().collect();
    path_starts(&name).any(|start| whole_match(&glob, &name[start..]))
        || (bare && whole_match(&glob, last_segment(&name)))
}

/// The last segment of the path `name`: what follows its last `::` outside
/// brackets, after a trailing parameter list (`(int)`, `(int) const`) and
/// generic arguments (`<T>`, `::<T>`) are cut off. The whole name when it
/// has no such `::` (a C name), or when its brackets do not balance.
fn last_segment(name: &[char]) -> &[char] {
    let mut end = name.len();
    // Cut trailing bracketed groups: `(…)` (maybe followed by a C++
    // qualifier such as ` const`) and `<…>`, then a `::` before `<…>`.
    loop {
        let trimmed = trim_qualifiers(&name[..end]);
        match trimmed.last() {
            Some(&close @ (')' | '>')) => {
                let open = if close == ')' { '(' } else { '<' };
                let Some(start) = matching_open(&name[..trimmed.len()], open, close) else {
                    return name;
                };
                if start == 0 {
                    // The whole name is bracketed (`<T as Trait>`): no
                    // path to cut from.
                    return name;
                }
                end = start;
                if name[..end].ends_with(&[':', ':']) {
                    end -= 2;
                }
            }
            _ => break,
        }
    }
    let path = &name[..end];
    let mut depth = 0i32;
    let mut start = 0;
    for (index, &c) in path.iter().enumerate() {
        match c {
            '<' | '(' | '[' | '{' => depth += 1,
            '>' | ')' | ']' | '}' => depth -= 1,
            ':' if depth == 0 && index > 0 && path[index - 1] == ':' => start = index + 1,
            _ => {}
        }
    }
    if depth != 0 {
        return name;
    }
    &path[start..]
}

/// `text` without trailing C++ member-function qualifiers (` const`,
/// ` volatile`, `&`, `&&`) after a parameter list.
fn trim_qualifiers(text: &[char]) -> &[char] {
    let mut text = text;
    loop {
        let before = text.len();
        for suffix in [" const", " volatile", " &&", " &", "&&", "&"] {
            let suffix: Vec<char> = suffix.chars().collect();
            if text.ends_with(&suffix) && text[..text.len() - suffix.len()].ends_with(&[')']) {
                text = &text[..text.len() - suffix.len()];
            }
        }
        if text.len() == before {
            return text;
        }
    }
}

/// Index of the `open` bracket matching the `close` that ends `text`.
fn matching_open(text: &[char], open: char, close: char) -> Option<usize> {
    let mut depth = 0usize;
    for (index, &c) in text.iter().enumerate().rev() {
        if c == close {
            depth += 1;
        } else if c == open {
            depth = depth.checked_sub(1)?;
            if depth == 0 {
                return Some(index);
            }
        }
    }
    None
}

/// Up to `count` of `names` closest to `glob`, for a message saying that
/// it matched nothing: first the names containing the glob's text (its
/// characters other than `*` and `?`, ignoring case), then the others by
/// edit distance to that text (the smallest of the distances to the whole
/// name and to its [last segment](self#rules), and, for a glob ending in
/// `*` (starting with `*`), to their beginnings (ends) as long as the
/// text: `hadle_*` is closest to `handle_get`, not to `main`); ties by
/// name.
///
/// ```
/// use fntrace_format::glob::closest;
/// let names = ["acc_graph::sleeper", "main", "acc_graph::work", "sleep"];
/// assert_eq!(closest("sleepr", names, 2), ["acc_graph::sleeper", "sleep"]);
/// assert_eq!(closest("*graph::w*", names, 1), ["acc_graph::work"]);
/// assert_eq!(closest("wrk*", names, 1), ["acc_graph::work"]);
/// ```
pub fn closest<'a>(
    glob: &str,
    names: impl IntoIterator<Item = &'a str>,
    count: usize,
) -> Vec<&'a str> {
    let text: String = glob
        .chars()
        .filter(|c| !matches!(c, '*' | '?'))
        .flat_map(char::to_lowercase)
        .collect();
    let text: Vec<char> = text.chars().collect();
    let mut scored: Vec<(bool, usize, &str)> = names
        .into_iter()
        .map(|name| {
            let lower: Vec<char> = name.chars().flat_map(char::to_lowercase).collect();
            let contains = !text.is_empty() && lower.windows(text.len()).any(|w| w == text);
            let distance = [&lower[..], last_segment(&lower)]
                .into_iter()
                .flat_map(|whole| {
                    let cut = text.len().min(whole.len());
                    let prefix = (glob.ends_with('*')).then(|| &whole[..cut]);
                    let suffix = (glob.starts_with('*')).then(|| &whole[whole.len() - cut..]);
                    [Some(whole), prefix, suffix].into_iter().flatten()
                })
                .map(|part| edit_distance(&text, part))
                .min()
                .unwrap_or(0);
            (!contains, distance, name)
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.2 == b.2);
    scored
        .into_iter()
        .take(count)
        .map(|(_, _, name)| name)
        .collect()
}

/// `GLOB: no function AMONG matches it (closest: a, b, c)`: the one
/// wording of every selection that matched nothing, offline (`-F`/`-N` of
/// the readers) and live (`fntrace ctl`'s filter, patch and triggers,
/// `FNTRACE_FILTER`), naming the three of `names` [`closest`] to `glob`
/// (no parenthesis when there are none). Callers put the option first.
///
/// ```
/// use fntrace_format::glob::no_match;
/// let names = ["handle_get", "handle_put", "main"];
/// assert_eq!(
///     no_match("hadle_get", "called in t.data", names),
///     "hadle_get: no function called in t.data matches it (closest: handle_get, handle_put, main)"
/// );
/// assert_eq!(no_match("x", "of the profile", []), "x: no function of the profile matches it");
/// ```
pub fn no_match<'a>(glob: &str, among: &str, names: impl IntoIterator<Item = &'a str>) -> String {
    let closest = closest(glob, names, 3);
    let closest = if closest.is_empty() {
        String::new()
    } else {
        format!(" (closest: {})", closest.join(", "))
    };
    format!("{glob}: no function {among} matches it{closest}")
}

/// The globs of `globs` that select none of `names`, in order.
pub fn unmatched<'g, S: AsRef<str>>(globs: &'g [S], names: &[&str]) -> Vec<&'g str> {
    globs
        .iter()
        .map(AsRef::as_ref)
        .filter(|glob| !names.iter().any(|name| matches(glob, name)))
        .collect()
}

/// Levenshtein distance between `a` and `b` (insertions, deletions and
/// substitutions of one character each cost 1).
fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != cb))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Whether any glob of `globs` selects `name` (false for no globs).
pub fn matches_any<S: AsRef<str>>(globs: &[S], name: &str) -> bool {
    globs.iter().any(|glob| matches(glob.as_ref(), name))
}

/// Indexes of `name` where a path starts: 0, and just after each `<`, `(`,
/// `[`, `&`, `,` or space.
fn path_starts(name: &[char]) -> impl Iterator<Item = usize> + '_ {
    std::iter::once(0).chain(
        name.iter()
            .enumerate()
            .filter(|(_, c)| matches!(c, '<' | '(' | '[' | '&' | ',' | ' '))
            .map(|(index, _)| index + 1),
    )
}

/// Whether `glob` matches all of `text`: `*` any run, `?` one character.
/// Linear backtracking on the last `*` only, which suffices for globs.
fn whole_match(glob: &[char], text: &[char]) -> bool {
    let (mut g, mut t) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while t < text.len() {
        if g < glob.len() && (glob[g] == '?' || glob[g] == text[t]) {
            g += 1;
            t += 1;
        } else if g < glob.len() && glob[g] == '*' {
            backtrack = Some((g, t));
            g += 1;
        } else if let Some((star, matched)) = backtrack {
            g = star + 1;
            t = matched + 1;
            backtrack = Some((star, matched + 1));
        } else {
            return false;
        }
    }
    glob[g..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_globs_match_the_whole_name() {
        assert!(matches("demo::*", "demo::tokenize"));
        assert!(matches("*tokenize", "demo::tokenize"));
        assert!(matches("d?mo::*ize", "demo::tokenize"));
        assert!(matches("*", ""));
        assert!(matches("main", "main"));
        assert!(!matches("main", "main2"));
        assert!(!matches("a*b", "acbd"));
        assert!(matches("*a*b*", "xxaxxbxx"));
    }

    #[test]
    fn a_crate_path_selects_its_trait_impls_and_generic_instances() {
        let deserialize = "<serde_json::value::Value as serde::Deserialize>::deserialize";
        assert!(matches("serde_json::*", deserialize));
        assert!(matches("serde::*", deserialize));
        assert!(matches("serde_json::value::*", deserialize));
        assert!(matches(
            "serde_json::*",
            "core::ptr::drop_in_place::<serde_json::Value>"
        ));
        assert!(matches("serde_json::*", "<&serde_json::Value as x::Y>::f"));
        assert!(matches("demo::*", "<alloc::vec::Vec<demo::Token>>::push"));
        assert!(!matches("serde_json::*", "serde::de::from_str"));
        assert!(!matches("serde::*", "serde_json::de::from_str"));
    }

    #[test]
    fn a_path_does_not_start_inside_another() {
        assert!(!matches("demo::*", "core::demo::x"));
        assert!(!matches("json::*", "serde_json::to_string"));
        assert!(matches("*demo::*", "core::demo::x"));
    }

    #[test]
    fn a_bare_name_matches_the_last_path_segment_as_gdb() {
        assert!(matches("sleeper", "acc_graph::sleeper"));
        assert!(matches("sleeper", "ns::sleeper"));
        assert!(matches("sleep*", "acc_graph::sleeper"));
        assert!(matches("sleeper", "sleeper"));
        assert!(!matches("sleeper", "acc_graph::sleeper_two"));
        assert!(!matches("sleeper", "sleeper::inner"));
        assert!(matches("bar", "foo::bar(int)"));
        assert!(matches("bar", "foo::bar(int) const"));
        assert!(matches("bar", "ns::Foo<int>::bar(std::vector<int>)"));
        assert!(matches("fmt", "<demo::Token as core::fmt::Display>::fmt"));
        assert!(matches(
            "drop_in_place",
            "core::ptr::drop_in_place::<demo::Foo>"
        ));
        assert!(matches("push", "<alloc::vec::Vec<demo::Token>>::push"));
        // Globs with a path are anchored as before.
        assert!(!matches("demo::sleeper", "acc_graph::demo::sleeper"));
        assert!(!matches(
            "Token",
            "<demo::Token as core::fmt::Display>::fmt"
        ));
        // Unbalanced or bracketed-only names do not panic.
        assert!(!matches("x", "a::b<c"));
        assert!(!matches("x", "<T as Y>"));
        assert!(matches("f", "f"));
    }

    #[test]
    fn closest_names() {
        let names = [
            "acc_graph::sleeper",
            "acc_graph::worker",
            "main",
            "fib",
            "helper",
        ];
        assert_eq!(closest("no_such_function", [], 3), Vec::<&str>::new());
        assert_eq!(closest("sleepr", names, 1), ["acc_graph::sleeper"]);
        assert_eq!(closest("fob", names, 2), ["fib", "main"]);
        // A prefix glob is compared with the names' beginnings.
        let handlers = ["handle_get", "handle_put", "main", "worker"];
        assert_eq!(
            closest("hadle_*", handlers, 2),
            ["handle_get", "handle_put"]
        );
        assert_eq!(closest("*gte", handlers, 1), ["handle_get"]);
        let mut graph = closest("*GRAPH*", names, 2);
        graph.sort();
        assert_eq!(graph, names[..2]);
        assert_eq!(edit_distance(&['a', 'b'], &['b', 'a', 'b']), 1);
    }

    #[test]
    fn any_of_several() {
        assert!(matches_any(&["a::*", "b::*"], "b::x"));
        assert!(!matches_any::<&str>(&[], "b::x"));
    }
}
