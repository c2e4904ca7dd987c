//! Whether a stopped thread is at a safe point (the crate's comment says
//! why): blocked in a system call whose glibc wrapper holds no lock, or
//! running code outside libc's and the loader's text with no loader
//! frame, `dl_iterate_phdr` frame or signal frame on its stack; and the
//! system calls a stop makes fail with `EINTR`, turned back into restarts.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::borrow::set_regs;

/// The kernel's internal restart codes, as `rax` holds them.
pub(crate) const ERESTARTSYS: i64 = -512;
pub(crate) const ERESTARTNOINTR: i64 = -513;
pub(crate) const ERESTARTNOHAND: i64 = -514;
pub(crate) const ERESTART_RESTARTBLOCK: i64 = -516;
pub(crate) const NR_RESTART_SYSCALL: u64 = 219;

/// System calls whose glibc wrappers hold no lock while they block (see
/// the module's comment).
pub(crate) const SAFE_SYSCALLS: [u64; 17] = [
    0,   // read
    7,   // poll
    19,  // readv
    23,  // select
    34,  // pause
    35,  // nanosleep
    43,  // accept
    45,  // recvfrom
    47,  // recvmsg
    61,  // wait4
    230, // clock_nanosleep
    232, // epoll_wait
    270, // pselect6
    271, // ppoll
    281, // epoll_pwait
    288, // accept4
    441, // epoll_pwait2
];

/// System calls that fail with `EINTR`, not a restart code, when their
/// thread is merely stopped and resumed (signal(7)): `epoll_wait`,
/// `epoll_pwait`, `epoll_pwait2`, `rt_sigtimedwait`, `semop`, `semtimedop`.
pub(crate) const EINTR_AFTER_STOP: [u64; 6] = [232, 281, 441, 128, 65, 220];

/// Rewrites the registers of a thread stopped by our interrupt (with no
/// signal passed to it meanwhile) right after one of [`EINTR_AFTER_STOP`]
/// failed with `EINTR` because of that stop: `rax` becomes
/// `-ERESTARTNOHAND`, which the kernel (or [`Borrowed::release`])
/// restarts, so the program never sees that `EINTR`. Whether it did.
pub(crate) fn undo_eintr_of_stop(tid: u32, regs: &mut libc::user_regs_struct, mem: &File) -> bool {
    let eintr = (regs.orig_rax as i64) >= 0
        && regs.rax as i64 == -(libc::EINTR as i64)
        && EINTR_AFTER_STOP.contains(&regs.orig_rax);
    let mut code = [0u8; 2];
    if !eintr
        || mem
            .read_exact_at(&mut code, regs.rip.wrapping_sub(2))
            .is_err()
        || code != [0x0f, 0x05]
    {
        return false;
    }
    let mut restarted = *regs;
    restarted.rax = ERESTARTNOHAND as u64;
    if set_regs(tid, &restarted).is_err() {
        return false;
    }
    *regs = restarted;
    true
}

pub(crate) fn interrupted_syscall(regs: &libc::user_regs_struct) -> bool {
    (regs.orig_rax as i64) >= 0
        && matches!(
            regs.rax as i64,
            ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND | ERESTART_RESTARTBLOCK
        )
}

/// Whether the thread is blocked in one of [`SAFE_SYSCALLS`], made by a
/// `syscall` instruction in libc's text.
pub(crate) fn blocked_in_safe_call(
    regs: &libc::user_regs_struct,
    libc_text: &[(u64, u64)],
    mem: &File,
) -> bool {
    if !interrupted_syscall(regs) || !SAFE_SYSCALLS.contains(&regs.orig_rax) {
        return false;
    }
    let at = regs.rip.wrapping_sub(2);
    if !libc_text.iter().any(|&(s, e)| at >= s && at < e) {
        return false;
    }
    let mut code = [0u8; 2];
    mem.read_exact_at(&mut code, at).is_ok() && code == [0x0f, 0x05]
}

/// What, found on a thread's stack, means that a lock may be held below
/// the frame it runs (see the module's comment): a return address into
/// the dynamic loader (the loader is mid-operation: running a
/// constructor, say), into `dl_iterate_phdr` (its callback runs with the
/// loader's lock), or a signal frame (`__restore_rt`: a handler may have
/// interrupted code that holds any lock).
pub(crate) struct LockFrames {
    pub(crate) loader_text: Vec<(u64, u64)>,
    pub(crate) libc_text: Vec<(u64, u64)>,
    pub(crate) dl_iterate_phdr: Option<(u64, u64)>,
    /// The writable mappings: the one holding rsp is the stack (and
    /// whether it is the main thread's, which grows as needed).
    pub(crate) stacks: Vec<(u64, u64, bool)>,
}

