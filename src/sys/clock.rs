//! Timestamps for events: the TSC, converted to nanoseconds of the monotonic
//! clock with a factor calibrated at `init`, where the TSC is invariant
//! (`constant_tsc` and `nonstop_tsc`); `clock_gettime` otherwise.
//!
//! rdtsc costs ≈ 10 ns here against ≈ 23 ns for clock_gettime (field notes
//! §5), and it is paid twice per traced call by the graph tracer. The hot
//! path stores raw ticks; they become nanoseconds when buffers are drained.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

static USE_TSC: AtomicBool = AtomicBool::new(false);
static BASE_TSC: AtomicU64 = AtomicU64::new(0);
static BASE_NS: AtomicU64 = AtomicU64::new(0);
/// Nanoseconds per TSC tick, as a 32.32 fixed-point number.
static NS_PER_TICK_FP32: AtomicU64 = AtomicU64::new(0);

/// The monotonic clock through the vDSO.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[inline]
fn rdtsc() -> u64 {
    // SAFETY: rdtsc is available on every x86-64 CPU and has no side effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// A timestamp for the hot path: raw TSC ticks when the TSC is in use
/// (converted later with [`ticks_to_ns`]), else nanoseconds.
#[inline]
pub fn now_ticks() -> u64 {
    if USE_TSC.load(Ordering::Acquire) {
        rdtsc()
    } else {
        monotonic_ns()
    }
}

/// Converts a [`now_ticks`] value to nanoseconds on the monotonic clock's
/// time base.
#[inline]
pub fn ticks_to_ns(ticks: u64) -> u64 {
    TickScale::current().ns(ticks)
}

/// The conversion [`ticks_to_ns`] applies, read once: a writer converting
/// millions of events hoists it out of its loop (no atomic loads per event).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickScale {
    base_ticks: u64,
    base_ns: u64,
    /// Nanoseconds per tick, 32.32 fixed point; 0: ticks are nanoseconds.
    ns_per_tick_fp32: u64,
}

impl TickScale {
    /// The scale in force now.
    pub fn current() -> TickScale {
        if USE_TSC.load(Ordering::Acquire) {
            TickScale {
                base_ticks: BASE_TSC.load(Ordering::Relaxed),
                base_ns: BASE_NS.load(Ordering::Relaxed),
                ns_per_tick_fp32: NS_PER_TICK_FP32.load(Ordering::Relaxed),
            }
        } else {
            TickScale {
                base_ticks: 0,
                base_ns: 0,
                ns_per_tick_fp32: 0,
            }
        }
    }

    /// `[base_ticks, base_ns, ns_per_tick_fp32]`: for code that converts
    /// the same way without calling this (the profile tracer's fast exit,
    /// `asm/x86_64/profile.S`).
    pub(crate) fn parts(&self) -> [u64; 3] {
        [self.base_ticks, self.base_ns, self.ns_per_tick_fp32]
    }

    /// `ticks` in nanoseconds, as [`ticks_to_ns`] gives them.
    #[inline(always)]
    pub fn ns(&self, ticks: u64) -> u64 {
        if self.ns_per_tick_fp32 == 0 {
            return ticks;
        }
        let since_base = ticks.wrapping_sub(self.base_ticks) as i64 as i128;
        let ns = (since_base * self.ns_per_tick_fp32 as i128) >> 32;
        (self.base_ns as i128 + ns) as u64
    }
}

/// Whether timestamps come from the TSC.
pub fn uses_tsc() -> bool {
    USE_TSC.load(Ordering::Acquire)
}

fn tsc_is_invariant() -> bool {
    let Ok(cpuinfo) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    cpuinfo
        .lines()
        .find(|line| line.starts_with("flags"))
        .is_some_and(|flags| {
            let has = |want: &str| flags.split_whitespace().any(|word| word == want);
            has("constant_tsc") && has("nonstop_tsc")
        })
}

/// Measures the TSC rate against the monotonic clock over `window` and
/// switches timestamps to the TSC when it is invariant. Idempotent.
pub(crate) fn calibrate(window: Duration) {
    if USE_TSC.load(Ordering::Acquire) || !tsc_is_invariant() {
        return;
    }
    let (ns0, tsc0) = (monotonic_ns(), rdtsc());
    std::thread::sleep(window);
    let (ns1, tsc1) = (monotonic_ns(), rdtsc());
    let ticks = tsc1.wrapping_sub(tsc0);
    if ticks == 0 || ns1 <= ns0 {
        return;
    }
    let factor = (((ns1 - ns0) as u128) << 32) / ticks as u128;
    BASE_TSC.store(tsc1, Ordering::Relaxed);
    BASE_NS.store(ns1, Ordering::Relaxed);
    NS_PER_TICK_FP32.store(factor as u64, Ordering::Relaxed);
    // Release pairs with the Acquire in now_ns: the factor is visible first.
    USE_TSC.store(true, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_time_follows_the_monotonic_clock() {
        calibrate(Duration::from_millis(20));
        let (a, b) = (ticks_to_ns(now_ticks()), monotonic_ns());
        std::thread::sleep(Duration::from_millis(50));
        let (c, d) = (ticks_to_ns(now_ticks()), monotonic_ns());
        let tsc_elapsed = c - a;
        let mono_elapsed = d - b;
        let diff = tsc_elapsed.abs_diff(mono_elapsed);
        // Within 1% + 200 µs of scheduling noise.
        assert!(
            diff < mono_elapsed / 100 + 200_000,
            "{tsc_elapsed} vs {mono_elapsed}"
        );
    }
}
