//! Loading the library on a thread of the target's own, started for it,
//! so that the borrowed thread is stopped only for two short calls
//! (`mmap`, `pthread_create`) and not for `dlopen` and
//! `fntrace_attach_start`, which take milliseconds.
//!
//! The borrowed thread maps two anonymous pages, read+execute; the
//! injector writes a start routine ([`ROUTINE`]) into the first and its
//! data block into the second through `/proc/PID/mem` (as a debugger
//! writes a breakpoint; where the kernel refuses that, the borrowed thread
//! makes them writable with `mprotect` first, and the routine's page
//! executable after: never writable and executable at once); the borrowed
//! thread starts a thread on the routine with the target's own
//! `pthread_create` (safe at a safe point, like `dlopen`: it takes libc's
//! and the loader's locks only inside their text, and the borrowed thread
//! holds none). Then the borrowed thread is let go, and the injector reads
//! the routine's result from the data block while no thread is stopped.
//!
//! The routine detaches its thread, makes the data block writable (if it
//! cannot, it unmaps both pages and ends: the injector's next read of the
//! block fails and says so), waits for the injector's `go`, written once
//! the borrowed thread is let go (until then that thread may still be
//! inside `pthread_create` with every signal blocked, and the start's
//! patching would see a thread blocking SIGTRAP and stop the world, whose
//! signals make `epoll_wait` fail with `EINTR`), calls `dlopen(path, RTLD_NOW)` (on an
//! object loaded already it only returns its handle), `dlsym(handle,
//! "fntrace_attach_start_here")` and that function (which also finds the
//! call sites on this thread, so that attaching starts no thread more than
//! the control socket's: each new thread that allocates may get a malloc
//! arena of its own, where what it frees can stay resident; a library
//! without it, loaded by an older fntrace, gets `fntrace_attach_start`),
//! keeps `dlerror()` or
//! `fntrace_last_error()` when one fails (thread-local strings, read
//! before the thread ends), sets `done`, and waits (100 µs sleeps, ≥ 10 s
//! at most) for the injector's `ack`; then it jumps to `munmap` of both
//! pages with its caller's return address, so the thread ends in
//! `pthread_create`'s code and nothing of the routine is left. The
//! injector waits for that thread to end before [`super::attach`] returns.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::borrow::{read_c_string, Borrowed, CALL_TIMEOUT};
use crate::maps::{elf_symbols, file_name, mapped_path, seen_from_here, Mapping};
use crate::{refused, Refused};

