//! Real-time priority for the few milliseconds of an attach, where
//! permitted: this process's thread, which drives the borrowed thread
//! step by step, and the borrowed thread itself, which runs the steps.
//! Each step hands the CPU from one to the other; on a loaded host each
//! handoff otherwise waits for the scheduler to pick the woken thread
//! among the busy ones, which stretched an attach's pause from 0.2 ms to
//! 10-20 ms at a load of 8.
//!
//! `SCHED_FIFO` at priority 1 with `SCHED_RESET_ON_FORK`: a thread the
//! borrowed thread creates (fntrace's own, in the target) starts with the
//! normal policy. A thread already under a real-time or deadline policy
//! keeps its own. Without the privilege (`CAP_SYS_NICE`, or
//! `RLIMIT_RTPRIO` ≥ 1) nothing changes and the attach runs as before.

/// A thread raised to `SCHED_FIFO`, put back to its policy when dropped.
pub(crate) struct Raised {
    /// The thread (0: the calling one).
    tid: libc::pid_t,
    policy: libc::c_int,
    param: libc::sched_param,
}

/// `SCHED_RESET_ON_FORK` (linux/sched.h).
const SCHED_RESET_ON_FORK: libc::c_int = 0x4000_0000;

/// Raises thread `tid` (0: the calling thread) to `SCHED_FIFO` 1, if it
/// runs under a normal policy and the kernel permits it.
pub(crate) fn raise(tid: u32) -> Option<Raised> {
    let tid = tid as libc::pid_t;
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain system calls on a thread id; `param` is a live value.
    let policy = unsafe { libc::sched_getscheduler(tid) };
    // SAFETY: as above.
    if policy < 0 || unsafe { libc::sched_getparam(tid, &mut param) } != 0 {
        return None;
    }
    let policy = policy & !SCHED_RESET_ON_FORK;
    if !matches!(
        policy,
        libc::SCHED_OTHER | libc::SCHED_BATCH | libc::SCHED_IDLE
    ) {
        return None;
    }
    let fifo = libc::sched_param { sched_priority: 1 };
    // SAFETY: as above.
    let set =
        unsafe { libc::sched_setscheduler(tid, libc::SCHED_FIFO | SCHED_RESET_ON_FORK, &fifo) };
    (set == 0).then_some(Raised { tid, policy, param })
}

impl Drop for Raised {
    fn drop(&mut self) {
        // SAFETY: a plain system call; `param` is a live value. A thread
        // gone meanwhile makes it fail, harmlessly.
        unsafe { libc::sched_setscheduler(self.tid, self.policy, &self.param) };
    }
}
