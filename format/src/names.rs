//! Function names: ELF symbols made readable ([`demangle`]), and the form a
//! symbol takes in a uftrace `.sym` file ([`uftrace_symbol_name`]).
//!
//! The runtime names traced functions with [`demangle`] too, so that fntrace's
//! reports, its filters and what it reads back from a data directory agree.

/// Demangles Rust (legacy `_ZN…E` and v0 `_R…`, without the hash) and C++
/// (Itanium `_Z…`) names; other names (C) are returned as they are.
///
/// C++ names take uftrace's default ("simple") form: the path to the
/// function without template arguments, parameter lists or return type
/// (`std::vector::emplace_back`, `ns::Point::operator<`), as `uftrace
/// report` shows them and its `-F` takes them; overloads and template
/// instances share it. [`demangle_full`] keeps everything.
pub fn demangle(name: &str) -> String {
    if name.starts_with("_Z") && rustc_demangle::try_demangle(name).is_err() {
        if let Some(full) = demangle_cpp(name) {
            let simple = simple_cpp_name(&full);
            return if inherits_constructor(name) {
                // `Derived::Base` in full (the base class's constructor it
                // inherits); uftrace names it `Derived::Derived`.
                own_constructor_name(&simple).unwrap_or(simple)
            } else {
                simple
            };
        }
    }
    demangle_full(name)
}

/// [`demangle`], but C++ names in full: template arguments, parameter
/// list, qualifiers and, for template functions, the return type
/// (`void ns::sort<int*>(int*, int*)`).
pub fn demangle_full(name: &str) -> String {
    if let Ok(demangled) = rustc_demangle::try_demangle(name) {
        // `{:#}` leaves the hash out: it tells apart crate versions, not
        // functions, and no one types it in a filter.
        return format!("{demangled:#}");
    }
    if name.starts_with("_Z") {
        if let Some(full) = demangle_cpp(name) {
            return full;
        }
    }
    name.to_string()
}

/// Whether the mangled `name` is an inheriting constructor (`CI1`/`CI2`
/// then the base class).
fn inherits_constructor(name: &str) -> bool {
    name.contains("CI1") || name.contains("CI2")
}

/// `a::B::C` → `a::B::B`; `None` for a name of one segment.
fn own_constructor_name(simple: &str) -> Option<String> {
    let (scope, _) = simple.rsplit_once("::")?;
    let class = scope.rsplit("::").next()?;
    Some(format!("{scope}::{class}"))
}

fn demangle_cpp(name: &str) -> Option<String> {
    cpp_demangle::Symbol::new(name).ok()?.demangle().ok()
}

/// What a function's symbol `raw` (its ELF name) becomes in a uftrace `.sym`
/// file.
///
/// uftrace expects ELF names there and demangles them itself when it shows
/// them (its `--demangle` modes, `-F`/`-N` filters and regexes work on its
/// own demangling; C++ shows as `ns::foo::bar`, without parameters). So C++
/// and C names are written as they are. Rust names are the exception:
/// uftrace 0.13 cannot demangle v0 names (`_R…`, shown raw), and of legacy
/// names (`_ZN…17h<hash>E`) only those without `$…$` escapes (every trait
/// impl, closure and generic has some: `_$LT$T$u20$as$u20$…`, shown raw). A
/// Rust name is therefore written demangled, without its hash
/// (`crate::module::function`, `<T as Trait>::method`), which uftrace shows
/// and filters on as it is; reading the directory back ([`demangle`] leaves
/// such a name alone) gives the same readable name.
pub fn uftrace_symbol_name(raw: &str) -> String {
    match rustc_demangle::try_demangle(raw) {
        Ok(demangled) => format!("{demangled:#}"),
        Err(_) => raw.to_string(),
    }
}

