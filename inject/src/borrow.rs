//! The ptrace side: seizing and stopping the target's threads one at a
//! time until one is at a safe point, saving its registers and extended
//! state, making calls on it (return address 0: the return faults, which
//! is seen and swallowed; other signals kept and delivered after), and
//! giving it back with a system call it was blocked in restarted by hand.

use std::ffi::CString;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use crate::safe_point::{
    interrupted_syscall, undo_eintr_of_stop, ERESTART_RESTARTBLOCK, NR_RESTART_SYSCALL,
};
use crate::{permission_message, refused, tracer_of, Refused};

/// `RTLD_NOW`.
pub(crate) const RTLD_NOW: u64 = 2;

pub(crate) fn read_c_string(mem: &File, addr: u64) -> String {
    if addr == 0 {
        return "no message".to_string();
    }
    let mut buf = vec![0u8; 1024];
    let n = mem.read_at(&mut buf, addr).unwrap_or(0);
    buf.truncate(n);
    if let Some(end) = buf.iter().position(|&b| b == 0) {
        buf.truncate(end);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// `ptrace(request, tid, addr, data)`.
pub(crate) fn ptrace(request: u32, tid: u32, addr: u64, data: u64) -> Result<i64, std::io::Error> {
    // SAFETY: every request made here takes a thread id and integer or
    // pointer arguments; the pointers passed (register and iovec buffers)
    // point to live buffers of the size the request writes or reads.
    let rc = unsafe {
        libc::ptrace(
            request,
            tid as libc::pid_t,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    };
    if rc == -1 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// What `waitpid` said about a traced thread.
pub(crate) enum Stop {
    /// A `PTRACE_EVENT_STOP` (our interrupt, or a group stop).
    Event,
    /// A signal-delivery-stop for this signal.
    Signal(i32),
    /// The thread is gone.
    Gone,
}

pub(crate) fn wait_stop(tid: u32, timeout: Duration) -> Result<Stop, Refused> {
    let started = Instant::now();
    let deadline = started + timeout;
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a live int.
        let rc = unsafe {
            libc::waitpid(
                tid as libc::pid_t,
                &mut status,
                libc::__WALL | libc::WNOHANG,
            )
        };
        if rc == -1 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if e.raw_os_error() == Some(libc::ECHILD) {
                return Ok(Stop::Gone);
            }
            return refused(format!("waiting for thread {tid}: {e}"));
        }
        if rc == tid as i32 {
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                return Ok(Stop::Gone);
            }
            if libc::WIFSTOPPED(status) {
                if status >> 16 == libc::PTRACE_EVENT_STOP {
                    return Ok(Stop::Event);
                }
                return Ok(Stop::Signal(libc::WSTOPSIG(status)));
            }
            continue;
        }
        if Instant::now() >= deadline {
            return refused(format!(
                "thread {tid} did not stop within {timeout:?} (it did not return from a call \
                 made in it)"
            ));
        }
        // The borrowed thread is stopped while this waits for it: a
        // fixed 200 µs sleep added up to a millisecond to its pause (each
        // call and the stop itself). Yield for the first 200 µs (a call
        // into the program's own code returns in tens of µs), then sleep
        // briefly, then longer (dlopen of a large library, a busy host).
        let waited = started.elapsed();
        if waited < Duration::from_micros(200) {
            std::thread::yield_now();
        } else if waited < Duration::from_millis(5) {
            std::thread::sleep(Duration::from_micros(20));
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// A thread seized and stopped, with what it held when it was stopped.
pub(crate) struct Borrowed {
    pub(crate) tid: u32,
    pub(crate) saved: libc::user_regs_struct,
    /// `NT_X86_XSTATE` (the bytes the kernel gave), or `None`: then
    /// `fpregs` is the saved state.
    pub(crate) xstate: Option<Vec<u8>>,
    pub(crate) fpregs: libc::user_fpregs_struct,
    pub(crate) stopped_at: Instant,
    /// Signals that arrived while it was borrowed, to deliver after.
    /// (A standard signal once: the kernel merges those too while a thread
    /// is not running; each real-time one, with its siginfo.)
    pub(crate) pending: Vec<libc::siginfo_t>,
    pub(crate) released: bool,
    /// The longest stop of a thread let go before this one was taken.
    pub(crate) longest_passed_over: Duration,
    /// Its real-time priority while borrowed (see `priority`), dropped
    /// before it is let go.
    pub(crate) raised: Option<crate::priority::Raised>,
}

/// How many rounds over the threads before giving up.
pub(crate) const ROUNDS: usize = 400;

/// Stops the process's threads one at a time until one is at a safe point
/// (`safe`), which stays stopped; the others are let go at once.
pub(crate) fn borrow_thread(
    pid: u32,
    only: Option<u32>,
    mem: &File,
    safe: &dyn Fn(&libc::user_regs_struct) -> bool,
) -> Result<(Borrowed, usize), Refused> {
    let mut passed_over = 0;
    let mut longest_passed_over = Duration::ZERO;
    for round in 0..ROUNDS {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map_err(|_| Refused(format!("no process with pid {pid}")))?;
        let mut tids: Vec<u32> = tasks
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|&tid| only.is_none_or(|only| only == tid))
            .collect();
        if tids.is_empty() {
            return refused(format!("process {pid} has no thread {}", only.unwrap_or(0)));
        }
        tids.sort_unstable();
        for tid in tids {
            match ptrace(libc::PTRACE_SEIZE, tid, 0, 0) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                    if tracer_of(pid)? != 0 {
                        return refused(format!(
                            "process {pid} is traced already, by process {}: a process has \
                             one tracer at a time",
                            tracer_of(pid)?
                        ));
                    }
                    return refused(permission_message(pid, e));
                }
                Err(e) => return refused(format!("PTRACE_SEIZE of thread {tid}: {e}")),
            }
            let stopped = stop_seized(tid);
            // The pause counts from the stop as seen here (the thread ran
            // until then), so the checks of its registers and stack count.
            let stopped_at = Instant::now();
            let regs = match stopped {
                Ok(Some((mut regs, passed))) => {
                    if !passed {
                        undo_eintr_of_stop(tid, &mut regs, mem);
                    }
                    regs
                }
                Ok(None) => continue, // gone
                Err(e) => {
                    let _ = ptrace(libc::PTRACE_DETACH, tid, 0, 0);
                    return Err(e);
                }
            };
            if safe(&regs) {
                match save_state(tid, regs, stopped_at) {
                    Ok(mut thread) => {
                        thread.longest_passed_over = longest_passed_over;
                        return Ok((thread, passed_over));
                    }
                    Err(e) => {
                        let _ = ptrace(libc::PTRACE_DETACH, tid, 0, 0);
                        return Err(e);
                    }
                }
            }
            passed_over += 1;
            let _ = ptrace(libc::PTRACE_DETACH, tid, 0, 0);
            longest_passed_over = longest_passed_over.max(stopped_at.elapsed());
        }
        std::thread::sleep(Duration::from_millis(if round < 50 { 1 } else { 5 }));
    }
    refused(format!(
        "no thread of process {pid} was at a safe point in {ROUNDS} rounds ({passed_over} stops): \
         each was running inside libc or the dynamic loader, or blocked in a call not known to \
         hold no lock; nothing was loaded (try again when the process is less busy)"
    ))
}

/// Interrupts a seized thread and waits for its stop; signals that arrive
/// first are delivered (not lost). Its registers and whether a signal was
/// passed on, or `None` if it is gone.
pub(crate) fn stop_seized(tid: u32) -> Result<Option<(libc::user_regs_struct, bool)>, Refused> {
    if let Err(e) = ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) {
        if e.raw_os_error() == Some(libc::ESRCH) {
            return Ok(None);
        }
        return refused(format!("PTRACE_INTERRUPT of thread {tid}: {e}"));
    }
    let mut passed = false;
    loop {
        match wait_stop(tid, Duration::from_secs(5))? {
            Stop::Gone => return Ok(None),
            Stop::Event => break,
            Stop::Signal(sig) => {
                passed = true;
                // Delivered as it would have been; the interrupt stays
                // pending and stops the thread next.
                if ptrace(libc::PTRACE_CONT, tid, 0, sig as u64).is_err() {
                    return Ok(None);
                }
            }
        }
    }
    match get_regs(tid) {
        Ok(regs) => Ok(Some((regs, passed))),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(None),
        Err(e) => refused(format!("PTRACE_GETREGS of thread {tid}: {e}")),
    }
}

