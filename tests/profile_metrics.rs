//! The metrics endpoint (`GET /metrics`, OpenMetrics text of the live
//! profile): exact counts from gcc -pg code, in-process
//! (`fntrace::serve_metrics`) and from a program that never calls fntrace
//! (`libfntrace.so` preloaded, `FNTRACE=profile FNTRACE_METRICS=…`);
//! `promtool check metrics` accepts the text; slow, oversized, idle and
//! wrong requests get error statuses and change nothing, and idle ones
//! do not keep a scrape out. (tests/programs/metrics_chaos.rs: who may scrape, the
//! token, idle clients at scale, the ceiling on functions.)

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::native::{build_libraries, profile_dir, repo};
use fntrace::{Filter, PROFILE_TRACER};
use fntrace_fixtures::c_pie;

/// Sends `request` and reads the whole response (the server closes).
fn http(address: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.write_all(request).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    String::from_utf8(response).unwrap()
}

/// The body of a successful `GET /metrics`.
fn scrape(address: SocketAddr) -> String {
    let response = http(address, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    body.to_string()
}

/// `fntrace_function_self_seconds_count` (calls) per exported function.
fn counts(body: &str) -> HashMap<String, u64> {
    body.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("fntrace_function_self_seconds_count{function=\"")?;
            let (name, value) = rest.split_once("\"} ")?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// Sends `request` on the control socket; its reply (the server closes).
fn control(socket: &Path, request: &str) -> String {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    writeln!(stream, "{request}").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

/// The exported functions of a scrape, by name.
fn names(body: &str) -> Vec<String> {
    let mut names: Vec<String> = counts(body).into_keys().collect();
    names.sort();
    names
}

/// `promtool check metrics` reads the text on stdin.
fn promtool_accepts(body: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; CI installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn served_in_process_with_exact_counts_and_defences() {
    fntrace::init().unwrap();
    let server = fntrace::serve_metrics("127.0.0.1:0").unwrap();
    let address = server.local_addr();
    assert!(address.ip().is_loopback());
    PROFILE_TRACER.reset();
    fntrace::enable_with("profile", &Filter::new().include("pie_*")).unwrap();
    std::thread::spawn(|| c_pie::run(25)).join().unwrap();
    c_pie::run(5);
    fntrace::disable("profile").unwrap();
    let body = scrape(address);
    let counted = counts(&body);
    assert_eq!(counted.get("pie_run"), Some(&2), "{body}");
    assert_eq!(counted.get("pie_mid"), Some(&30));
    assert_eq!(counted.get("pie_leaf"), Some(&120));
    assert!(body.ends_with("# EOF\n"));
    promtool_accepts(&body);
    // OpenMetrics when asked for.
    let response = http(
        address,
        b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0\r\n\r\n",
    );
    assert!(response.contains("Content-Type: application/openmetrics-text; version=1.0.0"));
    // Gzip when asked for: `gzip -dc` reads back the same text (but the
    // live thread count: the test binary's other tests come and go).
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nAccept-Encoding: deflate, gzip;q=0.5\r\n\r\n")
        .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    assert!(head.contains("\r\nContent-Encoding: gzip\r\n"), "{head}");
    let compressed = &response[split + 4..];
    assert!(head.contains(&format!("Content-Length: {}\r\n", compressed.len())));
    let mut gzip = Command::new("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    gzip.stdin.take().unwrap().write_all(compressed).unwrap();
    let output = gzip.wait_with_output().unwrap();
    assert!(output.status.success());
    let unzipped = String::from_utf8(output.stdout).unwrap();
    let alive = |text: &str| -> String {
        text.lines()
            .filter(|line| !line.starts_with("fntrace_process_threads "))
            .collect()
    };
    assert_eq!(alive(&unzipped), alive(&body));
    assert!(
        compressed.len() * 3 < body.len(),
        "{} of {}",
        compressed.len(),
        body.len()
    );
    // Not when refused.
    let response = http(
        address,
        b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip;q=0, identity\r\n\r\n",
    );
    assert!(!response.contains("Content-Encoding"), "{response}");

    // Wrong requests.
    let status = |request: &[u8]| http(address, request).lines().next().unwrap().to_string();
    assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
    assert_eq!(
        status(b"DELETE /metrics HTTP/1.1\r\n\r\n"),
        "HTTP/1.1 405 Method Not Allowed"
    );
    assert_eq!(status(b"hello there\n\n"), "HTTP/1.1 400 Bad Request");
    let mut huge = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 10_000));
    assert_eq!(
        status(&huge),
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    // Too many at once from one address: 16 idle connections, of which
    // the endpoint keeps 8 (the others get 503 at once, or when a newer
    // one pushes them out); a scrape is served all the same, pushing out
    // the oldest idle one; the 7 left are closed with 408 after 1 s.
    let idle: Vec<TcpStream> = (0..16)
        .map(|_| TcpStream::connect(address).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(counts(&scrape(address)).get("pie_mid"), Some(&30));
    let started = Instant::now();
    let mut statuses: HashMap<String, usize> = HashMap::new();
    for mut stream in idle {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response.lines().next().unwrap_or("").to_string();
        *statuses.entry(status).or_default() += 1;
    }
    assert_eq!(
        statuses,
        HashMap::from([
            ("HTTP/1.1 503 Service Unavailable".to_string(), 9),
            ("HTTP/1.1 408 Request Timeout".to_string(), 7),
        ])
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // A client that never completes its request is closed after 1 s.
    let started = Instant::now();
    let mut slow = TcpStream::connect(address).unwrap();
    slow.write_all(b"GET /metr").unwrap();
    let mut response = String::new();
    slow.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(started.elapsed() < Duration::from_secs(5));
    // Served again once those are gone.
    assert_eq!(counts(&scrape(address)).get("pie_mid"), Some(&30));
    server.stop();
    assert!(TcpStream::connect(address).is_err(), "stopped");
}

#[test]
fn preloaded_program_serves_metrics_from_the_environment() {
    build_libraries();
    let base = common::temp_dir("profile-metrics");
    std::fs::create_dir_all(&base).unwrap();
    let program = base.join("ctl_prog");
    let gcc = Command::new("gcc")
        .args(["-pg", "-O0", "-fPIE", "-pie"])
        .arg(repo().join("tests/c/ctl_prog.c"))
        .args(["-lpthread", "-o"])
        .arg(&program)
        .output()
        .unwrap();
    assert!(
        gcc.status.success(),
        "{}",
        String::from_utf8_lossy(&gcc.stderr)
    );
    // A free port (closed again before the program binds it).
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut command = Command::new(&program);
    for (name, _) in std::env::vars_os() {
        if name.as_bytes().starts_with(b"FNTRACE") {
            command.env_remove(name);
        }
    }
    let mut child = command
        .current_dir(&base)
        .env("LD_PRELOAD", profile_dir().join("libfntrace.so"))
        .env("FNTRACE", "profile")
        .env("FNTRACE_FILTER", "handle_*,parse_*,!handle_log*")
        .env("FNTRACE_METRICS", port.to_string())
        .env("FNTRACE_METRICS_FILTER", "handle_*")
        .env("FNTRACE_CONTROL", base.join("ctl.sock"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    writeln!(stdin, "work 300").unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "done\n");
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    // FNTRACE_METRICS_FILTER: the handlers only.
    let body = scrape(address);
    assert_eq!(names(&body), ["handle_get", "handle_put"], "{body}");
    promtool_accepts(&body);
    // Every function, from now on (`ctl PID metrics-filter '*'`).
    let socket = base.join("ctl.sock");
    let reply = control(&socket, "metrics-filter *");
    assert!(reply.starts_with("ok metrics-filter *"), "{reply}");
    let body = scrape(address);
    let counts = counts(&body);
    let threads = 4;
    assert_eq!(counts.get("handle_get"), Some(&(threads * 300)), "{body}");
    assert_eq!(counts.get("handle_put"), Some(&(threads * 300 / 4)));
    assert_eq!(
        counts.get("parse_key"),
        Some(&(threads * 300 + 2 * threads * 300 / 4))
    );
    assert_eq!(counts.len(), 3, "{counts:?}");
    assert!(body.contains("fntrace_profile_threads 4"), "{body}");
    promtool_accepts(&body);
    // Another filter, with an exclusion; a bad one refused, the last kept.
    let reply = control(&socket, "metrics-filter *_*, !handle_*");
    assert!(reply.starts_with("ok "), "{reply}");
    assert_eq!(names(&scrape(address)), ["parse_key"]);
    let reply = control(&socket, "metrics-filter a,,b");
    assert!(reply.starts_with("error: metrics-filter a,,b: "), "{reply}");
    assert_eq!(names(&scrape(address)), ["parse_key"]);
    // Cleared: FNTRACE_METRICS_FILTER's again.
    let reply = control(&socket, "metrics-filter --clear");
    assert!(reply.starts_with("ok metrics-filter cleared"), "{reply}");
    let body = scrape(address);
    assert_eq!(names(&body), ["handle_get", "handle_put"]);
    // The process: its pid and executable, and the threads alive now (as
    // /proc says just before and after the scrape; the program is idle,
    // waiting on stdin, so they agree).
    let build_info = format!(
        "\nfntrace_build_info{{version=\"{}\",pid=\"{}\",exe=\"ctl_prog\"}} 1\n",
        env!("CARGO_PKG_VERSION"),
        child.id()
    );
    assert!(body.contains(&build_info), "{body}");
    let alive = || {
        std::fs::read_dir(format!("/proc/{}/task", child.id()))
            .unwrap()
            .count()
    };
    // A scrape between two equal counts (20 tries: a thread of the
    // runtime's own may come or go meanwhile).
    let (before, body) = (0..20)
        .find_map(|_| {
            let (before, body, after) = (alive(), scrape(address), alive());
            (before == after).then_some((before, body))
        })
        .expect("the thread count kept changing");
    assert!(
        body.contains(&format!("\nfntrace_process_threads {before}\n")),
        "{before} threads alive: {body}"
    );
    drop(stdin);
    assert!(child.wait().unwrap().success());
    std::fs::remove_dir_all(&base).unwrap();
}
