//! The metrics endpoint: `GET /metrics` over HTTP/1.x on a TCP address,
//! answered with the live profile in OpenMetrics text, or the Prometheus
//! text format 0.0.4 when the scraper does not ask for OpenMetrics (the
//! profile tracer's snapshot, encoded by
//! `fntrace_format::analysis::exposition` with what [`MetricsOptions`]
//! and `metrics-filter` select, see `exported`), for Prometheus and
//! other scrapers; in Prometheus's protobuf format, with native
//! histograms, when the scraper asks for it
//! (`fntrace_format::analysis::prometheus_protobuf`); in each format,
//! the runtime future linker's families after the profile's when the
//! process links futures. Started by `FNTRACE_METRICS` or
//! [`crate::serve_metrics`] / [`crate::serve_metrics_with`].
//!
//! # Who may scrape
//!
//! The address must be a loopback address (127.0.0.0/8, `::1`) unless
//! [`MetricsOptions::public`] says otherwise, and a public address needs
//! a [`MetricsOptions::token`]: then every request must carry
//! `Authorization: Bearer TOKEN` (else `401`), compared in a time that
//! does not depend on where it differs.
//!
//! # Idle clients cannot keep a scrape out
//!
//! One thread (`fntrace-metrics`, untraced) serves every connection with
//! one `poll` loop. The request head (up to the empty line) must arrive
//! within [`MetricsOptions::request_timeout`] of the connection and hold
//! at most [`MAX_HEAD_BYTES`] (else `408` / `431`); the reply must be
//! taken within [`MetricsOptions::reply_timeout`]; each connection
//! carries one request (`Connection: close`). A connection that has not
//! sent its head yet is *waiting*: when a new one comes from an address
//! that holds [`MetricsOptions::max_clients_per_address`] connections
//! already, or when [`MetricsOptions::max_clients`] are open, the oldest
//! waiting connection (of that address; else of the address holding the
//! most) is closed with `503` to make room, once what it sent meanwhile
//! has been read (a head that has come is answered instead): a scraper
//! sends its head right after connecting, so clients that hold
//! connections without a request only push out each other. Only when
//! every connection is being answered is the new one turned away
//! (`503`). Replies are sent with `MSG_NOSIGNAL`. Only `GET` (and `HEAD`) of `/metrics` is served:
//! another path is `404`, another method `405`, a head that is not HTTP
//! `400`.
//!
//! `/metrics` is gzipped (`fntrace_format::export::gzip`, `Content-Encoding:
//! gzip`) when the request's `Accept-Encoding` allows it, as Prometheus's
//! does.
//!
//! `GET /debug/pprof/profile?seconds=N` is served too, under the same
//! rules: the calls of the next N seconds as a pprof profile ([`pprof`],
//! which says how the wait blocks no other scrape).

