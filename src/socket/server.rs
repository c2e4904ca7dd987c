//! The server thread: one `poll` loop over the listening socket, a wake-up
//! pipe and the connected clients, each read and written without blocking
//! and bounded in time and size; a complete request line is run by the
//! handler on this thread. No client can block the loop, and none can
//! raise `SIGPIPE` (replies go out with `send(MSG_NOSIGNAL)`).

use std::cell::Cell;
use std::io::{ErrorKind, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use super::conn::{poll_ready, pollfd, send_some};
use super::reply::Reply;
use super::{ControlOptions, Handler};
use crate::rt::thread::Untraced;
use fntrace_format::wire::request::{parse, MAX_REQUEST_BYTES};

thread_local! {
    /// Set by a handler (on the server's thread) whose command ends the
    /// server: `detach`. Its reply is sent, then the loop ends.
    static STOP_AFTER_REPLY: Cell<bool> = const { Cell::new(false) };
}

/// Called by a handler: once this request's reply is sent, the server
/// stops (its thread ends; its other clients are closed unanswered).
pub(crate) fn stop_after_reply() {
    STOP_AFTER_REPLY.with(|stop| stop.set(true));
}

/// A connected client.
struct Client {
    stream: UnixStream,
    /// The request bytes read so far (at most `MAX_REQUEST_BYTES`).
    request: Vec<u8>,
    /// The reply bytes not sent yet, once there is a reply.
    reply: Option<Vec<u8>>,
    /// When the client is closed if it has not sent its request (before
    /// the reply) or taken its reply (after).
    deadline: Instant,
}

/// What a read from a client gave.
enum Received {
    /// Not a whole line yet.
    More,
    /// The request line (without its `\n`).
    Line(Vec<u8>),
    /// `MAX_REQUEST_BYTES` without a `\n`.
    TooLong,
    /// The client closed (or failed) before its line ended: no reply.
    Gone,
}

/// Serves until a byte arrives on `wake`.
pub(super) fn run(
    listener: UnixListener,
    wake: OwnedFd,
    options: &ControlOptions,
    handler: Handler,
) {
    // Nothing this thread runs is traced: the commands it runs patch and
    // record the traced code.
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
            revents == 0 || serve_ready(client, handler, options)
        });
        if STOP_AFTER_REPLY.with(|stop| stop.replace(false)) {
            return;
        }
        let now = Instant::now();
        clients.retain_mut(|client| {
            if now < client.deadline {
                return true;
            }
            if client.reply.is_some() {
                return false; // the reply was not taken in time
            }
            // A request that arrived while a command ran is in time.
            let stays = serve_ready(client, handler, options);
            if client.reply.is_some() || !stays {
                return stays;
            }
            let why = format!(
                "no complete request line within {:?}; closing",
                options.request_timeout
            );
            send_some(client.stream.as_fd(), &Reply::error(why).encode());
            false
        });
        // A late request (one that arrived while a command ran) may have
        // been the one that ends the server.
        if STOP_AFTER_REPLY.with(|stop| stop.replace(false)) {
            return;
        }
        if fds[1].revents != 0 {
            accept_all(&listener, &mut clients, max_clients, options);
        }
    }
}

/// Connections accepted in one round of the loop: a flood of them does
/// not keep it from the clients it serves.
const ACCEPTS_PER_ROUND: usize = 64;

/// Accepts the waiting connections (up to `ACCEPTS_PER_ROUND`): a client,
/// or, past `max_clients` or from another user, an error reply and a
/// close.
fn accept_all(
    listener: &UnixListener,
    clients: &mut Vec<Client>,
    max_clients: usize,
    options: &ControlOptions,
) {
    for _ in 0..ACCEPTS_PER_ROUND {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            // WouldBlock (none left), or a client gone before its accept,
            // or out of descriptors: the others are served meanwhile.
            Err(_) => return,
        };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        if let Err(why) = check_peer(&stream) {
            send_some(stream.as_fd(), &Reply::error(why).encode());
            continue;
        }
        if clients.len() >= max_clients {
            let why = format!(
                "busy: {} clients are being served (at most {max_clients}); try again",
                clients.len()
            );
            send_some(stream.as_fd(), &Reply::error(why).encode());
            continue;
        }
        clients.push(Client {
            stream,
            request: Vec::new(),
            reply: None,
            deadline: Instant::now() + options.request_timeout,
        });
    }
}

