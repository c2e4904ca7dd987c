//! A small Rust TCP request/response service for tests/programs/attach_cycles.rs:
//! built by plain `rustc -O` (no instrumentation: fntrace gives its
//! functions sites with run-time entry patching, `patch 'svc::*'`), the
//! crate named `svc`, std only. The same protocol as
//! `tests/c/attach_server.c`:
//!
//! `svc [WORKERS]` (default 4) listens on 127.0.0.1 (a port the kernel
//! picks) and prints `ready PORT` once its threads run. Each worker
//! blocks in `accept`, then serves its connection until the client closes
//! it: every line `K` is answered `K V`, V = `mix(K) + 7`. The main
//! thread reads commands on standard input: `stats` prints `stats
//! served=N eintr=E`; `exit` prints `eintr accept=A read=R write=W
//! stdin=I served=N` and exits 0.
//!
//! `accept`, `read` and `write` are libc's, called directly (std's
//! wrappers retry on EINTR and would hide it): every EINTR is counted.
//! No thread sleeps in `nanosleep` or `epoll_wait`: `patch` writes entry
//! jumps by stopping every thread with a signal (`SA_RESTART`), after
//! which those two calls fail with EINTR whatever the handler's flags
//! (signal(7)); `read`, `accept` and `write` on a socket with no timeout
//! are restarted.

use std::io::Write;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

extern "C" {
    fn accept(fd: i32, addr: *mut u8, len: *mut u32) -> i32;
    fn read(fd: i32, buf: *mut u8, count: usize) -> isize;
    fn write(fd: i32, buf: *const u8, count: usize) -> isize;
    fn close(fd: i32) -> i32;
    fn signal(signum: i32, handler: usize) -> usize;
}

const EINTR: i32 = 4;
const SIGPIPE: i32 = 13;
const SIG_IGN: usize = 1;

static SERVED: AtomicU64 = AtomicU64::new(0);
static EINTR_ACCEPT: AtomicU64 = AtomicU64::new(0);
static EINTR_READ: AtomicU64 = AtomicU64::new(0);
static EINTR_WRITE: AtomicU64 = AtomicU64::new(0);
static EINTR_STDIN: AtomicU64 = AtomicU64::new(0);
static STOP: AtomicBool = AtomicBool::new(false);

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[inline(never)]
fn parse_key(line: &[u8]) -> u64 {
    let k = std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    std::hint::black_box(k)
}

#[inline(never)]
fn mix(k: u64) -> u64 {
    let mut x = k.wrapping_mul(2_654_435_761);
    x ^= x >> 13;
    std::hint::black_box(x % 1_000_003)
}

/// The reply to one request line.
#[inline(never)]
fn handle_request(line: &[u8], out: &mut Vec<u8>) {
    let k = parse_key(line);
    let v = mix(k) + 7;
    let _ = writeln!(out, "{k} {v}");
    SERVED.fetch_add(1, Ordering::Relaxed);
}

/// Reads into `buf` (libc's read, EINTR counted and retried).
fn read_some(fd: i32, buf: &mut [u8], counter: &AtomicU64) -> isize {
    loop {
        // SAFETY: buf is a live, writable buffer of buf.len() bytes.
        let n = unsafe { read(fd, buf.as_mut_ptr(), buf.len()) };
        if n < 0 && errno() == EINTR {
            counter.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        return n;
    }
}

fn write_all(fd: i32, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        // SAFETY: buf is a live buffer of buf.len() bytes.
        let n = unsafe { write(fd, buf.as_ptr(), buf.len()) };
        if n < 0 && errno() == EINTR {
            EINTR_WRITE.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if n <= 0 {
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

#[inline(never)]
fn serve(fd: i32) {
    let mut input = vec![0u8; 4096];
    let mut have = 0;
    let mut out = Vec::with_capacity(1 << 16);
    loop {
        let n = read_some(fd, &mut input[have..], &EINTR_READ);
        if n <= 0 {
            return;
        }
        have += n as usize;
        out.clear();
        let mut start = 0;
        while let Some(end) = input[start..have].iter().position(|&b| b == b'\n') {
            handle_request(&input[start..start + end], &mut out);
            start += end + 1;
        }
        input.copy_within(start..have, 0);
        have -= start;
        if have == input.len() {
            return; // a line longer than the buffer: not this protocol
        }
        if !out.is_empty() && !write_all(fd, &out) {
            return;
        }
    }
}

#[inline(never)]
fn worker(listener: i32, ready: Arc<Barrier>) {
    ready.wait();
    while !STOP.load(Ordering::Relaxed) {
        // SAFETY: null address and length: accept fills in nothing.
        let fd = unsafe { accept(listener, std::ptr::null_mut(), std::ptr::null_mut()) };
        if fd < 0 {
            if errno() == EINTR {
                EINTR_ACCEPT.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            return;
        }
        serve(fd);
        // SAFETY: fd is the connection accept returned, closed once.
        unsafe { close(fd) };
    }
}

fn eintr_total() -> u64 {
    [&EINTR_ACCEPT, &EINTR_READ, &EINTR_WRITE, &EINTR_STDIN]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
}

fn main() {
    // SAFETY: ignoring SIGPIPE: a write to a closed connection fails instead.
    unsafe { signal(SIGPIPE, SIG_IGN) };
    let workers: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(4);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("local address").port();
    let fd = listener.as_raw_fd();
    let ready = Arc::new(Barrier::new(workers + 1));
    for i in 0..workers {
        let ready = ready.clone();
        std::thread::Builder::new()
            .name(format!("worker{i}"))
            .spawn(move || worker(fd, ready))
            .expect("spawn");
    }
    ready.wait();
    println!("ready {port}");
    let mut line = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        let n = read_some(0, &mut buf, &EINTR_STDIN);
        if n <= 0 {
            break;
        }
        line.extend_from_slice(&buf[..n as usize]);
        let mut exit = false;
        while let Some(end) = line.iter().position(|&b| b == b'\n') {
            let command: Vec<u8> = line.drain(..=end).collect();
            match &command[..end] {
                b"stats" => println!(
                    "stats served={} eintr={}",
                    SERVED.load(Ordering::Relaxed),
                    eintr_total()
                ),
                b"exit" => exit = true,
                _ => {}
            }
        }
        if exit {
            break;
        }
    }
    STOP.store(true, Ordering::Relaxed);
    println!(
        "eintr accept={} read={} write={} stdin={} served={}",
        EINTR_ACCEPT.load(Ordering::Relaxed),
        EINTR_READ.load(Ordering::Relaxed),
        EINTR_WRITE.load(Ordering::Relaxed),
        EINTR_STDIN.load(Ordering::Relaxed),
        SERVED.load(Ordering::Relaxed)
    );
    std::process::exit(0);
}