/// uftrace's simple form of a demangled C++ name (`full`, as
/// `cpp_demangle` writes it): bracketed groups (`<…>`, `(…)`) dropped,
/// and what stands before the name (a return type) or after it
/// (` const`, `&&`); `(anonymous namespace)` spelled `_GLOBAL__N_1`,
/// the `N`th lambda of a scope `$_{N-1}`, a conversion operator
/// `operator(cast)`, as uftrace 0.13 spells them.
fn simple_cpp_name(full: &str) -> String {
    let chars: Vec<char> = full.chars().collect();
    let parameters = parameter_list(&chars);
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if let Some((text, used)) = special_at(&chars, i) {
            out.push_str(&text);
            i += used;
            continue;
        }
        match chars[i] {
            open @ ('<' | '(' | '[' | '{') => match group_end(&chars, i, open) {
                Some(end) => i = end,
                None => return full.to_string(),
            },
            // Before the parameter list, a space ends a return type (`void`,
            // `unsigned long const&`); after it, the name is complete
            // (` const`, ` &&`, ` [clone .cold]` follow).
            ' ' if parameters.is_some_and(|at| i < at) => {
                out.clear();
                i += 1;
            }
            ' ' => break,
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    if out.is_empty() {
        full.to_string()
    } else {
        out
    }
}

/// What uftrace writes for the text at `chars[at..]`, and how many
/// characters that takes, where the text is spelled differently from
/// the full name: an operator's name, the anonymous namespace, a lambda.
fn special_at(chars: &[char], at: usize) -> Option<(String, usize)> {
    if starts_operator(chars, at) {
        let after = at + OPERATOR.len();
        let (text, used) = operator_name(&chars[after..].iter().collect::<String>());
        return Some((format!("{OPERATOR}{text}"), OPERATOR.len() + used));
    }
    const ANONYMOUS: &str = "(anonymous namespace)";
    if starts_with_text(chars, at, ANONYMOUS) {
        return Some(("_GLOBAL__N_1".to_string(), ANONYMOUS.len()));
    }
    if starts_with_text(chars, at, "{lambda(") {
        let end = group_end(chars, at, '{')?;
        let inner: String = chars[at..end].iter().collect();
        let number = inner
            .rsplit_once('#')
            .and_then(|(_, n)| n.trim_end_matches('}').parse::<u32>().ok())
            .unwrap_or(1);
        return Some((format!("$_{}", number.saturating_sub(1)), end - at));
    }
    None
}

const OPERATOR: &str = "operator";

/// Whether an operator's name (`operator<`, `operator new`, `operator
/// bool`) starts at `chars[at]`: the word `operator` at the start of a
/// name segment.
fn starts_operator(chars: &[char], at: usize) -> bool {
    starts_with_text(chars, at, OPERATOR)
        && (at == 0 || matches!(chars[at - 1], ':' | ' '))
        && !chars
            .get(at + OPERATOR.len())
            .is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// Whether `chars[at..]` starts with the ASCII `text`.
fn starts_with_text(chars: &[char], at: usize, text: &str) -> bool {
    chars.len() >= at + text.len() && text.chars().zip(&chars[at..]).all(|(a, b)| a == *b)
}

/// Where the function's parameter list opens: the last `(` outside
/// brackets (earlier ones close the parameter lists of the functions a
/// local name lives in, or stand in a return type).
fn parameter_list(chars: &[char]) -> Option<usize> {
    let mut last = None;
    let mut i = 0;
    while i < chars.len() {
        if let Some((_, used)) = special_at(chars, i) {
            i += used;
            continue;
        }
        match chars[i] {
            open @ ('<' | '(' | '[' | '{') => {
                if open == '(' {
                    last = Some(i);
                }
                i = group_end(chars, i, open)?;
            }
            _ => i += 1,
        }
    }
    last
}

/// What follows `operator` in a C++ name, as uftrace shows it, and how
/// many characters of `rest` it takes: a symbol (`<<=`, `()`, `->*`; the
/// space of `operator< <T>` taken too), ` new`/` delete` (with `[]`), or
/// a conversion's target type (shown as `(cast)`).
fn operator_name(rest: &str) -> (String, usize) {
    const WORDS: [&str; 4] = [" new[]", " delete[]", " new", " delete"];
    const SYMBOLS: [&str; 42] = [
        "()",
        "[]",
        "->*",
        "->",
        "<=>",
        "<<=",
        ">>=",
        "<<",
        ">>",
        "<=",
        ">=",
        "==",
        "!=",
        "&&",
        "||",
        "++",
        "--",
        "+=",
        "-=",
        "*=",
        "/=",
        "%=",
        "^=",
        "&=",
        "|=",
        "+",
        "-",
        "*",
        "/",
        "%",
        "^",
        "&",
        "|",
        "~",
        "!",
        "=",
        "<",
        ">",
        ",",
        "\"\"",
        "co_await",
        " co_await",
    ];
    for word in WORDS {
        if rest.starts_with(word) {
            return (word.to_string(), word.len());
        }
    }
    if let Some(symbol) = SYMBOLS.iter().find(|symbol| rest.starts_with(**symbol)) {
        let spaced = rest[symbol.len()..].starts_with(" <");
        return (symbol.to_string(), symbol.len() + usize::from(spaced));
    }
    // A conversion operator: ` TYPE` up to its parameter list.
    let chars: Vec<char> = rest.chars().collect();
    let mut depth = 0i32;
    let mut used = 0;
    while used < chars.len() {
        match chars[used] {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 => break,
            _ => {}
        }
        used += 1;
    }
    ("(cast)".to_string(), used)
}

/// The index just past the group that opens with `open` at
/// `chars[start]`, counting nested groups of the same kind, skipping
/// parenthesised text inside other groups and operators' names (where
/// `<` and `>` are not brackets); `None` when it does not close.
fn group_end(chars: &[char], start: usize, open: char) -> Option<usize> {
    let close = match open {
        '<' => '>',
        '(' => ')',
        '[' => ']',
        _ => '}',
    };
    let mut depth = 0usize;
    let mut i = start;
    while i < chars.len() {
        let c = chars[i];
        if starts_operator(chars, i) {
            let after = i + OPERATOR.len();
            let (_, used) = operator_name(&chars[after..].iter().collect::<String>());
            i = after + used;
            continue;
        }
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some(i + 1);
            }
        } else if open != '(' && c == '(' {
            i = group_end(chars, i, '(')?;
            continue;
        }
        i += 1;
    }
    None
}

