//! The patch priority: whether a control operation that may write program
//! text (`init`, `enable`, `enable_with`, `disable`, `flush`) runs its
//! calling thread `SCHED_FIFO` for its duration (see [`crate::sys::sched`] for
//! why), the user's choice of it ([`set_patch_priority`],
//! `FNTRACE_PATCH_PRIORITY`), and what the last such operation got
//! ([`PatchBoost`], shown in `Stats`).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Once;

use crate::sys::sched::{raise_to_fifo, RaiseOutcome, Raised};

/// How the thread calling a control operation that writes program text is
/// scheduled while the operation runs (chosen with [`set_patch_priority`]
/// or `FNTRACE_PATCH_PRIORITY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum PatchPriority {
    /// `SCHED_FIFO` priority 1 for the operation's duration, where the
    /// kernel permits it (root, `CAP_SYS_NICE`, or `RLIMIT_RTPRIO` ≥ 1),
    /// then exactly the policy, priority and nice value the thread had
    /// (`FNTRACE_PATCH_PRIORITY=realtime`, the default). A thread busy in
    /// traced code then cannot delay the operation: on 2 CPUs with 16 such
    /// threads, an operation waits only for its own CPU time instead of
    /// getting about a ninth of a CPU. Threads or processes created
    /// meanwhile start as `SCHED_OTHER` (`SCHED_RESET_ON_FORK`). Where it
    /// is not permitted, the operation runs as with
    /// [`PatchPriority::Normal`], silently (`Stats::last_patch_boost`
    /// says so); a thread already real-time is left as it is.
    Realtime = 0,
    /// The calling thread keeps its own policy
    /// (`FNTRACE_PATCH_PRIORITY=normal`).
    Normal = 1,
}

/// How the last `init`, `enable`, `enable_with`, `disable` or `flush` was
/// scheduled (in `Stats::last_patch_boost`): why it may have been slow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum PatchBoost {
    /// It ran `SCHED_FIFO` ([`PatchPriority::Realtime`]). Without
    /// `CAP_SYS_NICE` (permitted by `RLIMIT_RTPRIO` alone), the kernel
    /// does not let the thread clear `SCHED_RESET_ON_FORK` afterwards: its
    /// policy, priority and nice value are restored, and the flag stays.
    Realtime = 1,
    /// It ran under the thread's own policy: [`PatchPriority::Normal`] was
    /// chosen.
    Normal = 2,
    /// It ran under the thread's own policy: [`PatchPriority::Realtime`]
    /// was chosen but the kernel refused it (no `CAP_SYS_NICE` and
    /// `RLIMIT_RTPRIO` 0).
    NotPermitted = 3,
    /// It ran under the thread's own policy, which was already real-time
    /// (`SCHED_FIFO`, `SCHED_RR`, `SCHED_DEADLINE`) or another one fntrace
    /// does not change (`SCHED_EXT`).
    OwnPolicy = 4,
}

impl PatchBoost {
    /// Every variant.
    const ALL: [PatchBoost; 4] = [
        PatchBoost::Realtime,
        PatchBoost::Normal,
        PatchBoost::NotPermitted,
        PatchBoost::OwnPolicy,
    ];
}

/// The priority of the next operation (a [`PatchPriority`] as `u8`).
static PRIORITY: AtomicU8 = AtomicU8::new(PatchPriority::Realtime as u8);

/// The last operation's [`PatchBoost`] as `u8`; 0 before the first.
static LAST_BOOST: AtomicU8 = AtomicU8::new(0);

/// Whether `FNTRACE_PATCH_PRIORITY=realtime` was set: a refusal is then
/// worth one line on stderr (by default it is silent).
static REALTIME_ASKED: AtomicBool = AtomicBool::new(false);

/// Whether that line was printed.
static WARNED: AtomicBool = AtomicBool::new(false);

/// The environment variable [`boost_for_text_change`] reads at the first
/// operation.
pub(crate) const PRIORITY_VARIABLE: &str = "FNTRACE_PATCH_PRIORITY";

/// Chooses how the thread calling the next `init`, `enable`,
/// `enable_with`, `disable` or `flush` is scheduled while it runs (default
/// [`PatchPriority::Realtime`]). Callable from any thread at any time; an
/// operation in progress finishes as it started. `FNTRACE_PATCH_PRIORITY`,
/// read at the first such operation, overrides a choice made before it.
pub fn set_patch_priority(priority: PatchPriority) {
    PRIORITY.store(priority as u8, Ordering::Relaxed);
}

/// The priority the next operation uses.
pub fn patch_priority() -> PatchPriority {
    match PRIORITY.load(Ordering::Relaxed) {
        1 => PatchPriority::Normal,
        _ => PatchPriority::Realtime,
    }
}

/// How the last operation that may write text was scheduled; `None`
/// before the first.
pub(crate) fn last_boost() -> Option<PatchBoost> {
    let last = LAST_BOOST.load(Ordering::Relaxed);
    PatchBoost::ALL
        .into_iter()
        .find(|boost| *boost as u8 == last)
}

/// Applies `FNTRACE_PATCH_PRIORITY` (`realtime` or `normal`) if set. An
/// unknown value prints one line on stderr naming the variable and keeps
/// the priority as it was.
fn priority_from_env() {
    let Some(value) = std::env::var_os(PRIORITY_VARIABLE) else {
        return;
    };
    match value.to_str() {
        Some("realtime") => {
            REALTIME_ASKED.store(true, Ordering::Relaxed);
            set_patch_priority(PatchPriority::Realtime);
        }
        Some("normal") => set_patch_priority(PatchPriority::Normal),
        _ if crate::sys::bad_setting_reported(PRIORITY_VARIABLE) => {}
        _ => eprintln!(
            "fntrace: {PRIORITY_VARIABLE}={} is not a patch priority \
             (use \"realtime\" or \"normal\"); keeping {:?}",
            value.to_string_lossy(),
            patch_priority()
        ),
    }
}

/// Held by a control operation that may write text, from before it takes
/// the operation lock until after it releases it: the calling thread runs
/// `SCHED_FIFO` meanwhile if [`PatchPriority::Realtime`] is chosen and
/// permitted. Not `Send`.
#[must_use]
pub(crate) struct OperationPriority {
    _raised: Option<Raised>,
}

/// Starts an operation's [`OperationPriority`] and records its
/// [`PatchBoost`] for `Stats`. The first call reads
/// `FNTRACE_PATCH_PRIORITY`.
pub(crate) fn boost_for_text_change() -> OperationPriority {
    static ENVIRONMENT: Once = Once::new();
    ENVIRONMENT.call_once(priority_from_env);
    let (boost, raised) = match patch_priority() {
        PatchPriority::Normal => (PatchBoost::Normal, None),
        PatchPriority::Realtime => match raise_to_fifo() {
            RaiseOutcome::Raised(raised) => (PatchBoost::Realtime, Some(raised)),
            RaiseOutcome::NotNormal => (PatchBoost::OwnPolicy, None),
            RaiseOutcome::Refused(errno) => {
                if REALTIME_ASKED.load(Ordering::Relaxed) && !WARNED.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "fntrace: {PRIORITY_VARIABLE}=realtime: the kernel refused SCHED_FIFO \
                         ({}; needs CAP_SYS_NICE or RLIMIT_RTPRIO >= 1); patching at the \
                         thread's own priority",
                        std::io::Error::from_raw_os_error(errno)
                    );
                }
                (PatchBoost::NotPermitted, None)
            }
        },
    };
    LAST_BOOST.store(boost as u8, Ordering::Relaxed);
    OperationPriority { _raised: raised }
}
