//! The metrics endpoint against hostile and careless clients: real
//! `gcc -pg` programs with `libfntrace.so` preloaded,
//! `FNTRACE=profile FNTRACE_METRICS=…`, as a service runs it.
//!
//! - Who may scrape: an address other hosts reach (`0.0.0.0`, `[::]`) is
//!   refused without `FNTRACE_METRICS_PUBLIC=1`, with a line saying how to
//!   serve it, and nothing listens; `PUBLIC=1` without a token is refused
//!   too; `:PORT` and `localhost:PORT` serve the loopback address only.
//! - The bearer token (`FNTRACE_METRICS_TOKEN`, `…_TOKEN_FILE`): `401`
//!   without it or with another, `200` with it; a bad token is refused
//!   without being printed.
//! - Idle and slow clients (20 from 20 loopback addresses, 20 idle and
//!   10 sending a byte every 100 ms from the scraper's own address, 40
//!   more: past every limit, each renewed just before the request
//!   timeout) while 20 real scrapes are made: every scrape is answered.
//! - 5,000 profiled functions: the series are bounded by
//!   `FNTRACE_METRICS_MAX_FUNCTIONS` (500), the functions exported are
//!   the 500 with the most total time in the profile's own snapshot
//!   (`profile` over the control socket), the 10 first with histograms,
//!   the omitted count exact, a scrape timed, promtool accepts the text.
//!
//! Every file goes into the test's temporary directory; every address is
//! a loopback one (port 0 or a free port); every wait is bounded.

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::native::{build_libraries, profile_dir, repo};
use fntrace_format::analysis::ProfileSnapshot;

/// How long a line of a program, or a reply, may take before the test
/// fails instead of waiting on.
const PATIENCE: Duration = Duration::from_secs(60);

/// A token the tests use (32 characters, as `openssl rand -hex 16`).
const TOKEN: &str = "6b1f0c2e9a7d4e35b8c1f0a2d3e4b5c6";

/// A scratch directory of the test's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = common::temp_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `source` built with `gcc -pg` (PIE) into `dir`, run with the library
/// preloaded (not linked).
fn build(source: &Path, dir: &Path, name: &str) -> PathBuf {
    build_libraries();
    let program = dir.join(name);
    let gcc = Command::new("gcc")
        .args(["-pg", "-O0", "-fPIE", "-pie"])
        .arg(source)
        .args(["-lpthread", "-o"])
        .arg(&program)
        .output()
        .expect("gcc");
    assert!(
        gcc.status.success(),
        "{}",
        String::from_utf8_lossy(&gcc.stderr)
    );
    program
}

/// `tests/c/ctl_prog.c`, built once per test into `dir`.
fn ctl_prog(dir: &Path) -> PathBuf {
    build(&repo().join("tests/c/ctl_prog.c"), dir, "ctl_prog")
}

/// A loopback port free now (closed again before the program binds it).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A preloaded program paced by its standard input (`ready`, `work …` →
/// `done`), its stderr in a file.
struct Program {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: PathBuf,
}