use std::io::{ErrorKind, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::conn::{poll_ready, pollfd, send_some, wake_pipe, ServerThread};
use super::pprof::{self, Window};
use crate::builtin::profile::PROFILE_TRACER;
use crate::error::Error;
use crate::rt::spawn::spawn_running;
use crate::rt::thread::Untraced;
use crate::vars;
use fntrace_format::analysis::{
    accepts_protobuf, exposition, prometheus_protobuf, Exposition, TextFormat, DEFAULT_HISTOGRAMS,
    DEFAULT_MAX_FUNCTIONS, OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE,
    PROTOBUF_CONTENT_TYPE,
};

/// The longest request head accepted (request line and headers).
pub(crate) const MAX_HEAD_BYTES: usize = 8192;

/// Who may scrape the metrics endpoint, how it treats its clients and
/// what it exports; see [`serve_metrics_with`](crate::serve_metrics_with).
#[derive(Clone)]
pub struct MetricsOptions {
    /// Whether an address other hosts can reach (`0.0.0.0:9464`, a
    /// non-loopback interface) may be served (false): such an address is
    /// refused unless this is set, and then only with a [`token`].
    /// (`FNTRACE_METRICS_PUBLIC=1`.)
    ///
    /// [`token`]: MetricsOptions::token
    pub public: bool,
    /// The bearer token every request must carry (`Authorization: Bearer
    /// TOKEN`; without it, or with another, `401`): 16 to 4096 characters
    /// of `A-Z a-z 0-9 - . _ ~ + /`, `=` at the end. Required with
    /// [`public`](MetricsOptions::public). (`FNTRACE_METRICS_TOKEN`,
    /// `FNTRACE_METRICS_TOKEN_FILE`.)
    pub token: Option<String>,
    /// The most functions exported (500): those with the most total time;
    /// the others are counted in `fntrace_metrics_functions_omitted`.
    /// (`FNTRACE_METRICS_MAX_FUNCTIONS`.)
    pub max_functions: usize,
    /// How many of them carry the duration histogram (10): those with the
    /// most total time; the others are 3 series each (calls, self time,
    /// running calls). (`FNTRACE_METRICS_HISTOGRAMS`.)
    pub histograms: usize,
    /// Globs a function's name must match to be exported, `!glob`s it
    /// must not (the trace filter's syntax); empty: all.
    /// (`FNTRACE_METRICS_FILTER`.)
    pub filter: Vec<String>,
    /// Label values in full, generic arguments kept (false: without them,
    /// the instances of a generic function one series).
    /// (`FNTRACE_METRICS_NAMES=full`.)
    pub full_names: bool,
    /// Classic histogram buckets per power of two (1; a power of two up
    /// to 128), for scrapers without native histograms.
    /// (`FNTRACE_METRICS_BUCKETS_PER_DOUBLING`.)
    pub buckets_per_doubling: u32,
    /// Connections open at once (64).
    pub max_clients: usize,
    /// Connections open at once from one address (8).
    pub max_clients_per_address: usize,
    /// How long a client has, from its connection, to send its request
    /// head (1 s); then it gets `408` and is closed.
    pub request_timeout: Duration,
    /// How long a client has to take its reply (10 s, Prometheus's
    /// default scrape timeout); then it is closed.
    pub reply_timeout: Duration,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        MetricsOptions {
            public: false,
            token: None,
            max_functions: DEFAULT_MAX_FUNCTIONS,
            histograms: DEFAULT_HISTOGRAMS,
            filter: Vec::new(),
            full_names: false,
            buckets_per_doubling: 1,
            max_clients: 64,
            max_clients_per_address: 8,
            request_timeout: Duration::from_secs(1),
            reply_timeout: Duration::from_secs(10),
        }
    }
}

impl std::fmt::Debug for MetricsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsOptions")
            .field("public", &self.public)
            // Never the token itself: options get logged.
            .field("token", &self.token.as_ref().map(|_| "(set, not shown)"))
            .field("max_functions", &self.max_functions)
            .field("histograms", &self.histograms)
            .field("filter", &self.filter)
            .field("full_names", &self.full_names)
            .field("max_clients", &self.max_clients)
            .field("max_clients_per_address", &self.max_clients_per_address)
            .field("request_timeout", &self.request_timeout)
            .field("reply_timeout", &self.reply_timeout)
            .finish()
    }
}

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

