//! A dependency that is not a workspace member.

/// RUSTC_BOOTSTRAP as this crate's rustc saw it.
pub const RUSTC_BOOTSTRAP: Option<&str> = option_env!("RUSTC_BOOTSTRAP");

/// Some work.
#[inline(never)]
pub fn outside_work(x: u64) -> u64 {
    x * 5 + 2
}