pub(crate) fn get_regs(tid: u32) -> Result<libc::user_regs_struct, std::io::Error> {
    // SAFETY: all-zero is a valid value of this plain C struct.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    ptrace(
        libc::PTRACE_GETREGS,
        tid,
        0,
        &mut regs as *mut libc::user_regs_struct as u64,
    )?;
    Ok(regs)
}

pub(crate) fn set_regs(tid: u32, regs: &libc::user_regs_struct) -> Result<(), Refused> {
    ptrace(
        libc::PTRACE_SETREGS,
        tid,
        0,
        regs as *const libc::user_regs_struct as u64,
    )
    .map(drop)
    .map_err(|e| Refused(format!("PTRACE_SETREGS of thread {tid}: {e}")))
}

/// The first real-time signal (the kernel's; glibc keeps two for itself).
pub(crate) const SIGRTMIN: i32 = 32;

/// `NT_X86_XSTATE`.
pub(crate) const NT_X86_XSTATE: u64 = 0x202;

pub(crate) fn save_state(
    tid: u32,
    saved: libc::user_regs_struct,
    stopped_at: Instant,
) -> Result<Borrowed, Refused> {
    // SAFETY: all-zero is a valid value of this plain C struct.
    let mut fpregs: libc::user_fpregs_struct = unsafe { std::mem::zeroed() };
    ptrace(
        libc::PTRACE_GETFPREGS,
        tid,
        0,
        &mut fpregs as *mut libc::user_fpregs_struct as u64,
    )
    .map_err(|e| Refused(format!("PTRACE_GETFPREGS of thread {tid}: {e}")))?;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    let xstate = match ptrace(
        libc::PTRACE_GETREGSET,
        tid,
        NT_X86_XSTATE,
        &mut iov as *mut libc::iovec as u64,
    ) {
        Ok(_) => {
            buffer.truncate(iov.iov_len);
            Some(buffer)
        }
        Err(_) => None,
    };
    Ok(Borrowed {
        tid,
        saved,
        xstate,
        fpregs,
        stopped_at,
        pending: Vec::new(),
        released: false,
        longest_passed_over: Duration::ZERO,
        raised: crate::priority::raise(tid),
    })
}

