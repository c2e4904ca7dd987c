//! The metrics endpoint's replies: routes, tokens, addresses.

use super::*;

fn status(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

fn open(head: &[u8]) -> Vec<u8> {
    now(answer(head, &MetricsOptions::default()))
}

fn now(answer: Answer) -> Vec<u8> {
    match answer {
        Answer::Now(reply) => reply,
        Answer::Later(_) => panic!("a window opened"),
    }
}

#[test]
fn answers_only_get_of_metrics() {
    assert_eq!(
        status(&open(b"GET /nope HTTP/1.1\r\n")),
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        status(&open(b"POST /metrics HTTP/1.1\r\n")),
        "HTTP/1.1 405 Method Not Allowed"
    );
    assert_eq!(status(&open(b"hello")), "HTTP/1.1 400 Bad Request");
    assert_eq!(
        status(&open(b"GET /metrics SPDY\r\n")),
        "HTTP/1.1 400 Bad Request"
    );
    assert_eq!(status(&open(&[0xff, 0xfe])), "HTTP/1.1 400 Bad Request");
    let ok = open(b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n");
    let text = String::from_utf8(ok).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains(OPENMETRICS_CONTENT_TYPE));
    assert!(text.ends_with("# EOF\n"), "{text}");
    let plain = String::from_utf8(open(b"HEAD /metrics?x=1 HTTP/1.0\r\n")).unwrap();
    assert!(plain.contains(PROMETHEUS_CONTENT_TYPE) && plain.ends_with("\r\n\r\n"));
    assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nrest"), Some(20));
    assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(14));
    assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
    // A window out of bounds is refused before anything else is looked at.
    let bad = open(b"GET /debug/pprof/profile?seconds=0 HTTP/1.1\r\n");
    let bad = String::from_utf8(bad).unwrap();
    assert!(bad.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{bad}");
    assert!(bad.contains("from 1 to 300"), "{bad}");
    let other = String::from_utf8(open(b"GET /debug/pprof/heap HTTP/1.1\r\n")).unwrap();
    assert!(
        other.contains("only /metrics and /debug/pprof/profile"),
        "{other}"
    );
}

#[test]
fn with_a_token_only_requests_carrying_it_are_answered() {
    let token = "0123456789abcdef0123456789abcdef";
    let options = MetricsOptions {
        token: Some(token.into()),
        ..MetricsOptions::default()
    };
    let ask = |head: String| String::from_utf8(now(answer(head.as_bytes(), &options))).unwrap();
    for refused in [
        "GET /metrics HTTP/1.1\r\n".to_string(),
        // Not even which paths exist, without it.
        "GET /other HTTP/1.1\r\n".to_string(),
        format!("GET /metrics HTTP/1.1\r\nAuthorization: Basic {token}\r\n"),
        format!("GET /metrics HTTP/1.1\r\nAuthorization: Bearer{token}\r\n"),
        format!("GET /metrics HTTP/1.1\r\nAuthorization: Bearer {token}x\r\n"),
        format!(
            "GET /metrics HTTP/1.1\r\nAuthorization: Bearer {}\r\n",
            &token[1..]
        ),
        "GET /metrics HTTP/1.1\r\nAuthorization: Bearer \r\n".to_string(),
        // Two of them: which one counts is not guessed.
        format!(
            "GET /metrics HTTP/1.1\r\nAuthorization: Bearer {token}\r\n\
             Authorization: Bearer nope\r\n"
        ),
    ] {
        let reply = ask(refused.clone());
        assert!(
            reply.starts_with("HTTP/1.1 401 Unauthorized\r\n"),
            "{refused:?}: {reply}"
        );
        assert!(
            reply.contains("WWW-Authenticate: Bearer realm=\"fntrace\""),
            "{reply}"
        );
    }
    let wrong = ask(format!(
        "GET /metrics HTTP/1.1\r\nAuthorization: Bearer {token}x\r\n"
    ));
    assert!(wrong.contains("error=\"invalid_token\""), "{wrong}");
    for accepted in [
        format!("GET /metrics HTTP/1.1\r\nAuthorization: Bearer {token}\r\n"),
        format!("GET /metrics HTTP/1.1\r\nauthorization:   bearer {token}  \r\n"),
    ] {
        let reply = ask(accepted.clone());
        assert!(
            reply.starts_with("HTTP/1.1 200 OK\r\n"),
            "{accepted:?}: {reply}"
        );
    }
    assert!(same_token(b"abc", b"abc"));
    assert!(!same_token(b"abd", b"abc"));
    assert!(!same_token(b"ab", b"abc"));
    assert!(!same_token(b"abc\0", b"abc"));
    assert!(!same_token(b"", b"abc"));
}

#[test]
fn an_address_other_hosts_reach_needs_the_opt_in_and_a_token() {
    let refused = |address: &str, options: &MetricsOptions| {
        let resolved: Vec<SocketAddr> = address.to_socket_addrs().unwrap().collect();
        refusal(address, &resolved, options)
    };
    let loopback = MetricsOptions::default();
    for address in [
        "127.0.0.1:9464",
        "127.1.2.3:9464",
        "[::1]:9464",
        "[::ffff:127.0.0.1]:1",
    ] {
        assert_eq!(refused(address, &loopback), None, "{address}");
    }
    for address in [
        "0.0.0.0:9464",
        "[::]:9464",
        "192.0.2.1:9464",
        "[::ffff:10.0.0.1]:1",
    ] {
        let why = refused(address, &loopback).expect(address);
        assert!(why.contains("is not a loopback address"), "{why}");
        assert!(why.contains("FNTRACE_METRICS_PUBLIC=1"), "{why}");
    }
    let public = MetricsOptions {
        public: true,
        ..MetricsOptions::default()
    };
    let why = refused("0.0.0.0:9464", &public).unwrap();
    assert!(why.contains("no token is set"), "{why}");
    let with_token = MetricsOptions {
        token: Some("0123456789abcdef".into()),
        ..public
    };
    assert_eq!(refused("0.0.0.0:9464", &with_token), None);
    let weak = MetricsOptions {
        token: Some("secret".into()),
        ..MetricsOptions::default()
    };
    let why = refused("127.0.0.1:9464", &weak).unwrap();
    assert!(
        why.contains("too short") && !why.contains("secret"),
        "{why}"
    );
    assert!(!format!("{with_token:?}").contains("0123456789abcdef"));
}