/// The start routine, position independent, `rdi` = the data block (kept
/// in `rbx`); the offsets are [`Block`]'s. Assembled from:
///
/// ```text
///     push %rbx; mov %rdi,%rbx
///     call *SELF(%rbx); mov %rax,%rdi; call *DETACH(%rbx)
///     mov %rbx,%rdi; mov $4096,%esi; mov $3,%edx; call *MPROTECT(%rbx)
///     test %eax,%eax; jnz 8f                              # block RW, or end
/// 9:  cmpq $0,GO(%rbx); jne 10f; decq WAITS(%rbx); jz 8f  # the borrowed
///     lea SLEEP(%rbx),%rdi; xor %esi,%esi; mov $35,%eax; syscall; jmp 9b
/// 10:
///     mov $186,%eax; syscall; mov %rax,TID(%rbx)          # gettid
///     mov PATH(%rbx),%rdi; mov $2,%esi; call *DLOPEN(%rbx)  # RTLD_NOW
///     test %rax,%rax; jz 1f; mov %rax,HANDLE(%rbx)
///     mov %rax,%rdi; mov START_NAME(%rbx),%rsi; call *DLSYM(%rbx)
///     test %rax,%rax; jz 2f; call *%rax; mov %rax,CODE(%rbx)
///     test %eax,%eax; jz 5f
///     movq $3,STATUS(%rbx)
///     mov HANDLE(%rbx),%rdi; mov ERROR_NAME(%rbx),%rsi; call *DLSYM(%rbx)
///     test %rax,%rax; jz 6f; call *%rax; mov %rax,MESSAGE(%rbx); jmp 6f
/// 1:  movq $1,STATUS(%rbx); jmp 3f
/// 2:  movq $2,STATUS(%rbx)
/// 3:  call *DLERROR(%rbx); mov %rax,MESSAGE(%rbx); jmp 6f
/// 5:  movq $0,STATUS(%rbx)
/// 6:  movq $1,DONE(%rbx)
/// 7:  cmpq $0,ACK(%rbx); jne 8f
///     decq WAITS(%rbx); jz 8f
///     lea SLEEP(%rbx),%rdi; xor %esi,%esi; mov $35,%eax; syscall  # nanosleep
///     jmp 7b
/// 8:  mov BASE(%rbx),%rdi; mov LEN(%rbx),%rsi; mov MUNMAP(%rbx),%rax
///     pop %rbx; jmp *%rax
/// ```
const ROUTINE: [u8; 273] = [
    0x53, 0x48, 0x89, 0xfb, 0xff, 0x53, 0x70, 0x48, 0x89, 0xc7, 0xff, 0x53, 0x68, 0x48, 0x89, 0xdf,
    0xbe, 0x00, 0x10, 0x00, 0x00, 0xba, 0x03, 0x00, 0x00, 0x00, 0xff, 0x93, 0xb0, 0x00, 0x00, 0x00,
    0x85, 0xc0, 0x0f, 0x85, 0xd7, 0x00, 0x00, 0x00, 0x48, 0x83, 0xbb, 0xc0, 0x00, 0x00, 0x00, 0x00,
    0x75, 0x1c, 0x48, 0xff, 0x8b, 0xa0, 0x00, 0x00, 0x00, 0x0f, 0x84, 0xc0, 0x00, 0x00, 0x00, 0x48,
    0x8d, 0x7b, 0x30, 0x31, 0xf6, 0xb8, 0x23, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xda, 0xb8, 0xba,
    0x00, 0x00, 0x00, 0x0f, 0x05, 0x48, 0x89, 0x43, 0x20, 0x48, 0x8b, 0xbb, 0x88, 0x00, 0x00, 0x00,
    0xbe, 0x02, 0x00, 0x00, 0x00, 0xff, 0x53, 0x48, 0x48, 0x85, 0xc0, 0x74, 0x49, 0x48, 0x89, 0x83,
    0xa8, 0x00, 0x00, 0x00, 0x48, 0x89, 0xc7, 0x48, 0x8b, 0xb3, 0x90, 0x00, 0x00, 0x00, 0xff, 0x53,
    0x50, 0x48, 0x85, 0xc0, 0x74, 0x3a, 0xff, 0xd0, 0x48, 0x89, 0x43, 0x28, 0x85, 0xc0, 0x74, 0x41,
    0x48, 0xc7, 0x43, 0x10, 0x03, 0x00, 0x00, 0x00, 0x48, 0x8b, 0xbb, 0xa8, 0x00, 0x00, 0x00, 0x48,
    0x8b, 0xb3, 0x98, 0x00, 0x00, 0x00, 0xff, 0x53, 0x50, 0x48, 0x85, 0xc0, 0x74, 0x2b, 0xff, 0xd0,
    0x48, 0x89, 0x43, 0x18, 0xeb, 0x23, 0x48, 0xc7, 0x43, 0x10, 0x01, 0x00, 0x00, 0x00, 0xeb, 0x08,
    0x48, 0xc7, 0x43, 0x10, 0x02, 0x00, 0x00, 0x00, 0xff, 0x53, 0x58, 0x48, 0x89, 0x43, 0x18, 0xeb,
    0x08, 0x48, 0xc7, 0x43, 0x10, 0x00, 0x00, 0x00, 0x00, 0x48, 0xc7, 0x03, 0x01, 0x00, 0x00, 0x00,
    0x48, 0x83, 0x7b, 0x08, 0x00, 0x75, 0x18, 0x48, 0xff, 0x8b, 0xa0, 0x00, 0x00, 0x00, 0x74, 0x0f,
    0x48, 0x8d, 0x7b, 0x30, 0x31, 0xf6, 0xb8, 0x23, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xe1, 0x48,
    0x8b, 0x7b, 0x78, 0x48, 0x8b, 0xb3, 0x80, 0x00, 0x00, 0x00, 0x48, 0x8b, 0x43, 0x60, 0x5b, 0xff,
    0xe0,
];

/// The data block's words, by byte offset (the routine's operands).
struct Block;