/// Whether only this host reaches `address`: 127.0.0.0/8, `::1`, or an
/// IPv4-mapped loopback address.
fn is_loopback(address: &SocketAddr) -> bool {
    match address.ip() {
        IpAddr::V4(ip) => ip.is_loopback(),
        IpAddr::V6(ip) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Why `options` refuse `addresses` (what `address` resolved to), if
/// they do.
fn refusal(address: &str, addresses: &[SocketAddr], options: &MetricsOptions) -> Option<String> {
    if let Some(token) = &options.token {
        if let Err(e) = vars::parse_token(token) {
            return Some(format!("the token is refused: {e}"));
        }
    }
    let open = addresses.iter().find(|a| !is_loopback(a))?;
    if !options.public {
        let port = open.port();
        return Some(format!(
            "{open} is not a loopback address: other hosts could read the profile. Serve \
             127.0.0.1:{port} (or :{port}, a port alone), or set FNTRACE_METRICS_PUBLIC=1 \
             (MetricsOptions::public) with a bearer token, FNTRACE_METRICS_TOKEN or \
             FNTRACE_METRICS_TOKEN_FILE (MetricsOptions::token)"
        ));
    }
    if options.token.is_none() {
        return Some(format!(
            "{address} is public (FNTRACE_METRICS_PUBLIC=1) and no token is set: set \
             FNTRACE_METRICS_TOKEN or FNTRACE_METRICS_TOKEN_FILE (MetricsOptions::token), \
             which every scrape must then send"
        ));
    }
    None
}

/// Serves `GET /metrics` on `address` (`HOST:PORT`; a port alone is on
/// the loopback address) on a thread of its own.
pub(crate) fn serve_metrics(
    address: &str,
    options: &MetricsOptions,
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
    if let Some(why) = refusal(address, &addresses, options) {
        return Err(Error::Io {
            what: format!("metrics address {address}"),
            source: std::io::Error::new(ErrorKind::PermissionDenied, why),
        });
    }
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
    /// Its address (the port left out: the limits are per host).
    peer: IpAddr,
    /// When it connected.
    since: Instant,
    /// The request head read so far.
    head: Vec<u8>,
    /// The reply bytes not sent yet, once there is a reply.
    reply: Option<Vec<u8>>,
    /// The profile window it waits for (no reply until it ends).
    window: Option<Window>,
    /// When it is closed if its head has not arrived (before the reply)
    /// or its reply not been taken (after); when its window ends.
    deadline: Instant,
}

impl Client {
    /// Whether it has sent no complete head yet.
    fn waiting(&self) -> bool {
        self.reply.is_none() && self.window.is_none()
    }
}

/// Serves until a byte arrives on `wake`.
fn run(listener: TcpListener, wake: OwnedFd, options: &MetricsOptions) {
    // Nothing this thread runs is traced.
    let _untraced = Untraced::begin();
    let mut clients: Vec<Client> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        fds.clear();
        fds.push(pollfd(wake.as_raw_fd(), libc::POLLIN));
        fds.push(pollfd(listener.as_raw_fd(), libc::POLLIN));
        for client in &clients {
            // A window's client: only an error or hang-up wakes it.
            let events = match (&client.reply, &client.window) {
                (Some(_), _) => libc::POLLOUT,
                (None, Some(_)) => 0,
                (None, None) => libc::POLLIN,
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
            if let Some(window) = client.window.take() {
                let (status, body, extra) = window.finish();
                let content_type = match status {
                    200 => "application/octet-stream",
                    _ => "text/plain",
                };
                let reply = response_with(status, content_type, &body, window.with_body, extra);
                client.reply = Some(reply);
                client.deadline = now + options.reply_timeout;
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
            accept_all(&listener, &mut clients, options);
        }
    }
}

/// Accepts the waiting connections (64 at most per round), making room
/// for each (see the module docs).
fn accept_all(listener: &TcpListener, clients: &mut Vec<Client>, options: &MetricsOptions) {
    for _ in 0..64 {
        let (stream, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        let peer = peer.ip();
        if !make_room(clients, peer, options) {
            refuse(
                &stream,
                b"busy: every connection is being answered; try again\n",
            );
            continue;
        }
        let now = Instant::now();
        clients.push(Client {
            stream,
            peer,
            since: now,
            head: Vec::new(),
            reply: None,
            window: None,
            deadline: now + options.request_timeout,
        });
    }
}

/// Makes room for one more connection from `peer` if a limit is reached:
/// closes the oldest waiting connection (no complete head) of `peer`
/// when it holds its share, else of the address holding the most
/// connections. What a candidate sent meanwhile is read first: one whose
/// head has come (a scraper, just accepted) is answered, not closed, and
/// the next is taken. False when no connection can be closed for it.
fn make_room(clients: &mut Vec<Client>, peer: IpAddr, options: &MetricsOptions) -> bool {
    loop {
        let from = |ip: IpAddr| clients.iter().filter(|c| c.peer == ip).count();
        let victim = if from(peer) >= options.max_clients_per_address.max(1) {
            oldest(clients, |c| c.waiting() && c.peer == peer)
        } else if clients.len() >= options.max_clients.max(1) {
            let most = clients
                .iter()
                .filter(|c| c.waiting())
                .map(|c| from(c.peer))
                .max()
                .unwrap_or(0);
            oldest(clients, |c| c.waiting() && from(c.peer) == most)
        } else {
            return true;
        };
        let Some(victim) = victim else {
            return false;
        };
        let client = &mut clients[victim];
        if read_head(client, options) && !client.waiting() {
            continue; // a request: it is answered
        }
        // Gone, or still without a request: its place is taken.
        let client = clients.swap_remove(victim);
        refuse(
            &client.stream,
            b"closed for a newer connection: no request was sent on this one\n",
        );
        return true;
    }
}

/// The index of the oldest client among those `which` selects.
fn oldest(clients: &[Client], which: impl Fn(&Client) -> bool) -> Option<usize> {
    clients
        .iter()
        .enumerate()
        .filter(|(_, c)| which(c))
        .min_by_key(|(_, c)| c.since)
        .map(|(index, _)| index)
}

/// Answers `503` with `why` (if the socket takes it now) and closes.
fn refuse(stream: &TcpStream, why: &[u8]) {
    let reply = response(503, "text/plain", why, true);
    if send_some(stream.as_fd(), &reply) == Some(reply.len()) {
        close_gently(stream);
    }
}

/// Reads what a client with no reply yet has sent, without waiting; once
/// its head is complete (or too large) its reply is made, and it has
/// until the reply timeout to take it. False if it is gone.
fn read_head(client: &mut Client, options: &MetricsOptions) -> bool {
    let mut chunk = [0u8; 1024];
    while client.waiting() {
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
                    match answer(&client.head[..end], options) {
                        Answer::Now(reply) => client.reply = Some(reply),
                        Answer::Later(window) => {
                            client.deadline = window.due();
                            client.window = Some(window);
                            return true;
                        }
                    }
                }
            }
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) if err.kind() == ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
    client.deadline = Instant::now() + options.reply_timeout;
    true
}

/// Serves a client `poll` found ready; whether it stays connected.
fn serve_ready(client: &mut Client, options: &MetricsOptions) -> bool {
    if client.window.is_some() {
        return false; // an error or a hang-up: nobody waits for it
    }
    if client.reply.is_none() && !read_head(client, options) {
        return false;
    }
    let Some(reply) = &mut client.reply else {
        return true;
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

/// What a request head is answered with.
pub(crate) enum Answer {
    /// This reply.
    Now(Vec<u8>),
    /// A profile window's, when it ends.
    Later(Window),
}

impl From<Vec<u8>> for Answer {
    fn from(reply: Vec<u8>) -> Answer {
        Answer::Now(reply)
    }
}

/// The reply to a request head.
pub(crate) fn answer(head: &[u8], options: &MetricsOptions) -> Answer {
    let Ok(head) = std::str::from_utf8(head) else {
        return response(400, "text/plain", b"the request is not text\n", true).into();
    };
    let mut lines = head.lines();
    let request = lines.next().unwrap_or("");
    let words: Vec<&str> = request.split(' ').collect();
    let [method, target, version] = words[..] else {
        return response(400, "text/plain", b"not an HTTP request line\n", true).into();
    };
    if !version.starts_with("HTTP/1.") {
        return response(400, "text/plain", b"HTTP/1.x only\n", true).into();
    }
    let headers: Vec<(&str, &str)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim(), value.trim()))
        .collect();
    if let Some(token) = &options.token {
        // Before anything else is said about the request.
        if let Err(why) = authorized(&headers, token) {
            return unauthorized(why).into();
        }
    }
    let path = target.split('?').next().unwrap_or("");
    if path != "/metrics" && path != pprof::PATH {
        let why = format!("only /metrics and {} are served here\n", pprof::PATH);
        return response(404, "text/plain", why.as_bytes(), true).into();
    }
    let with_body = match method {
        "GET" => true,
        "HEAD" => false,
        _ => return response(405, "text/plain", b"GET (or HEAD) only\n", true).into(),
    };
    if path == pprof::PATH {
        return match pprof::open(target, with_body) {
            Ok(window) => Answer::Later(window),
            Err((status, why, extra)) => {
                response_with(status, "text/plain", &why, with_body, extra).into()
            }
        };
    }
    let accept = |format: fn(&str) -> bool| {
        headers
            .iter()
            .any(|(name, value)| name.eq_ignore_ascii_case("accept") && format(value))
    };
    let wants_openmetrics = accept(|value| value.contains("application/openmetrics-text"));
    let (format, content_type) = if wants_openmetrics {
        (TextFormat::OpenMetrics, OPENMETRICS_CONTENT_TYPE)
    } else {
        (TextFormat::Prometheus, PROMETHEUS_CONTENT_TYPE)
    };
    let what = Exposition {
        format,
        filter: exported::live_filter().unwrap_or_else(|| options.filter.clone()),
        max_functions: options.max_functions,
        histograms: options.histograms,
        full_names: options.full_names,
        buckets_per_doubling: options.buckets_per_doubling,
        process: Some(exported::process_info()),
    };
    // Asked for by Prometheus with native histograms on: it reads them
    // from this format only.
    let (body, content_type) = if accept(accepts_protobuf) {
        let mut body = prometheus_protobuf(&PROFILE_TRACER.snapshot(), &what);
        if let Some(rows) = super::futures::rows() {
            fntrace_format::analysis::write_future_protobuf(&rows, linker_table(), &mut body);
        }
        (body, PROTOBUF_CONTENT_TYPE)
    } else {
        let body = exposition(&PROFILE_TRACER.snapshot(), &what);
        (with_futures(body, format).into_bytes(), content_type)
    };
    if accepts_gzip(&headers) {
        let body = fntrace_format::export::gzip(&body);
        let extra = "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n";
        return response_with(200, content_type, &body, with_body, extra).into();
    }
    response(200, content_type, &body, with_body).into()
}

/// Whether `Accept-Encoding` lists `gzip` (or `*`) without `q=0`.
fn accepts_gzip(headers: &[(&str, &str)]) -> bool {
    headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("accept-encoding"))
        .flat_map(|(_, value)| value.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q == 0.0))
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
}

