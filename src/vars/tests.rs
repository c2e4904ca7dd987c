//! The variables' table and parsers, checked.

use super::*;

/// The `env` module's doc and `docs/environment.md` name every
/// variable of the table (the page with whether `exec` passes it on,
/// as the table says), and nothing else names a variable the table
/// lacks.
#[test]
fn the_docs_list_every_variable() {
    let env_doc: String = include_str!("../preload/env.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let docs = include_str!("../../docs/environment.md");
    for variable in VARIABLES {
        let named = format!("`{}", variable.name);
        assert!(
            env_doc.contains(&named),
            "env.rs's doc lacks {}",
            variable.name
        );
        let row = format!("| `{}` |", variable.name);
        let line = docs
            .lines()
            .find(|line| line.starts_with(&row))
            .unwrap_or_else(|| panic!("docs/environment.md lacks {}", variable.name));
        // The last column says whether exec passes it on, as the
        // table's flag, which the exec wrappers read, does.
        let passed = line
            .trim_end_matches('|')
            .rsplit('|')
            .next()
            .unwrap()
            .trim();
        assert_eq!(
            passed,
            if variable.passed_on { "yes" } else { "no" },
            "docs/environment.md: {}'s \"passed across exec\"",
            variable.name
        );
        assert!(!variable.meaning.is_empty() && !variable.meaning.contains('\n'));
    }
    for doc in [env_doc.as_str(), docs] {
        for word in doc.split(|c: char| !(c.is_ascii_uppercase() || c == '_')) {
            if word.starts_with("FNTRACE") && word != "FNTRACE_" {
                assert!(
                    variable(word).is_some() || word == "FNTRACE_LIB",
                    "{word} is documented but not in the table"
                );
            }
        }
    }
}

#[test]
fn every_variable_refuses_a_bad_value() {
    let bad = [
        ("FNTRACE_FILTER", ",,"),
        ("FNTRACE_DEPTH", "deep"),
        ("FNTRACE_ARGS", "f@arg1/o"),
        ("FNTRACE_ARGS", "f@retval"),
        ("FNTRACE_RETVAL", "f@arg1"),
        ("FNTRACE_PATCH_FUNCTIONS", "w_*,,x"),
        ("FNTRACE_PATCH_FUNCTIONS", "!w_*"),
        ("FNTRACE_REPORT", "yes"),
        ("FNTRACE_APPEND", "2"),
        ("FNTRACE_FLIGHT", "64Q"),
        ("FNTRACE_FLIGHT", "8"),
        ("FNTRACE_FLIGHT", "4097M"),
        ("FNTRACE_FLIGHT", "1048576M"),
        ("FNTRACE_FLIGHT_TRIGGER", "handle_*"),
        ("FNTRACE_FLIGHT_TRIGGER", "handle_*>5"),
        ("FNTRACE_FLIGHT_TRIGGER", ">5ms"),
        ("FNTRACE_FLIGHT_TRIGGER", "a>5ms,,b>1ms"),
        ("FNTRACE_FLIGHT_TRIGGER", "a>5ms@all"),
        ("FNTRACE_FLIGHT_TRIGGER", "a>@trigger-thread"),
        ("FNTRACE_FLIGHT_TRIGGER", ""),
        ("FNTRACE_FLIGHT_TRIGGER", "SIGSEGV"),
        ("FNTRACE_FLIGHT_TRIGGER", "SIGUSR2"),
        ("FNTRACE_FLIGHT_TRIGGER", "SIGNOPE"),
        ("FNTRACE_FLIGHT_RATE", "0"),
        ("FNTRACE_FUTURES_SLOTS", "63"),
        ("FNTRACE_CONTROL", "yes"),
        ("FNTRACE_CONTROL", "rel/x.sock"),
        ("FNTRACE_METRICS", "localhost"),
        ("FNTRACE_METRICS", "127.0.0.1:99999"),
        ("FNTRACE_METRICS", ":99999"),
        ("FNTRACE_METRICS", "host:"),
        ("FNTRACE_METRICS_PUBLIC", "yes"),
        ("FNTRACE_METRICS_TOKEN", ""),
        ("FNTRACE_METRICS_TOKEN", "short"),
        ("FNTRACE_METRICS_TOKEN", "0123456789abcdef 0123"),
        ("FNTRACE_METRICS_TOKEN", "0123456789abcdef=x"),
        ("FNTRACE_METRICS_TOKEN_FILE", "token.txt"),
        ("FNTRACE_METRICS_MAX_FUNCTIONS", "many"),
        ("FNTRACE_METRICS_MAX_FUNCTIONS", "-1"),
        ("FNTRACE_METRICS_MAX_FUNCTIONS", "1000001"),
        ("FNTRACE_PATCH", "fast"),
        ("FNTRACE_PATCH_PRIORITY", "high"),
        ("FNTRACE_TEXT_WRITES", "poke"),
    ];
    for (name, value) in bad {
        let err = (variable(name).unwrap().check)(value).unwrap_err();
        assert!(!err.contains('\n'), "{name}={value}: {err}");
    }
    assert_eq!(
        parse_patch_functions("w_*, parse_?"),
        Ok(vec!["w_*".to_string(), "parse_?".to_string()])
    );
    use crate::flight::SnapshotThreads::{All, Trigger};
    assert_eq!(parse_flight_budget("64M"), Ok(64 << 20));
    assert_eq!(parse_flight_budget("4G"), Ok(4 << 30));
    assert_eq!(
        parse_flight_budget("5G"),
        Err("5368709120 bytes is over the flight window's limit, 4G (4294967296 bytes)".into())
    );
    assert_eq!(
        parse_triggers("handle_*>5ms, other>20ms@trigger-thread,panic,SIGUSR1"),
        Ok(vec![
            TriggerSpec::Slow("handle_*".into(), Duration::from_millis(5), All),
            TriggerSpec::Slow("other".into(), Duration::from_millis(20), Trigger),
            TriggerSpec::Panic,
            TriggerSpec::Signal(libc::SIGUSR1),
        ])
    );
    // Trait impls' names hold spaces and '>'.
    let poll = "<a::F as core::future::future::Future>::poll";
    assert_eq!(
        parse_triggers(&format!("{poll}>4ms")),
        Ok(vec![TriggerSpec::Slow(
            poll.into(),
            Duration::from_millis(4),
            All
        )])
    );
    assert!(parse_globs(&format!("{poll},!b::*")).is_ok());
    assert!(parse_globs("a b").is_ok() && parse_globs("a\tb").is_err());
    assert_eq!(parse_control("/run/x.sock"), Ok(Some("/run/x.sock".into())));
    assert_eq!(parse_control("0"), Ok(None));
}

#[test]
fn what_exec_passes_on_is_in_the_table() {
    for name in [
        "FNTRACE_PATCH_PRIORITY",
        "FNTRACE_TEXT_WRITES",
        "FNTRACE_OUTPUT",
    ] {
        assert!(variable(name).unwrap().passed_on, "{name}");
    }
}
