//! A recording that survives `exec` and `_exit`. The buffers live in the
//! process's memory, which `exec` and `_exit` throw away without running
//! `atexit` handlers: these wrappers (which a program linked with
//! `libfntrace.a` or preloaded with `libfntrace.so` calls instead of
//! glibc's) first drain the buffers and finish this process's session of
//! the recording, then call glibc's function.
//!
//! Across `exec`, the new program continues the recording when it carries
//! fntrace too (preloaded by `LD_PRELOAD`, as `fntrace record` sets it up):
//! the environment that started the recording (`FNTRACE_OUTPUT`,
//! `FNTRACE_APPEND=1`, `LD_PRELOAD` ...) is added to an `execve` whose
//! `envp` lacks it, as uftrace does. If the `exec` fails, the recording
//! goes on in a new session.
//!
//! Wrapped: `execve`, `execv`, `execvp`, `execvpe`, `fexecve`, `execl`,
//! `execlp`, `execle`, `_exit`, `_Exit`. glibc implements the variadic
//! `execl*` with its internal `execve`, which no wrapper sees, so fntrace
//! defines them: C in `shim/exec_list.c` gathers the list into an array
//! and calls the `execv`, `execvp` or `execve` here. Not wrapped:
//! `posix_spawn` (it does not replace this process).
//!
//! In the child of a `vfork`, which shares the parent's memory, nothing is
//! drained: the recording belongs to the parent.

use std::ffi::{c_char, c_int, CStr, CString};

use super::next::NextSymbols;
use crate::record;

/// Variables passed on to an exec'd program whose `envp` lacks them:
/// `LD_PRELOAD` and the table's variables marked `passed_on`.
fn passed_on() -> impl Iterator<Item = &'static str> {
    std::iter::once("LD_PRELOAD").chain(
        crate::vars::VARIABLES
            .iter()
            .filter(|v| v.passed_on)
            .map(|v| v.name),
    )
}

type ExecvFn = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;

/// glibc's definitions of the functions wrapped here, looked up before
/// `main` by [`find_real_functions`].
static REAL: NextSymbols<5> =
    NextSymbols::new([c"execve", c"execvpe", c"fexecve", c"execv", c"execvp"]);

#[used]
#[unsafe(link_section = ".init_array")]
static FIND_REAL_FUNCTIONS: extern "C" fn() = find_real_functions;

extern "C" fn find_real_functions() {
    REAL.find_all();
}

/// Runs `exec` (which returns only on failure) after finishing this
/// process's part of the recording; resumes recording if it fails.
fn around_exec(exec: impl FnOnce() -> c_int) -> c_int {
    let finished = record::finish_before_exec();
    let result = exec();
    if finished {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        record::resume_after_failed_exec();
        // SAFETY: writing this thread's errno.
        unsafe { *libc::__errno_location() = errno };
    }
    result
}

/// `envp` with the variables of [`passed_on`] it lacks, from this process's
/// environment; `None` when nothing is missing (or no recording runs).
///
/// # Safety
/// `envp` is null or a null-terminated array of C strings.
unsafe fn with_recording_environment(envp: *const *const c_char) -> Option<Vec<CString>> {
    if envp.is_null() || !record::writing_in_this_process() {
        return None;
    }
    let mut entries: Vec<CString> = Vec::new();
    let mut at = envp;
    // SAFETY: the caller's array is null-terminated; each entry is a C string.
    unsafe {
        while !(*at).is_null() {
            entries.push(CStr::from_ptr(*at).to_owned());
            at = at.add(1);
        }
    }
    let has = |name: &str| {
        entries.iter().any(|entry| {
            let bytes = entry.as_bytes();
            bytes.len() > name.len()
                && bytes.starts_with(name.as_bytes())
                && bytes[name.len()] == b'='
        })
    };
    let missing: Vec<CString> = passed_on()
        .filter(|name| !has(name))
        .filter_map(|name| {
            let value = std::env::var_os(name)?;
            let mut entry = format!("{name}=").into_bytes();
            entry.extend_from_slice(std::os::unix::ffi::OsStrExt::as_bytes(value.as_os_str()));
            CString::new(entry).ok()
        })
        .collect();
    if missing.is_empty() {
        return None;
    }
    entries.extend(missing);
    Some(entries)
}

/// Calls `f` with `envp`, or with the array built from `merged`.
fn with_envp<R>(
    envp: *const *const c_char,
    merged: Option<Vec<CString>>,
    f: impl FnOnce(*const *const c_char) -> R,
) -> R {
    match merged {
        None => f(envp),
        Some(entries) => {
            let mut pointers: Vec<*const c_char> = entries.iter().map(|e| e.as_ptr()).collect();
            pointers.push(std::ptr::null());
            f(pointers.as_ptr())
        }
    }
}

