//! Where traced functions begin in their source files, read from the DWARF
//! line tables of the executables and libraries they lie in (or their
//! separate debug files), for `fntrace pprof`'s file:line. The files are
//! read as they are now: a program rebuilt since the trace names lines of
//! the new build.

use std::collections::HashMap;

use fntrace_tools::export::SourceLine;
use fntrace_tools::maps::parse_map_line;
use object::{Object, ObjectSegment};

/// A file's line tables and its loadable segments (file offset, size,
/// address), which turn an offset in the file into the address DWARF uses.
struct DebugFile {
    lines: addr2line::Loader,
    segments: Vec<(u64, u64, u64)>,
}

impl DebugFile {
    fn open(path: &str) -> Result<Self, String> {
        let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
        let elf = object::File::parse(&*bytes).map_err(|e| e.to_string())?;
        let segments = elf
            .segments()
            .map(|segment| {
                let (offset, size) = segment.file_range();
                (offset, size, segment.address())
            })
            .collect();
        let lines = addr2line::Loader::new(path).map_err(|e| e.to_string())?;
        Ok(DebugFile { lines, segments })
    }

    /// The address DWARF gives the byte at `offset` in the file.
    fn address_of(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(start, size, _)| (start..start + size).contains(&offset))
            .map(|&(start, _, address)| address + (offset - start))
    }
}

/// The first source line of each of `functions` (run-time entry addresses
/// in the process whose memory map `maps` is) that debug information
/// gives. Files that cannot be read, or where no function has a line (no
/// `-g`), are said once on stderr; a function without a line in a file
/// where others have one (a PLT entry) is left out silently.
pub fn entry_lines(maps: &str, functions: &[usize]) -> HashMap<usize, SourceLine> {
    let mappings: Vec<_> = maps
        .lines()
        .filter_map(parse_map_line)
        .filter(|map| map.path.starts_with('/'))
        .collect();
    let mut files: HashMap<&str, Option<DebugFile>> = HashMap::new();
    // Per file: whether any of its functions had a line.
    let mut any_line: HashMap<&str, bool> = HashMap::new();
    let mut found = HashMap::new();
    for &function in functions {
        let address = function as u64;
        let Some((map, offset)) = mappings
            .iter()
            .find_map(|map| Some((map, map.file_offset(address)?)))
        else {
            continue;
        };
        let file = files.entry(map.path).or_insert_with(|| {
            DebugFile::open(map.path)
                .map_err(|why| eprintln!("fntrace: note: {}: no source lines: {why}", map.path))
                .ok()
        });
        let Some(file) = file else { continue };
        let Some(location) = file
            .address_of(offset)
            .and_then(|dwarf_address| file.lines.find_location(dwarf_address).ok().flatten())
        else {
            any_line.entry(map.path).or_insert(false);
            continue;
        };
        if let (Some(path), Some(line)) = (location.file, location.line) {
            any_line.insert(map.path, true);
            found.insert(
                function,
                SourceLine {
                    file: path.to_string(),
                    line,
                },
            );
        }
    }
    for (path, _) in any_line.into_iter().filter(|&(_, any)| !any) {
        eprintln!(
            "fntrace: note: {path}: no line tables for its functions (built without -g?): \
             named without file:line"
        );
    }
    found
}