/// `name` (a [`demangle`]d name) without its generic arguments: the
/// short form metrics label functions with. A `<…>` right after a name
/// (`HashMap<String, String>`) or after `::` (`drop_in_place::<T>`, the
/// `::` included) is dropped; a `<…>` that starts a path (`<T as
/// Trait>::f`, `<Store>::get`) stays, its paths shortened the same way.
/// `-> T` inside arguments and C++ operator names (`operator<`,
/// `operator->`) are no brackets. A name whose brackets do not balance is
/// returned as it is. Instances of one generic function share the short
/// name: `core::ptr::drop_in_place::<a::B>` and `…::<c::D>` are both
/// `core::ptr::drop_in_place`.
///
/// ```
/// use fntrace_format::short_name;
/// assert_eq!(
///     short_name("<hashbrown::map::HashMap<alloc::string::String, u8>>::insert"),
///     "<hashbrown::map::HashMap>::insert"
/// );
/// assert_eq!(
///     short_name("<alloc::string::String as core::fmt::Display>::fmt"),
///     "<alloc::string::String as core::fmt::Display>::fmt"
/// );
/// assert_eq!(short_name("core::ptr::drop_in_place::<kv::Conn>"), "core::ptr::drop_in_place");
/// ```
pub fn short_name(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.contains('<') {
        return std::borrow::Cow::Borrowed(name);
    }
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len());
    match shorten(&chars, 0, &mut out, false) {
        Some(end) if end == chars.len() => std::borrow::Cow::Owned(out),
        _ => std::borrow::Cow::Borrowed(name),
    }
}