impl Block {
    const DONE: u64 = 0x00;
    const ACK: u64 = 0x08;
    const STATUS: u64 = 0x10;
    const MESSAGE: u64 = 0x18;
    const TID: u64 = 0x20;
    const CODE: u64 = 0x28;
    /// A `timespec` of 100 µs.
    const SLEEP: u64 = 0x30;
    /// The functions, in this order: `dlopen`, `dlsym`, `dlerror`,
    /// `munmap`, `pthread_detach`, `pthread_self`.
    const FUNCTIONS: u64 = 0x48;
    const BASE: u64 = 0x78;
    const PATH: u64 = 0x88;
    const WAITS: u64 = 0xa0;
    const MPROTECT: u64 = 0xb0;
    /// Set by the injector once the borrowed thread is let go.
    const GO: u64 = 0xc0;
    const STRINGS: u64 = 0x100;
}

/// How many 100 µs sleeps the routine waits for the injector's `ack`.
const WAITS: u64 = 100_000;

/// The two pages: the routine's, then the data block's.
const PAGE: u64 = 4096;

/// The target's functions the borrowed thread and the routine call.
pub(crate) struct Functions {
    pub mmap: u64,
    pub mprotect: u64,
    pub munmap: u64,
    pub pthread_create: u64,
    pub pthread_self: u64,
    pub pthread_detach: u64,
    pub dlopen: u64,
    pub dlsym: u64,
    pub dlerror: u64,
}

/// A loading thread started in the target, not waited for yet.
pub(crate) struct Started {
    block: u64,
}

/// Makes the borrowed thread start the loading thread. `None` when the
/// target could not (no memory, no thread: its `mmap` or `pthread_create`
/// failed): nothing is left of the attempt, and the caller makes the calls
/// on the borrowed thread itself.
pub(crate) fn start(
    thread: &mut Borrowed,
    mem: &File,
    functions: &Functions,
    path: &str,
    start_name: &str,
) -> Result<Option<Started>, Refused> {
    let len = 2 * PAGE;
    // PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, fd -1.
    let base = thread.call(
        mem,
        functions.mmap,
        &[0, len, 5, 0x22, u64::MAX, 0],
        None,
        0,
    )?;
    if base as i64 >= -4095 && base as i64 <= 0 {
        return Ok(None);
    }
    let block = base + PAGE;
    let mut data = vec![0u8; PAGE as usize];
    let put = |data: &mut [u8], at: u64, value: u64| {
        data[at as usize..at as usize + 8].copy_from_slice(&value.to_le_bytes());
    };
    put(&mut data, Block::SLEEP + 8, 100_000);
    let calls = [
        functions.dlopen,
        functions.dlsym,
        functions.dlerror,
        functions.munmap,
        functions.pthread_detach,
        functions.pthread_self,
    ];
    for (i, function) in calls.into_iter().enumerate() {
        put(&mut data, Block::FUNCTIONS + 8 * i as u64, function);
    }
    put(&mut data, Block::BASE, base);
    put(&mut data, Block::BASE + 8, len);
    put(&mut data, Block::WAITS, WAITS);
    put(&mut data, Block::MPROTECT, functions.mprotect);
    let mut at = Block::STRINGS;
    for (slot, text) in [path, start_name, "fntrace_last_error"]
        .into_iter()
        .enumerate()
    {
        let end = at + text.len() as u64 + 1;
        if end > PAGE {
            unmap(thread, mem, functions, base, len)?;
            return refused(format!("the library's path is too long ({path})"));
        }
        put(&mut data, Block::PATH + 8 * slot as u64, block + at);
        data[at as usize..end as usize - 1].copy_from_slice(text.as_bytes());
        at = end;
    }
    let tid = thread.tid;
    let write = || {
        mem.write_all_at(&ROUTINE, base)
            .and_then(|()| mem.write_all_at(&data, block))
    };
    // Written through /proc/PID/mem as a debugger writes a breakpoint (the
    // kernel copies the private pages): the target never has them writable
    // and executable at once. Where the kernel forbids that
    // (`proc_mem.force_override`), they are made writable, written, and
    // the routine's page made executable: two calls more.
    if write().is_err() {
        if thread.call(mem, functions.mprotect, &[base, len, 3], None, 0)? != 0 {
            unmap(thread, mem, functions, base, len)?;
            return Ok(None);
        }
        if let Err(e) = write() {
            unmap(thread, mem, functions, base, len)?;
            return refused(format!(
                "writing into process memory through thread {tid}: {e}"
            ));
        }
        // PROT_READ | PROT_EXEC.
        if thread.call(mem, functions.mprotect, &[base, PAGE, 5], None, 0)? != 0 {
            unmap(thread, mem, functions, base, len)?;
            return Ok(None);
        }
    }
    // Its `pthread_t` goes to 8 bytes on the borrowed thread's stack (the
    // block is not writable yet): the string's, below the red zone.
    let created = thread.call(
        mem,
        functions.pthread_create,
        &[base, block],
        Some("pthread"),
        0,
    )?;
    if created as u32 != 0 {
        unmap(thread, mem, functions, base, len)?;
        return Ok(None);
    }
    Ok(Some(Started { block }))
}

