//! The arguments that say which calls a reading command looks at (`-F`,
//! `-N`, `--tid`, `--time-range`, `--demangle`), the same for every command
//! that reads a trace.

use clap::{Args, ValueEnum};

/// Which calls a command looks at (the same for every command).
#[derive(Clone, Debug, Default, Args)]
pub struct SelectArgs {
    /// Only the calls inside functions matching GLOB (the functions and
    /// everything they call); repeatable.
    #[arg(short = 'F', long = "filter", value_name = "GLOB")]
    pub filter: Vec<String>,
    /// Leave out functions matching GLOB, and everything they call;
    /// repeatable.
    #[arg(short = 'N', long = "notrace", value_name = "GLOB")]
    pub notrace: Vec<String>,
    /// Only this thread; repeatable.
    #[arg(long, value_name = "TID")]
    pub tid: Vec<u32>,
    /// Only calls entered in A~B: times since the trace's start with a unit
    /// (`10ms~20ms`, `1.5s~`), or timestamps in seconds as uftrace shows them
    /// (`51234.000100~51234.000200`); either end may be left out.
    #[arg(long, value_name = "A~B")]
    pub time_range: Option<String>,
    /// How C++ functions are named (shown, and matched by -F/-N): `simple`,
    /// as uftrace shows them (`ns::Class::method`), or `full` (template
    /// arguments, parameters and return type: overloads apart).
    #[arg(long, value_name = "MODE", value_enum, default_value_t = Demangle::Simple)]
    pub demangle: Demangle,
}

/// `--demangle`: how C++ functions are named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Demangle {
    /// `ns::Class::method`: no template arguments, parameters or return
    /// type (uftrace's default; overloads and instances share a name).
    #[default]
    Simple,
    /// Everything the symbol says: `void ns::sort<int*>(int*, int*)`.
    Full,
}
