//! `fntrace`: reads a trace directory (written by `fntrace::dump`, or by
//! `uftrace record`: the uftrace data format) and prints or converts it. The
//! commands live in the `cli` module; `fntrace --help` lists them.

#![forbid(unsafe_code)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
