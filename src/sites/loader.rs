//! Keeping objects mapped while fntrace reads or writes their text: control
//! operations scan and patch inside a `dl_iterate_phdr` callback.
//!
//! A program may `dlclose` a library (and `dlopen` another at the same
//! address) at any moment, on any thread. fntrace's symbol index is a
//! snapshot: an object listed there may be gone by the time its text is
//! scanned or written, and reading it then faulted (`SIGSEGV` while the
//! loader mapped another object there, `SIGBUS`), writing it failed
//! ("address is not mapped", or other bytes than expected).
//!
//! glibc's loader changes its list of objects only under its
//! `dl_load_write_lock`, and unmaps a closed object's segments under the
//! same lock hold that takes it off the list (`_dl_close_worker`: the lock
//! is taken before `DL_UNMAP` and released after the list is updated); a
//! new object is added to the list (`_dl_add_to_namespace_list`, same
//! lock) only after its segments are mapped. `dl_iterate_phdr` holds that
//! lock while its callback runs. So [`hold`] runs an operation inside the
//! callback: every object listed then stays mapped, whole, until the
//! operation returns, whoever calls `dlclose` and however (through the
//! PLT, from a library bound to glibc directly, from glibc itself).
//!
//! Chosen over wrapping `dlclose` (taking the operation lock around the
//! real one): a wrapper only sees the calls that bind to it (not those of
//! libraries that bound to glibc's `dlclose` when fntrace is linked
//! statically, nor glibc's own), and holding the operation lock across a
//! library's destructors deadlocks when one calls fntrace. Pinning each
//! object with `dlopen(RTLD_NOLOAD)` takes the loader's other lock
//! (`dl_load_lock`), which `dlopen` holds while it runs constructors that
//! may wait for a control operation; `dl_load_write_lock` is held only
//! for list updates, never across user code.
//!
//! What the callback must not do: wait for anything a thread waiting for
//! the loader's lock may hold. Threads wait for it inside `dlopen`,
//! `dlclose` or `dl_iterate_phdr` (the unwinder, `symbols::current`, which
//! holds its cache lock meanwhile): so the symbol index is built before
//! [`hold`], never inside. The lock is recursive: the callback's own
//! thread may call `dl_iterate_phdr` again (to list the objects, to unwind).
//!
//! The loader's unload counter (`dlpi_subs`; the symbol index's
//! generation adds `dlpi_adds`, for objects loaded) tells whether objects
//! were unloaded since the last check: then [`drop_gone`]
//! marks unloaded every site outside the text of the objects listed now,
//! or whose text no longer holds what fntrace wrote (another object was
//! mapped there), before anything is written.

use std::ffi::CStr;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{flag, Site, SITES};
use crate::symbols::LoadedObject;

/// The objects the loader lists while [`hold`] runs its operation.
pub(crate) struct Loaded {
    /// How many objects were ever unloaded (`dlpi_subs`).
    pub subs: u64,
    /// Each object's name (empty for the executable) and its executable
    /// `PT_LOAD` segments.
    objects: Vec<(Vec<u8>, Vec<Range<usize>>)>,
    /// Every executable segment, sorted by start.
    text: Vec<Range<usize>>,
}

impl Loaded {
    /// Whether `[addr, addr + len)` lies in the text of a listed object.
    pub(crate) fn holds_text(&self, addr: usize, len: usize) -> bool {
        let index = self.text.partition_point(|range| range.start <= addr);
        index.checked_sub(1).is_some_and(|index| {
            let range = &self.text[index];
            addr.checked_add(len).is_some_and(|end| end <= range.end)
        })
    }

    /// Whether `object` (from a symbol index built earlier) is still
    /// loaded where the index says: an object of its name with the same
    /// executable segments is listed.
    pub(crate) fn lists(&self, object: &LoadedObject) -> bool {
        self.objects.iter().any(|(name, text)| {
            *text == object.text && (name.is_empty() || name.as_slice() == object.path.as_bytes())
        })
    }
}

/// What the callback gets through `dl_iterate_phdr`'s data pointer.
struct PhdrCall<F, R> {
    operation: Option<F>,
    result: Option<std::thread::Result<R>>,
}