impl Program {
    /// Starts `program` with `env` (and no other `FNTRACE*` variable) and
    /// waits for its `ready`, or for its end when `ready` is false (a
    /// start-up that failed before `main` prints nothing else).
    fn start(program: &Path, dir: &Path, env: &[(&str, &str)]) -> Program {
        let stderr = dir.join(format!(
            "stderr-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let mut command = Command::new(program);
        for (name, _) in std::env::vars_os() {
            if name.as_bytes().starts_with(b"FNTRACE") {
                command.env_remove(name);
            }
        }
        command
            .current_dir(dir)
            .env("LD_PRELOAD", profile_dir().join("libfntrace.so"))
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let mut started = Program {
            child,
            stdin,
            lines,
            stderr,
        };
        assert_eq!(started.line(), "ready");
        started
    }

    /// The program's next line.
    fn line(&mut self) -> String {
        self.lines
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("no line in {PATIENCE:?}; stderr: {}", self.stderr()))
    }

    /// Sends `request` and waits for `done`.
    fn work(&mut self, request: &str) {
        writeln!(self.stdin.as_mut().unwrap(), "{request}").unwrap();
        assert_eq!(self.line(), "done");
    }

    /// What it printed on stderr so far.
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Ends it (its input closed) and returns its stderr; it must exit 0.
    fn finish(mut self) -> String {
        drop(self.stdin.take());
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{status}: {}", self.stderr());
                return self.stderr();
            }
            assert!(Instant::now() < deadline, "the program did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One HTTP exchange: `request` on a new connection (from `source`, or
/// the default loopback address), the whole response read (the server
/// closes), all bounded by 10 s.
fn http_from(source: Option<Ipv4Addr>, address: SocketAddr, request: &[u8]) -> String {
    let mut stream = match source {
        Some(source) => connect_from(source, address),
        None => TcpStream::connect_timeout(&address, Duration::from_secs(10)).unwrap(),
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    String::from_utf8(response).unwrap()
}

fn http(address: SocketAddr, request: &[u8]) -> String {
    http_from(None, address, request)
}

/// `GET /metrics` with these extra header lines.
fn get(address: SocketAddr, headers: &str) -> String {
    http(
        address,
        format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{headers}\r\n").as_bytes(),
    )
}

/// The status line of a response.
fn status(response: &str) -> &str {
    response.lines().next().unwrap_or("")
}

/// The body of a `200` response.
fn body(response: &str) -> &str {
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    response.split_once("\r\n\r\n").unwrap().1
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

/// A TCP connection to `to` from the loopback address `from` (any of
/// 127.0.0.0/8 is this host's: one client per address without any set-up).
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let sockaddr = |address: SocketAddrV4| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: address.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*address.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    let SocketAddr::V4(to) = to else {
        panic!("an IPv4 address")
    };
    let (local, remote) = (sockaddr(SocketAddrV4::new(from, 0)), sockaddr(to));
    let length = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a new socket; no memory is passed.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` was just made and is owned by nobody else; the stream
    // closes it.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    // SAFETY: `local` is a live sockaddr_in of `length` bytes.
    let bound = unsafe { libc::bind(fd, (&raw const local).cast(), length) };
    assert_eq!(bound, 0, "bind {from}: {}", std::io::Error::last_os_error());
    // SAFETY: `remote` is a live sockaddr_in of `length` bytes.
    let connected = unsafe { libc::connect(fd, (&raw const remote).cast(), length) };
    assert_eq!(
        connected,
        0,
        "connect {from} -> {to}: {}",
        std::io::Error::last_os_error()
    );
    stream
}

/// An IPv4 address of this host that is not loopback, if it has one
/// (`ip -o -4 addr show scope global`; the test binds nothing to find it).
fn outward_address() -> Option<std::net::IpAddr> {
    let output = Command::new("ip")
        .args(["-o", "-4", "addr", "show", "scope", "global"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let mut words = text.split_whitespace();
    words.find(|&word| word == "inet")?;
    let address = words.next()?.split('/').next()?;
    address.parse().ok()
}

/// Whether anything accepts connections at `address` (1 s at most).
fn listening(address: SocketAddr) -> bool {
    TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok()
}

#[test]
fn an_address_other_hosts_reach_is_refused_without_the_opt_in() {
    let scratch = Scratch::new("metrics-public");
    let program = ctl_prog(&scratch.0);
    let port = free_port();
    let loopback = SocketAddr::from(([127, 0, 0, 1], port));
    for address in [format!("0.0.0.0:{port}"), format!("[::]:{port}")] {
        let mut run = Program::start(
            &program,
            &scratch.0,
            &[("FNTRACE", "profile"), ("FNTRACE_METRICS", &address)],
        );
        run.work("work 10");
        // 0.0.0.0 would have been reached through 127.0.0.1 too.
        assert!(!listening(loopback), "{address} was bound");
        let stderr = run.finish();
        let expected = format!(
            "fntrace: FNTRACE_METRICS={address}: metrics address {address}: {address} is not a \
             loopback address: other hosts could read the profile. Serve 127.0.0.1:{port} (or \
             :{port}, a port alone), or set FNTRACE_METRICS_PUBLIC=1"
        );
        assert!(stderr.contains(&expected), "{stderr}");
        assert!(
            stderr.contains("; the program runs on without a metrics endpoint\n"),
            "{stderr}"
        );
    }
    // The opt-in alone is not enough: a public endpoint needs a token.
    let address = format!("0.0.0.0:{port}");
    let run = Program::start(
        &program,
        &scratch.0,
        &[
            ("FNTRACE", "profile"),
            ("FNTRACE_METRICS", &address),
            ("FNTRACE_METRICS_PUBLIC", "1"),
        ],
    );
    assert!(!listening(loopback));
    let stderr = run.finish();
    assert!(
        stderr.contains("is public (FNTRACE_METRICS_PUBLIC=1) and no token is set"),
        "{stderr}"
    );
    // A bad opt-in is named, with its value.
    let run = Program::start(
        &program,
        &scratch.0,
        &[
            ("FNTRACE_METRICS", &address),
            ("FNTRACE_METRICS_PUBLIC", "yes"),
        ],
    );
    let stderr = run.finish();
    assert!(
        stderr.contains("fntrace: FNTRACE_METRICS_PUBLIC=yes: use 1 (or 0)"),
        "{stderr}"
    );

    // `:PORT`, a port alone and localhost serve the loopback address, and
    // only it.
    for address in [
        format!(":{port}"),
        port.to_string(),
        format!("localhost:{port}"),
    ] {
        let mut run = Program::start(
            &program,
            &scratch.0,
            &[
                ("FNTRACE", "profile"),
                ("FNTRACE_FILTER", "handle_get"),
                ("FNTRACE_METRICS", &address),
            ],
        );
        run.work("work 100");
        let response = get(loopback, "");
        assert_eq!(counts(body(&response)).get("handle_get"), Some(&400));
        if let Some(outward) = outward_address() {
            assert!(
                !listening(SocketAddr::new(outward, port)),
                "{address} is reached through {outward}"
            );
        }
        let stderr = run.finish();
        assert!(!stderr.contains("fntrace:"), "{address}: {stderr}");
    }
}

#[test]
fn the_token_is_required_and_compared() {
    let scratch = Scratch::new("metrics-token");
    let program = ctl_prog(&scratch.0);
    let port = free_port();
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let file = scratch.0.join("token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let metrics = format!("127.0.0.1:{port}");
    let from_file = file.to_str().unwrap();
    for token in [
        ("FNTRACE_METRICS_TOKEN", TOKEN),
        ("FNTRACE_METRICS_TOKEN_FILE", from_file),
    ] {
        let mut run = Program::start(
            &program,
            &scratch.0,
            &[
                ("FNTRACE", "profile"),
                ("FNTRACE_FILTER", "handle_get"),
                ("FNTRACE_METRICS", &metrics),
                token,
            ],
        );
        run.work("work 50");
        let wrong = &TOKEN[..TOKEN.len() - 1];
        for (headers, error) in [
            (String::new(), None),
            (
                format!("Authorization: Bearer {wrong}\r\n"),
                Some("invalid_token"),
            ),
            (
                format!("Authorization: Bearer {TOKEN}0\r\n"),
                Some("invalid_token"),
            ),
            (format!("Authorization: Basic {TOKEN}\r\n"), None),
            (format!("X-Token: {TOKEN}\r\n"), None),
        ] {
            let response = get(address, &headers);
            assert_eq!(status(&response), "HTTP/1.1 401 Unauthorized", "{headers}");
            let challenge = match error {
                Some(error) => {
                    format!("WWW-Authenticate: Bearer realm=\"fntrace\", error=\"{error}\"\r\n")
                }
                None => "WWW-Authenticate: Bearer realm=\"fntrace\"\r\n".to_string(),
            };
            assert!(response.contains(&challenge), "{response}");
            assert!(!response.contains("fntrace_function"), "{response}");
        }
        // Not even whether another path exists.
        let other = http(address, b"GET /secret HTTP/1.1\r\n\r\n");
        assert_eq!(status(&other), "HTTP/1.1 401 Unauthorized");
        let response = get(address, &format!("Authorization: Bearer {TOKEN}\r\n"));
        assert_eq!(counts(body(&response)).get("handle_get"), Some(&200));
        let stderr = run.finish();
        assert!(!stderr.contains("fntrace:"), "{stderr}");
    }

    // A bad token is refused, described, never printed; so are both at once.
    let weak = "hunter2-hunter2";
    for (env, said) in [
        (
            vec![("FNTRACE_METRICS_TOKEN", weak)],
            "fntrace: FNTRACE_METRICS_TOKEN=(15 characters, not shown): too short: at least 16 \
             characters",
        ),
        (
            vec![("FNTRACE_METRICS_TOKEN", "0123456789abcdef 0123456789")],
            "fntrace: FNTRACE_METRICS_TOKEN=(27 characters, not shown): character 17 is a space",
        ),
        (
            vec![
                ("FNTRACE_METRICS_TOKEN", TOKEN),
                ("FNTRACE_METRICS_TOKEN_FILE", from_file),
            ],
            "fntrace: FNTRACE_METRICS_TOKEN and FNTRACE_METRICS_TOKEN_FILE are both set: use one",
        ),
        (
            vec![("FNTRACE_METRICS_TOKEN_FILE", "token")],
            "fntrace: FNTRACE_METRICS_TOKEN_FILE=token: use an absolute path",
        ),
    ] {
        std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
        let mut all = vec![
            ("FNTRACE", "profile"),
            ("FNTRACE_METRICS", metrics.as_str()),
        ];
        all.extend(env);
        let run = Program::start(&program, &scratch.0, &all);
        assert!(!listening(address));
        let stderr = run.finish();
        assert!(stderr.contains(said), "{stderr}");
        assert!(
            !stderr.contains(weak) && !stderr.contains(TOKEN),
            "{stderr}"
        );
    }
    // A token file whose line is not a token: its text is not printed.
    std::fs::write(&file, "hunter2\n").unwrap();
    let run = Program::start(
        &program,
        &scratch.0,
        &[
            ("FNTRACE_METRICS", &metrics),
            ("FNTRACE_METRICS_TOKEN_FILE", from_file),
        ],
    );
    let stderr = run.finish();
    assert!(
        stderr.contains(&format!(
            "fntrace: FNTRACE_METRICS_TOKEN_FILE={from_file}: its line is not a token: too short"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// A client that holds a connection without a request: `slow` ones send
/// a byte of a head that never ends every 100 ms.
struct Idle {
    from: Ipv4Addr,
    slow: bool,
    stream: Option<(TcpStream, Instant)>,
}

/// Holds `idle` clients' connections to `address` open, each renewed
/// after `renew` (just under the server's request timeout), until `stop`;
/// counts the connections made.
fn hold(
    mut idle: Vec<Idle>,
    address: SocketAddr,
    renew: Duration,
    stop: Arc<AtomicBool>,
    made: Arc<AtomicUsize>,
) {
    let mut last_drip = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let drip = last_drip.elapsed() >= Duration::from_millis(100);
        if drip {
            last_drip = Instant::now();
        }
        for client in &mut idle {
            if client
                .stream
                .as_ref()
                .is_none_or(|(_, since)| since.elapsed() >= renew)
            {
                let mut stream = connect_from(client.from, address);
                if client.slow {
                    let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ");
                }
                client.stream = Some((stream, Instant::now()));
                made.fetch_add(1, Ordering::Relaxed);
            } else if drip && client.slow {
                let (stream, _) = client.stream.as_mut().unwrap();
                // Closed by the server by now, perhaps: nothing to do.
                let _ = stream.write_all(b"a");
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn scrapes_are_answered_while_idle_clients_hold_connections() {
    let scratch = Scratch::new("metrics-idle");
    let program = ctl_prog(&scratch.0);
    let port = free_port();
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let mut run = Program::start(
        &program,
        &scratch.0,
        &[
            ("FNTRACE", "profile"),
            ("FNTRACE_FILTER", "handle_get"),
            ("FNTRACE_METRICS", &address.to_string()),
        ],
    );
    run.work("work 100");

    // 20 idle clients from 20 addresses of their own (127.0.0.2-21), 20
    // idle and 10 slow ones from the scraper's own address (127.0.0.1),
    // 40 idle ones more from 127.0.0.30-69: 90 at once, past the 64
    // connections and the 8 per address the endpoint keeps. Each is
    // renewed every 0.9 s, before the 1 s the endpoint gives a request
    // (the attack measured before: renewed every 1.9 s against 2 s).
    let mut idle: Vec<Idle> = Vec::new();
    let client = |from: Ipv4Addr, slow: bool| Idle {
        from,
        slow,
        stream: None,
    };
    idle.extend((2..22).map(|i| client(Ipv4Addr::new(127, 0, 0, i), false)));
    idle.extend((0..20).map(|_| client(Ipv4Addr::LOCALHOST, false)));
    idle.extend((0..10).map(|_| client(Ipv4Addr::LOCALHOST, true)));
    idle.extend((30..70).map(|i| client(Ipv4Addr::new(127, 0, 0, i), false)));
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicUsize::new(0));
    let holder = {
        let (stop, made) = (stop.clone(), made.clone());
        std::thread::spawn(move || hold(idle, address, Duration::from_millis(900), stop, made))
    };
    // Every idle client connected, and renewed at least once.
    let deadline = Instant::now() + PATIENCE;
    while made.load(Ordering::Relaxed) < 180 {
        assert!(
            Instant::now() < deadline,
            "the idle clients did not connect"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let mut slowest = Duration::ZERO;
    let mut answered = 0;
    for scrape in 0..20 {
        let started = Instant::now();
        // Half from 127.0.0.1, where 30 idle clients are; half from one of
        // the addresses of a single idle client.
        let from = match scrape % 2 {
            0 => Ipv4Addr::LOCALHOST,
            _ => Ipv4Addr::new(127, 0, 0, 2 + scrape as u8),
        };
        let response = http_from(Some(from), address, b"GET /metrics HTTP/1.1\r\n\r\n");
        slowest = slowest.max(started.elapsed());
        assert_eq!(
            counts(body(&response)).get("handle_get"),
            Some(&400),
            "scrape {scrape} from {from}"
        );
        answered += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    holder.join().unwrap();
    eprintln!(
        "{answered} of 20 scrapes answered (slowest {slowest:?}) while 90 idle clients \
         made {} connections",
        made.load(Ordering::Relaxed)
    );
    assert!(slowest < Duration::from_secs(5), "{slowest:?}");
    let stderr = run.finish();
    assert!(!stderr.contains("fntrace:"), "{stderr}");
}

/// Functions of the generated program.
const FUNCTIONS: usize = 5000;

/// A C program with [`FUNCTIONS`] `noinline` functions `f_<i>`, paced by
/// its input: `work` makes 4 threads call a quarter of them each, `f_<i>`
/// `1 + i % 8` times. (One thread's profile holds 4096 functions and 4096
/// histogram chunks, one per power of two of a function's durations: a
/// quarter each fits.)
fn many_functions_source() -> String {
    let mut source = String::from(
        "#include <pthread.h>\n#include <stdio.h>\n#include <string.h>\n\
         static volatile long sink;\n",
    );
    for i in 0..FUNCTIONS {
        let _ = writeln!(
            source,
            "__attribute__((noinline)) long f_{i}(long x) {{ sink += x; return x * 3 + {i}; }}"
        );
    }
    source += "typedef long (*fn)(long);\nstatic fn const table[] = {";
    for i in 0..FUNCTIONS {
        let _ = write!(source, "f_{i},");
    }
    let _ = write!(
        source,
        "}};\n\
         static void *quarter(void *arg) {{\n\
             long first = (long)arg;\n\
             for (long i = first; i < first + {quarter}; i++)\n\
                 for (long r = 0; r <= i % 8; r++)\n\
                     sink += table[i](r);\n\
             return NULL;\n\
         }}\n\
         int main(void) {{\n\
             char line[64];\n\
             printf(\"ready\\n\");\n\
             fflush(stdout);\n\
             while (fgets(line, sizeof line, stdin) != NULL && strcmp(line, \"work\\n\") == 0) {{\n\
                 pthread_t threads[4];\n\
                 for (long t = 0; t < 4; t++)\n\
                     pthread_create(&threads[t], NULL, quarter, (void *)(t * {quarter}));\n\
                 for (long t = 0; t < 4; t++)\n\
                     pthread_join(threads[t], NULL);\n\
                 printf(\"done\\n\");\n\
                 fflush(stdout);\n\
             }}\n\
             return 0;\n\
         }}\n",
        quarter = FUNCTIONS / 4
    );
    source
}

/// The profile's snapshot through the control socket at `socket`.
fn profile_snapshot(socket: &Path) -> ProfileSnapshot {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(b"profile\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("ok profile: "), "{reply}");
    let text = &reply[reply.find("\nfntrace-profile ").unwrap() + 1..];
    // The empty line that ends the reply is not the profile's.
    let text = text.strip_suffix('\n').unwrap_or(text);
    ProfileSnapshot::from_text(text).unwrap()
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
    let mut stdin = child.stdin.take().unwrap();
    let text = body.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        output.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn five_thousand_functions_are_cut_to_the_ceiling() {
    let scratch = Scratch::new("metrics-ceiling");
    let source = scratch.0.join("many.c");
    std::fs::write(&source, many_functions_source()).unwrap();
    let program = build(&source, &scratch.0, "many");
    let port = free_port();
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let socket = scratch.0.join("ctl.sock");
    let mut run = Program::start(
        &program,
        &scratch.0,
        &[
            ("FNTRACE", "profile"),
            ("FNTRACE_FILTER", "f_*"),
            ("FNTRACE_METRICS", &address.to_string()),
            ("FNTRACE_CONTROL", socket.to_str().unwrap()),
        ],
    );
    run.work("work");
    // Nothing runs now: the scrapes and the snapshot see the same profile.
    let snapshot = profile_snapshot(&socket);
    assert_eq!(snapshot.functions.len(), FUNCTIONS);
    assert_eq!(snapshot.not_kept.functions, 0);
    let calls: u64 = snapshot.functions.iter().map(|f| f.durations.count()).sum();
    let expected_calls: u64 = (0..FUNCTIONS as u64).map(|i| 1 + i % 8).sum();
    assert_eq!(calls, expected_calls);

    let mut times = Vec::new();
    let mut text = String::new();
    for _ in 0..5 {
        let started = Instant::now();
        let response = get(address, "");
        times.push(started.elapsed());
        text = body(&response).to_string();
    }
    times.sort();
    eprintln!(
        "a scrape of {FUNCTIONS} profiled functions (500 exported, {} bytes): {:?} best, \
         {:?} median, {:?} worst of 5",
        text.len(),
        times[0],
        times[2],
        times[4]
    );

    // The 500 with the most total time (ties by name), as the profile says.
    let mut ranked: Vec<(u64, &str)> = snapshot
        .functions
        .iter()
        .map(|f| (f.total_ns, f.name.as_str()))
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let top: BTreeSet<&str> = ranked[..500].iter().map(|&(_, name)| name).collect();
    let counted = counts(&text);
    let exported: BTreeSet<&str> = counted.keys().map(String::as_str).collect();
    assert_eq!(exported, top);
    for f in &snapshot.functions {
        if let Some(&n) = counted.get(&f.name) {
            assert_eq!(n, f.durations.count(), "{}", f.name);
        }
    }
    // 37 series for each of the 10 with the most total time, 3 for each
    // other (the summary, running calls); 2 counters, 3 gauges, build info.
    let series = text.lines().filter(|line| !line.starts_with('#')).count();
    assert_eq!(series, 10 * 37 + 490 * 3 + 6);
    for &(_, name) in &ranked[..10] {
        let line = format!("fntrace_function_duration_seconds_count{{function=\"{name}\"}}");
        assert!(text.contains(&line), "{name}");
    }
    assert!(
        text.contains(&format!(
            "\nfntrace_metrics_functions_omitted {}\n",
            FUNCTIONS - 500
        )),
        "{}",
        &text[text.len().saturating_sub(2000)..]
    );
    promtool_accepts(&text);
    // Best of five: a loaded machine's worst is its own business.
    assert!(
        times[0] <= Duration::from_millis(100),
        "a scrape took {:?} at best",
        times[0]
    );
    let stderr = run.finish();
    assert!(!stderr.contains("fntrace:"), "{stderr}");
}
