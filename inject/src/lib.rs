//! Loading `libfntrace.so` into a running process (`fntrace attach PID`):
//! the ptrace code, the only unsafe code of the command, behind one safe
//! call, [`attach`]. A crate of its own because the `fntrace` binary
//! forbids unsafe code (`#![forbid(unsafe_code)]`) and rustix has no
//! ptrace.
//!
//! # Why the target cannot deadlock
//!
//! A thread stopped at an arbitrary instruction may hold any lock: malloc's
//! arena lock, the dynamic loader's, stdio's. Making it call `dlopen` there
//! would make it wait for a lock it holds itself, forever. So a thread is
//! borrowed only at a *safe point*, where it holds no C library or loader
//! lock:
//!
//! - its user-space instruction pointer lies outside the text of libc, of
//!   the dynamic loader (`ld-linux`) and of a `libfntrace.so` loaded
//!   already (whose operation lock `fntrace_attach_start` takes): it runs
//!   the program's own code
//!   (or another library's), and libc's and the loader's locks are taken
//!   and released inside their own text, so it holds none of them; or
//! - it is blocked in a system call made from libc's text, right after the
//!   `syscall` instruction, among calls whose glibc wrappers take no lock
//!   and that programs make outside any library lock: `read`, `readv`,
//!   `recvfrom`, `recvmsg`, `accept`, `accept4`, `poll`, `ppoll`,
//!   `select`, `pselect6`, `epoll_wait`, `epoll_pwait`, `epoll_pwait2`,
//!   `nanosleep`, `clock_nanosleep`, `pause`, `wait4`. (The loader reads
//!   files with its own `read` in its own text: a thread loading a library
//!   is never taken.) `futex` is not among them: a thread waiting in
//!   `futex` may be waiting for one lock while holding another (malloc's
//!   arena lock, say, or the loader's, whose holder then waits on ours).
//!
//! Code of the program's own can still run with a libc lock held below it:
//! a callback of `dl_iterate_phdr` (the loader's lock), a constructor run
//! by the loader, a signal handler that interrupted `malloc`. So the
//! thread's stack (from rsp up, 512 KiB at most) is searched as well, and
//! the thread is not taken if it holds a return address into the loader's
//! text or into `dl_iterate_phdr` (the bytes before it a call), or a
//! signal frame (`__restore_rt`'s bytes, the word after it a `uc_flags`
//! the kernel writes and the next a null `uc_link`); nor if its stack has less than
//! 256 KiB below rsp (a coroutine's or a signal stack: the calls need tens
//! of KiB). A stale value found there only makes the search refuse a
//! thread that was safe.
//!
//! `epoll_wait`, `epoll_pwait`, `rt_sigtimedwait` and `semop` fail with
//! `EINTR` even when their thread is only stopped and resumed, with no
//! signal handler: for a thread stopped in one of them with no signal
//! passed to it meanwhile, `rax` is made `-ERESTARTNOHAND` before it goes
//! on, and the call is restarted like the others.
//!
//! Threads are taken one at a time: `PTRACE_SEIZE` and `PTRACE_INTERRUPT`
//! stop one thread, its registers are read, and if it is not at a safe
//! point it is let go at once (`PTRACE_DETACH`: a system call it was in is
//! restarted by the kernel, with no `EINTR`) and the next one is tried;
//! every thread, again and again, a bounded number of rounds, then
//! [`attach`] fails with the reason rather than risk a hang. Only the
//! borrowed thread is ever stopped; the others run, so a lock `dlopen`
//! needs that another thread holds is released by it.
//!
//! # The borrowed thread
//!
//! It does not load the library itself: it makes two short calls, `mmap`
//! and `pthread_create` (and two `mprotect` where the kernel refuses
//! writes through `/proc/PID/mem` into pages the target cannot write),
//! which start a thread of the target's own that calls `dlopen(path,
//! RTLD_NOW)` and `fntrace_attach_start_here()` (the call sites found on
//! that thread too) while no thread is stopped,
//! and is let go (module `spawn`: a stop of a few hundred µs where the
//! thread gets a CPU at once, not the milliseconds `dlopen` and the start
//! take). Only where that cannot be done (no `pthread_create` found, or
//! the target's `mmap` or `pthread_create` failed) does the borrowed
//! thread call `dlopen` and `fntrace_attach_start` itself.
//!
//! Its general registers and its whole extended state (`PTRACE_GETREGSET`
//! `NT_X86_XSTATE`: x87, SSE, AVX; `PTRACE_GETFPREGS` where that is
//! missing) are saved. Each call (those, or `dlopen(path, RTLD_NOW)`,
//! then `fntrace_attach_start()`, and `dlerror()` or `fntrace_last_error()`
//! when one fails) runs on the thread's own stack, below its red zone (rsp −
//! 128 − 2 KiB, 16-byte aligned at the call), with return address 0: the
//! return faults (`SIGSEGV` at rip 0), which the tracer sees and swallows.
//! Any other signal that arrives meanwhile is kept, with its siginfo, and
//! delivered after the registers are restored (the first when the thread
//! is let go, the others queued with `rt_tgsigqueueinfo`): no real-time
//! signal is lost, a standard one pending twice is delivered once (as the
//! kernel merges it for any thread that is not running), and handlers run
//! in the thread's own context. If the thread was stopped inside a system call (`rax` one of
//! `-ERESTARTSYS`, `-ERESTARTNOINTR`, `-ERESTARTNOHAND`,
//! `-ERESTART_RESTARTBLOCK` with `orig_rax` ≥ 0), `orig_rax` is −1 while it
//! runs the calls (so the kernel restarts nothing then), and at the end the
//! call is restarted by hand: `rax` = the system call's number
//! (`restart_syscall` for `-ERESTART_RESTARTBLOCK`), `rip` back over the
//! `syscall` instruction. The blocked call resumes as if nothing happened:
//! no `EINTR`. No ptrace attachment outlives [`attach`].
//!
//! What remains: a thread cancelled with `pthread_cancel` while it is
//! borrowed out of a cancellable blocking call (glibc before 2.41 runs
//! those in asynchronous cancellation mode) could be cancelled inside
//! `dlopen`; programs that cancel threads blocked in `read` are rare.
//!
//! # Where each part is
//!
//! This file: [`attach`], which finds what to call and decides which way
//! to load; `maps`: the target's mappings and its objects' symbols;
//! `safe_point`: whether a stopped thread may be borrowed; `borrow`: the
//! ptrace calls (seize, stop, save, call, restore); `spawn`: the loading
//! thread the borrowed one starts.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod borrow;
mod maps;
mod priority;
mod safe_point;
mod spawn;