/// Copies `chars[at..]` to `out`, generic arguments left out, up to the
/// end or (`inside`) the `>` that closes the group it is in; returns
/// where it stopped (at that `>`), `None` if brackets do not balance.
fn shorten(chars: &[char], mut at: usize, out: &mut String, inside: bool) -> Option<usize> {
    while at < chars.len() {
        if starts_operator(chars, at) {
            // `operator<`, `operator<<=`, `operator->`: the name, not brackets.
            out.push_str(OPERATOR);
            at += OPERATOR.len();
            while at < chars.len() && "<>=-!+*/%^&|~,()[]".contains(chars[at]) {
                out.push(chars[at]);
                at += 1;
            }
            continue;
        }
        match chars[at] {
            '-' if chars.get(at + 1) == Some(&'>') => {
                out.push_str("->");
                at += 2;
            }
            '>' if inside => return Some(at),
            '>' => return None,
            '<' => {
                // A path starts here (the name's start, after `::`, a
                // space, `(`, `&`, `[` or `,`)? Then `<T as Trait>` stays.
                // (After `::` it is a turbofish: rustc writes no
                // `a::<T as Trait>`.)
                let starts_path = out
                    .chars()
                    .last()
                    .is_none_or(|c| matches!(c, ' ' | '(' | '&' | '[' | ',' | '<' | '*'));
                if starts_path {
                    out.push('<');
                    at = shorten(chars, at + 1, out, true)?;
                    out.push('>');
                    at += 1;
                } else {
                    if out.ends_with("::") {
                        out.truncate(out.len() - 2);
                    }
                    at = skip_group(chars, at)?;
                }
            }
            c => {
                out.push(c);
                at += 1;
            }
        }
    }
    (!inside).then_some(at)
}