/// Whether `headers` carry `Authorization: Bearer TOKEN` with `token`
/// (one such header; the scheme's case does not matter), or why not:
/// `invalid_token` (a token, not this one) or nothing to say (none sent).
fn authorized(headers: &[(&str, &str)], token: &str) -> Result<(), Option<&'static str>> {
    let mut given = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("authorization"))
        .map(|(_, value)| value);
    let (Some(value), None) = (given.next(), given.next()) else {
        return Err(None);
    };
    let Some((scheme, credentials)) = value.split_once(' ') else {
        return Err(None);
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(None);
    }
    match same_token(credentials.trim().as_bytes(), token.as_bytes()) {
        true => Ok(()),
        false => Err(Some("invalid_token")),
    }
}

/// Whether `given` is `expected`, in a time that depends on the length of
/// `expected` alone: every byte is compared, whatever the first
/// difference (a comparison that stops there would tell a client, by its
/// time, how much of its guess is right).
fn same_token(given: &[u8], expected: &[u8]) -> bool {
    let mut differ = u8::from(given.len() != expected.len());
    for (at, &byte) in expected.iter().enumerate() {
        differ |= byte ^ given.get(at).copied().unwrap_or(0);
    }
    // Not folded into an early exit by the optimiser.
    std::hint::black_box(differ) == 0
}

