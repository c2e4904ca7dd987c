//! `tests/c/ctl_prog.c` driven from a test: started with a chosen
//! environment, paced by its standard input (`work N`, `exit`), so that
//! the test knows which calls happened between two of its commands.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The running C program.
pub struct Program {
    pub child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Program {
    /// Starts `program` in `cwd` with `vars` (and no other FNTRACE
    /// variable), once it printed `ready` (its constructors, fntrace's
    /// among them, have run).
    pub fn start(program: &Path, vars: &[(&str, &OsStr)], cwd: &Path) -> Program {
        let mut command = Command::new(program);
        command
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, _) in std::env::vars_os() {
            if name.as_bytes().starts_with(b"FNTRACE") {
                command.env_remove(name);
            }
        }
        command.envs(vars.iter().copied());
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "{}", program.display());
        Program {
            child,
            stdin,
            stdout,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `line`, and waits for the program's `answer` line.
    pub fn ask(&mut self, line: &str, answer: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        let mut got = String::new();
        self.stdout.read_line(&mut got).unwrap();
        assert_eq!(got, format!("{answer}\n"), "the program stopped working");
    }

    /// Starts a round of `n` iterations per thread.
    pub fn begin_work(&mut self, n: u64) {
        writeln!(self.stdin, "work {n}").unwrap();
    }

    /// Waits for the round to end.
    pub fn end_work(&mut self) {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "done\n", "the program stopped working");
    }

    /// `n` iterations on each of the program's threads, waited for.
    pub fn work(&mut self, n: u64) {
        self.begin_work(n);
        self.end_work();
    }

    /// Ends the program; it must exit 0. Its standard error, without
    /// the line fntrace prints when a batch found a thread blocking
    /// SIGTRAP (a thread being created has every signal blocked for a
    /// moment; on a busy machine a batch may see it, and then patches
    /// stopping the world, correctly, and says so once).
    pub fn finish(mut self) -> String {
        writeln!(self.stdin, "exit").unwrap();
        drop(self.stdin);
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}: {stderr}");
        stderr
            .split_inclusive('\n')
            .filter(|line| {
                !line.starts_with("fntrace: thread ") || !line.contains(" blocks SIGTRAP")
            })
            .collect()
    }
}
