//! The operating system and the CPU as fntrace uses them: clocks, thread
//! ids, errno, futexes, signals to threads, `/proc`. Knows nothing of
//! fntrace above it.

pub(crate) mod clock;
