//! The calling thread's view of the address space, from
//! `/proc/thread-self/maps`.
//!
//! `region::query_range` reads `/proc/self/maps`, which names the main
//! thread: once that thread has called `pthread_exit` (a zombie leader) the
//! file is empty although the process runs on (checked on this kernel: 0
//! lines there, 33 in `thread-self`). The text writer falls back to this
//! parser only then; the text alias (`patch::alias`) reads whole lines
//! ([`Line`]: file, offset, inode) to find the file mapped at an address
//! and to check its own mappings. Allocates; never call it while threads
//! are stopped.

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

/// One line of the maps file, with the file it maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Line {
    /// Addresses and permissions.
    pub mapping: Mapping,
    /// Offset in the file of `mapping.start`.
    pub offset: u64,
    /// The file's device, as the file writes it (`major:minor`, hex).
    pub device: String,
    /// The file's inode; 0 for anonymous memory.
    pub inode: u64,
    /// The path (or `[heap]`, `/memfd:NAME (deleted)`...); empty for
    /// anonymous memory.
    pub path: String,
}

/// Every line of `/proc/thread-self/maps`.
pub(crate) fn thread_self_lines() -> io::Result<Vec<Line>> {
    Ok(parse_lines(&std::fs::read_to_string(
        "/proc/thread-self/maps",
    )?))
}

/// Parses the lines of a maps file that parse; the path keeps its inner
/// spaces.
pub(crate) fn parse_lines(text: &str) -> Vec<Line> {
    text.lines().filter_map(parse_line).collect()
}

/// One line of a maps file (`start-end perms offset dev inode path`).
pub(crate) fn parse_line(line: &str) -> Option<Line> {
    let mapping = parse(line).into_iter().next()?;
    let mut rest = line;
    let mut field = || {
        let trimmed = rest.trim_start();
        let end = trimmed.find(' ').unwrap_or(trimmed.len());
        let (field, after) = trimmed.split_at(end);
        rest = after;
        field
    };
    let (_range, _perms) = (field(), field());
    let offset = u64::from_str_radix(field(), 16).ok()?;
    let device = field().to_string();
    let inode = field().parse().ok()?;
    Some(Line {
        mapping,
        offset,
        device,
        inode,
        path: rest.trim_start().to_string(),
    })
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
    fn lines_keep_the_file_offset_inode_and_path() {
        let line = "7f10-7f20 r-xp 0001a000 08:01 16088 /usr/lib/a b.so";
        let parsed = parse_line(line).unwrap();
        assert_eq!((parsed.mapping.start, parsed.mapping.end), (0x7f10, 0x7f20));
        assert_eq!(parsed.offset, 0x1a000);
        assert_eq!(parsed.device, "08:01");
        assert_eq!(parsed.inode, 16088);
        assert_eq!(parsed.path, "/usr/lib/a b.so");
        let anonymous = parse_line("7f10-7f20 rw-p 00000000 00:00 0").unwrap();
        assert_eq!((anonymous.inode, anonymous.path.as_str()), (0, ""));
        assert_eq!(parse_line("garbage"), None);
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
