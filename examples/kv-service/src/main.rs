//! kv-service: a multi-threaded TCP key-value service on tokio, written as
//! network services usually are, and the example of tracing a running
//! service with fntrace (see the README's walkthrough).
//!
//! Built with `fntrace cargo build --release -p kv-service`, its own
//! functions (only them: not tokio, not std, not fntrace) have a call to
//! mcount at their entry, which fntrace keeps as NOPs until asked. fntrace
//! is linked, so the environment controls it (`FNTRACE_CONTROL=1` serves
//! the control socket for `fntrace ctl PID ...`; `FNTRACE=graph
//! FNTRACE_OUTPUT=DIR` records the whole run).
//!
//! `kv-service [--listen ADDR] [--workers N]` (defaults: 127.0.0.1:7878,
//! 4 worker threads; port 0 picks a free port). It prints `kv-service:
//! listening on ADDR (pid PID)` on stdout once it accepts connections, and
//! stops on SIGTERM or SIGINT (returning from `main`, so that what runs at
//! exit runs).
//!
//! Protocol: one request per line, one response line per request, in order.
//!
//! | request         | response                    |
//! |-----------------|-----------------------------|
//! | `GET key`       | `VALUE value` / `NOT_FOUND` |
//! | `PUT key value` | `OK`                        |
//! | `DEL key`       | `DELETED` / `NOT_FOUND`     |
//! | anything else   | `ERR reason`                |
//!
//! A line longer than 64 KiB gets `ERR line too long` and the connection is
//! closed.

mod store;

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};

use store::Store;

// fntrace is linked for what it does on its own (environment, control
// socket); nothing here calls it.
use fntrace as _;

/// The longest request line accepted, newline excluded.
const MAX_LINE: usize = 64 << 10;

/// Command-line settings.
struct Options {
    listen: SocketAddr,
    workers: usize,
}

fn main() -> ExitCode {
    let options = match parse_options(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("kv-service: {message}");
            eprintln!("usage: kv-service [--listen ADDR] [--workers N]");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.workers)
        .thread_name("kv-worker")
        .enable_all()
        .build();
    let result = runtime.and_then(|runtime| runtime.block_on(serve(options.listen)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("kv-service: {err}");
            ExitCode::FAILURE
        }
    }
}

fn parse_options(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options {
        listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
        workers: 4,
    };
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--listen" => {
                let text = value()?;
                options.listen = text
                    .parse()
                    .map_err(|_| format!("--listen {text}: not an address such as 127.0.0.1:0"))?;
            }
            "--workers" => {
                let text = value()?;
                options.workers = text
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or(format!("--workers {text}: not a positive number"))?;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(options)
}

/// Accepts connections until SIGTERM or SIGINT, each served by a task of
/// its own.
async fn serve(listen: SocketAddr) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(
            stdout,
            "kv-service: listening on {} (pid {})",
            listener.local_addr()?,
            std::process::id()
        )?;
        stdout.flush()?;
    }
    let store = Arc::new(Store::new());
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let store = Arc::clone(&store);
                    tokio::spawn(async move {
                        if let Err(err) = serve_connection(stream, &store).await {
                            eprintln!("kv-service: connection: {err}");
                        }
                    });
                }
                // Out of descriptors and the like: the next accept may work.
                Err(err) => eprintln!("kv-service: accept: {err}"),
            },
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        }
    }
    eprintln!("kv-service: stopping");
    Ok(())
}

/// Answers the requests of one connection, in order, until it closes.
async fn serve_connection(stream: TcpStream, store: &Store) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let (reader, writer) = stream.into_split();
    let mut reader = BufReader::new(reader);
    let mut writer = BufWriter::new(writer);
    let mut line = String::new();
    let mut response = String::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_line(&mut line)
            .await?;
        if read == 0 {
            return Ok(());
        }
        if !line.ends_with('\n') && line.len() > MAX_LINE {
            writer.write_all(b"ERR line too long\n").await?;
            return writer.flush().await;
        }
        response.clear();
        handle_request(store, line.trim_end_matches(['\n', '\r']), &mut response);
        response.push('\n');
        writer.write_all(response.as_bytes()).await?;
        // Answer now unless the client already sent the next request.
        if reader.buffer().is_empty() {
            writer.flush().await?;
        }
    }
}

/// A parsed request.
#[derive(Debug, PartialEq, Eq)]
enum Request<'a> {
    Get(&'a str),
    Put(&'a str, &'a str),
    Delete(&'a str),
}

/// Parses and answers one request line, writing the response (without its
/// newline) to `response`.
#[inline(never)]
fn handle_request(store: &Store, line: &str, response: &mut String) {
    match parse_request(line) {
        Ok(Request::Get(key)) => handle_get(store, key, response),
        Ok(Request::Put(key, value)) => handle_put(store, key, value, response),
        Ok(Request::Delete(key)) => handle_delete(store, key, response),
        Err(reason) => {
            response.push_str("ERR ");
            response.push_str(reason);
        }
    }
}

/// The key of a GET or DEL: one word.
fn key_only(rest: &str) -> Result<&str, &'static str> {
    match rest {
        "" => Err("missing key"),
        key if key.contains(' ') => Err("a key has no spaces"),
        key => Ok(key),
    }
}

#[inline(never)]
fn parse_request(line: &str) -> Result<Request<'_>, &'static str> {
    let (command, rest) = line.split_once(' ').unwrap_or((line, ""));
    match command {
        "GET" => key_only(rest).map(Request::Get),
        "DEL" => key_only(rest).map(Request::Delete),
        "PUT" => match rest.split_once(' ') {
            Some((key, value)) if !key.is_empty() => Ok(Request::Put(key, value)),
            _ => Err("PUT needs a key and a value"),
        },
        "" => Err("empty request"),
        _ => Err("unknown command (GET, PUT, DEL)"),
    }
}

// The handlers are kept out of line so that each has its own entry, and its
// own row in fntrace's latency table.

#[inline(never)]
fn handle_get(store: &Store, key: &str, response: &mut String) {
    match store.get(key) {
        Some(value) => {
            response.push_str("VALUE ");
            response.push_str(&value);
        }
        None => response.push_str("NOT_FOUND"),
    }
}

#[inline(never)]
fn handle_put(store: &Store, key: &str, value: &str, response: &mut String) {
    store.put(key, value);
    response.push_str("OK");
}

#[inline(never)]
fn handle_delete(store: &Store, key: &str, response: &mut String) {
    response.push_str(if store.delete(key) {
        "DELETED"
    } else {
        "NOT_FOUND"
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(store: &Store, line: &str) -> String {
        let mut response = String::new();
        handle_request(store, line, &mut response);
        response
    }

    #[test]
    fn requests_and_responses() {
        let store = Store::new();
        assert_eq!(answer(&store, "GET a"), "NOT_FOUND");
        assert_eq!(answer(&store, "PUT a hello world"), "OK");
        assert_eq!(answer(&store, "GET a"), "VALUE hello world");
        assert_eq!(answer(&store, "DEL a"), "DELETED");
        assert_eq!(answer(&store, "DEL a"), "NOT_FOUND");
        assert_eq!(answer(&store, "PUT a"), "ERR PUT needs a key and a value");
        assert_eq!(answer(&store, "GET a b"), "ERR a key has no spaces");
        assert_eq!(answer(&store, "GET"), "ERR missing key");
        assert_eq!(answer(&store, ""), "ERR empty request");
        assert_eq!(
            answer(&store, "LIST"),
            "ERR unknown command (GET, PUT, DEL)"
        );
    }
}
