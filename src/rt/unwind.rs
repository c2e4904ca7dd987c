//! Unwinders must see real return addresses. fntrace defines the unwinder
//! entry points that walk the stack, puts the real return addresses of this
//! thread's hooked frames back, and calls the real functions (found with
//! `dlsym(RTLD_NEXT)`, in libgcc_s). A definition in the executable takes
//! precedence for Rust's panic runtime (linked statically) and for C++'s
//! `__cxa_throw` (libstdc++ binds to the executable's exported symbol).
//!
//! - `_Unwind_RaiseException` (panics, C++ `throw`), `_Unwind_Resume`
//!   (continuing after a cleanup) and `_Unwind_Resume_or_Rethrow` (C++
//!   `throw;`): every frame of the thread is unhooked for the walk and stays
//!   on the shadow stack, marked.
//! - `_Unwind_SetIP` (a personality routine choosing the landing pad the
//!   unwinder jumps to: a cleanup, or the `catch`/`catch_unwind` handler):
//!   the frames below the landing pad's frame are gone and reported as
//!   vanished; the marked ones from there up are hooked again, so their
//!   exits are seen.
//! - `_Unwind_ForcedUnwind` (thread cancellation, `pthread_exit`): the
//!   thread ends; its frames are unhooked and forgotten.
//! - `_Unwind_Backtrace` (`std::backtrace`, the panic message's backtrace):
//!   unhooked for the walk, hooked again afterwards.
//!
//! glibc calls the unwinder through pointers it looks up in libgcc_s
//! itself, past these definitions: `pthread_exit`, thread cancellation and
//! `backtrace` walk the stack without passing here. So:
//! - `pthread_exit` and `backtrace` are wrapped too (as uftrace does): the
//!   first forgets the thread's frames (they never return: their exits are
//!   not reported, as uftrace shows them), the second unhooks them for the
//!   walk.
//! - `_Unwind_Find_FDE`, which libgcc's unwinder calls (through its PLT)
//!   for every frame of every walk, unhooks the thread's frames as for an
//!   exception when a walk finds them hooked (a cancellation): the walk
//!   reads real return addresses. The first call of a walk is for the
//!   unwinder's own frame, before any return address is read.
//! - An unwinder that finds the trampoline anyway stops there, as at the
//!   end of the stack (asm/x86_64/return.S), instead of reading garbage.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sys::clock;

use super::shadow;
use super::thread::Untraced;

struct RealFunction {
    name: &'static CStr,
    address: AtomicUsize,
}

impl RealFunction {
    const fn new(name: &'static CStr) -> Self {
        RealFunction {
            name,
            address: AtomicUsize::new(0),
        }
    }

    fn get(&self) -> usize {
        let cached = self.address.load(Ordering::Relaxed);
        if cached != 0 {
            return cached;
        }
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
        let found = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
        if found == 0 {
            let msg = b"fntrace: the real unwinder function is missing\n";
            // SAFETY: write(2) of a static buffer; abort has no preconditions.
            unsafe {
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::abort();
            }
        }
        self.address.store(found, Ordering::Relaxed);
        found
    }
}

static RAISE: RealFunction = RealFunction::new(c"_Unwind_RaiseException");
static FORCED: RealFunction = RealFunction::new(c"_Unwind_ForcedUnwind");
static BACKTRACE: RealFunction = RealFunction::new(c"_Unwind_Backtrace");
static RESUME: RealFunction = RealFunction::new(c"_Unwind_Resume");
static RESUME_OR_RETHROW: RealFunction = RealFunction::new(c"_Unwind_Resume_or_Rethrow");
static SET_IP: RealFunction = RealFunction::new(c"_Unwind_SetIP");
static FIND_FDE: RealFunction = RealFunction::new(c"_Unwind_Find_FDE");
static PTHREAD_EXIT: RealFunction = RealFunction::new(c"pthread_exit");
static GLIBC_BACKTRACE: RealFunction = RealFunction::new(c"backtrace");

/// Resolves the real functions ahead of need and makes sure the linker
/// keeps these definitions (a reference from `init` pulls this object in).
pub(crate) fn prepare() -> [usize; 9] {
    for real in [
        &RAISE,
        &FORCED,
        &BACKTRACE,
        &RESUME,
        &RESUME_OR_RETHROW,
        &SET_IP,
        &FIND_FDE,
        &PTHREAD_EXIT,
        &GLIBC_BACKTRACE,
    ] {
        real.get();
    }
    [
        _Unwind_SetIP as *const () as usize,
        _Unwind_RaiseException as *const () as usize,
        _Unwind_ForcedUnwind as *const () as usize,
        _Unwind_Backtrace as *const () as usize,
        _Unwind_Resume as *const () as usize,
        _Unwind_Resume_or_Rethrow as *const () as usize,
        _Unwind_Find_FDE as *const () as usize,
        pthread_exit as *const () as usize,
        backtrace as *const () as usize,
    ]
}

