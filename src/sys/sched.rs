//! Scheduling policy of the calling thread, changed for the time a thread
//! sleeps in a signal handler (async-signal-safe: system calls only).
//!
//! A thread woken from a futex under `SCHED_OTHER` preempts the running
//! thread if the scheduler finds it more deserving, and a thread that slept
//! usually is. When the stop protocol releases 16 parked threads on 2 CPUs,
//! the releasing thread is preempted at once and waits a round of time
//! slices before it can return (measured: 26–66 ms). `SCHED_BATCH`
//! threads never preempt on wake-up (the tick schedules them), so a parked
//! thread is batch while it sleeps and goes back to `SCHED_OTHER` as soon
//! as it runs. An unprivileged thread may move between the two (same nice
//! value); threads under any other policy are left alone.

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
