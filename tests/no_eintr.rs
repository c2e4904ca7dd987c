//! The breakpoint protocol never interrupts a blocked system call: six
//! threads blocked in `epoll_wait`, `poll`, `nanosleep`, `select`, `read`
//! on a pipe and `recv` with `SO_RCVTIMEO` (each looping with a 20 ms
//! timeout) see 0 EINTR during 1,000 enable/disable toggles. The same
//! threads during 100 stop-the-world toggles do see EINTR (in `nanosleep`
//! at least), which shows the probe would catch them.

#[macro_use]
mod common;

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Counter;
use fntrace::PatchProtocol;
use fntrace_fixtures::rust;

static COUNTER: Counter = Counter::new();
fntrace::register_tracer!("eintr", &COUNTER);

const BREAKPOINT_TOGGLES: usize = 1_000;
const STOP_TOGGLES: usize = 100;
const CALLS: [&str; 6] = ["epoll_wait", "poll", "nanosleep", "select", "read", "recv"];

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn pipe() -> [RawFd; 2] {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out-array of two ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    fds
}

/// One blocking call of kind `which` with a ~20 ms timeout; the return
/// value as the call gives it (-1 with errno on error).
fn blocking_call(which: usize, fds: [RawFd; 2], socket: RawFd, epoll: RawFd) -> isize {
    // SAFETY: each call gets valid fds and valid, live buffers.
    unsafe {
        match which {
            0 => {
                let mut event = libc::epoll_event { events: 0, u64: 0 };
                libc::epoll_wait(epoll, &mut event, 1, 20) as isize
            }
            1 => {
                let mut poll = libc::pollfd {
                    fd: fds[0],
                    events: libc::POLLIN,
                    revents: 0,
                };
                libc::poll(&mut poll, 1, 20) as isize
            }
            2 => {
                let time = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 20_000_000,
                };
                libc::nanosleep(&time, std::ptr::null_mut()) as isize
            }
            3 => {
                let mut set: libc::fd_set = std::mem::zeroed();
                libc::FD_ZERO(&mut set);
                libc::FD_SET(fds[0], &mut set);
                let mut timeout = libc::timeval {
                    tv_sec: 0,
                    tv_usec: 20_000,
                };
                libc::select(
                    fds[0] + 1,
                    &mut set,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    &mut timeout,
                ) as isize
            }
            // Blocks until the end of the test writes one byte.
            4 => {
                let mut byte = 0u8;
                libc::read(fds[0], (&mut byte as *mut u8).cast(), 1)
            }
            _ => {
                let mut byte = 0u8;
                libc::recv(socket, (&mut byte as *mut u8).cast(), 1, 0)
            }
        }
    }
}

struct Blocked {
    stop: Arc<AtomicBool>,
    eintr: Arc<[AtomicU64; 6]>,
    wakers: Vec<RawFd>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

fn start_blocked_threads() -> Blocked {
    let stop = Arc::new(AtomicBool::new(false));
    let eintr: Arc<[AtomicU64; 6]> = Arc::new(Default::default());
    let mut wakers = Vec::new();
    let mut threads = Vec::new();
    for which in 0..CALLS.len() {
        let fds = pipe();
        wakers.push(fds[1]);
        let mut pair = [0; 2];
        // SAFETY: valid out-array; then a valid timeval option.
        unsafe {
            assert_eq!(
                libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr()),
                0
            );
            let timeout = libc::timeval {
                tv_sec: 0,
                tv_usec: 20_000,
            };
            libc::setsockopt(
                pair[0],
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&timeout as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            );
        }
        // SAFETY: plain epoll setup on a fresh fd.
        let epoll = unsafe {
            let epoll = libc::epoll_create1(0);
            let mut event = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: 0,
            };
            libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fds[0], &mut event);
            epoll
        };
        let (stop, eintr) = (Arc::clone(&stop), Arc::clone(&eintr));
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if blocking_call(which, fds, pair[0], epoll) < 0 && errno() == libc::EINTR {
                    eintr[which].fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // Let every thread reach its call.
    std::thread::sleep(Duration::from_millis(50));
    Blocked {
        stop,
        eintr,
        wakers,
        threads,
    }
}

impl Blocked {
    fn finish(self) -> [u64; 6] {
        self.stop.store(true, Ordering::Relaxed);
        for fd in &self.wakers {
            // SAFETY: a valid pipe write end and a one-byte buffer.
            unsafe { libc::write(*fd, [1u8].as_ptr().cast(), 1) };
        }
        for thread in self.threads {
            thread.join().unwrap();
        }
        std::array::from_fn(|i| self.eintr[i].load(Ordering::Relaxed))
    }
}

fn toggle(protocol: PatchProtocol, times: usize) -> [u64; 6] {
    fntrace::set_patch_protocol(protocol).unwrap();
    let blocked = start_blocked_threads();
    for i in 0..times {
        fntrace::enable("eintr").unwrap_or_else(|e| panic!("enable #{i}: {e}"));
        rust::leaf(1);
        fntrace::disable("eintr").unwrap_or_else(|e| panic!("disable #{i}: {e}"));
    }
    blocked.finish()
}

#[test]
fn blocked_calls_see_no_eintr_with_the_breakpoint_protocol() {
    fntrace::init().unwrap();
    COUNTER.watch(addr!(rust::leaf));

    let breakpoint = toggle(PatchProtocol::Breakpoint, BREAKPOINT_TOGGLES);
    assert_eq!(
        COUNTER.count(addr!(rust::leaf)),
        BREAKPOINT_TOGGLES as u64,
        "the sites really were patched"
    );
    let stop = toggle(PatchProtocol::StopTheWorld, STOP_TOGGLES);
    for (i, call) in CALLS.iter().enumerate() {
        println!(
            "{call:>10}: EINTR {:>4} in {BREAKPOINT_TOGGLES} breakpoint toggles, \
             {:>4} in {STOP_TOGGLES} stop-the-world toggles",
            breakpoint[i], stop[i]
        );
    }
    assert_eq!(breakpoint, [0; 6], "EINTR with the breakpoint protocol");
    assert!(stop[2] > 0, "stop-the-world interrupts nanosleep: {stop:?}");
}
