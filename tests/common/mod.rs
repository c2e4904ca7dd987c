//! Shared by the integration tests: a counting tracer and helpers to read
//! the bytes at a call site.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Counts calls per watched function.
pub struct Counter {
    watched: [AtomicUsize; 32],
    counts: [AtomicU64; 32],
    pub all: AtomicU64,
}

impl Counter {
    pub const fn new() -> Self {
        Counter {
            watched: [const { AtomicUsize::new(0) }; 32],
            counts: [const { AtomicU64::new(0) }; 32],
            all: AtomicU64::new(0),
        }
    }

    /// Starts counting calls of the function at `address`; returns its slot.
    pub fn watch(&self, address: usize) -> usize {
        for (slot, watched) in self.watched.iter().enumerate() {
            if watched.load(Ordering::Relaxed) == address {
                return slot;
            }
            if watched
                .compare_exchange(0, address, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return slot;
            }
        }
        panic!("too many watched functions");
    }

    /// Calls of the function at `address` counted so far.
    pub fn count(&self, address: usize) -> u64 {
        let slot = self.watch(address);
        self.counts[slot].load(Ordering::Relaxed)
    }

    pub fn reset(&self) {
        for count in &self.counts {
            count.store(0, Ordering::Relaxed);
        }
        self.all.store(0, Ordering::Relaxed);
    }
}

impl fntrace::Tracer for Counter {
    fn entry(&self, call: &fntrace::Call<'_>) {
        self.all.fetch_add(1, Ordering::Relaxed);
        let function = call.function();
        for (slot, watched) in self.watched.iter().enumerate() {
            match watched.load(Ordering::Relaxed) {
                0 => return,
                address if address == function => {
                    self.counts[slot].fetch_add(1, Ordering::Relaxed);
                    return;
                }
                _ => {}
            }
        }
    }
}

/// The `len` bytes at `address` (program text is readable).
pub fn text(address: usize, len: usize) -> Vec<u8> {
    // SAFETY: callers pass call-site addresses inside mapped program text.
    unsafe { std::slice::from_raw_parts(address as *const u8, len) }.to_vec()
}

pub const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
pub const NOP6: [u8; 6] = [0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00];

/// Address of a Rust function item.
#[macro_export]
macro_rules! addr {
    ($f:expr) => {
        $f as *const () as usize
    };
}
