//! The patch priority: a control operation that writes text runs its
//! calling thread `SCHED_FIFO` priority 1 (reset on fork) and then puts
//! back exactly the policy, priority and nice value the thread had; a
//! thread it creates meanwhile, and a recorder's writer thread, are
//! `SCHED_OTHER`; a thread already real-time is left alone;
//! `PatchPriority::Normal` and `FNTRACE_PATCH_PRIORITY=normal` switch it
//! off; without the permission (no `CAP_SYS_NICE`, `RLIMIT_RTPRIO` 0)
//! operations succeed unboosted, silently unless the variable asked for
//! `realtime`; a thread without `CAP_SYS_NICE` gets its policy back with
//! the reset-on-fork flag (the kernel refuses to clear it). `Stats` says
//! which.
//!
//! The policy inside an operation is seen from the enabled tracer's
//! `on_enable` (which runs on the calling thread) and, for every
//! operation, by a thread that blocks the stop signal and waits for it
//! with `sigwaitinfo`: the signal comes from the patching thread in the
//! middle of the operation, which keeps retrying (no deadline in reach)
//! until that thread unblocks it. The cases that need another process's
//! credentials or environment run in child processes of this test binary.

#[macro_use]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use fntrace::{Filter, PatchBoost, PatchPriority, PatchProtocol};
use fntrace_fixtures::rust;

/// A thread's scheduling as the kernel reports it: policy (with
/// `SCHED_RESET_ON_FORK`), real-time priority, nice value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Scheduling {
    policy: i32,
    priority: i32,
    nice: i32,
}

const OTHER: i32 = libc::SCHED_OTHER;
const FIFO_RESET: i32 = libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK;
const OTHER_RESET: i32 = libc::SCHED_OTHER | libc::SCHED_RESET_ON_FORK;

fn scheduling_of(tid: i32) -> Scheduling {
    // SAFETY: plain queries of a thread of this process; `param` is a
    // valid out-pointer.
    unsafe {
        let policy = libc::sched_getscheduler(tid);
        assert!(policy >= 0, "sched_getscheduler({tid})");
        let mut param = libc::sched_param { sched_priority: -1 };
        assert_eq!(libc::sched_getparam(tid, &mut param), 0);
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        assert_eq!(*libc::__errno_location(), 0, "getpriority({tid})");
        Scheduling {
            policy,
            priority: param.sched_priority,
            nice,
        }
    }
}

fn own_tid() -> i32 {
    fntrace::current_tid() as i32
}

fn own_scheduling() -> Scheduling {
    scheduling_of(own_tid())
}

/// Gives the calling thread `policy` (with its priority) and `nice`.
fn set_own_scheduling(policy: i32, priority: i32, nice: i32) {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: changes the calling thread's scheduling only.
    unsafe {
        assert_eq!(libc::sched_setscheduler(0, policy, &param), 0, "{policy}");
        if priority == 0 {
            assert_eq!(
                libc::setpriority(libc::PRIO_PROCESS, own_tid() as libc::id_t, nice),
                0
            );
        }
    }
}

/// What the tracer's `on_enable` saw: its own thread's scheduling, and
/// that of a thread it created.
type Seen = (Scheduling, Scheduling);

/// Records, in `on_enable`, the calling thread's scheduling and that of a
/// thread created there.
struct Observer(Mutex<Vec<Seen>>);

