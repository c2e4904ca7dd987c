//! `FNTRACE_PATCH` chooses the patch protocol at `init`: `stop` and
//! `breakpoint` are taken; anything else prints one line on stderr naming
//! the variable and keeps the default (the breakpoint protocol). Each case
//! runs this test binary again as a child with the variable set.

use std::process::Command;

use fntrace::PatchProtocol;

const CHILD: &str = "FNTRACE_PATCH_ENV_CHILD";

/// In a child: init, then print the protocol in use.
#[test]
fn child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    fntrace::init().unwrap();
    println!("protocol={:?}", fntrace::patch_protocol());
}

fn run_child(value: &str) -> (String, String) {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("FNTRACE_PATCH", value)
        .output()
        .unwrap();
    assert!(output.status.success());
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_variable_chooses_the_protocol_and_a_bad_value_is_named() {
    assert_eq!(fntrace::patch_protocol(), PatchProtocol::Breakpoint);

    let (stdout, stderr) = run_child("stop");
    assert!(stdout.contains("protocol=StopTheWorld"), "{stdout}");
    assert!(!stderr.contains("fntrace:"), "{stderr}");

    let (stdout, _) = run_child("breakpoint");
    assert!(stdout.contains("protocol=Breakpoint"), "{stdout}");

    let (stdout, stderr) = run_child("sometimes");
    assert!(stdout.contains("protocol=Breakpoint"), "{stdout}");
    let complaints: Vec<_> = stderr
        .lines()
        .filter(|l| l.starts_with("fntrace:"))
        .collect();
    assert_eq!(complaints.len(), 1, "{stderr}");
    assert!(
        complaints[0].contains("FNTRACE_PATCH=sometimes"),
        "{}",
        complaints[0]
    );

    // Between operations, from any thread.
    std::thread::spawn(|| fntrace::set_patch_protocol(PatchProtocol::StopTheWorld).unwrap())
        .join()
        .unwrap();
    assert_eq!(fntrace::patch_protocol(), PatchProtocol::StopTheWorld);
}
