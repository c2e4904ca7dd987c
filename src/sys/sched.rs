//! Scheduling policy of the calling thread: lowered for the time a thread
//! sleeps in a signal handler, and raised for the time a thread patches
//! program text. System calls only (async-signal-safe).
//!
//! Lowered: a thread woken from a futex under `SCHED_OTHER` preempts the
//! running thread if the scheduler finds it more deserving, and a thread
//! that slept usually is. When the stop protocol releases 16 parked threads
//! on 2 CPUs, the releasing thread is preempted at once and waits a round
//! of time slices before it can return (measured: 26–66 ms). `SCHED_BATCH`
//! threads never preempt on wake-up (the tick schedules them), so a parked
//! thread is batch while it sleeps and goes back to `SCHED_OTHER` as soon
//! as it runs. An unprivileged thread may move between the two (same nice
//! value); threads under any other policy are left alone.
//!
//! Raised: a patching thread that competes for 2 CPUs with 16 busy
//! threads gets about a ninth of a CPU (100,000 sites: 13 ms of CPU, over
//! 200 ms of wall time), and every wake-up from a sleep or a futex waits a
//! round of time slices. Under `SCHED_FIFO` it runs as soon as it is
//! runnable. [`raise_to_fifo`] adds `SCHED_RESET_ON_FORK`, so a thread or
//! process it creates meanwhile starts as `SCHED_OTHER`, and [`Raised`]
//! puts back the policy the thread had (the nice value survives the round
//! trip: the kernel keeps it while the thread is real-time).

use std::marker::PhantomData;

use super::last_errno;

/// What [`sleep_as_batch`] changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub(crate) struct Demoted(bool);

/// Makes the calling thread `SCHED_BATCH` if it is `SCHED_OTHER`.
pub(crate) fn sleep_as_batch() -> Demoted {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid pointer.
    let demoted = unsafe {
        libc::sched_getscheduler(0) == libc::SCHED_OTHER
            && libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) == 0
    };
    Demoted(demoted)
}

/// Undoes [`sleep_as_batch`].
pub(crate) fn wake_as_before(demoted: Demoted) {
    if demoted.0 {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: as above. Failure leaves the thread batch, which only
        // changes how eagerly it preempts others.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
    }
}

/// `SCHED_FIFO` priority of a raised thread: the lowest real-time one,
/// which is above every `SCHED_OTHER`, `SCHED_BATCH` and `SCHED_IDLE` thread.
const RAISED_PRIORITY: i32 = 1;

/// What [`raise_to_fifo`] did.
#[must_use]
pub(crate) enum RaiseOutcome {
    /// The thread runs `SCHED_FIFO` until the guard drops.
    Raised(Raised),
    /// The thread has a policy other than `SCHED_OTHER`, `SCHED_BATCH` or
    /// `SCHED_IDLE` (a real-time one, or one such as `SCHED_EXT`): left
    /// as it is.
    NotNormal,
    /// The kernel refused (EPERM without `CAP_SYS_NICE` and with
    /// `RLIMIT_RTPRIO` 0); the raw errno.
    Refused(i32),
}

/// The calling thread runs `SCHED_FIFO` while this lives; dropping it
/// (on the same thread) puts back the policy the thread had before.
#[must_use]
pub(crate) struct Raised {
    /// `sched_getscheduler`'s answer before: the policy, with
    /// `SCHED_RESET_ON_FORK` if the thread had it.
    previous: i32,
    /// Not `Send`: the policy belongs to the thread that raised itself.
    _thread_bound: PhantomData<*const ()>,
}

/// Makes the calling thread `SCHED_FIFO` (priority 1, reset on fork) if
/// it has a normal policy and the kernel permits it.
pub(crate) fn raise_to_fifo() -> RaiseOutcome {
    // SAFETY: pid 0 is the calling thread.
    let previous = unsafe { libc::sched_getscheduler(0) };
    if previous < 0 {
        return RaiseOutcome::Refused(last_errno());
    }
    let policy = previous & !libc::SCHED_RESET_ON_FORK;
    if ![libc::SCHED_OTHER, libc::SCHED_BATCH, libc::SCHED_IDLE].contains(&policy) {
        return RaiseOutcome::NotNormal;
    }
    let param = libc::sched_param {
        sched_priority: RAISED_PRIORITY,
    };
    let fifo = libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK;
    // SAFETY: pid 0 is the calling thread; `param` is a valid pointer.
    if unsafe { libc::sched_setscheduler(0, fifo, &param) } != 0 {
        return RaiseOutcome::Refused(last_errno());
    }
    RaiseOutcome::Raised(Raised {
        previous,
        _thread_bound: PhantomData,
    })
}

impl Drop for Raised {
    fn drop(&mut self) {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread (the guard is not Send, so
        // the one that raised itself); `param` is a valid pointer.
        let restored = unsafe { libc::sched_setscheduler(0, self.previous, &param) } == 0;
        if !restored {
            // Without CAP_SYS_NICE the kernel lets no thread clear
            // SCHED_RESET_ON_FORK: keep it, with the old policy (it only
            // resets a negative nice value in the threads this one
            // creates). Nothing else is left to try if this fails too.
            let keep_reset = self.previous | libc::SCHED_RESET_ON_FORK;
            // SAFETY: as above.
            unsafe { libc::sched_setscheduler(0, keep_reset, &param) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_goes_batch_and_back() {
        std::thread::spawn(|| {
            // SAFETY: queries the calling thread's policy only.
            let policy = || unsafe { libc::sched_getscheduler(0) };
            assert_eq!(policy(), libc::SCHED_OTHER);
            let demoted = sleep_as_batch();
            assert_eq!(demoted, Demoted(true));
            assert_eq!(policy(), libc::SCHED_BATCH);
            wake_as_before(demoted);
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