/// Runs `operation` while the loader cannot map or unmap any object: with
/// glibc's `dl_load_write_lock` held (inside a `dl_iterate_phdr`
/// callback), with the list of objects as it is meanwhile. A panic in
/// `operation` is carried out of the callback and resumed here.
pub(crate) fn hold<F: FnOnce(&Loaded) -> R, R>(operation: F) -> R {
    prepare_thread();
    let mut call = PhdrCall {
        operation: Some(operation),
        result: None,
    };
    // Its callback may list the objects again (a reentrant take), and a
    // thread that lists them meanwhile waits here rather than for the
    // loader's lock with `LISTING` held.
    let _listing = crate::symbols::loader_listing();
    // SAFETY: the callback matches dl_iterate_phdr's contract; `data` is
    // `call`, which outlives the call, and the callback is its only user.
    unsafe {
        libc::dl_iterate_phdr(
            Some(run_once::<F, R>),
            &mut call as *mut PhdrCall<F, R> as *mut libc::c_void,
        );
    }
    match call.result {
        Some(Ok(result)) => result,
        Some(Err(panic)) => resume_unwind(panic),
        // No object listed at all (cannot happen: the executable always
        // is): nothing can be unloaded either.
        None => {
            let operation = call.operation.take().expect("not run");
            operation(&Loaded {
                subs: 0,
                objects: Vec::new(),
                text: Vec::new(),
            })
        }
    }
}

/// Sets up, outside the loader's lock, what the calling thread would
/// otherwise set up inside the callback on first use: parking_lot's
/// per-thread wait state, made the first time a thread waits for a
/// parking_lot lock. Making it registers its destructor
/// (`__cxa_thread_atexit_impl`), which takes the loader's `dl_load_lock`;
/// a thread inside `dlopen` holds that lock while it waits for the
/// `dl_load_write_lock` the callback holds. A control operation on a
/// thread that had never waited for such a lock, meeting one taken
/// inside the callback, deadlocked with a concurrent `dlopen` (found by
/// the chaos benchmark: the service hung, its control thread in
/// `__cxa_thread_atexit_impl` under `dl_iterate_phdr`).
fn prepare_thread() {
    thread_local! {
        static PREPARED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if PREPARED.get() {
        return;
    }
    let key = &PREPARED as *const _ as usize;
    // SAFETY: `validate` refuses, so `park` returns at once (Invalid)
    // after making this thread's wait state; no callback touches
    // anything, and no thread is unparked with the key.
    unsafe {
        parking_lot_core::park(
            key,
            || false,
            || {},
            |_, _| {},
            parking_lot_core::DEFAULT_PARK_TOKEN,
            None,
        );
    }
    PREPARED.set(true);
}

/// The callback of [`hold`]: at the first object, lists them all (the
/// lock is recursive) and runs the operation; returns 1 to stop.
unsafe extern "C" fn run_once<F: FnOnce(&Loaded) -> R, R>(
    info: *mut libc::dl_phdr_info,
    size: usize,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `data` is the `PhdrCall` `hold` passed; glibc passes a valid info
    // of `size` bytes for the duration of the call.
    let (call, info) = unsafe { (&mut *(data as *mut PhdrCall<F, R>), &*info) };
    let Some(operation) = call.operation.take() else {
        return 1;
    };
    let counted = size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8;
    let subs = if counted { info.dlpi_subs } else { 0 };
    call.result = Some(catch_unwind(AssertUnwindSafe(|| {
        let mut loaded = Loaded {
            subs,
            objects: Vec::new(),
            text: Vec::new(),
        };
        // SAFETY: as in `hold`; `list_object` only reads the info and
        // pushes into `loaded`.
        unsafe {
            libc::dl_iterate_phdr(
                Some(list_object),
                &mut loaded as *mut Loaded as *mut libc::c_void,
            );
        }
        loaded.text.sort_unstable_by_key(|range| range.start);
        operation(&loaded)
    })));
    1
}

/// Adds one object's name and executable segments to the `Loaded` at
/// `data`.
unsafe extern "C" fn list_object(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut libc::c_void,
) -> libc::c_int {
    // A panic must not unwind into glibc: allocation failure aborts, and
    // nothing else here panics.
    // SAFETY: glibc passes a valid info whose dlpi_phdr points at
    // dlpi_phnum program headers, valid during the call; data is the
    // Loaded that run_once passed.
    unsafe {
        let loaded = &mut *(data as *mut Loaded);
        let info = &*info;
        let name = if info.dlpi_name.is_null() {
            Vec::new()
        } else {
            CStr::from_ptr(info.dlpi_name).to_bytes().to_vec()
        };
        let bias = info.dlpi_addr as usize;
        let mut text = Vec::new();
        for i in 0..info.dlpi_phnum as usize {
            let ph = &*info.dlpi_phdr.add(i);
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
                let start = bias.wrapping_add(ph.p_vaddr as usize);
                text.push(start..start.wrapping_add(ph.p_memsz as usize));
            }
        }
        loaded.text.extend(text.iter().cloned());
        loaded.objects.push((name, text));
    }
    0
}

