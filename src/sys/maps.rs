//! The calling thread's view of the address space, from
//! `/proc/thread-self/maps`.
//!
//! `region::query_range` reads `/proc/self/maps`, which names the main
//! thread: once that thread has called `pthread_exit` (a zombie leader) the
//! file is empty although the process runs on (checked on this kernel: 0
//! lines there, 33 in `thread-self`). The text writer falls back to this
//! parser only then. Allocates; never call it while threads are stopped.

use std::io;

/// One line of the maps file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mapping {
    /// First address.
    pub start: usize,
    /// One past the last address.
    pub end: usize,
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Executable.
    pub execute: bool,
    /// A shared mapping (writes reach the file or other processes).
    pub shared: bool,
}

/// The mappings of `/proc/thread-self/maps`.
pub(crate) fn thread_self() -> io::Result<Vec<Mapping>> {
    Ok(parse(&std::fs::read_to_string("/proc/thread-self/maps")?))
}

/// Parses a maps file (`start-end perms offset dev inode path`); lines
/// that do not parse are skipped.
fn parse(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_ascii_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            let perms = fields.next()?.as_bytes();
            Some(Mapping {
                start: usize::from_str_radix(start, 16).ok()?,
                end: usize::from_str_radix(end, 16).ok()?,
                read: perms.first() == Some(&b'r'),
                write: perms.get(1) == Some(&b'w'),
                execute: perms.get(2) == Some(&b'x'),
                shared: perms.get(3) == Some(&b's'),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_and_skips_garbage() {
        let maps = "00400000-00409000 r-xp 00000000 08:00 16088 /usr/bin/head\n\
                    garbage\n\
                    7f00-8f00 rw-s 0 0:0 0\n";
        let parsed = parse(maps);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].start, 0x40_0000);
        assert!(parsed[0].read && parsed[0].execute && !parsed[0].write && !parsed[0].shared);
        assert!(parsed[1].write && parsed[1].shared);
    }

    #[test]
    fn this_thread_sees_its_own_code() {
        let here = this_thread_sees_its_own_code as *const () as usize;
        let maps = thread_self().unwrap();
        let text = maps
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .unwrap();
        assert!(text.execute);
    }
}
