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
//! - `__cxa_begin_catch` (entered by every C++ `catch`, defined weak in
//!   `asm/x86_64/entry.S`, which passes the catching frame's stack
//!   pointer): the frames below the catch are reported as vanished, the
//!   marked ones above it are hooked again, so their exits are seen. A Rust
//!   panic caught by `catch_unwind` has no such signal: its marked frames
//!   stay unhooked (exits not seen) and are dropped as later calls find
//!   them dead.
//! - `_Unwind_ForcedUnwind` (thread cancellation, `pthread_exit`): the
//!   thread ends; its frames are unhooked and forgotten.
//! - `_Unwind_Backtrace` (`std::backtrace`, the panic message's backtrace):
//!   unhooked for the walk, hooked again afterwards.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::shadow::ShadowStack;
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
/// libstdc++'s; looked up at the first `catch` (only C++ code calls it).
static BEGIN_CATCH: RealFunction = RealFunction::new(c"__cxa_begin_catch");

/// Resolves the real functions ahead of need and makes sure the linker
/// keeps these definitions (a reference from `init` pulls this object in).
pub(crate) fn prepare() -> [usize; 5] {
    RAISE.get();
    FORCED.get();
    BACKTRACE.get();
    RESUME.get();
    RESUME_OR_RETHROW.get();
    [
        _Unwind_RaiseException as *const () as usize,
        _Unwind_ForcedUnwind as *const () as usize,
        _Unwind_Backtrace as *const () as usize,
        _Unwind_Resume as *const () as usize,
        _Unwind_Resume_or_Rethrow as *const () as usize,
    ]
}

fn forget_hooked_frames() {
    let _untraced = Untraced::begin();
    if let Some(stack) = ShadowStack::current() {
        stack.unhook_all(true);
    }
}

fn unhook_for_unwinding() {
    let _untraced = Untraced::begin();
    if let Some(stack) = ShadowStack::current() {
        stack.unhook_for_unwinding();
    }
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
    let stack = ShadowStack::current();
    let frames = stack.map(|stack| {
        stack.unhook_all(false);
        stack as *mut ShadowStack
    });
    drop(untraced);
    // SAFETY: the address is libgcc's function of this exact signature.
    let real: unsafe extern "C-unwind" fn(*mut c_void, *mut c_void) -> c_int =
        unsafe { std::mem::transmute(BACKTRACE.get()) };
    // SAFETY: forwarded from this function's contract.
    let result = unsafe { real(trace, argument) };
    if let Some(stack) = frames {
        let _untraced = Untraced::begin();
        // SAFETY: this thread's own shadow stack, still mapped (the thread
        // is running).
        unsafe { (*stack).rehook_all() };
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
/// block, whose frames [`fntrace_begin_catch`] hooked again).
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

/// Reached from `__cxa_begin_catch` (asm/x86_64/entry.S) with the catching
/// frame's stack pointer: the exception is caught, the frames below are
/// gone, the ones above live on. Then the real `__cxa_begin_catch`.
///
/// # Safety
/// Called only by the asm shim, with the arguments of `__cxa_begin_catch`.
#[no_mangle]
pub unsafe extern "C" fn fntrace_begin_catch(
    exception: *mut c_void,
    catcher_sp: usize,
) -> *mut c_void {
    {
        let _untraced = Untraced::begin();
        if let Some(stack) = ShadowStack::current() {
            let now = super::clock::now_ticks();
            stack.resync_after_catch(catcher_sp, |dead, depth| {
                super::entry::report_vanished(dead, depth, now)
            });
        }
    }
    // SAFETY: the address is libstdc++'s function of this exact signature.
    let real: unsafe extern "C" fn(*mut c_void) -> *mut c_void =
        unsafe { std::mem::transmute(BEGIN_CATCH.get()) };
    // SAFETY: forwarded from the caller's arguments.
    unsafe { real(exception) }
}