fn forget_hooked_frames() {
    let _untraced = Untraced::begin();
    shadow::with_stack(|stack| stack.unhook_all(true));
}

fn unhook_for_unwinding() {
    let _untraced = Untraced::begin();
    shadow::with_stack(|stack| stack.unhook_for_unwinding());
}

/// Wraps libgcc's `_Unwind_RaiseException`.
///
/// # Safety
/// As the real function: `exception` is a valid `_Unwind_Exception`.
#[no_mangle]
pub unsafe extern "C-unwind" fn _Unwind_RaiseException(exception: *mut c_void) -> c_int {
    unhook_for_unwinding();
    // SAFETY: the address is libgcc's function of this exact signature.
    let real: unsafe extern "C-unwind" fn(*mut c_void) -> c_int =
        unsafe { std::mem::transmute(RAISE.get()) };
    // SAFETY: forwarded from this function's contract.
    unsafe { real(exception) }
}

/// Wraps libgcc's `_Unwind_ForcedUnwind`.
///
/// # Safety
/// As the real function.
#[no_mangle]
pub unsafe extern "C-unwind" fn _Unwind_ForcedUnwind(
    exception: *mut c_void,
    stop: *mut c_void,
    stop_argument: *mut c_void,
) -> c_int {
    forget_hooked_frames();
    // SAFETY: the address is libgcc's function of this exact signature.
    let real: unsafe extern "C-unwind" fn(*mut c_void, *mut c_void, *mut c_void) -> c_int =
        unsafe { std::mem::transmute(FORCED.get()) };
    // SAFETY: forwarded from this function's contract.
    unsafe { real(exception, stop, stop_argument) }
}

/// Wraps libgcc's `_Unwind_Backtrace`.
///
/// # Safety
/// As the real function.
#[no_mangle]
pub unsafe extern "C-unwind" fn _Unwind_Backtrace(
    trace: *mut c_void,
    argument: *mut c_void,
) -> c_int {
    let untraced = Untraced::begin();
    let unhooked = shadow::with_stack(|stack| stack.unhook_all(false)).is_some();
    drop(untraced);
    // SAFETY: the address is libgcc's function of this exact signature.
    let real: unsafe extern "C-unwind" fn(*mut c_void, *mut c_void) -> c_int =
        unsafe { std::mem::transmute(BACKTRACE.get()) };
    // SAFETY: forwarded from this function's contract.
    let result = unsafe { real(trace, argument) };
    if unhooked {
        let _untraced = Untraced::begin();
        shadow::with_stack(|stack| stack.rehook_all());
    }
    result
}

/// Wraps libgcc's `_Unwind_Resume` (called at the end of a cleanup to go on
/// unwinding: a `catch` inside the cleanup may have hooked frames again).
///
/// # Safety
/// As the real function.
#[no_mangle]
pub unsafe extern "C-unwind" fn _Unwind_Resume(exception: *mut c_void) {
    unhook_for_unwinding();
    // SAFETY: the address is libgcc's function of this exact signature.
    let real: unsafe extern "C-unwind" fn(*mut c_void) =
        unsafe { std::mem::transmute(RESUME.get()) };
    // SAFETY: forwarded from this function's contract.
    unsafe { real(exception) }
}

/// Wraps libgcc's `_Unwind_Resume_or_Rethrow` (C++ `throw;` from a catch
/// block, whose frames [`_Unwind_SetIP`] hooked again).
///
/// # Safety
/// As the real function.
#[no_mangle]
pub unsafe extern "C-unwind" fn _Unwind_Resume_or_Rethrow(exception: *mut c_void) -> c_int {
    unhook_for_unwinding();
    // SAFETY: the address is libgcc's function of this exact signature.
    let real: unsafe extern "C-unwind" fn(*mut c_void) -> c_int =
        unsafe { std::mem::transmute(RESUME_OR_RETHROW.get()) };
    // SAFETY: forwarded from this function's contract.
    unsafe { real(exception) }
}