/// Where the `<…>` group opening at `at` ends (just after its `>`),
/// `->` and operator names inside not counted.
fn skip_group(chars: &[char], mut at: usize) -> Option<usize> {
    let mut depth = 0usize;
    while at < chars.len() {
        if starts_operator(chars, at) {
            at += OPERATOR.len();
            while at < chars.len() && "<>=-!+*/%^&|~".contains(chars[at]) {
                at += 1;
            }
            continue;
        }
        match chars[at] {
            '-' if chars.get(at + 1) == Some(&'>') => at += 1,
            '<' => depth += 1,
            '>' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(at + 1);
                }
            }
            _ => {}
        }
        at += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{demangle, demangle_full, short_name, uftrace_symbol_name};

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(
            demangle("_ZN4demo8tokenize17h0123456789abcdefE"),
            "demo::tokenize"
        );
        assert_eq!(
            demangle("_RNvCs2dGlcl3A6Of_21fixture_rust_workload4leaf"),
            "fixture_rust_workload::leaf"
        );
        assert_eq!(demangle("_Z11cxx_throwerl"), "cxx_thrower");
        assert_eq!(demangle_full("_Z11cxx_throwerl"), "cxx_thrower(long)");
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar");
        assert_eq!(demangle_full("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("pie_leaf"), "pie_leaf");
        // Already readable: unchanged.
        assert_eq!(
            demangle("<T as core::fmt::Debug>::fmt"),
            "<T as core::fmt::Debug>::fmt"
        );
    }

    /// C++ names as `uftrace report` 0.13 shows them (symbols of g++ 12's
    /// build of `tools/tests/cpp_names/names.cpp`).
    #[test]
    fn cpp_names_take_uftraces_simple_form() {
        for (symbol, simple) in [
            ("_ZNK6shapes5PointltERKS0_", "shapes::Point::operator<"),
            ("_ZNK6shapes5PointclEi", "shapes::Point::operator()"),
            ("_ZNK6shapes5PointcvbEv", "shapes::Point::operator(cast)"),
            ("_ZnwmPv", "operator new"),
            ("_ZN6shapes12_GLOBAL__N_16hiddenEi", "shapes::_GLOBAL__N_1::hidden"),
            ("_ZZ3runvENKUliE_clEi", "run::$_0::operator()"),
            ("_ZZ3runvENKUliE0_clEi", "run::$_1::operator()"),
            ("_ZNKSt8functionIFiiEEclEi", "std::function::operator()"),
            // Return types before the name, `operator< <T>` with its space.
            ("_ZSt3maxImERKT_S2_S2_", "std::max"),
            (
                "_ZStltIcSt11char_traitsIcESaIcEEbRKNSt7__cxx1112basic_stringIT_T0_T1_EESA_",
                "std::operator<",
            ),
            (
                "_ZN9__gnu_cxxmiIPN6shapes5PointESt6vectorIS2_SaIS2_EEEENS_17__normal_iteratorIT_T0_E15difference_typeERKSA_SD_",
                "__gnu_cxx::operator-",
            ),
            (
                "_ZSt3getILm0EJONSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEEERNSt13tuple_elementIXT_ESt5tupleIJDpT0_EEE4typeERSB_",
                "std::get",
            ),
            // A class local to a member function template.
            (
                "_ZZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE12_M_constructIPKcEEvT_S8_St20forward_iterator_tagEN6_GuardD1Ev",
                "std::__cxx11::basic_string::_M_construct::_Guard::~_Guard",
            ),
            // An inheriting constructor: named after its own class.
            (
                "_ZNSt15__uniq_ptr_dataIN6shapes4BaseESt14default_deleteIS1_ELb1ELb1EECI1St15__uniq_ptr_implIS1_S3_EEPS1_",
                "std::__uniq_ptr_data::__uniq_ptr_data",
            ),
            // A GCC clone: the suffix dropped, as uftrace does.
            ("_ZN1nL5scaleEii.constprop.0", "n::scale"),
        ] {
            assert_eq!(demangle(symbol), simple, "{symbol}");
        }
    }

    #[test]
    fn sym_files_get_elf_names_but_readable_rust() {
        assert_eq!(
            uftrace_symbol_name("_ZN2ns3ns13foo3barEi"),
            "_ZN2ns3ns13foo3barEi"
        );
        assert_eq!(uftrace_symbol_name("pie_leaf"), "pie_leaf");
        assert_eq!(
            uftrace_symbol_name("_RNvCs2dGlcl3A6Of_21fixture_rust_workload4leaf"),
            "fixture_rust_workload::leaf"
        );
        assert_eq!(
            uftrace_symbol_name(
                "_ZN48_$LT$demo..Token$u20$as$u20$core..fmt..Debug$GT$3fmt17h0123456789abcdefE"
            ),
            "<demo::Token as core::fmt::Debug>::fmt"
        );
    }

    #[test]
    fn short_names_leave_out_generic_arguments() {
        // Names of the example service's profile, as demangled.
        let cases = [
            (
                "<<std::hash::random::RandomState>::new::KEYS::{K#0}::{closure#1} as core::ops::function::FnOnce<(core::option::Option<&mut core::option::Option<core::cell::Cell<(u64, u64)>>>,)>>::call_once",
                "<<std::hash::random::RandomState>::new::KEYS::{K#0}::{closure#1} as core::ops::function::FnOnce>::call_once",
            ),
            (
                "<alloc::raw_vec::RawVecInner<_>>::reserve::do_reserve_and_handle::<alloc::alloc::Global>",
                "<alloc::raw_vec::RawVecInner>::reserve::do_reserve_and_handle",
            ),
            (
                "std::sys::backtrace::__rust_begin_short_backtrace::<fn() -> std::process::ExitCode, std::process::ExitCode>",
                "std::sys::backtrace::__rust_begin_short_backtrace",
            ),
            (
                "<tokio::runtime::task::harness::Harness<kv_service::serve::{closure#0}::{closure#1}, alloc::sync::Arc<tokio::runtime::scheduler::multi_thread::handle::Handle>>>::poll",
                "<tokio::runtime::task::harness::Harness>::poll",
            ),
            (
                "<&str as core::fmt::Display>::fmt",
                "<&str as core::fmt::Display>::fmt",
            ),
            (
                "<[u8] as core::fmt::Debug>::fmt",
                "<[u8] as core::fmt::Debug>::fmt",
            ),
            (
                "<fn() -> u8 as core::ops::function::FnOnce<()>>::call_once",
                "<fn() -> u8 as core::ops::function::FnOnce>::call_once",
            ),
            ("kv_service::handle_get", "kv_service::handle_get"),
            ("kv_service::serve::{closure#0}", "kv_service::serve::{closure#0}"),
            // C++ names (uftrace's simple form) keep their operators.
            ("ns::Point::operator<", "ns::Point::operator<"),
            ("ns::Stream::operator<<", "ns::Stream::operator<<"),
            ("ns::Ptr::operator->", "ns::Ptr::operator->"),
            // Brackets that do not balance: the name as it is.
            ("a<b", "a<b"),
            ("a>b<c", "a>b<c"),
            ("<a::B", "<a::B"),
        ];
        for (name, short) in cases {
            assert_eq!(short_name(name), short, "{name}");
        }
        assert_eq!(
            short_name("core::ptr::drop_in_place::<kv_service::serve_connection::{closure#0}>"),
            short_name("core::ptr::drop_in_place::<std::io::error::Error>"),
        );
    }
}