use borrow::{borrow_thread, read_c_string, RTLD_NOW};
use maps::{
    elf_symbols, file_name, is_libc, is_loader, mapped_path, read_maps, seen_from_here,
    symbol_address, symbol_range,
};
use safe_point::{blocked_in_safe_call, LockFrames};
use spawn::{spawn_functions, START_HERE};

/// What [`attach`] did.
#[derive(Clone, Debug)]
pub struct Attached {
    /// The thread borrowed for the calls.
    pub tid: u32,
    /// Whether the library was loaded now (else it was there already).
    pub loaded: bool,
    /// The longest time a thread of the target was stopped: the borrowed
    /// thread's, from its stop (as `waitpid` saw it) to its release (the
    /// library is loaded after that, on a thread of the target's own,
    /// with no thread stopped), or that of a thread let go for not being
    /// at a safe point, if longer.
    pub pause: Duration,
    /// Threads stopped and let go because they were not at a safe point.
    pub passed_over: usize,
}

/// Why the calls could not be made: a sentence for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

fn refused<T>(message: impl Into<String>) -> Result<T, Refused> {
    Err(Refused(message.into()))
}

pub(crate) fn tracer_of(pid: u32) -> Result<u32, Refused> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|_| Refused(format!("no process with pid {pid}")))?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0))
}