/// The loader's unload count when [`drop_gone`] last checked the sites.
/// Read and written only by control operations (under their lock).
static CHECKED_SUBS: AtomicU64 = AtomicU64::new(0);

/// Inside [`hold`]: when objects were unloaded since the last check, marks
/// unloaded every site that no longer lies in the text of a listed object,
/// or whose text no longer is what `expected` says (another object was
/// mapped at its address). Their text is never written again; a site
/// found later at the same address is described anew. Returns how many.
/// Caller holds the control lock.
pub(crate) fn drop_gone(loaded: &Loaded, expected: impl Fn(&Site, &[u8]) -> bool) -> usize {
    if CHECKED_SUBS.load(Ordering::Relaxed) == loaded.subs {
        return 0;
    }
    let mut unloaded = 0;
    for site in SITES.iter() {
        let Some(form) = site.form() else {
            continue;
        };
        let addr = site.addr.load(Ordering::Relaxed);
        let len = form.instruction_len();
        if site.has_flag(flag::ENTRY_STUB) {
            // A run-time entry patch's stub lies on a page fntrace mapped
            // and never unmaps; the site lives as long as its function's
            // object (whose entry jumps to the stub).
            let function = site.function.load(Ordering::Relaxed);
            if !loaded.holds_text(function, 1) {
                site.unload();
                SITES.note_change();
                unloaded += 1;
            }
            continue;
        }
        let same = loaded.holds_text(addr, len) && {
            // SAFETY: the bytes lie in an executable PT_LOAD segment of an
            // object the loader lists, which stays mapped (readable) while
            // its lock is held (we are inside `hold`).
            let text = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            expected(site, text)
        };
        if !same {
            site.unload();
            SITES.note_change();
            unloaded += 1;
        }
    }
    CHECKED_SUBS.store(loaded.subs, Ordering::Relaxed);
    unloaded
}

#[cfg(test)]
mod tests {
    use super::hold;
    use std::ffi::CString;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A library of glibc's that this process has not loaded: its `dlopen`
    /// adds an object, so it takes `dl_load_write_lock` under
    /// `dl_load_lock`.
    fn library_not_loaded() -> CString {
        [
            "libresolv.so.2",
            "libanl.so.1",
            "libBrokenLocale.so.1",
            "libutil.so.1",
        ]
        .into_iter()
        .map(|name| CString::new(name).unwrap())
        .find(|name| {
            // SAFETY: a valid C string; RTLD_NOLOAD loads nothing.
            let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
            if !handle.is_null() {
                // SAFETY: the handle just returned (one reference).
                unsafe { libc::dlclose(handle) };
            }
            handle.is_null()
        })
        .expect("a glibc library not loaded yet")
    }

    /// The chaos benchmark's hang: a thread that had never waited for a
    /// parking_lot lock waited for one inside `hold` while another thread
    /// was in `dlopen`: making its wait state took `dl_load_lock`, which
    /// the `dlopen` held while it waited for the lock `hold` holds.
    #[test]
    fn a_first_wait_for_a_lock_inside_hold_does_not_deadlock_with_dlopen() {
        static CONTENDED: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
        let library = library_not_loaded();
        let held = CONTENDED.lock();
        let (inside, inside_rx) = mpsc::channel();
        let (done, done_rx) = mpsc::channel();
        // A new thread: it has never waited for a parking_lot lock.
        std::thread::spawn(move || {
            hold(|_| {
                inside.send(()).unwrap();
                // Meanwhile the other thread enters dlopen and waits for
                // the loader's list lock, holding dl_load_lock.
                std::thread::sleep(Duration::from_millis(200));
                drop(CONTENDED.lock());
            });
            done.send(()).unwrap();
        });
        inside_rx.recv().unwrap();
        let opener = std::thread::spawn(move || {
            // SAFETY: a valid C string; the library is closed again.
            unsafe {
                let handle = libc::dlopen(library.as_ptr(), libc::RTLD_NOW);
                assert!(!handle.is_null());
                libc::dlclose(handle);
            }
        });
        // Released once the hold's thread waits for it.
        std::thread::sleep(Duration::from_millis(500));
        drop(held);
        if done_rx.recv_timeout(Duration::from_secs(20)).is_err() {
            // Not a panic: its backtrace would wait for the loader's locks
            // the deadlocked threads hold.
            eprintln!("deadlock: the operation inside hold never finished");
            // SAFETY: ends the process at once; nothing is left to run.
            unsafe { libc::_exit(1) };
        }
        opener.join().unwrap();
    }
}
