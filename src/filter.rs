//! Which calls a tracer sees: function-name globs (applied when sites are
//! patched: functions not selected keep their NOP), and limits a tracer
//! applies at run time (maximum depth, minimum duration).

use std::time::Duration;

use crate::error::Error;

/// A selection of traced calls, passed to [`crate::enable_with`].
///
/// ```
/// let filter = fntrace::Filter::new()
///     .include("demo::*")
///     .exclude("*::drop_in_place*")
///     .max_depth(8)
///     .min_duration(std::time::Duration::from_micros(1));
/// assert!(filter.selects("demo::handle_request"));
/// assert!(!filter.selects("core::ptr::drop_in_place::<demo::Foo>"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    include: Vec<String>,
    exclude: Vec<String>,
    max_depth: Option<u16>,
    min_duration: Option<Duration>,
    patch: Vec<String>,
    args: Vec<String>,
    retval: Vec<String>,
}

impl Filter {
    /// Every function, no limits.
    pub fn new() -> Filter {
        Filter::default()
    }

    /// Trace only functions whose demangled name matches one of the
    /// included globs (`*` any run of characters, `?` one character; a glob
    /// also matches from any point where a path starts inside the name, so
    /// `serde_json::*` selects `<serde_json::Value as serde::Serialize>::serialize`;
    /// a bare name, without `::`, also matches the last segment of a path as
    /// GDB's `break NAME` does, so `sleeper` selects `app::sleeper`: see
    /// [the rules](fntrace_format::glob#rules)). Without any include, every
    /// function is included.
    pub fn include(mut self, glob: &str) -> Filter {
        self.include.push(glob.to_string());
        self
    }

    /// Never trace functions whose demangled name matches `glob`.
    pub fn exclude(mut self, glob: &str) -> Filter {
        self.exclude.push(glob.to_string());
        self
    }

    /// Record only calls at most this deep (0: only the outermost traced
    /// calls of each thread).
    pub fn max_depth(mut self, depth: u16) -> Filter {
        self.max_depth = Some(depth);
        self
    }

    /// Record only calls that take at least this long (graph tracer). At
    /// most `u64::MAX` nanoseconds (about 584 years): longer is refused by
    /// `fntrace::enable_with` with `Error::BadFilter`.
    pub fn min_duration(mut self, duration: Duration) -> Filter {
        self.min_duration = Some(duration);
        self
    }

    /// Before the tracer is enabled, patch the entries of the functions
    /// matching `glob` that were built without instrumentation, so that
    /// they have sites too (uftrace's `-P`; see [`crate::patch_functions`],
    /// which this calls, and `docs/runtime-patching.md`). They are then
    /// selected like any function: by the include and exclude globs, if
    /// any. Functions that cannot be patched safely are left as built and
    /// listed, with the reason, by [`crate::patch_report`].
    ///
    /// ```no_run
    /// // Trace `parse_*`, built without -pg, with the graph tracer.
    /// let filter = fntrace::Filter::new().patch("parse_*");
    /// fntrace::enable_with("graph", &filter)?;
    /// # Ok::<(), fntrace::Error>(())
    /// ```
    pub fn patch(mut self, glob: &str) -> Filter {
        self.patch.push(glob.to_string());
        self
    }

    /// Record the arguments `spec` names, in uftrace's `-A` syntax
    /// (`GLOB@arg1/d,arg2/s,fparg1`; several specs joined by `;` or given
    /// in several calls), with the graph tracer: in recordings
    /// ([`crate::record`]) and flight snapshots, read by `uftrace replay`
    /// and `fntrace replay`. The specs are the process's, as
    /// [`crate::set_arg_specs`] sets them (they replace the ones in force,
    /// which a filter without specs leaves as they are); a spec that does
    /// not parse, or a glob that selects no function with a call site, is
    /// refused by [`crate::enable_with`] and [`crate::record`] with
    /// `Error::BadArgSpec`, nothing changed.
    ///
    /// ```no_run
    /// let filter = fntrace::Filter::new()
    ///     .include("kv::*")
    ///     .args("kv::handle_get@arg1/s")
    ///     .retval("kv::handle_get@retval/d");
    /// let recording = fntrace::record("graph", &filter, "/tmp/trace")?;
    /// # Ok::<(), fntrace::Error>(())
    /// ```
    pub fn args(mut self, spec: &str) -> Filter {
        self.args.push(spec.to_string());
        self
    }

    /// Record the return values `spec` names, in uftrace's `-R` syntax
    /// (`GLOB@retval/d`); as [`Filter::args`].
    pub fn retval(mut self, spec: &str) -> Filter {
        self.retval.push(spec.to_string());
        self
    }