fn command_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// Loads `library` (this side's path to `libfntrace.so`) into process
/// `pid` with `dlopen`, unless it is loaded there already, and calls its
/// `fntrace_attach_start` on a thread borrowed at a safe point (see the
/// module's comment). The error says why nothing, or what, was done.
///
/// `only`: borrow that thread of the process and no other (it must come to
/// a safe point within the same bounded tries).
pub fn attach(pid: u32, library: &Path, only: Option<u32>) -> Result<Attached, Refused> {
    let _raised = priority::raise(0);
    let tracer = tracer_of(pid)?;
    if tracer != 0 {
        return refused(format!(
            "process {pid} is traced already, by process {tracer} ({}): a process has one \
             tracer at a time; detach that one (gdb, strace) first",
            command_of(tracer)
        ));
    }
    let maps = read_maps(pid)?;
    let Some(libc_path) = mapped_path(&maps, is_libc) else {
        return refused(format!(
            "process {pid} has no libc.so mapped (a statically linked program?): fntrace attach \
             loads its library with the target's dlopen, which needs a dynamically linked program"
        ));
    };
    let already = mapped_path(&maps, |p| file_name(p) == "libfntrace.so");
    let target_path = match &already {
        Some(path) => path.clone(),
        None => path_in_target(pid, library)?,
    };
    let dlopen = match symbol_address(pid, &maps, &libc_path, "dlopen") {
        Some(addr) => (addr, libc_path.clone()),
        None => match mapped_path(&maps, |p| file_name(p).starts_with("libdl.so")) {
            Some(libdl) => match symbol_address(pid, &maps, &libdl, "dlopen") {
                Some(addr) => (addr, libdl),
                None => return refused(format!("{libdl} in process {pid} has no dlopen")),
            },
            None => {
                return refused(format!(
                    "process {pid}'s C library ({libc_path}) has no dlopen (glibc before 2.34 \
                     keeps it in libdl.so.2, which this program did not load)"
                ))
            }
        },
    };
    let dlerror = symbol_address(pid, &maps, &dlopen.1, "dlerror");
    // libc's, the loader's, and fntrace's own (loaded already: a thread in
    // it may hold its operation lock, which fntrace_attach_start takes).
    let unsafe_text: Vec<(u64, u64)> = maps
        .iter()
        .filter(|m| {
            m.executable
                && (is_libc(&m.path) || is_loader(&m.path) || file_name(&m.path) == "libfntrace.so")
        })
        .map(|m| (m.start, m.end))
        .collect();
    let libc_text: Vec<(u64, u64)> = maps
        .iter()
        .filter(|m| m.executable && is_libc(&m.path))
        .map(|m| (m.start, m.end))
        .collect();
    let mem = File::options()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .map_err(|e| Refused(permission_message(pid, e)))?;
    let frames = LockFrames {
        loader_text: maps
            .iter()
            .filter(|m| m.executable && is_loader(&m.path))
            .map(|m| (m.start, m.end))
            .collect(),
        libc_text: libc_text.clone(),
        dl_iterate_phdr: symbol_range(pid, &maps, &libc_path, "dl_iterate_phdr")
            .map(|(start, size)| (start, start + size.max(1))),
        stacks: maps
            .iter()
            .filter(|m| !m.executable)
            .map(|m| (m.start, m.end, m.path == "[stack]"))
            .collect(),
    };
    let safe = |regs: &libc::user_regs_struct| -> bool {
        let rip = regs.rip;
        let at_safe_point = !unsafe_text.iter().any(|&(s, e)| rip >= s && rip < e)
            || blocked_in_safe_call(regs, &libc_text, &mem);
        at_safe_point && !frames.on_stack(regs.rsp, &mem)
    };
    // Read before a thread is stopped: the library's file may be large.
    let ours_file = match &already {
        Some(path) => seen_from_here(pid, path),
        None => library.to_path_buf(),
    };
    let Some(ours_symbols) = elf_symbols(
        &ours_file,
        &["fntrace_attach_start", "fntrace_last_error", START_HERE],
    ) else {
        return refused(format!(
            "{} is not a readable ELF file",
            ours_file.display()
        ));
    };
    if ours_symbols.found[0].is_none() {
        return refused(format!(
            "{} has no fntrace_attach_start (a libfntrace.so older than fntrace attach?)",
            ours_file.display()
        ));
    }
    let functions = spawn_functions(pid, &maps, &libc_path, &dlopen);
    let (mut thread, passed_over) = borrow_thread(pid, only, &mem, &safe)?;
    let loaded = already.is_none();
    let result = (|| {
        if let Some(functions) = &functions {
            // The scan on the loading thread, where the library has that
            // (an older one loaded already may not): no thread more.
            let start = match ours_symbols.found[2] {
                Some(_) => START_HERE,
                None => "fntrace_attach_start",
            };
            if let Some(started) = spawn::start(&mut thread, &mem, functions, &target_path, start)?
            {
                return Ok(Some(started));
            }
        }
        if loaded {
            let handle = thread.call(&mem, dlopen.0, &[], Some(&target_path), RTLD_NOW)?;
            if handle == 0 {
                let why = match dlerror {
                    Some(dlerror) => {
                        let text = thread.call(&mem, dlerror, &[], None, 0)?;
                        read_c_string(&mem, text)
                    }
                    None => "no message (dlerror not found)".to_string(),
                };
                return refused(format!(
                    "dlopen({target_path}) in process {pid} failed: {why}"
                ));
            }
        }
        let maps = read_maps(pid)?;
        let Some(ours) = mapped_path(&maps, |p| file_name(p) == "libfntrace.so") else {
            return refused(format!(
                "{target_path} is not mapped in process {pid} after dlopen"
            ));
        };
        let Some((start, _)) = ours_symbols.in_target(&maps, &ours, 0) else {
            return refused(format!(
                "{ours} in process {pid}: its load address is not in its maps"
            ));
        };
        let code = thread.call(&mem, start, &[], None, 0)? as u32 as i32;
        if code != 0 {
            let why = match ours_symbols.in_target(&maps, &ours, 1) {
                Some((last_error, _)) => {
                    let text = thread.call(&mem, last_error, &[], None, 0)?;
                    read_c_string(&mem, text)
                }
                None => format!("error {code}"),
            };
            return refused(format!("in process {pid}: {why}"));
        }
        Ok(None)
    })();
    let pause = thread
        .release()
        .map(|pause| pause.max(thread.longest_passed_over));
    if let Some(started) = result? {
        match spawn::finish(&mem, pid, started)? {
            spawn::Outcome::Attached => {}
            spawn::Outcome::NotLoaded(why) => {
                return refused(format!(
                    "dlopen({target_path}) in process {pid} failed: {why}"
                ))
            }
            spawn::Outcome::NoStart(why) => {
                return refused(format!(
                    "{target_path} in process {pid} has no fntrace_attach_start: {why}"
                ))
            }
            spawn::Outcome::Failed(code, why) => {
                return refused(format!(
                    "in process {pid}: {}",
                    why.unwrap_or_else(|| format!("error {code}"))
                ))
            }
        }
    }
    Ok(Attached {
        tid: thread.tid,
        loaded,
        pause: pause?,
        passed_over,
    })
}

