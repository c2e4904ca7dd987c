//! Function-name globs: the one matcher behind every name selection of
//! fntrace — the runtime's `Filter` and `FNTRACE_FILTER`, and the CLI's
//! `-F`/`-N` — so that a glob selects the same functions wherever it is
//! typed.
//!
//! # Rules
//!
//! Names are demangled ([`demangle`](crate::demangle)): `crate::module::fn`,
//! `<Type as Trait>::method`, `core::ptr::drop_in_place::<demo::Foo>`, C++
//! `ns::f(int)`, C `f`.
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
//!
//! Why: Rust puts the type of an impl, not its crate, first in the name, so
//! a glob anchored at the start of the name misses every method of every
//! trait impl — which is what a user means by "everything in `serde_json`".

/// Whether `glob` selects the function called `name`, by the
/// [rules](self#rules) of this module.
///
/// ```
/// use fntrace_tools::glob::matches;
/// assert!(matches("serde_json::*", "serde_json::de::from_str"));
/// assert!(matches(
///     "serde_json::*",
///     "<serde_json::value::Value as serde::Deserialize>::deserialize"
/// ));
/// assert!(!matches("demo::*", "core::demo::x"));
/// assert!(matches("*demo::*", "core::demo::x"));
/// ```
pub fn matches(glob: &str, name: &str) -> bool {
    let glob: Vec<char> = glob.chars().collect();
    let name: Vec<char> = name.chars().collect();
    let matched = path_starts(&name).any(|start| whole_match(&glob, &name[start..]));
    matched
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
    fn any_of_several() {
        assert!(matches_any(&["a::*", "b::*"], "b::x"));
        assert!(!matches_any::<&str>(&[], "b::x"));
    }
}
