//! Timestamps for events: the TSC, converted to nanoseconds of the monotonic
//! clock with a factor calibrated at `init`, where the TSC is invariant
//! (`constant_tsc` and `nonstop_tsc`); `clock_gettime` otherwise.
//!
//! rdtsc costs 9-12 ns here, clock_gettime more than twice that
//! (docs/performance.md), and it is paid twice per traced call by the graph tracer. The hot
//! path stores raw ticks; they become nanoseconds when buffers are drained.
//!
//! The conversion is `offset + (ticks × factor) >> 64`: the factor is
//! nanoseconds per tick as a 0.64 fixed-point fraction, so a TSC below
//! 1 GHz is not used (none known with an invariant TSC). The high half of
//! one unsigned multiply is the whole conversion (no shift), and the
//! offset cancels out of a duration: the profile tracer's fast exit
//! converts two timestamps per call with it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

static USE_TSC: AtomicBool = AtomicBool::new(false);
/// Added (wrapping) to the scaled ticks: the calibration's last reading
/// then converts to its monotonic time exactly.
static OFFSET_NS: AtomicU64 = AtomicU64::new(0);
/// Nanoseconds per TSC tick, as a 0.64 fixed-point fraction.
static NS_PER_TICK_FP64: AtomicU64 = AtomicU64::new(0);

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
    offset_ns: u64,
    /// Nanoseconds per tick, 0.64 fixed point; 0: ticks are nanoseconds.
    ns_per_tick_fp64: u64,
}

impl TickScale {
    /// The scale in force now.
    pub fn current() -> TickScale {
        if USE_TSC.load(Ordering::Acquire) {
            TickScale {
                offset_ns: OFFSET_NS.load(Ordering::Relaxed),
                ns_per_tick_fp64: NS_PER_TICK_FP64.load(Ordering::Relaxed),
            }
        } else {
            TickScale {
                offset_ns: 0,
                ns_per_tick_fp64: 0,
            }
        }
    }

    /// The factor, nanoseconds per tick as a 0.64 fixed-point fraction
    /// (0: ticks are nanoseconds): for code that computes
    /// [`TickScale::duration_ns`] without calling it (the profile tracer's
    /// fast exit, `asm/x86_64/profile.S`).
    pub(crate) fn ns_per_tick_fp64(&self) -> u64 {
        self.ns_per_tick_fp64
    }

    /// `ticks` scaled, before the offset: monotonic in `ticks`.
    #[inline(always)]
    fn scaled(&self, ticks: u64) -> u64 {
        ((ticks as u128 * self.ns_per_tick_fp64 as u128) >> 64) as u64
    }

    /// `ticks` in nanoseconds, as [`ticks_to_ns`] gives them.
    #[inline(always)]
    pub fn ns(&self, ticks: u64) -> u64 {
        if self.ns_per_tick_fp64 == 0 {
            return ticks;
        }
        self.offset_ns.wrapping_add(self.scaled(ticks))
    }

    /// The nanoseconds from `entry_ticks` to `exit_ticks`, 0 if the exit
    /// reads earlier: `ns(exit).saturating_sub(ns(entry))` for any two
    /// timestamps whose nanoseconds lie on the monotonic clock (the offset
    /// cancels out), so the same as a reader of the recorded nanoseconds
    /// computes.
    #[inline(always)]
    pub fn duration_ns(&self, entry_ticks: u64, exit_ticks: u64) -> u64 {
        if self.ns_per_tick_fp64 == 0 {
            return exit_ticks.saturating_sub(entry_ticks);
        }
        self.scaled(exit_ticks)
            .saturating_sub(self.scaled(entry_ticks))
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
/// switches timestamps to the TSC when it is invariant and runs at 1 GHz
/// or more (the factor is a fraction of a nanosecond). Idempotent.
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
    let factor = (((ns1 - ns0) as u128) << 64) / ticks as u128;
    let Ok(factor) = u64::try_from(factor) else {
        return; // slower than 1 GHz: a nanosecond per tick or more
    };
    let scale = TickScale {
        offset_ns: 0,
        ns_per_tick_fp64: factor,
    };
    OFFSET_NS.store(ns1.wrapping_sub(scale.scaled(tsc1)), Ordering::Relaxed);
    NS_PER_TICK_FP64.store(factor, Ordering::Relaxed);
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

    /// A duration is the difference of the two timestamps' nanoseconds,
    /// whatever the factor and the offset (which makes the scaled ticks
    /// wrap past zero when added, for most of these).
    #[test]
    fn a_duration_is_the_difference_of_the_nanoseconds() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..100_000 {
            let factor = next() | 1;
            let entry = next() >> (next() % 64);
            let Some(exit) = entry.checked_add(next() >> (next() % 62 + 2)) else {
                continue;
            };
            let unshifted = TickScale {
                offset_ns: 0,
                ns_per_tick_fp64: factor,
            };
            // The entry at 1 s on the clock.
            let scale = TickScale {
                offset_ns: 1_000_000_000u64.wrapping_sub(unshifted.scaled(entry)),
                ns_per_tick_fp64: factor,
            };
            let (entry_ns, exit_ns) = (scale.ns(entry), scale.ns(exit));
            assert_eq!(entry_ns, 1_000_000_000);
            assert!(exit_ns >= entry_ns, "{factor:#x} {entry} {exit}");
            assert_eq!(scale.duration_ns(entry, exit), exit_ns - entry_ns);
            assert_eq!(scale.duration_ns(exit, entry), 0);
        }
    }
}