/// Wraps libgcc's `_Unwind_SetIP`, which a personality routine (Rust's,
/// C++'s) calls right before the unwinder transfers control to a landing
/// pad (a cleanup, or the handler that catches) in the frame of `context`.
/// The frames below that frame are gone: their exits are reported now;
/// the unhooked frames from there up live on and are hooked again (a
/// cleanup goes on unwinding through `_Unwind_Resume`, which unhooks them
/// first).
///
/// # Safety
/// As the real function: `context` is the unwinder's current context.
#[no_mangle]
pub unsafe extern "C" fn _Unwind_SetIP(context: *mut c_void, ip: usize) {
    {
        let _untraced = Untraced::begin();
        // While a personality routine runs, the context's "CFA" is the
        // landing frame's stack pointer (the CFA of the frame it called,
        // which was unwound): every frame whose return address lies below
        // it is gone, the landing frame's callee included.
        // SAFETY: a valid context, from the caller's contract.
        let landing_sp = unsafe { _Unwind_GetCFA(context) };
        let now = clock::now_ticks();
        // One frame at a time: reporting an exit runs tracer code, which
        // must not find the stack in use.
        while let Some(Some(gone)) = shadow::with_stack(|stack| stack.pop_unwound(landing_sp)) {
            super::entry::report_gone(&gone, now);
        }
        shadow::with_stack(|stack| stack.rehook_after_landing());
    }
    // SAFETY: the address is libgcc's function of this exact signature.
    let real: unsafe extern "C" fn(*mut c_void, usize) =
        unsafe { std::mem::transmute(SET_IP.get()) };
    // SAFETY: forwarded from this function's contract.
    unsafe { real(context, ip) }
}

/// Wraps libgcc's `_Unwind_Find_FDE` (the unwind description of the code
/// at `pc`), which libgcc's unwinder calls for each frame it walks: a walk
/// that finds this thread's frames hooked (one that did not come through
/// the wrappers above: a thread cancellation) unhooks them first, as for
/// an exception.
///
/// # Safety
/// As the real function: `bases` is valid for writes.
#[no_mangle]
pub unsafe extern "C" fn _Unwind_Find_FDE(pc: *mut c_void, bases: *mut c_void) -> *const c_void {
    {
        let _untraced = Untraced::begin();
        shadow::with_stack(|stack| {
            if stack.any_frame_hooked() {
                stack.unhook_for_unwinding();
            }
        });
    }
    // SAFETY: the address is libgcc's function of this exact signature.
    let real: unsafe extern "C" fn(*mut c_void, *mut c_void) -> *const c_void =
        unsafe { std::mem::transmute(FIND_FDE.get()) };
    // SAFETY: forwarded from this function's contract.
    unsafe { real(pc, bases) }
}

/// Wraps glibc's `pthread_exit`: the thread's hooked frames never return,
/// so they are forgotten (no exit reported, as uftrace shows them) and get
/// their real return addresses back for the unwinder, which glibc calls
/// past the wrappers above.
///
/// # Safety
/// As the real function.
#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_exit(value: *mut c_void) -> ! {
    forget_hooked_frames();
    // SAFETY: the address is glibc's function of this exact signature.
    let real: unsafe extern "C-unwind" fn(*mut c_void) -> ! =
        unsafe { std::mem::transmute(PTHREAD_EXIT.get()) };
    // SAFETY: forwarded from this function's contract.
    unsafe { real(value) }
}

/// Wraps glibc's `backtrace`, which calls the unwinder past the wrappers
/// above: the walk sees real return addresses, and the frames are hooked
/// again afterwards.
///
/// # Safety
/// As the real function: `buffer` holds `size` pointers.
#[no_mangle]
pub unsafe extern "C" fn backtrace(buffer: *mut *mut c_void, size: c_int) -> c_int {
    let untraced = Untraced::begin();
    let unhooked = shadow::with_stack(|stack| stack.unhook_all(false)).is_some();
    drop(untraced);
    // SAFETY: the address is glibc's function of this exact signature.
    let real: unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int =
        unsafe { std::mem::transmute(GLIBC_BACKTRACE.get()) };
    // SAFETY: forwarded from this function's contract.
    let depth = unsafe { real(buffer, size) };
    if unhooked {
        let _untraced = Untraced::begin();
        shadow::with_stack(|stack| stack.rehook_all());
    }
    depth
}

extern "C" {
    /// libgcc: the context's canonical frame address; while a personality
    /// routine runs for a frame, the CFA of the frame it called (the stack
    /// pointer it lands with).
    fn _Unwind_GetCFA(context: *mut c_void) -> usize;
}
