//! The target's memory map and the symbols of the objects it has mapped:
//! where libc, the loader and `libfntrace.so` are, and the addresses of the
//! functions the injector calls there (read from each object's file, as
//! the target sees it through `/proc/PID/root`).

use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol};

use crate::{permission_message, Refused};

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug)]
pub(crate) struct Mapping {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) executable: bool,
    pub(crate) offset: u64,
    pub(crate) path: String,
}

pub(crate) fn read_maps(pid: u32) -> Result<Vec<Mapping>, Refused> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| {
        Refused(match e.raw_os_error() {
            Some(libc::EACCES | libc::EPERM) => permission_message(pid, e),
            _ => format!("reading /proc/{pid}/maps: {e}"),
        })
    })?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let range = fields.next()?;
            let perms = fields.next()?;
            let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
            let _dev = fields.next()?;
            let _inode = fields.next()?;
            let path = fields.next().unwrap_or("").trim_start().to_string();
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                executable: perms.as_bytes().get(2) == Some(&b'x'),
                offset,
                path,
            })
        })
        .collect())
}

pub(crate) fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

pub(crate) fn is_libc(path: &str) -> bool {
    let name = file_name(path);
    name.starts_with("libc.so") || (name.starts_with("libc-") && name.ends_with(".so"))
}

pub(crate) fn is_loader(path: &str) -> bool {
    let name = file_name(path);
    name.starts_with("ld-linux") || (name.starts_with("ld-") && name.contains(".so"))
}

/// The dynamic symbols `names` of the ELF file at `file` (as the target
/// would map it: addresses relative to its load base), with sizes.
pub(crate) struct Symbols {
    /// The first segment's address, page aligned: what the load base adds to.
    pub(crate) first_vaddr: u64,
    pub(crate) found: Vec<Option<(u64, u64)>>,
}

pub(crate) fn elf_symbols(file: &Path, names: &[&str]) -> Option<Symbols> {
    let data = std::fs::read(file).ok()?;
    let elf = object::File::parse(&*data).ok()?;
    let first_vaddr = elf.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
    let mut found = vec![None; names.len()];
    for symbol in elf.dynamic_symbols().filter(|s| s.is_definition()) {
        let Ok(name) = symbol.name() else { continue };
        if let Some(at) = names.iter().position(|n| *n == name) {
            found[at].get_or_insert((symbol.address(), symbol.size()));
        }
    }
    Some(Symbols { first_vaddr, found })
}

impl Symbols {
    /// Symbol `index`'s address and size in the object mapped from `path`.
    pub(crate) fn in_target(
        &self,
        maps: &[Mapping],
        path: &str,
        index: usize,
    ) -> Option<(u64, u64)> {
        let base_mapping = maps.iter().find(|m| m.path == path && m.offset == 0)?;
        let base = base_mapping.start.wrapping_sub(self.first_vaddr);
        self.found[index].map(|(addr, size)| (base.wrapping_add(addr), size))
    }
}

/// The file mapped from `path` in process `pid`, as this side reads it.
pub(crate) fn seen_from_here(pid: u32, path: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root{path}"))
}

/// The address and size, in the target, of the dynamic symbol `name` of
/// the object mapped from `path`.
pub(crate) fn symbol_range(
    pid: u32,
    maps: &[Mapping],
    path: &str,
    name: &str,
) -> Option<(u64, u64)> {
    elf_symbols(&seen_from_here(pid, path), &[name])?.in_target(maps, path, 0)
}

pub(crate) fn symbol_address(pid: u32, maps: &[Mapping], path: &str, name: &str) -> Option<u64> {
    symbol_range(pid, maps, path, name).map(|(start, _)| start)
}

/// Where an object named `file_name` is mapped, if it is.
pub(crate) fn mapped_path(maps: &[Mapping], matches: impl Fn(&str) -> bool) -> Option<String> {
    maps.iter()
        .find(|m| m.path.starts_with('/') && matches(&m.path))
        .map(|m| m.path.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_libc_and_the_loader_by_their_names() {
        assert!(is_libc("/usr/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_libc("/lib64/libc-2.17.so"));
        assert!(!is_libc("/usr/lib/libcurl.so.4"));
        assert!(!is_libc("/work/libc.so.6.d/prog"));
        assert!(is_loader("/lib64/ld-linux-x86-64.so.2"));
        assert!(is_loader("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"));
        assert!(!is_loader("/usr/lib/libldap.so.2"));
    }
}