/// `mov $15,%rax; syscall` (`rt_sigreturn`): glibc's `__restore_rt`, where
/// a signal handler returns.
pub(crate) const RESTORE_RT: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// How much of a stack above rsp is searched.
pub(crate) const STACK_SCAN: u64 = 512 << 10;

/// The room a borrowed thread needs below rsp for the calls (dlopen and
/// fntrace's start-up use tens of KiB): a thread with less (a coroutine's
/// small stack, a signal stack) is not taken.
pub(crate) const STACK_ROOM: u64 = 256 << 10;

impl LockFrames {
    /// Whether the stack above `rsp` holds one of those return addresses
    /// (a value the bytes before which are a call, or a signal frame), or
    /// the stack has too little room below rsp ([`STACK_ROOM`]). A stale
    /// value can refuse a thread that was safe, never the reverse.
    pub(crate) fn on_stack(&self, rsp: u64, mem: &File) -> bool {
        let Some(&(start, end, main)) = self.stacks.iter().find(|&&(s, e, _)| rsp >= s && rsp < e)
        else {
            return true; // no stack found: not taken
        };
        if !main && rsp - start < STACK_ROOM {
            return true;
        }
        let len = (end - rsp).min(STACK_SCAN) as usize;
        let mut stack = vec![0u8; len];
        if mem.read_exact_at(&mut stack, rsp).is_err() {
            return true;
        }
        let inside = |ranges: &[(u64, u64)], v: u64| ranges.iter().any(|&(s, e)| v >= s && v < e);
        let words: Vec<u64> = (stack.chunks_exact(8))
            .map(|word| u64::from_le_bytes(word.try_into().unwrap_or([0; 8])))
            .collect();
        words.iter().enumerate().any(|(at, &v)| {
            let in_loader = inside(&self.loader_text, v);
            let in_iterate = self.dl_iterate_phdr.is_some_and(|(s, e)| v > s && v <= e);
            if (in_loader || in_iterate) && follows_call(mem, v) {
                return true;
            }
            if inside(&self.libc_text, v) {
                let mut code = [0u8; 9];
                return mem.read_exact_at(&mut code, v).is_ok()
                    && code == RESTORE_RT
                    && may_be_signal_frame(&words[at..]);
            }
            false
        })
    }
}

/// Whether `words`, whose first is `__restore_rt`'s address, may begin a
/// signal frame as the x86-64 kernel writes it (`struct rt_sigframe`):
/// that address (the handler's return address), then the ucontext's
/// `uc_flags`, which holds no flag beyond `UC_FP_XSTATE`,
/// `UC_SIGCONTEXT_SS` and `UC_STRICT_RESTORE_SS` (1, 2, 4), then
/// `uc_link`, which the kernel always writes 0. Words past the end of
/// what was read count as a frame. What this rules out is the address in
/// a `struct sigaction` left on the stack by a `sigaction` call (Rust's
/// runtime makes some at start-up): its `sa_restorer` is followed by
/// `sa_mask` and whatever the caller's frame held next.
fn may_be_signal_frame(words: &[u64]) -> bool {
    let uc_flags_known = words.get(1).is_none_or(|&flags| flags <= 7);
    let no_uc_link = words.get(2).is_none_or(|&link| link == 0);
    uc_flags_known && no_uc_link
}

