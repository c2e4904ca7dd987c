//! The live profile end to end: a `gcc -pg` C program preloaded with
//! `libfntrace.so` (no code change), serving its control socket, driven
//! with `fntrace ctl`: `enable profile`, `fntrace top --once` lists its
//! functions while it works, `ctl metrics` gives exact counts that
//! `promtool check metrics` accepts, `ctl profile` prints them in
//! report's table, `profile --save` feeds `fntrace flame`, `profile reset`
//! and `disable profile` do what they say.
//!
//! The program works only when told to (a line on its stdin) and says when
//! it is done, so each count is known exactly: the tracer is switched and
//! read while the program is quiet.
use crate::common;
use crate::profile_program;

use common::TempDir;
use profile_program::{counts, expected, fntrace, promtool_accepts, Program};

#[test]
fn a_preloaded_c_program_profiled_live() {
    let dir = TempDir::new("live");
    let socket = dir.0.join("control.sock");
    let target = socket.to_str().unwrap();
    let mut program = Program::start(&dir.0, &socket, &[]);

    // Calls before the profile is enabled are not counted.
    assert_eq!(program.ask("run 50"), 50);
    fntrace(&["ctl", target, "enable", "profile"]);
    assert_eq!(program.ask("run 1000"), 1000);

    // Quiet: exact. (`main` was entered before the tracer was enabled: a
    // call in progress then is not counted, so it has no row.)
    let metrics = fntrace(&["ctl", target, "metrics"]);
    promtool_accepts(&metrics);
    assert_eq!(counts(&metrics), expected(1000, 2000), "{metrics}");
    assert!(
        metrics.contains(
            "fntrace_function_duration_seconds_bucket{function=\"leaf\",le=\"+Inf\"} 2000\n"
        ),
        "{metrics}"
    );

    // The table, as report's.
    let table = fntrace(&["ctl", target, "profile", "-s", "calls", "-N", "pars?"]);
    let rows: Vec<(String, String)> = table
        .lines()
        .skip_while(|line| !line.starts_with("calls"))
        .skip(1)
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            (cells[0].to_string(), cells.last().unwrap().to_string())
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("2000".to_string(), "leaf".to_string()),
            ("1000".to_string(), "handle".to_string()),
        ],
        "{table}"
    );

    // top: one interval while the program works.
    program.send("spin 3000");
    let frame = fntrace(&["top", target, "--once", "--interval", "1s"]);
    let spun = program.done();
    assert!(spun > 0);
    let header = frame.lines().next().unwrap();
    assert!(
        header.starts_with(&format!("fntrace top {target}: ")),
        "{frame}"
    );
    let listed: Vec<&str> = frame
        .lines()
        .skip(2)
        .map(|line| line.split_whitespace().last().unwrap())
        .collect();
    for name in ["handle", "parse", "leaf"] {
        assert!(listed.contains(&name), "top lacks {name}:\n{frame}");
    }
    // Each listed function made calls in the interval (calls/s > 0),
    // sorted by total: handle (callees included) first.
    assert_eq!(listed[0], "handle", "{frame}");
    let handle_rate: u64 = frame
        .lines()
        .nth(2)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(handle_rate > 0, "{frame}");

    // The snapshot saved and drawn: handle → parse, leaf.
    let saved = dir.0.join("now.profile");
    fntrace(&["ctl", target, "profile", "--save", saved.to_str().unwrap()]);
    let folded = dir.0.join("stacks.txt");
    fntrace(&[
        "flame",
        saved.to_str().unwrap(),
        "--folded",
        "-o",
        folded.to_str().unwrap(),
    ]);
    let stacks: Vec<String> = std::fs::read_to_string(&folded)
        .unwrap()
        .lines()
        .map(|line| line.rsplit_once(' ').unwrap().0.to_string())
        .collect();
    for chain in ["handle", "handle;parse", "handle;leaf"] {
        assert!(stacks.iter().any(|s| s == chain), "no {chain}: {stacks:?}");
    }

    // Disabled: the counts stay, exact, and nothing more is counted.
    fntrace(&["ctl", target, "disable", "profile"]);
    assert_eq!(program.ask("run 7"), 7);
    let metrics = fntrace(&["ctl", target, "metrics"]);
    promtool_accepts(&metrics);
    // `spin` read the clock once for its deadline, then once per round
    // and once more to stop.
    let mut spun_counts = expected(1000 + spun, 2000 + 2 * spun);
    spun_counts.insert(2, ("now".to_string(), spun + 2));
    assert_eq!(counts(&metrics), spun_counts, "{metrics}");

    // Reset: from zero.
    fntrace(&["ctl", target, "profile", "reset"]);
    fntrace(&["ctl", target, "enable", "profile"]);
    assert_eq!(program.ask("run 10"), 10);
    fntrace(&["ctl", target, "disable", "profile"]);
    let metrics = fntrace(&["ctl", target, "metrics"]);
    promtool_accepts(&metrics);
    assert_eq!(counts(&metrics), expected(10, 20), "{metrics}");
}
