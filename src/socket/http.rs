//! The metrics endpoint: `GET /metrics` over HTTP/1.x on a TCP address,
//! answered with the live profile in OpenMetrics text (the profile
//! tracer's snapshot, encoded by `fntrace_tools::analysis::openmetrics`),
//! for Prometheus and other scrapers. Started by `FNTRACE_METRICS` or
//! [`crate::serve_metrics`].
//!
//! One thread (`fntrace-metrics`, untraced) serves every connection with
//! one `poll` loop, with the control socket's defences: at most
//! [`ControlOptions::max_clients`] connections at once (more get `503`
//! and are closed), the request head (up to the empty line) must arrive
//! within [`ControlOptions::request_timeout`] and hold at most
//! [`MAX_HEAD_BYTES`] (else `408` / `431`), the reply must be taken
//! within [`ControlOptions::reply_timeout`]; replies are sent with
//! `MSG_NOSIGNAL`; each connection carries one request (`Connection:
//! close`). Only `GET` (and `HEAD`) of `/metrics` is served: another path
//! is `404`, another method `405`, a head that is not HTTP `400`. The
//! address is the caller's choice: `FNTRACE_METRICS=PORT` binds the
//! loopback address only.

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Instant;

use super::conn::{poll_ready, pollfd, send_some, wake_pipe, ServerThread};
use super::ControlOptions;
use crate::error::Error;
use crate::rt::thread::Untraced;
use crate::sys::spawn::spawn_running;
use crate::tracers::profile::PROFILE_TRACER;
use fntrace_tools::analysis::{openmetrics, OPENMETRICS_CONTENT_TYPE};

/// The longest request head accepted (request line and headers).
pub(crate) const MAX_HEAD_BYTES: usize = 8192;

/// The content type of the Prometheus text format 0.0.4, which the text
/// also is (see `fntrace_tools::analysis::openmetrics`), for scrapers that
/// do not ask for OpenMetrics.
const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A running metrics endpoint; dropping it stops it as
/// [`MetricsServer::stop`] does.
pub struct MetricsServer {
    address: SocketAddr,
    thread: ServerThread,
}

impl MetricsServer {
    /// The address it listens on (with the port the system chose for a
    /// port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Stops serving: the thread ends and the port is closed.
    pub fn stop(mut self) {
        self.thread.stop();
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.thread.stop();
    }
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// Serves `GET /metrics` on `address` (`HOST:PORT`; a port alone is on
/// the loopback address) on a thread of its own.
pub(crate) fn serve_metrics(
    address: &str,
    options: &ControlOptions,
) -> Result<MetricsServer, Error> {
    let io = |what: &str| {
        let what = format!("metrics address {address}: {what}");
        move |source| Error::Io { what, source }
    };
    let addresses: Vec<SocketAddr> = if let Ok(port) = address.parse::<u16>() {
        vec![SocketAddr::from(([127, 0, 0, 1], port))]
    } else {
        address
            .to_socket_addrs()
            .map_err(io("not HOST:PORT"))?
            .collect()
    };
    let listener = TcpListener::bind(&addresses[..]).map_err(io("binding"))?;
    listener
        .set_nonblocking(true)
        .map_err(io("setting it up"))?;
    let bound = listener.local_addr().map_err(io("setting it up"))?;
    let (wake_read, wake_write) = wake_pipe().map_err(io("making its wake-up pipe"))?;
    let options = options.clone();
    let thread = spawn_running("fntrace-metrics", move || {
        run(listener, wake_read, &options)
    })
    .map_err(io("starting its thread"))?;
    Ok(MetricsServer {
        address: bound,
        thread: ServerThread::new(wake_write, thread),
    })
}

/// A connected scraper.
struct Client {
    stream: TcpStream,
    /// The request head read so far.
    head: Vec<u8>,
    /// The reply bytes not sent yet, once there is a reply.
    reply: Option<Vec<u8>>,
    /// When it is closed if its head has not arrived (before the reply)
    /// or its reply not been taken (after).
    deadline: Instant,
}

/// Serves until a byte arrives on `wake`.
fn run(listener: TcpListener, wake: OwnedFd, options: &ControlOptions) {
    // Nothing this thread runs is traced.
    let _untraced = Untraced::begin();
    let max_clients = options.max_clients.max(1);
    let mut clients: Vec<Client> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        fds.clear();
        fds.push(pollfd(wake.as_raw_fd(), libc::POLLIN));
        fds.push(pollfd(listener.as_raw_fd(), libc::POLLIN));
        for client in &clients {
            let events = match client.reply {
                Some(_) => libc::POLLOUT,
                None => libc::POLLIN,
            };
            fds.push(pollfd(client.stream.as_raw_fd(), events));
        }
        if !poll_ready(&mut fds, clients.iter().map(|c| c.deadline)) {
            continue;
        }
        if fds[0].revents != 0 {
            return;
        }
        let mut index = 0;
        clients.retain_mut(|client| {
            let revents = fds[2 + index].revents;
            index += 1;
            revents == 0 || serve_ready(client, options)
        });
        let now = Instant::now();
        clients.retain_mut(|client| {
            if now < client.deadline {
                return true;
            }
            if client.reply.is_none() {
                let reply = response(408, "text/plain", b"no complete request in time\n", true);
                if send_some(client.stream.as_fd(), &reply) == Some(reply.len()) {
                    close_gently(&client.stream);
                }
            }
            false
        });
        if fds[1].revents != 0 {
            accept_all(&listener, &mut clients, max_clients, options);
        }
    }
}