/// The path under which process `pid` sees `library`: the same path when
/// it names the same file there (`/proc/PID/root` + path: another mount
/// namespace or root may show another file, or none); for a `library`
/// given as `/proc/PID/root/PATH` (a copy placed in the process's own
/// file system), PATH.
fn path_in_target(pid: u32, library: &Path) -> Result<String, Refused> {
    let fix = format!(
        "copy libfntrace.so into its file system and pass --lib /proc/{pid}/root/PATH (PATH as \
         the process sees it)"
    );
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    if let Ok(inside) = library.strip_prefix(&root) {
        if !library.is_file() {
            return refused(format!("{} is not a file", library.display()));
        }
        return Path::new("/")
            .join(inside)
            .to_str()
            .map(String::from)
            .ok_or_else(|| Refused(format!("{} is not UTF-8", library.display())));
    }
    let library = library
        .canonicalize()
        .map_err(|e| Refused(format!("{}: {e}", library.display())))?;
    let ours =
        std::fs::metadata(&library).map_err(|e| Refused(format!("{}: {e}", library.display())))?;
    let seen = root.join(library.strip_prefix("/").unwrap_or(&library));
    match std::fs::metadata(&seen) {
        Ok(theirs) if theirs.dev() == ours.dev() && theirs.ino() == ours.ino() => {}
        Ok(_) => {
            return refused(format!(
                "process {pid} sees another file at {} (another mount namespace or root): {fix}",
                library.display()
            ))
        }
        Err(e) => {
            return refused(format!(
                "process {pid} cannot see {} ({}: {e}; another mount namespace or root): {fix}",
                library.display(),
                seen.display()
            ))
        }
    }
    library
        .to_str()
        .map(String::from)
        .ok_or_else(|| Refused(format!("{} is not UTF-8", library.display())))
}

pub(crate) fn permission_message(pid: u32, e: std::io::Error) -> String {
    if e.raw_os_error() != Some(libc::EPERM) && e.raw_os_error() != Some(libc::EACCES) {
        return format!("process {pid}: {e}");
    }
    let uid = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(String::from))
        })
        .unwrap_or_else(|| "?".to_string());
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let yama = match scope {
        None => "no Yama module here".to_string(),
        Some(0) => "Yama's ptrace_scope is 0".to_string(),
        Some(n) => format!(
            "Yama's ptrace_scope is {n}, which allows only a parent (1), CAP_SYS_PTRACE (2) or \
             no one (3): `sudo sysctl kernel.yama.ptrace_scope=0`, or run fntrace as root"
        ),
    };
    format!(
        "not permitted to trace process {pid} ({e}): ptrace needs the target's uid ({uid}; a \
         setuid or undumpable program not even then) or CAP_SYS_PTRACE, and the Yama rule \
         ({yama}); run fntrace as uid {uid} or as root"
    )
}