/// The `401` of a request without the token (`error`: RFC 6750's error
/// code, when a wrong one was sent).
fn unauthorized(error: Option<&str>) -> Vec<u8> {
    let challenge = match error {
        Some(error) => format!("Bearer realm=\"fntrace\", error=\"{error}\""),
        None => "Bearer realm=\"fntrace\"".to_string(),
    };
    response_with(
        401,
        "text/plain",
        b"a bearer token is required: Authorization: Bearer TOKEN\n",
        true,
        &format!("WWW-Authenticate: {challenge}\r\n"),
    )
}

/// An HTTP/1.1 response that closes the connection.
fn response(status: u16, content_type: &str, body: &[u8], with_body: bool) -> Vec<u8> {
    let extra = if status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    response_with(status, content_type, body, with_body, extra)
}

/// [`response`] with `extra` header lines (each ending in `\r\n`).
fn response_with(
    status: u16,
    content_type: &str,
    body: &[u8],
    with_body: bool,
    extra: &str,
) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        body.len()
    );
    out.push_str(extra);
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    if with_body {
        out.extend_from_slice(body);
    }
    out
}

mod exported;
pub(crate) use exported::{options_from_env, set_metrics_filter};

#[cfg(test)]
mod tests;

/// `body` with the runtime future linker's families, if the process
/// records async functions' polls (`fntrace record --async`).
fn with_futures(body: String, format: TextFormat) -> String {
    let Some(rows) = super::futures::rows() else {
        return body;
    };
    fntrace_format::analysis::with_future_metrics(body, &rows, linker_table(), format)
}

/// The runtime future linker's table now, as `/metrics` shows it.
fn linker_table() -> fntrace_format::analysis::LinkerTable {
    fntrace_format::analysis::LinkerTable {
        untracked: crate::builtin::futures::untracked(),
        pending: crate::builtin::futures::pending(),
    }
}