impl fntrace::Tracer for Observer {
    fn entry(&self, _call: &fntrace::Call<'_>) {}
    fn on_enable(&self, _filter: &Filter) {
        if DROP_CAP_SYS_NICE_IN_ON_ENABLE.swap(false, Ordering::Relaxed) {
            drop_cap_sys_nice();
        }
        let own = own_scheduling();
        let created = std::thread::spawn(own_scheduling).join().unwrap();
        self.0.lock().unwrap().push((own, created));
    }
}

/// Makes the next `on_enable` drop `CAP_SYS_NICE` from its thread.
static DROP_CAP_SYS_NICE_IN_ON_ENABLE: AtomicBool = AtomicBool::new(false);

static OBSERVER: Observer = Observer(Mutex::new(Vec::new()));
fntrace::register_tracer!("prio", &OBSERVER);

fn last_seen() -> Seen {
    *OBSERVER.0.lock().unwrap().last().expect("on_enable ran")
}

fn last_boost() -> Option<PatchBoost> {
    fntrace::stats().last_patch_boost
}

/// Runs `operation` on this thread under the stop-the-world protocol and
/// returns this thread's scheduling as another thread saw it while the
/// operation was stopping the world.
fn seen_from_outside(operation: impl FnOnce()) -> Scheduling {
    let patcher = own_tid();
    let (ready_tx, ready_rx) = mpsc::channel();
    let observer = std::thread::spawn(move || {
        // SAFETY: changes the calling thread's signal mask and waits for a
        // signal on it; `set` is a valid sigset.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR2);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            ready_tx.send(()).unwrap();
            // The stop signal: the patcher is inside the operation, and
            // retries for as long as this thread blocks the signal.
            assert_eq!(libc::sigwaitinfo(&set, std::ptr::null_mut()), libc::SIGUSR2);
            let seen = scheduling_of(patcher);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            seen
        }
    });
    ready_rx.recv().unwrap();
    operation();
    observer.join().unwrap()
}

