//! `fntrace`: reads a trace directory (written by `fntrace::dump`, or by
//! `uftrace record`: the uftrace data format) and prints or converts it. The
//! commands live in the `cli` module; `fntrace --help` lists them. Under
//! `fntrace cargo`, cargo also runs it as its rustc wrapper.

#![forbid(unsafe_code)]

mod cli;

fn main() -> std::process::ExitCode {
    // `fntrace cargo` makes this binary cargo's rustc wrapper.
    // `fntrace record` starts its program through this executable.
    if let Some(code) = cli::run_as_launcher() {
        return code;
    }
    if let Some(code) = cli::run_as_rustc_wrapper() {
        return code;
    }
    cli::main()
}
