//! Function names: ELF symbols made readable ([`demangle`]), and the form a
//! symbol takes in a uftrace `.sym` file ([`uftrace_symbol_name`]).
//!
//! The runtime names traced functions with [`demangle`] too, so that fntrace's
//! reports, its filters and what it reads back from a data directory agree.

/// Demangles Rust (legacy `_ZN…E` and v0 `_R…`, without the hash) and C++
/// (Itanium `_Z…`, with its parameter list) names; other names (C) are
/// returned as they are.
pub fn demangle(name: &str) -> String {
    if let Ok(demangled) = rustc_demangle::try_demangle(name) {
        // `{:#}` leaves the hash out: it tells apart crate versions, not
        // functions, and no one types it in a filter.
        return format!("{demangled:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(name) {
            if let Ok(demangled) = symbol.demangle() {
                return demangled;
            }
        }
    }
    name.to_string()
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

#[cfg(test)]
mod tests {
    use super::{demangle, uftrace_symbol_name};

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
        assert_eq!(demangle("_Z11cxx_throwerl"), "cxx_thrower(long)");
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("pie_leaf"), "pie_leaf");
        // Already readable: unchanged.
        assert_eq!(
            demangle("<T as core::fmt::Debug>::fmt"),
            "<T as core::fmt::Debug>::fmt"
        );
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
}