/// Every operation that writes text, seen from outside and from
/// `on_enable`, from threads that start under different policies.
#[test]
fn operations_run_fifo_and_then_exactly_as_before() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    fntrace::set_patch_protocol(PatchProtocol::StopTheWorld).unwrap();
    // Far beyond the observer's reaction: the operations cannot give up.
    fntrace::set_ack_timeout(Duration::from_secs(600));
    assert_eq!(fntrace::patch_priority(), PatchPriority::Realtime);
    assert_eq!(last_boost(), None);

    let before = own_scheduling();
    assert_eq!(before.policy, OTHER);
    let inside = seen_from_outside(|| fntrace::init().unwrap());
    assert_eq!((inside.policy, inside.priority), (FIFO_RESET, 1));
    assert_eq!(own_scheduling(), before);
    assert_eq!(last_boost(), Some(PatchBoost::Realtime));

    // Normal, batch, idle and reset-on-fork threads with nice values.
    let starts = [
        (libc::SCHED_OTHER, 0),
        (libc::SCHED_BATCH, 7),
        (libc::SCHED_IDLE, 3),
        (OTHER_RESET, -3),
    ];
    for (policy, nice) in starts {
        std::thread::spawn(move || {
            set_own_scheduling(policy, 0, nice);
            let before = own_scheduling();
            assert_eq!((before.policy, before.nice), (policy, nice));

            let inside = seen_from_outside(|| fntrace::enable("prio").unwrap());
            assert_eq!((inside.policy, inside.priority), (FIFO_RESET, 1));
            assert_eq!(inside.nice, nice, "the nice value survives");
            let (own, created) = last_seen();
            assert_eq!((own.policy, own.priority), (FIFO_RESET, 1));
            let plain = Scheduling {
                policy: OTHER,
                priority: 0,
                nice: 0,
            };
            assert_eq!(created, plain, "a thread created meanwhile is not FIFO");
            assert_eq!(own_scheduling(), before);
            assert_eq!(last_boost(), Some(PatchBoost::Realtime));

            let inside = seen_from_outside(|| fntrace::disable("prio").unwrap());
            assert_eq!((inside.policy, inside.priority), (FIFO_RESET, 1));
            assert_eq!(own_scheduling(), before);

            fntrace::enable_with("prio", &Filter::new()).unwrap();
            assert_eq!(
                (last_seen().0.policy, last_seen().0.priority),
                (FIFO_RESET, 1)
            );
            assert_eq!(own_scheduling(), before);
            fntrace::disable("prio").unwrap();
            fntrace::flush().unwrap();
            assert_eq!(last_boost(), Some(PatchBoost::Realtime));
            assert_eq!(own_scheduling(), before);
        })
        .join()
        .unwrap();
    }

    // A real-time thread is left as it is.
    for policy in [libc::SCHED_FIFO, libc::SCHED_RR] {
        std::thread::spawn(move || {
            set_own_scheduling(policy, 5, 0);
            let before = own_scheduling();
            let inside = seen_from_outside(|| fntrace::enable("prio").unwrap());
            assert_eq!(inside, before);
            assert_eq!(last_seen().0, before);
            assert_eq!(last_boost(), Some(PatchBoost::OwnPolicy));
            fntrace::disable("prio").unwrap();
            assert_eq!(own_scheduling(), before);
        })
        .join()
        .unwrap();
    }

    // A thread that loses CAP_SYS_NICE while boosted (as one permitted by
    // RLIMIT_RTPRIO alone never had it): the kernel does not let it clear
    // the reset-on-fork flag, so it gets its policy back with the flag.
    std::thread::spawn(|| {
        let before = own_scheduling();
        DROP_CAP_SYS_NICE_IN_ON_ENABLE.store(true, Ordering::Relaxed);
        fntrace::enable("prio").unwrap();
        assert_eq!(
            (last_seen().0.policy, last_seen().0.priority),
            (FIFO_RESET, 1)
        );
        let expected = Scheduling {
            policy: OTHER_RESET,
            ..before
        };
        assert_eq!(own_scheduling(), expected);
        assert_eq!(last_boost(), Some(PatchBoost::Realtime));
        fntrace::disable("prio").unwrap();
        assert_eq!(own_scheduling(), expected, "no change the second time");
    })
    .join()
    .unwrap();

    // Switched off by the API.
    fntrace::set_patch_priority(PatchPriority::Normal);
    assert_eq!(fntrace::patch_priority(), PatchPriority::Normal);
    let inside = seen_from_outside(|| fntrace::enable("prio").unwrap());
    assert_eq!(inside, before);
    assert_eq!(last_seen().0, before);
    assert_eq!(last_boost(), Some(PatchBoost::Normal));
    fntrace::disable("prio").unwrap();
    fntrace::set_patch_priority(PatchPriority::Realtime);

    // A recorder's writer thread, started by a boosted operation's caller.
    // Under the breakpoint protocol: the stop protocol parks every other
    // thread as SCHED_BATCH, and a released thread is SCHED_OTHER again
    // only once it has run, which the FIFO caller need not wait for. A
    // thread being created blocks SIGTRAP for a moment, and a batch that
    // meets it then falls back to the stop protocol (seen under load):
    // the writer may be SCHED_BATCH until it next runs, never FIFO.
    fntrace::set_patch_protocol(PatchProtocol::Breakpoint).unwrap();
    let dir = common::temp_dir("patch_priority_record");
    let recording = fntrace::record("graph", &Filter::new(), &dir).unwrap();
    assert_eq!(last_boost(), Some(PatchBoost::Realtime));
    let writer = thread_named("fntrace-writer");
    let expected = Scheduling {
        policy: OTHER,
        priority: 0,
        // The caller's (the test may run under `nice`).
        nice: own_scheduling().nice,
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let seen = scheduling_of(writer);
        if seen == expected {
            break;
        }
        let parked = Scheduling {
            policy: libc::SCHED_BATCH,
            ..expected
        };
        assert_eq!(seen, parked, "the writer is SCHED_OTHER, or parked");
        assert!(std::time::Instant::now() < deadline, "{seen:?} for 30 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    rust::run(3);
    recording.stop().unwrap();
    assert_eq!(own_scheduling(), before);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tid of this process's thread called `name`.
fn thread_named(name: &str) -> i32 {
    let named: Vec<i32> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|entry| {
            let path = entry.unwrap().path();
            let comm = std::fs::read_to_string(path.join("comm")).ok()?;
            (comm.trim_end() == name).then(|| path.file_name()?.to_str()?.parse().ok())?
        })
        .collect();
    assert_eq!(named.len(), 1, "threads named {name}: {named:?}");
    named[0]
}

const CHILD: &str = "FNTRACE_PATCH_PRIORITY_CHILD";

/// `CAP_SYS_NICE`'s bit in the capability sets.
const CAP_SYS_NICE: u32 = 23;

/// Drops `CAP_SYS_NICE` from the calling thread's effective and permitted
/// sets (for good).
fn drop_cap_sys_nice() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capget/capset with a version-3 header and two data words,
    // as the kernel expects; they change only this thread's capabilities.
    unsafe {
        assert_eq!(
            libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()),
            0
        );
        data[0].effective &= !(1 << CAP_SYS_NICE);
        data[0].permitted &= !(1 << CAP_SYS_NICE);
        assert_eq!(
            libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()),
            0
        );
    }
}

