//! Writing call sites in live text: the one seam every patch goes through.
//!
//! A [`TextWrite`] says "these `len` bytes at `addr` are `old`; make them
//! `new`". A [`Patcher`] applies a batch of writes so that no thread ever
//! fetches a half-written instruction, and after it returns every thread
//! executes the new bytes. Nothing above this module knows how.
//!
//! Protocols (one file each, chosen in [`active`]):
//! - [`stop_world`]: stop every other thread with a signal, write, resume.
//! - later: int3 + `membarrier` (the Linux kernel's text_poke_bp) beside it.

pub(crate) mod reach;
pub(crate) mod stop_world;
pub(crate) mod text;

use crate::error::Error;

/// One instruction-sized change of program text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TextWrite {
    /// First byte of the instruction.
    pub addr: usize,
    /// Number of bytes written (1..=8).
    pub len: u8,
    /// What the text must hold before the write (checked; mismatch → error).
    pub old: [u8; 8],
    /// What the text holds after the write.
    pub new: [u8; 8],
}

impl TextWrite {
    /// The bytes expected before the write.
    pub fn old_bytes(&self) -> &[u8] {
        &self.old[..self.len as usize]
    }
    /// The bytes written.
    pub fn new_bytes(&self) -> &[u8] {
        &self.new[..self.len as usize]
    }
}

/// A protocol for applying text writes while other threads run.
pub(crate) trait Patcher: Sync {
    /// Applies all `writes` or none of them. On success every thread of the
    /// process executes the new bytes from its next instruction fetch of them.
    /// Before writing anything, every `old` is checked against the text.
    fn apply(&self, writes: &[TextWrite]) -> Result<(), Error>;
}

/// The protocol in use.
pub(crate) fn active() -> &'static dyn Patcher {
    &stop_world::STOP_THE_WORLD
}