/// Only the process's own user, or root, may control it.
fn check_peer(stream: &UnixStream) -> Result<(), String> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes a `ucred` of at most `len` bytes into
    // `cred`, which is that large.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(format!(
            "the client's credentials cannot be read ({}); refused",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: geteuid takes no arguments and cannot fail.
    let own = unsafe { libc::geteuid() };
    if cred.uid == own || cred.uid == 0 {
        Ok(())
    } else {
        Err(format!(
            "permission denied: uid {} may not control this process (only uid {own} or root)",
            cred.uid
        ))
    }
}

/// Serves a client `poll` found ready; whether it stays connected.
fn serve_ready(client: &mut Client, handler: Handler, options: &ControlOptions) -> bool {
    if client.reply.is_some() {
        return send_rest(client);
    }
    let reply = match read_request(client) {
        Received::More => return true,
        Received::Gone => return false,
        // The client gave up (it was not served in time, the process being
        // stopped, say) and closed: what it asked is not done behind its
        // back. Checked last thing before the command runs.
        Received::Line(_) if hung_up(&client.stream) => return false,
        Received::TooLong => Reply::error(format!(
            "the request is longer than {MAX_REQUEST_BYTES} bytes without a newline; closing"
        )),
        Received::Line(line) => match parse(&line) {
            Ok(request) => {
                catch_unwind(AssertUnwindSafe(|| handler(request))).unwrap_or_else(|_| {
                    Reply::error("fntrace panicked running the command (a bug); it was abandoned")
                })
            }
            Err(why) => Reply::error(why),
        },
    };
    client.reply = Some(reply.encode());
    client.deadline = Instant::now() + options.reply_timeout;
    if STOP_AFTER_REPLY.with(Cell::get) {
        // The server ends after this: the reply is sent now, waiting (at
        // most the reply timeout) for the client to take it.
        while send_rest(client) && Instant::now() < client.deadline {
            let mut fd = pollfd(client.stream.as_raw_fd(), libc::POLLOUT);
            // SAFETY: one initialised pollfd, a bounded timeout.
            unsafe { libc::poll(&mut fd, 1, 100) };
        }
        return false;
    }
    send_rest(client)
}

/// Whether the client closed its connection (both ways: `POLLHUP`), as a
/// client that gave up waiting does by exiting. A client that only shut
/// down its writing side (`shutdown(SHUT_WR)`, as `socat` does at the end
/// of its input) still waits for the reply: that is `POLLRDHUP` alone.
fn hung_up(stream: &UnixStream) -> bool {
    let mut fd = pollfd(stream.as_raw_fd(), 0);
    // SAFETY: one initialised pollfd; a zero timeout never blocks.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    ready > 0 && fd.revents & (libc::POLLHUP | libc::POLLERR) != 0
}

/// Reads what the client sent, up to the end of its request line.
fn read_request(client: &mut Client) -> Received {
    let mut chunk = [0u8; 1024];
    loop {
        let room = (MAX_REQUEST_BYTES - client.request.len()).min(chunk.len());
        if room == 0 {
            return Received::TooLong;
        }
        match client.stream.read(&mut chunk[..room]) {
            Ok(0) => return Received::Gone,
            Ok(n) => {
                let start = client.request.len();
                client.request.extend_from_slice(&chunk[..n]);
                if let Some(at) = client.request[start..].iter().position(|&b| b == b'\n') {
                    // Bytes after the line are ignored: one request per
                    // connection.
                    client.request.truncate(start + at);
                    return Received::Line(std::mem::take(&mut client.request));
                }
            }
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) if err.kind() == ErrorKind::WouldBlock => return Received::More,
            Err(_) => return Received::Gone,
        }
    }
}

/// Sends what the socket takes of the reply; whether the client stays
/// connected (the reply is not all sent, and the client is there).
fn send_rest(client: &mut Client) -> bool {
    let Some(reply) = &mut client.reply else {
        return false;
    };
    let sent = send_some(client.stream.as_fd(), reply);
    match sent {
        Some(n) if n < reply.len() => {
            reply.drain(..n);
            true
        }
        // All sent, or the client is gone: close.
        _ => false,
    }
}