/// How long one call may take before the tracer gives up waiting.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(60);

impl Borrowed {
    /// Calls `function(args..., string?, extra)` on the thread and returns
    /// its `rax`. `string`, if given, is copied below the thread's red zone
    /// and passed as the first argument (then `extra` is the second).
    pub(crate) fn call(
        &mut self,
        mem: &File,
        function: u64,
        args: &[u64],
        string: Option<&str>,
        extra: u64,
    ) -> Result<u64, Refused> {
        let tid = self.tid;
        let mut regs = self.saved;
        let mut sp = self.saved.rsp - 128 - 2048;
        let mut arguments: Vec<u64> = Vec::new();
        if let Some(text) = string {
            let c = CString::new(text).map_err(|_| Refused(format!("{text:?} holds a NUL")))?;
            let bytes = c.as_bytes_with_nul();
            sp = (sp - bytes.len() as u64) & !15;
            mem.write_all_at(bytes, sp)
                .map_err(|e| Refused(format!("writing into thread {tid}'s stack: {e}")))?;
            arguments.push(sp);
            arguments.push(extra);
        }
        arguments.extend_from_slice(args);
        // 16-byte aligned at the call: the return address 8 below.
        sp = (sp - 64) & !15;
        sp -= 8;
        mem.write_all_at(&0u64.to_le_bytes(), sp)
            .map_err(|e| Refused(format!("writing into thread {tid}'s stack: {e}")))?;
        let slots = [
            &mut regs.rdi,
            &mut regs.rsi,
            &mut regs.rdx,
            &mut regs.rcx,
            &mut regs.r8,
            &mut regs.r9,
        ];
        for (slot, value) in slots.into_iter().zip(arguments) {
            *slot = value;
        }
        regs.rsp = sp;
        regs.rip = function;
        regs.rax = 0;
        // Not in a system call any more: the kernel restarts nothing.
        regs.orig_rax = u64::MAX;
        // The direction flag clear, as the ABI requires at a call.
        regs.eflags &= !(1 << 10);
        set_regs(tid, &regs)?;
        ptrace(libc::PTRACE_CONT, tid, 0, 0)
            .map_err(|e| Refused(format!("PTRACE_CONT of thread {tid}: {e}")))?;
        loop {
            match wait_stop(tid, CALL_TIMEOUT)? {
                Stop::Gone => {
                    self.released = true;
                    return refused(format!("thread {tid} ended during a call made in it"));
                }
                Stop::Signal(libc::SIGSEGV) => {
                    let now = get_regs(tid)
                        .map_err(|e| Refused(format!("PTRACE_GETREGS of thread {tid}: {e}")))?;
                    if now.rip == 0 {
                        return Ok(now.rax);
                    }
                    return refused(format!(
                        "the call made in thread {tid} crashed (SIGSEGV at {:#x}); its \
                         registers were put back",
                        now.rip
                    ));
                }
                Stop::Signal(sig) => {
                    // Kept for after the thread's registers are put back.
                    // SAFETY: all-zero is a valid siginfo_t.
                    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                    let got = ptrace(
                        libc::PTRACE_GETSIGINFO,
                        tid,
                        0,
                        &mut info as *mut libc::siginfo_t as u64,
                    );
                    if got.is_err() {
                        info.si_signo = sig;
                    }
                    let merged = sig < SIGRTMIN && self.pending.iter().any(|p| p.si_signo == sig);
                    if !merged {
                        self.pending.push(info);
                    }
                    ptrace(libc::PTRACE_CONT, tid, 0, 0)
                        .map_err(|e| Refused(format!("PTRACE_CONT of thread {tid}: {e}")))?;
                }
                Stop::Event => {
                    ptrace(libc::PTRACE_CONT, tid, 0, 0)
                        .map_err(|e| Refused(format!("PTRACE_CONT of thread {tid}: {e}")))?;
                }
            }
        }
    }

