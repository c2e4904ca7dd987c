//! Unwinders must see real return addresses. fntrace defines the unwinder
//! entry points that walk the stack, puts the real return addresses of this
//! thread's hooked frames back, and calls the real functions (found with
//! `dlsym(RTLD_NEXT)`, in libgcc_s). A definition in the executable takes
//! precedence for Rust's panic runtime (linked statically) and for C++'s
//! `__cxa_throw` (libstdc++ binds to the executable's exported symbol).
//!
//! - `_Unwind_RaiseException` (panics, C++ `throw`) and
//!   `_Unwind_ForcedUnwind` (thread cancellation, `pthread_exit`): every
//!   hooked frame of the thread is unhooked and forgotten; the frames the
//!   exception passes are unwound, the others return normally. Their exits
//!   are not reported.
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

/// Resolves the real functions ahead of need and makes sure the linker
/// keeps these definitions (a reference from `init` pulls this object in).
pub(crate) fn prepare() -> [usize; 3] {
    RAISE.get();
    FORCED.get();
    BACKTRACE.get();
    [
        _Unwind_RaiseException as *const () as usize,
        _Unwind_ForcedUnwind as *const () as usize,
        _Unwind_Backtrace as *const () as usize,
    ]
}

fn forget_hooked_frames() {
    let _untraced = Untraced::begin();
    if let Some(stack) = ShadowStack::current() {
        stack.unhook_all(true);
    }
}

/// Wraps libgcc's `_Unwind_RaiseException`.
///
/// # Safety
/// As the real function: `exception` is a valid `_Unwind_Exception`.
#[no_mangle]
pub unsafe extern "C-unwind" fn _Unwind_RaiseException(exception: *mut c_void) -> c_int {
    forget_hooked_frames();
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