fn unmap(
    thread: &mut Borrowed,
    mem: &File,
    functions: &Functions,
    base: u64,
    len: u64,
) -> Result<(), Refused> {
    thread.call(mem, functions.munmap, &[base, len], None, 0)?;
    Ok(())
}

fn read_word(mem: &File, addr: u64) -> std::io::Result<u64> {
    let mut word = [0u8; 8];
    mem.read_exact_at(&mut word, addr)?;
    Ok(u64::from_le_bytes(word))
}

/// What the loading thread's calls returned.
pub(crate) enum Outcome {
    /// `fntrace_attach_start` returned 0.
    Attached,
    /// `dlopen` failed, with `dlerror()`.
    NotLoaded(String),
    /// The library has no `fntrace_attach_start`: `dlerror()`.
    NoStart(String),
    /// `fntrace_attach_start` failed: its code and
    /// `fntrace_last_error()`, if that was found.
    Failed(i32, Option<String>),
}

/// Once the borrowed thread is let go: lets the loading thread go on,
/// waits (no thread stopped) for its result, tells it to
/// end, and waits for it to be gone. `pid`: the target.
pub(crate) fn finish(mem: &File, pid: u32, started: Started) -> Result<Outcome, Refused> {
    let block = started.block;
    let go = mem.write_all_at(&1u64.to_le_bytes(), block + Block::GO);
    let gone = |e: std::io::Error| {
        Refused(format!(
            "reading the data of the thread started in process {pid} to load the library: {e} \
             (the process ended, or the thread could not make its data writable)"
        ))
    };
    go.map_err(gone)?;
    let began = Instant::now();
    while read_word(mem, block + Block::DONE).map_err(gone)? == 0 {
        if began.elapsed() > CALL_TIMEOUT {
            let _ = mem.write_all_at(&1u64.to_le_bytes(), block + Block::ACK);
            return refused(format!(
                "the thread started in process {pid} to load the library did not finish \
                 within {CALL_TIMEOUT:?} (it unmaps its code itself when it does)"
            ));
        }
        pause_briefly(began);
    }
    let word = |offset| read_word(mem, block + offset).map_err(gone);
    let status = word(Block::STATUS)?;
    let message = word(Block::MESSAGE)?;
    let tid = word(Block::TID)?;
    let outcome = match status {
        0 => Outcome::Attached,
        1 => Outcome::NotLoaded(read_c_string(mem, message)),
        2 => Outcome::NoStart(read_c_string(mem, message)),
        _ => Outcome::Failed(
            word(Block::CODE)? as u32 as i32,
            (message != 0).then(|| read_c_string(mem, message)),
        ),
    };
    mem.write_all_at(&1u64.to_le_bytes(), block + Block::ACK)
        .map_err(gone)?;
    // Its own pages are unmapped by then too (the last thing it does).
    let task = format!("/proc/{pid}/task/{tid}");
    let began = Instant::now();
    while Path::new(&task).exists() && began.elapsed() < Duration::from_secs(10) {
        pause_briefly(began);
    }
    Ok(outcome)
}

/// A wait of this side's, `since` it began: yields at first (the routine's
/// steps take tens of µs), then sleeps.
fn pause_briefly(since: Instant) {
    if since.elapsed() < Duration::from_micros(200) {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// What the loading thread (this module) calls once the library is loaded:
/// the start that also finds the call sites on the calling thread.
pub(crate) const START_HERE: &str = "fntrace_attach_start_here";

/// The target's functions that load the library on a thread of its own
/// (this module), found in its C library (or `libpthread` before glibc 2.34)
/// and in the object of `dlopen` (its address and path); `None` if one is
/// missing (then the borrowed thread makes the calls itself).
pub(crate) fn spawn_functions(
    pid: u32,
    maps: &[Mapping],
    libc_path: &str,
    (dlopen, dl_object): &(u64, String),
) -> Option<Functions> {
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
    Some(Functions {
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
