//! Lines of `/proc/PID/maps`, which a trace keeps (`Trace::maps`): which
//! file an address of the traced process lies in, and where in that file.

/// One line of `/proc/PID/maps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapLine<'a> {
    /// First address of the mapping.
    pub start: u64,
    /// First address past it.
    pub end: u64,
    /// Offset in the file of the byte mapped at `start`.
    pub offset: u64,
    /// The file (without a trailing ` (deleted)`), or a pseudo-path such as
    /// `[stack]`, or empty for anonymous memory.
    pub path: &'a str,
}

impl MapLine<'_> {
    /// The offset in [`MapLine::path`] of the byte at `address`, when the
    /// mapping holds it.
    pub fn file_offset(&self, address: u64) -> Option<u64> {
        (self.start..self.end)
            .contains(&address)
            .then(|| address - self.start + self.offset)
    }
}

/// `line` read as a maps line; `None` when it is not one.
pub fn parse_map_line(line: &str) -> Option<MapLine<'_>> {
    let mut rest = line.trim_start();
    // Range, permissions, offset, device, inode; the rest is the path.
    let mut fields = [""; 5];
    for field in &mut fields {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        *field = &rest[..end];
        rest = rest[end..].trim_start();
    }
    let (start, end) = fields[0].split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let offset = u64::from_str_radix(fields[2], 16).ok()?;
    let path = rest.trim_end();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    Some(MapLine {
        start,
        end,
        offset,
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_mapping_gives_its_offsets_and_path() {
        let line =
            "7f1c2a400000-7f1c2a428000 r-xp 00028000 fe:01 1311 /usr/lib/libc.so.6 (deleted)";
        let map = parse_map_line(line).unwrap();
        assert_eq!(map.start, 0x7f1c_2a40_0000);
        assert_eq!(map.end, 0x7f1c_2a42_8000);
        assert_eq!(map.path, "/usr/lib/libc.so.6");
        assert_eq!(map.file_offset(0x7f1c_2a40_0010), Some(0x28010));
        assert_eq!(map.file_offset(0x7f1c_2a42_8000), None);
        let anonymous = parse_map_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0").unwrap();
        assert_eq!(anonymous.path, "");
        assert!(parse_map_line("not a maps line").is_none());
    }
}
