//! kv-load: drives kv-service with a fixed number of requests from many
//! connections at once, checks every response, and says how many requests
//! of each kind were answered.
//!
//! `kv-load ADDR [--connections N] [--requests N]` (defaults: 16
//! connections, 1000 requests each). Every connection opens first; then
//! all send at once, each repeating on keys of its own
//! `PUT k v`, `GET k` (→ `VALUE v`), `DEL k` (→ `DELETED`), `GET k`
//! (→ `NOT_FOUND`), one request at a time. It exits once every response
//! has arrived — 0 if each was the expected one — after printing what was
//! sent, the rate, and the latency of a request (send to response) at the
//! median, 90th and 99th percentile and worst, all connections together:
//!
//! ```text
//! kv-load: 16000 requests on 16 connections: 4000 PUT, 8000 GET, 4000 DEL
//! kv-load: 52311 requests/s over 0.306 s; latency p50 265 µs, p90 470 µs, p99 1.21 ms, max 3.02 ms
//! ```

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Requests sent by one connection, by kind, and how long each took.
#[derive(Default)]
struct Sent {
    put: u64,
    get: u64,
    delete: u64,
    /// From writing the request to reading its response, in nanoseconds.
    latencies_ns: Vec<u64>,
}

fn main() -> ExitCode {
    let (address, connections, requests) = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("kv-load: {message}");
            eprintln!("usage: kv-load ADDR [--connections N] [--requests N]");
            return ExitCode::from(2);
        }
    };
    // The connections and the clock: the rate counts from the moment all
    // connections are open.
    let start = Arc::new(Barrier::new(connections + 1));
    let workers: Vec<_> = (0..connections)
        .map(|connection| {
            let address = address.clone();
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                let stream = TcpStream::connect(&address);
                // Every connection waits for the others, connected or not.
                start.wait();
                run_connection(stream?, connection, requests)
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    let mut total = Sent::default();
    let mut failed = false;
    for worker in workers {
        match worker.join().expect("a connection thread panicked") {
            Ok(sent) => {
                total.put += sent.put;
                total.get += sent.get;
                total.delete += sent.delete;
                total.latencies_ns.extend(sent.latencies_ns);
            }
            Err(err) => {
                eprintln!("kv-load: {err}");
                failed = true;
            }
        }
    }
    let elapsed = began.elapsed();
    if failed {
        return ExitCode::FAILURE;
    }
    println!(
        "kv-load: {} requests on {connections} connections: {} PUT, {} GET, {} DEL",
        total.put + total.get + total.delete,
        total.put,
        total.get,
        total.delete
    );
    println!(
        "kv-load: {}",
        rate_and_latency(&mut total.latencies_ns, elapsed)
    );
    ExitCode::SUCCESS
}

/// `N requests/s over T s; latency p50 …, p90 …, p99 …, max …` of these
/// request latencies (sorted in place), made in `elapsed`.
fn rate_and_latency(latencies_ns: &mut [u64], elapsed: Duration) -> String {
    latencies_ns.sort_unstable();
    // Nearest rank: the smallest latency at least a fraction `q` of the
    // requests did not exceed.
    let quantile = |q: f64| -> u64 {
        let rank = ((q * latencies_ns.len() as f64).ceil() as usize).clamp(1, latencies_ns.len());
        latencies_ns[rank - 1]
    };
    let seconds = elapsed.as_secs_f64().max(1e-9);
    format!(
        "{:.0} requests/s over {seconds:.3} s; latency p50 {}, p90 {}, p99 {}, max {}",
        latencies_ns.len() as f64 / seconds,
        readable(quantile(0.50)),
        readable(quantile(0.90)),
        readable(quantile(0.99)),
        readable(quantile(1.0)),
    )
}

/// `812 ns`, `265 µs`, `1.21 ms`, `2.00 s`: three significant digits.
fn readable(ns: u64) -> String {
    let (value, unit) = match ns {
        0..=999 => return format!("{ns} ns"),
        1_000..=999_999 => (ns as f64 / 1e3, "µs"),
        1_000_000..=999_999_999 => (ns as f64 / 1e6, "ms"),
        _ => (ns as f64 / 1e9, "s"),
    };
    let decimals = if value >= 100.0 {
        0
    } else if value >= 10.0 {
        1
    } else {
        2
    };
    format!("{value:.decimals$} {unit}")
}

fn parse_args() -> Result<(String, usize, u64), String> {
    let mut args = std::env::args().skip(1);
    let address = args.next().ok_or("no address")?;
    let (mut connections, mut requests) = (16, 1000);
    while let Some(arg) = args.next() {
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        let number: u64 = value
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .ok_or(format!("{arg} {value}: not a positive number"))?;
        match arg.as_str() {
            "--connections" => connections = number as usize,
            "--requests" => requests = number,
            _ => return Err(format!("unknown argument {arg}")),
        }
    }
    Ok((address, connections, requests))
}

/// Sends `requests` requests on `stream`, one at a time, checking each
/// response.
fn run_connection(stream: TcpStream, connection: usize, requests: u64) -> std::io::Result<Sent> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = BufWriter::new(stream);
    let mut sent = Sent::default();
    sent.latencies_ns.reserve(requests as usize);
    let mut response = String::new();
    // Keys of this process and connection only: concurrent runs do not meet.
    let prefix = format!("load-{}-{connection}", std::process::id());
    for i in 0..requests {
        let key = format!("{prefix}-{}", i / 4);
        let value = format!("value-{}", i / 4);
        let (request, expected) = match i % 4 {
            0 => {
                sent.put += 1;
                (format!("PUT {key} {value}"), "OK".to_string())
            }
            1 => {
                sent.get += 1;
                (format!("GET {key}"), format!("VALUE {value}"))
            }
            2 => {
                sent.delete += 1;
                (format!("DEL {key}"), "DELETED".to_string())
            }
            _ => {
                sent.get += 1;
                (format!("GET {key}"), "NOT_FOUND".to_string())
            }
        };
        let sending = Instant::now();
        writeln!(writer, "{request}")?;
        writer.flush()?;
        response.clear();
        let read = reader.read_line(&mut response)?;
        sent.latencies_ns.push(sending.elapsed().as_nanos() as u64);
        if read == 0 {
            return Err(std::io::Error::other(format!(
                "connection {connection}: closed by the service after {i} responses"
            )));
        }
        if response.trim_end() != expected {
            return Err(std::io::Error::other(format!(
                "connection {connection}: {request:?} got {:?}, expected {expected:?}",
                response.trim_end()
            )));
        }
    }
    Ok(sent)
}