    /// The specs set with [`Filter::args`].
    pub fn get_args(&self) -> &[String] {
        &self.args
    }

    /// The specs set with [`Filter::retval`].
    pub fn get_retval(&self) -> &[String] {
        &self.retval
    }

    /// The globs set with [`Filter::patch`].
    pub fn get_patch(&self) -> &[String] {
        &self.patch
    }

    /// The depth limit set with [`Filter::max_depth`], if any.
    pub fn get_max_depth(&self) -> Option<u16> {
        self.max_depth
    }

    /// The duration threshold set with [`Filter::min_duration`], if any.
    pub fn get_min_duration(&self) -> Option<Duration> {
        self.min_duration
    }

    /// The duration threshold in nanoseconds (0: none), or why the filter
    /// cannot be used.
    pub(crate) fn min_duration_ns(&self) -> Result<u64, Error> {
        let Some(duration) = self.min_duration else {
            return Ok(0);
        };
        u64::try_from(duration.as_nanos()).map_err(|_| {
            Error::BadFilter(format!(
                "min_duration of {duration:?} is longer than the longest fntrace can measure \
                 (u64::MAX nanoseconds, about 584 years)"
            ))
        })
    }

    /// Whether the names part of the filter selects `name`.
    pub fn selects(&self, name: &str) -> bool {
        let included = self.include.is_empty() || self.include.iter().any(|g| glob_match(g, name));
        included && !self.exclude.iter().any(|g| glob_match(g, name))
    }

    /// Its include globs, then its exclude globs (what a check for globs
    /// that select nothing looks at).
    pub(crate) fn name_globs(&self) -> impl Iterator<Item = &str> {
        self.include.iter().chain(&self.exclude).map(String::as_str)
    }

    /// Whether the filter looks at names at all.
    pub(crate) fn has_name_rules(&self) -> bool {
        !self.include.is_empty() || !self.exclude.is_empty()
    }
}

/// The one glob matcher of fntrace, shared with the CLI's `-F`/`-N`: see
/// [its rules](fntrace_format::glob#rules).
fn glob_match(glob: &str, name: &str) -> bool {
    fntrace_format::glob::matches(glob, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("demo::*", "demo::tokenize"));
        assert!(glob_match("*tokenize", "demo::tokenize"));
        assert!(glob_match("d?mo::*ize", "demo::tokenize"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("demo::*", "core::demo::x"));
        // The shared rules: a crate's path selects its trait impls too.
        assert!(glob_match(
            "serde_json::*",
            "<serde_json::value::Value as serde::Deserialize>::deserialize"
        ));
        assert!(!glob_match("a*b", "acbd"));
        assert!(glob_match("*a*b*", "xxaxxbxx"));
    }

    #[test]
    fn a_bare_name_selects_the_function_in_any_module() {
        // FNTRACE_FILTER and `ctl filter` build this Filter too.
        let f = Filter::new().include("sleeper");
        assert!(f.selects("acc_graph::sleeper"));
        assert!(f.selects("ns::sleeper"));
        assert!(f.selects("sleeper"));
        assert!(!f.selects("acc_graph::sleeper_two"));
        assert!(!Filter::new()
            .exclude("sleeper")
            .selects("acc_graph::sleeper"));
        assert!(!Filter::new()
            .include("x::sleeper")
            .selects("acc_graph::sleeper"));
    }

    #[test]
    fn include_and_exclude() {
        let f = Filter::new()
            .include("a::*")
            .include("b::*")
            .exclude("*::skip");
        assert!(f.selects("a::x"));
        assert!(f.selects("b::y"));
        assert!(!f.selects("a::skip"));
        assert!(!f.selects("c::x"));
        assert!(Filter::new().selects("anything"));
        assert!(!Filter::new().exclude("*").selects("anything"));
    }

    #[test]
    fn durations_beyond_u64_nanoseconds_are_refused_not_wrapped() {
        let longest = Duration::from_nanos(u64::MAX);
        assert_eq!(Filter::new().min_duration_ns().unwrap(), 0);
        let ok = Filter::new().min_duration(longest);
        assert_eq!(ok.min_duration_ns().unwrap(), u64::MAX);
        // 584 years and a bit: as_nanos() as u64 used to wrap this to 5 ns.
        let wrapped = Filter::new().min_duration(longest + Duration::from_nanos(6));
        let err = wrapped.min_duration_ns().unwrap_err();
        assert!(
            matches!(err, Error::BadFilter(ref m) if m.contains("584 years")),
            "{err}"
        );
    }
}