/// Fails as a missing glibc function would.
fn unavailable() -> c_int {
    // SAFETY: writing this thread's errno.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

/// `execve`, after finishing this process's session of the recording.
///
/// # Safety
/// As glibc's `execve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: glibc's `execve` takes (path, argv, envp), valid as the
    // caller of this `execve` must pass them.
    unsafe { exec_with_envp(c"execve", path, argv, envp) }
}

/// `execvpe`, after finishing this process's session of the recording.
///
/// # Safety
/// As glibc's `execvpe`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: glibc's `execvpe` takes (file, argv, envp), valid as the
    // caller of this `execvpe` must pass them.
    unsafe { exec_with_envp(c"execvpe", file, argv, envp) }
}

/// `fexecve`, after finishing this process's session of the recording.
///
/// # Safety
/// As glibc's `fexecve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: glibc's `fexecve` takes (fd, argv, envp), valid as the
    // caller of this `fexecve` must pass them.
    unsafe { exec_with_envp(c"fexecve", fd, argv, envp) }
}

/// The wrappers that take an environment (`execve`, `execvpe`,
/// `fexecve`): glibc's function `name` called with `envp` completed by
/// [`with_recording_environment`], after finishing this process's
/// session of the recording.
///
/// # Safety
/// glibc's `name` is `unsafe extern "C" fn(A, argv, envp) -> c_int`, and
/// `first`, `argv` and `envp` are valid arguments for it.
unsafe fn exec_with_envp<A: Copy>(
    name: &CStr,
    first: A,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    type Real<A> = unsafe extern "C" fn(A, *const *const c_char, *const *const c_char) -> c_int;
    let real = REAL.get(name);
    if real.is_null() {
        return unavailable();
    }
    // SAFETY: a non-null address of glibc's `name`, which has this type
    // (the caller's contract).
    let real = unsafe { std::mem::transmute::<*mut libc::c_void, Real<A>>(real) };
    // SAFETY: `envp` is valid, as `name` requires (the caller's contract).
    let merged = unsafe { with_recording_environment(envp) };
    around_exec(|| {
        // SAFETY: the caller's arguments, as `name` requires them.
        with_envp(envp, merged, |envp| unsafe { real(first, argv, envp) })
    })
}

/// `execv` (this process's environment goes to the new program).
///
/// # Safety
/// As glibc's `execv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    exec_with_environ(c"execv", path, argv)
}

/// `execvp` (this process's environment goes to the new program).
///
/// # Safety
/// As glibc's `execvp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    exec_with_environ(c"execvp", file, argv)
}

fn exec_with_environ(name: &CStr, path: *const c_char, argv: *const *const c_char) -> c_int {
    let real = REAL.get(name);
    if real.is_null() {
        return unavailable();
    }
    // SAFETY: glibc's `execv` and `execvp` have this type.
    let real: ExecvFn = unsafe { std::mem::transmute::<*mut libc::c_void, ExecvFn>(real) };
    // SAFETY: the caller's arguments, as `execv`/`execvp` require them.
    around_exec(|| unsafe { real(path, argv) })
}

/// `execl`: the list gathered into an array for [`execv`] (by
/// `fntrace_execl_list`, `shim/exec_list.c`).
///
/// A jump, so that the C function receives the variadic call's registers
/// (`%al` included) as the caller set them; Rust cannot define a variadic
/// function, and rustc exports from `libfntrace.so` only what Rust defines.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn execl() {
    core::arch::naked_asm!("jmp fntrace_execl_list")
}

/// `execlp`: the list gathered into an array for [`execvp`] (by
/// `fntrace_execlp_list`, `shim/exec_list.c`), jumped to as [`execl`].
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn execlp() {
    core::arch::naked_asm!("jmp fntrace_execlp_list")
}

/// `execle`: the list and the environment after it gathered for
/// [`execve`] (by `fntrace_execle_list`, `shim/exec_list.c`), jumped to as
/// [`execl`].
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn execle() {
    core::arch::naked_asm!("jmp fntrace_execle_list")
}

/// `_exit`, after finishing this process's part of the recording.
#[unsafe(no_mangle)]
pub extern "C" fn _exit(status: c_int) -> ! {
    exit_now(status)
}

/// `_Exit`, as `_exit`.
#[unsafe(no_mangle)]
pub extern "C" fn _Exit(status: c_int) -> ! {
    exit_now(status)
}

fn exit_now(status: c_int) -> ! {
    record::finish_before_exit();
    // SAFETY: exit_group ends the process; it does not return.
    unsafe {
        libc::syscall(libc::SYS_exit_group, status);
    }
    unreachable!("exit_group returned")
}