/// Whether the bytes before `addr` end with a call instruction (`e8
/// rel32`, or `ff /2` with any addressing of 2, 3, 6 or 7 bytes).
pub(crate) fn follows_call(mem: &File, addr: u64) -> bool {
    let mut code = [0u8; 7];
    if addr < 7 || mem.read_exact_at(&mut code, addr - 7).is_err() {
        return false;
    }
    let ff2 = |at: usize| code[at] == 0xff && (code[at + 1] & 0x38) == 0x10;
    code[2] == 0xe8 || ff2(0) || ff2(1) || ff2(4) || ff2(5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::{is_libc, read_maps};
    use std::sync::atomic::{AtomicU8, Ordering};

    /// The search as `attach` makes it, over this process's maps (no
    /// loader text: only signal frames and the room below rsp count).
    fn own_lock_frames() -> LockFrames {
        let maps = read_maps(std::process::id()).unwrap();
        LockFrames {
            loader_text: Vec::new(),
            libc_text: (maps.iter())
                .filter(|m| m.executable && is_libc(&m.path))
                .map(|m| (m.start, m.end))
                .collect(),
            dl_iterate_phdr: None,
            stacks: (maps.iter())
                .filter(|m| !m.executable)
                .map(|m| (m.start, m.end, m.path == "[stack]"))
                .collect(),
        }
    }

    /// The caller's stack pointer (near enough: this function is inlined).
    #[inline(always)]
    fn rsp() -> u64 {
        let rsp: u64;
        // SAFETY: reads the stack pointer into a register; nothing else.
        unsafe { std::arch::asm!("mov {}, rsp", out(reg) rsp, options(nomem, nostack)) };
        rsp
    }

    /// What the handler found: 1 a lock frame, 2 none.
    static IN_HANDLER: AtomicU8 = AtomicU8::new(0);
    static FRAMES: std::sync::OnceLock<LockFrames> = std::sync::OnceLock::new();

    extern "C" fn search_from_handler(_: libc::c_int) {
        let (Some(frames), Ok(mem)) = (FRAMES.get(), File::open("/proc/self/mem")) else {
            return;
        };
        let found = frames.on_stack(rsp(), &mem);
        IN_HANDLER.store(if found { 1 } else { 2 }, Ordering::SeqCst);
    }

    /// The restorer libc installed for `signal` (its `__restore_rt`), read
    /// in a frame of its own: the `struct sigaction` read back is gone
    /// from the caller's stack (it would pass for a frame: its restorer
    /// followed by zeros).
    #[inline(never)]
    fn installed_restorer(signal: libc::c_int) -> u64 {
        // SAFETY: all-zero is a valid sigaction; the call writes it.
        let mut installed: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reads the action back into `installed`.
        unsafe { libc::sigaction(signal, std::ptr::null(), &mut installed) };
        installed.sa_restorer.map_or(0, |f| f as usize as u64)
    }

    #[test]
    fn a_real_signal_frame_is_found_and_a_stale_sigaction_is_not() {
        let frames = FRAMES.get_or_init(own_lock_frames);
        let mem = File::open("/proc/self/mem").unwrap();
        // SAFETY: all-zero is a valid sigaction.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = search_from_handler as *const () as usize;
        // SAFETY: `action` is valid for the call; SIGUSR2's handler is
        // this test's function, which only reads memory and stores.
        let installed = unsafe { libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut()) };
        assert_eq!(installed, 0);
        let restorer = installed_restorer(libc::SIGUSR2);
        // What a `struct sigaction` leaves on a stack: `__restore_rt` as
        // its restorer, its mask, then the caller's next word: no frame.
        let held = std::hint::black_box([restorer, 0, rsp() & !0xfff]);
        assert!(
            frames
                .libc_text
                .iter()
                .any(|&(s, e)| restorer >= s && restorer < e),
            "glibc's restorer {restorer:#x} is in its text"
        );
        assert!(!frames.on_stack(rsp(), &mem), "no lock frame: {held:x?}");
        // In a handler the kernel's frame is found.
        // SAFETY: raises SIGUSR2 on this thread, handled above.
        assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
        assert_eq!(
            IN_HANDLER.load(Ordering::SeqCst),
            1,
            "the signal frame was not found"
        );
        std::hint::black_box(held);
    }

    #[test]
    fn a_system_call_stopped_with_a_restart_code_is_restartable() {
        // SAFETY: all-zero is a valid value of this plain C struct.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        regs.orig_rax = 0; // read
        for code in [
            ERESTARTSYS,
            ERESTARTNOINTR,
            ERESTARTNOHAND,
            ERESTART_RESTARTBLOCK,
        ] {
            regs.rax = code as u64;
            assert!(interrupted_syscall(&regs), "{code}");
        }
        regs.rax = -(libc::EINTR as i64) as u64;
        assert!(!interrupted_syscall(&regs), "EINTR is the program's");
        regs.rax = ERESTARTSYS as u64;
        regs.orig_rax = u64::MAX;
        assert!(!interrupted_syscall(&regs), "not in a system call");
    }
}
