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
//! signal frame (`__restore_rt`'s bytes); nor if its stack has less than
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

use std::ffi::CString;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use object::{Object, ObjectSegment, ObjectSymbol};

mod spawn;

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

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug)]
struct Mapping {
    start: u64,
    end: u64,
    executable: bool,
    offset: u64,
    path: String,
}

fn read_maps(pid: u32) -> Result<Vec<Mapping>, Refused> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| {
        Refused(match e.raw_os_error() {
            Some(libc::EACCES | libc::EPERM) => permission_message(pid, e),
            _ => format!("reading /proc/{pid}/maps: {e}"),
        })
    })?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let range = fields.next()?;
            let perms = fields.next()?;
            let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
            let _dev = fields.next()?;
            let _inode = fields.next()?;
            let path = fields.next().unwrap_or("").trim_start().to_string();
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                executable: perms.as_bytes().get(2) == Some(&b'x'),
                offset,
                path,
            })
        })
        .collect())
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn is_libc(path: &str) -> bool {
    let name = file_name(path);
    name.starts_with("libc.so") || (name.starts_with("libc-") && name.ends_with(".so"))
}

fn is_loader(path: &str) -> bool {
    let name = file_name(path);
    name.starts_with("ld-linux") || (name.starts_with("ld-") && name.contains(".so"))
}

/// The dynamic symbols `names` of the ELF file at `file` (as the target
/// would map it: addresses relative to its load base), with sizes.
struct Symbols {
    /// The first segment's address, page aligned: what the load base adds to.
    first_vaddr: u64,
    found: Vec<Option<(u64, u64)>>,
}

fn elf_symbols(file: &Path, names: &[&str]) -> Option<Symbols> {
    let data = std::fs::read(file).ok()?;
    let elf = object::File::parse(&*data).ok()?;
    let first_vaddr = elf.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
    let mut found = vec![None; names.len()];
    for symbol in elf.dynamic_symbols().filter(|s| s.is_definition()) {
        let Ok(name) = symbol.name() else { continue };
        if let Some(at) = names.iter().position(|n| *n == name) {
            found[at].get_or_insert((symbol.address(), symbol.size()));
        }
    }
    Some(Symbols { first_vaddr, found })
}

impl Symbols {
    /// Symbol `index`'s address and size in the object mapped from `path`.
    fn in_target(&self, maps: &[Mapping], path: &str, index: usize) -> Option<(u64, u64)> {
        let base_mapping = maps.iter().find(|m| m.path == path && m.offset == 0)?;
        let base = base_mapping.start.wrapping_sub(self.first_vaddr);
        self.found[index].map(|(addr, size)| (base.wrapping_add(addr), size))
    }
}

/// The file mapped from `path` in process `pid`, as this side reads it.
fn seen_from_here(pid: u32, path: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root{path}"))
}

/// The address and size, in the target, of the dynamic symbol `name` of
/// the object mapped from `path`.
fn symbol_range(pid: u32, maps: &[Mapping], path: &str, name: &str) -> Option<(u64, u64)> {
    elf_symbols(&seen_from_here(pid, path), &[name])?.in_target(maps, path, 0)
}

fn symbol_address(pid: u32, maps: &[Mapping], path: &str, name: &str) -> Option<u64> {
    symbol_range(pid, maps, path, name).map(|(start, _)| start)
}

/// Where an object named `file_name` is mapped, if it is.
fn mapped_path(maps: &[Mapping], matches: impl Fn(&str) -> bool) -> Option<String> {
    maps.iter()
        .find(|m| m.path.starts_with('/') && matches(&m.path))
        .map(|m| m.path.clone())
}