/// Accepts the waiting connections (64 at most per round).
fn accept_all(
    listener: &TcpListener,
    clients: &mut Vec<Client>,
    max_clients: usize,
    options: &ControlOptions,
) {
    for _ in 0..64 {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        if clients.len() >= max_clients {
            let reply = response(503, "text/plain", b"busy; try again\n", true);
            if send_some(stream.as_fd(), &reply) == Some(reply.len()) {
                close_gently(&stream);
            }
            continue;
        }
        clients.push(Client {
            stream,
            head: Vec::new(),
            reply: None,
            deadline: Instant::now() + options.request_timeout,
        });
    }
}

/// Serves a client `poll` found ready; whether it stays connected.
fn serve_ready(client: &mut Client, options: &ControlOptions) -> bool {
    if client.reply.is_none() {
        let mut chunk = [0u8; 1024];
        loop {
            let room = (MAX_HEAD_BYTES - client.head.len()).min(chunk.len());
            if room == 0 {
                client.reply = Some(response(
                    431,
                    "text/plain",
                    b"request head too large\n",
                    true,
                ));
                break;
            }
            match client.stream.read(&mut chunk[..room]) {
                Ok(0) => return false,
                Ok(n) => {
                    client.head.extend_from_slice(&chunk[..n]);
                    if let Some(end) = head_end(&client.head) {
                        client.reply = Some(answer(&client.head[..end]));
                        break;
                    }
                }
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(err) if err.kind() == ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        }
        client.deadline = Instant::now() + options.reply_timeout;
    }
    let Some(reply) = &mut client.reply else {
        return false;
    };
    match send_some(client.stream.as_fd(), reply) {
        Some(n) if n < reply.len() => {
            reply.drain(..n);
            true
        }
        Some(_) => {
            close_gently(&client.stream);
            false
        }
        None => false,
    }
}

/// Before a connection is closed after its whole reply: ends the sending
/// side and reads what the client sent beyond its head (64 KiB at most,
/// what is there now), so that the close is not a reset that would
/// discard the reply before the client read it (a head too large).
fn close_gently(stream: &TcpStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match (&*stream).read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => return,
        }
    }
}

/// Where the head ends (the empty line: `\r\n\r\n`, or `\n\n`).
fn head_end(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = bytes.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The reply to a request head.
pub(crate) fn answer(head: &[u8]) -> Vec<u8> {
    let Ok(head) = std::str::from_utf8(head) else {
        return response(400, "text/plain", b"the request is not text\n", true);
    };
    let mut lines = head.lines();
    let request = lines.next().unwrap_or("");
    let words: Vec<&str> = request.split(' ').collect();
    let [method, target, version] = words[..] else {
        return response(400, "text/plain", b"not an HTTP request line\n", true);
    };
    if !version.starts_with("HTTP/1.") {
        return response(400, "text/plain", b"HTTP/1.x only\n", true);
    }
    let path = target.split('?').next().unwrap_or("");
    if path != "/metrics" {
        return response(404, "text/plain", b"only /metrics is served here\n", true);
    }
    let with_body = match method {
        "GET" => true,
        "HEAD" => false,
        _ => return response(405, "text/plain", b"GET /metrics only\n", true),
    };
    let wants_openmetrics = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("accept")
                && value.contains("application/openmetrics-text")
        })
    });
    let content_type = if wants_openmetrics {
        OPENMETRICS_CONTENT_TYPE
    } else {
        PROMETHEUS_CONTENT_TYPE
    };
    let body = openmetrics(&PROFILE_TRACER.snapshot());
    response(200, content_type, body.as_bytes(), with_body)
}

/// An HTTP/1.1 response that closes the connection.
fn response(status: u16, content_type: &str, body: &[u8], with_body: bool) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        body.len()
    );
    if status == 405 {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    if with_body {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(reply: &[u8]) -> String {
        String::from_utf8_lossy(reply)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    }

    #[test]
    fn answers_only_get_of_metrics() {
        assert_eq!(
            status(&answer(b"GET /nope HTTP/1.1\r\n")),
            "HTTP/1.1 404 Not Found"
        );
        assert_eq!(
            status(&answer(b"POST /metrics HTTP/1.1\r\n")),
            "HTTP/1.1 405 Method Not Allowed"
        );
        assert_eq!(status(&answer(b"hello")), "HTTP/1.1 400 Bad Request");
        assert_eq!(
            status(&answer(b"GET /metrics SPDY\r\n")),
            "HTTP/1.1 400 Bad Request"
        );
        assert_eq!(status(&answer(&[0xff, 0xfe])), "HTTP/1.1 400 Bad Request");
        let ok = answer(b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n");
        let text = String::from_utf8(ok).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains(OPENMETRICS_CONTENT_TYPE));
        assert!(text.ends_with("# EOF\n"), "{text}");
        let plain = String::from_utf8(answer(b"HEAD /metrics?x=1 HTTP/1.0\r\n")).unwrap();
        assert!(plain.contains(PROMETHEUS_CONTENT_TYPE) && plain.ends_with("\r\n\r\n"));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nrest"), Some(20));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
    }
}