    /// Puts back the thread's registers (restarting a system call it was
    /// stopped in by hand) and lets it go, delivering the signals that
    /// arrived meanwhile. Returns how long it was stopped.
    pub(crate) fn release(&mut self) -> Result<Duration, Refused> {
        if self.released {
            return Ok(self.stopped_at.elapsed());
        }
        self.released = true;
        let tid = self.tid;
        let mut regs = self.saved;
        if interrupted_syscall(&regs) {
            regs.rax = match regs.rax as i64 {
                ERESTART_RESTARTBLOCK => NR_RESTART_SYSCALL,
                _ => regs.orig_rax,
            };
            regs.rip -= 2;
            regs.orig_rax = u64::MAX;
        }
        let restored = (|| {
            set_regs(tid, &regs)?;
            match &mut self.xstate {
                Some(xstate) => {
                    let mut iov = libc::iovec {
                        iov_base: xstate.as_mut_ptr().cast(),
                        iov_len: xstate.len(),
                    };
                    ptrace(
                        libc::PTRACE_SETREGSET,
                        tid,
                        NT_X86_XSTATE,
                        &mut iov as *mut libc::iovec as u64,
                    )
                }
                None => ptrace(
                    libc::PTRACE_SETFPREGS,
                    tid,
                    0,
                    &self.fpregs as *const libc::user_fpregs_struct as u64,
                ),
            }
            .map(drop)
            .map_err(|e| Refused(format!("restoring thread {tid}'s vector registers: {e}")))
        })();
        // The first signal replaces the SIGSEGV the thread is stopped
        // for (with its own siginfo); the others are queued to it.
        let first = match self.pending.first() {
            Some(info) => {
                let _ = ptrace(
                    libc::PTRACE_SETSIGINFO,
                    tid,
                    0,
                    info as *const libc::siginfo_t as u64,
                );
                info.si_signo
            }
            None => 0,
        };
        // Its own policy again before it runs its own code.
        self.raised = None;
        let detached = ptrace(libc::PTRACE_DETACH, tid, 0, first as u64);
        let pause = self.stopped_at.elapsed();
        let tgid = thread_group(tid) as libc::c_long;
        for info in self.pending.iter().skip(1) {
            // SAFETY: rt_tgsigqueueinfo reads one siginfo_t from a live
            // value; tgkill takes plain integers.
            unsafe {
                let queued = libc::syscall(
                    libc::SYS_rt_tgsigqueueinfo,
                    tgid,
                    tid as libc::c_long,
                    info.si_signo as libc::c_long,
                    info as *const libc::siginfo_t,
                );
                // A siginfo the kernel would not let us forge (si_code of
                // kill): sent plainly.
                if queued != 0 {
                    libc::syscall(
                        libc::SYS_tgkill,
                        tgid,
                        tid as libc::c_long,
                        info.si_signo as libc::c_long,
                    );
                }
            }
        }
        restored?;
        detached.map_err(|e| Refused(format!("PTRACE_DETACH of thread {tid}: {e}")))?;
        Ok(pause)
    }
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// The process (thread group) of thread `tid`.
pub(crate) fn thread_group(tid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(tid)
}