fn tracer_of(pid: u32) -> Result<u32, Refused> {
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

fn permission_message(pid: u32, e: std::io::Error) -> String {
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

/// `RTLD_NOW`.
const RTLD_NOW: u64 = 2;

/// The kernel's internal restart codes, as `rax` holds them.
const ERESTARTSYS: i64 = -512;
const ERESTARTNOINTR: i64 = -513;
const ERESTARTNOHAND: i64 = -514;
const ERESTART_RESTARTBLOCK: i64 = -516;
const NR_RESTART_SYSCALL: u64 = 219;

/// System calls whose glibc wrappers hold no lock while they block (see
/// the module's comment).
const SAFE_SYSCALLS: [u64; 17] = [
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
const EINTR_AFTER_STOP: [u64; 6] = [232, 281, 441, 128, 65, 220];

/// Rewrites the registers of a thread stopped by our interrupt (with no
/// signal passed to it meanwhile) right after one of [`EINTR_AFTER_STOP`]
/// failed with `EINTR` because of that stop: `rax` becomes
/// `-ERESTARTNOHAND`, which the kernel (or [`Borrowed::release`])
/// restarts, so the program never sees that `EINTR`. Whether it did.
fn undo_eintr_of_stop(tid: u32, regs: &mut libc::user_regs_struct, mem: &File) -> bool {
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

fn interrupted_syscall(regs: &libc::user_regs_struct) -> bool {
    (regs.orig_rax as i64) >= 0
        && matches!(
            regs.rax as i64,
            ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND | ERESTART_RESTARTBLOCK
        )
}

/// Whether the thread is blocked in one of [`SAFE_SYSCALLS`], made by a
/// `syscall` instruction in libc's text.
fn blocked_in_safe_call(
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
struct LockFrames {
    loader_text: Vec<(u64, u64)>,
    libc_text: Vec<(u64, u64)>,
    dl_iterate_phdr: Option<(u64, u64)>,
    /// The writable mappings: the one holding rsp is the stack (and
    /// whether it is the main thread's, which grows as needed).
    stacks: Vec<(u64, u64, bool)>,
}

/// `mov $15,%rax; syscall` (`rt_sigreturn`): glibc's `__restore_rt`, where
/// a signal handler returns.
const RESTORE_RT: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// How much of a stack above rsp is searched.
const STACK_SCAN: u64 = 512 << 10;

/// What the loading thread ([`spawn`]) calls once the library is loaded:
/// the start that also finds the call sites on the calling thread.
const START_HERE: &str = "fntrace_attach_start_here";

/// The target's functions that load the library on a thread of its own
/// ([`spawn`]), found in its C library (or `libpthread` before glibc 2.34)
/// and in the object of `dlopen` (its address and path); `None` if one is
/// missing (then the borrowed thread makes the calls itself).
fn spawn_functions(
    pid: u32,
    maps: &[Mapping],
    libc_path: &str,
    (dlopen, dl_object): &(u64, String),
) -> Option<spawn::Functions> {
    let names = [
        "mmap",
        "mprotect",
        "munmap",
        "pthread_create",
        "pthread_self",
        "pthread_detach",
    ];
    let libc = elf_symbols(&seen_from_here(pid, libc_path), &names)?;
    let mut found: Vec<Option<u64>> = (0..names.len())
        .map(|i| libc.in_target(maps, libc_path, i).map(|(at, _)| at))
        .collect();
    if found.iter().any(Option::is_none) {
        let libpthread = mapped_path(maps, |p| file_name(p).starts_with("libpthread.so"))?;
        let theirs = elf_symbols(&seen_from_here(pid, &libpthread), &names)?;
        for (i, slot) in found.iter_mut().enumerate() {
            *slot = slot.or_else(|| theirs.in_target(maps, &libpthread, i).map(|(at, _)| at));
        }
    }
    let dl = elf_symbols(&seen_from_here(pid, dl_object), &["dlsym", "dlerror"])?;
    let dl_found = |i| dl.in_target(maps, dl_object, i).map(|(at, _)| at);
    Some(spawn::Functions {
        mmap: found[0]?,
        mprotect: found[1]?,
        munmap: found[2]?,
        pthread_create: found[3]?,
        pthread_self: found[4]?,
        pthread_detach: found[5]?,
        dlopen: *dlopen,
        dlsym: dl_found(0)?,
        dlerror: dl_found(1)?,
    })
}

/// The room a borrowed thread needs below rsp for the calls (dlopen and
/// fntrace's start-up use tens of KiB): a thread with less (a coroutine's
/// small stack, a signal stack) is not taken.
const STACK_ROOM: u64 = 256 << 10;

impl LockFrames {
    /// Whether the stack above `rsp` holds one of those return addresses
    /// (a value the bytes before which are a call, or a signal frame), or
    /// the stack has too little room below rsp ([`STACK_ROOM`]). A stale
    /// value can refuse a thread that was safe, never the reverse.
    fn on_stack(&self, rsp: u64, mem: &File) -> bool {
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
        stack.chunks_exact(8).any(|word| {
            let v = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
            let in_loader = inside(&self.loader_text, v);
            let in_iterate = self.dl_iterate_phdr.is_some_and(|(s, e)| v > s && v <= e);
            if (in_loader || in_iterate) && follows_call(mem, v) {
                return true;
            }
            if inside(&self.libc_text, v) {
                let mut code = [0u8; 9];
                return mem.read_exact_at(&mut code, v).is_ok() && code == RESTORE_RT;
            }
            false
        })
    }
}

/// Whether the bytes before `addr` end with a call instruction (`e8
/// rel32`, or `ff /2` with any addressing of 2, 3, 6 or 7 bytes).
fn follows_call(mem: &File, addr: u64) -> bool {
    let mut code = [0u8; 7];
    if addr < 7 || mem.read_exact_at(&mut code, addr - 7).is_err() {
        return false;
    }
    let ff2 = |at: usize| code[at] == 0xff && (code[at + 1] & 0x38) == 0x10;
    code[2] == 0xe8 || ff2(0) || ff2(1) || ff2(4) || ff2(5)
}

fn read_c_string(mem: &File, addr: u64) -> String {
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
fn ptrace(request: u32, tid: u32, addr: u64, data: u64) -> Result<i64, std::io::Error> {
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
enum Stop {
    /// A `PTRACE_EVENT_STOP` (our interrupt, or a group stop).
    Event,
    /// A signal-delivery-stop for this signal.
    Signal(i32),
    /// The thread is gone.
    Gone,
}

fn wait_stop(tid: u32, timeout: Duration) -> Result<Stop, Refused> {
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
struct Borrowed {
    tid: u32,
    saved: libc::user_regs_struct,
    /// `NT_X86_XSTATE` (the bytes the kernel gave), or `None`: then
    /// `fpregs` is the saved state.
    xstate: Option<Vec<u8>>,
    fpregs: libc::user_fpregs_struct,
    stopped_at: Instant,
    /// Signals that arrived while it was borrowed, to deliver after.
    /// (A standard signal once: the kernel merges those too while a thread
    /// is not running; each real-time one, with its siginfo.)
    pending: Vec<libc::siginfo_t>,
    released: bool,
    /// The longest stop of a thread let go before this one was taken.
    longest_passed_over: Duration,
}

/// How many rounds over the threads before giving up.
const ROUNDS: usize = 400;

/// Stops the process's threads one at a time until one is at a safe point
/// (`safe`), which stays stopped; the others are let go at once.
fn borrow_thread(
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
fn stop_seized(tid: u32) -> Result<Option<(libc::user_regs_struct, bool)>, Refused> {
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

fn get_regs(tid: u32) -> Result<libc::user_regs_struct, std::io::Error> {
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

fn set_regs(tid: u32, regs: &libc::user_regs_struct) -> Result<(), Refused> {
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
const SIGRTMIN: i32 = 32;

/// `NT_X86_XSTATE`.
const NT_X86_XSTATE: u64 = 0x202;

fn save_state(
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
    })
}

/// How long one call may take before the tracer gives up waiting.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

impl Borrowed {
    /// Calls `function(args..., string?, extra)` on the thread and returns
    /// its `rax`. `string`, if given, is copied below the thread's red zone
    /// and passed as the first argument (then `extra` is the second).
    fn call(
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
    fn release(&mut self) -> Result<Duration, Refused> {
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
fn thread_group(tid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(tid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_libc_and_the_loader_by_their_names() {
        assert!(is_libc("/usr/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_libc("/lib64/libc-2.17.so"));
        assert!(!is_libc("/usr/lib/libcurl.so.4"));
        assert!(!is_libc("/work/libc.so.6.d/prog"));
        assert!(is_loader("/lib64/ld-linux-x86-64.so.2"));
        assert!(is_loader("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"));
        assert!(!is_loader("/usr/lib/libldap.so.2"));
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