/// Lowers `RLIMIT_RTPRIO` (raising it needs `CAP_SYS_RESOURCE`, which
/// this test does not assume).
fn set_rtprio_limit(limit: u64) {
    let rlimit = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: `rlimit` is a valid pointer.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_RTPRIO, &rlimit) }, 0);
}

/// In a child: the case named by `CHILD`.
#[test]
fn child() {
    let Some(case) = std::env::var_os(CHILD) else {
        return;
    };
    let case = case.to_str().unwrap();
    let before = own_scheduling();
    let (inside, boost) = match case {
        "rtprio0" => {
            set_rtprio_limit(0);
            drop_cap_sys_nice();
            fntrace::init().unwrap();
            fntrace::enable("prio").unwrap();
            let inside = last_seen().0;
            fntrace::disable("prio").unwrap();
            fntrace::flush().unwrap();
            (inside, last_boost())
        }
        "env" => {
            fntrace::init().unwrap();
            fntrace::enable("prio").unwrap();
            fntrace::disable("prio").unwrap();
            (last_seen().0, last_boost())
        }
        other => panic!("unknown case {other}"),
    };
    let after = own_scheduling();
    println!("inside {} {}", inside.policy, inside.priority);
    println!("after {} {} {}", after.policy, after.priority, after.nice);
    println!("boost {boost:?}");
    assert_eq!((after.priority, after.nice), (before.priority, before.nice));
    println!("child done");
}

/// Runs the `child` test in a child process for `case`, with
/// `FNTRACE_PATCH_PRIORITY` set to `variable` (or unset); returns its
/// stdout and its stderr lines that start with "fntrace:".
fn run_child(case: &str, variable: Option<&str>) -> (String, Vec<String>) {
    common::run_child_test(
        CHILD,
        case,
        &[("FNTRACE_PATCH_PRIORITY", variable)],
        "child done",
    )
}

#[test]
fn without_the_permission_operations_run_unboosted() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let (stdout, lines) = run_child("rtprio0", None);
    assert!(stdout.contains(&format!("inside {OTHER} 0\n")), "{stdout}");
    // The child inherits this process's nice value (`cargo test` may run
    // under `nice`).
    let nice = own_scheduling().nice;
    assert!(
        stdout.contains(&format!("after {OTHER} 0 {nice}\n")),
        "{stdout}"
    );
    assert!(stdout.contains("boost Some(NotPermitted)"), "{stdout}");
    assert_eq!(lines, Vec::<String>::new(), "silent by default");

    // Asked for explicitly: one line says why (for three operations).
    let (stdout, lines) = run_child("rtprio0", Some("realtime"));
    assert!(stdout.contains("boost Some(NotPermitted)"), "{stdout}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("FNTRACE_PATCH_PRIORITY") && lines[0].contains("CAP_SYS_NICE"),
        "{}",
        lines[0]
    );
}

#[test]
fn the_environment_variable_chooses() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let (stdout, lines) = run_child("env", Some("normal"));
    assert!(stdout.contains(&format!("inside {OTHER} 0\n")), "{stdout}");
    assert!(stdout.contains("boost Some(Normal)"), "{stdout}");
    assert_eq!(lines, Vec::<String>::new());

    let (stdout, lines) = run_child("env", Some("realtime"));
    assert!(
        stdout.contains(&format!("inside {FIFO_RESET} 1\n")),
        "{stdout}"
    );
    assert!(stdout.contains("boost Some(Realtime)"), "{stdout}");
    assert_eq!(lines, Vec::<String>::new());

    // A bad value: one line naming the variable, and the default.
    let (stdout, lines) = run_child("env", Some("fast"));
    assert!(
        stdout.contains(&format!("inside {FIFO_RESET} 1\n")),
        "{stdout}"
    );
    assert!(stdout.contains("boost Some(Realtime)"), "{stdout}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    // Start-up reports it (the patcher, reading it later, says no more).
    assert!(
        lines[0].contains("FNTRACE_PATCH_PRIORITY=fast") && lines[0].contains("default is kept"),
        "{}",
        lines[0]
    );
}
