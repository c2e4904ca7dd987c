//! The uftrace data format's vocabulary, shared by the writer and the reader:
//! the `info` header, `.dat` record encoding, timestamps and `maps` lines.

use std::path::Path;

use super::super::ExportError;
use crate::trace::{EventKind, GraphEvent, ThreadTrace, Trace};

/// Largest size given to a symbol in a `.sym` file, in bytes.
pub const MAX_SYMBOL_SIZE: u64 = 64 * 1024;

pub(super) const MAGIC: &[u8; 8] = b"Ftrace!\0";
pub(super) const VERSION: u32 = 4;
pub(super) const HEADER_SIZE: u16 = 40;
pub(super) const MAX_STACK: u16 = 1024;
pub(super) const MAX_DEPTH: u16 = 1023;

pub(super) const FEAT_TASK_SESSION: u64 = 1 << 1;
pub(super) const FEAT_ARGUMENT: u64 = 1 << 3;
pub(super) const FEAT_RETVAL: u64 = 1 << 4;
pub(super) const FEAT_SYM_REL_ADDR: u64 = 1 << 5;
pub(super) const INFO_EXE_NAME: u64 = 1 << 0;
pub(super) const INFO_CMDLINE: u64 = 1 << 3;
pub(super) const INFO_TASKINFO: u64 = 1 << 7;
pub(super) const INFO_ARG_SPEC: u64 = 1 << 10;
pub(super) const INFO_PATTERN_TYPE: u64 = 1 << 12;

pub(super) const RECORD_SIZE: usize = 16;
pub(super) const RECORD_MAGIC: u64 = 5;
pub(super) const TYPE_ENTRY: u64 = 0;
pub(super) const TYPE_EXIT: u64 = 1;
pub(super) const TYPE_LOST: u64 = 2;
pub(super) const TYPE_EVENT: u64 = 3;
pub(super) const ADDR_BITS: u32 = 48;
/// The `more` bit of a record's first byte after the time: argument (or
/// return-value) data follows the record.
pub(super) const MORE_BIT: u8 = 1 << 2;

/// Where thread names and added records are listed.
pub(super) const FNTRACE_FILE: &str = "fntrace.txt";

/// How a recorder's note starts in `fntrace.txt`.
pub(super) const RECORDER_NOTE: &str = "recorder ";

pub(super) fn info_bytes(trace: &Trace, threads: &[ThreadTrace]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&HEADER_SIZE.to_le_bytes());
    out.push(1); // little-endian
    out.push(2); // ELFCLASS64
    let args = !trace.arg_spec.is_empty() || !trace.retval_spec.is_empty();
    let mut features = FEAT_TASK_SESSION | FEAT_SYM_REL_ADDR;
    let mut info = INFO_EXE_NAME | INFO_CMDLINE | INFO_TASKINFO;
    if !trace.arg_spec.is_empty() {
        features |= FEAT_ARGUMENT;
    }
    if !trace.retval_spec.is_empty() {
        features |= FEAT_RETVAL;
    }
    if args {
        info |= INFO_ARG_SPEC | INFO_PATTERN_TYPE;
    }
    out.extend_from_slice(&features.to_le_bytes());
    out.extend_from_slice(&info.to_le_bytes());
    out.extend_from_slice(&MAX_STACK.to_le_bytes());
    out.extend_from_slice(&[0; 6]);
    debug_assert_eq!(out.len(), usize::from(HEADER_SIZE));

    let tids: Vec<String> = threads.iter().map(|t| t.tid.to_string()).collect();
    // Sections in the order of their info bits.
    let cmdline = if trace.cmdline.is_empty() {
        &trace.exe
    } else {
        &trace.cmdline
    };
    let mut text = format!(
        "exename:{}\ncmdline:{}\ntaskinfo:lines=2\ntaskinfo:nr_tid={}\ntaskinfo:tids={}\n",
        one_line(&trace.exe),
        quote_cmdline(cmdline),
        tids.len(),
        tids.join(",")
    );
    if args {
        // uftrace 0.13's section (cmds/info.c): the specs, then its three
        // automatic-argument lines (left empty: none is recorded), and
        // the specs' pattern type, so that uftrace reads their globs as
        // globs (its default is regular expressions).
        let specs = [
            ("argspec", &trace.arg_spec),
            ("retspec", &trace.retval_spec),
        ];
        let given: Vec<_> = specs.iter().filter(|(_, spec)| !spec.is_empty()).collect();
        text += &format!("argspec:lines={}\n", given.len() + 3);
        for (name, spec) in given {
            text += &format!("{name}:{}\n", one_line(spec));
        }
        text += "argauto:\nretauto:\nenumauto:\npattern_type:glob\n";
    }
    out.extend_from_slice(text.as_bytes());
    out
}

/// The `cmdline` section's value: `uftrace dump --chrome` pastes it between
/// the double quotes of a JSON string (`"command_line":"…"`), so it is
/// escaped as JSON string contents. uftrace itself escapes `"` only, and
/// turns the NULs between arguments and any newline into spaces; fntrace also
/// escapes `\` and turns every other control character into a space, which
/// a JSON string cannot hold raw either.
pub(super) fn quote_cmdline(cmdline: &str) -> String {
    let mut out = String::with_capacity(cmdline.len());
    for c in cmdline.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Undoes [`quote_cmdline`] (and reads uftrace's, which escapes `"` only).
pub(super) fn unquote_cmdline(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(&next @ ('"' | '\\')) = chars.peek() {
                out.push(next);
                chars.next();
                continue;
            }
        }
        out.push(c);
    }
    out
}

pub(super) struct InfoHeader {
    pub(super) features: u64,
    pub(super) exe: String,
    /// The command line, unescaped; empty if the section is missing.
    pub(super) cmdline: String,
    pub(super) tids: Vec<u32>,
    /// The `argspec` and `retspec` lines (empty if none).
    pub(super) arg_spec: String,
    pub(super) retval_spec: String,
    /// Whether the specs' patterns are regular expressions (uftrace's
    /// default) rather than globs.
    pub(super) regex: bool,
    /// uftrace's `-a` (`auto-args:1`): its `argauto`, `retauto` and
    /// `enumauto` lines (libc's prototypes and their enums), which apply,
    /// with the `.dbg` files' specs.
    pub(super) auto: Option<[String; 3]>,
}

pub(super) fn parse_info(path: &Path, data: &[u8]) -> Result<InfoHeader, ExportError> {
    let bad = |problem: String| ExportError::malformed(path, problem);
    if data.len() < usize::from(HEADER_SIZE) {
        return Err(bad(format!(
            "only {} bytes; a uftrace info header has {HEADER_SIZE}",
            data.len()
        )));
    }
    if &data[..8] != MAGIC {
        return Err(bad(format!(
            "bad magic {:02x?} (expected \"Ftrace!\\0\"): not a uftrace info file",
            &data[..8]
        )));
    }
    let u16_at = |at: usize| u16::from_le_bytes([data[at], data[at + 1]]);
    let u32_at =
        |at: usize| u32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
    let u64_at = |at: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&data[at..at + 8]);
        u64::from_le_bytes(bytes)
    };
    let version = u32_at(8);
    if !(4..=5).contains(&version) {
        return Err(bad(format!(
            "file format version {version}; fntrace reads versions 4 and 5"
        )));
    }
    let header_size = usize::from(u16_at(12));
    if header_size < usize::from(HEADER_SIZE) || header_size > data.len() {
        return Err(bad(format!("bad header size {header_size}")));
    }
    if data[14] != 1 {
        return Err(bad(
            "big-endian data; fntrace reads little-endian data only".into(),
        ));
    }
    if data[15] != 2 {
        return Err(bad("32-bit data; fntrace reads 64-bit data only".into()));
    }
    let features = u64_at(16);

    let text = String::from_utf8_lossy(&data[header_size..]);
    let mut exe = String::new();
    let mut cmdline = String::new();
    let mut tids = Vec::new();
    let (mut arg_spec, mut retval_spec, mut regex) = (String::new(), String::new(), true);
    let mut auto: [String; 3] = Default::default();
    let mut auto_args = false;
    for line in text.lines() {
        for (k, key) in ["argauto:", "retauto:", "enumauto:"].iter().enumerate() {
            if let Some(spec) = line.strip_prefix(key) {
                auto[k] = spec.to_string();
            }
        }
        auto_args |= line == "auto-args:1";
        if let Some(spec) = line.strip_prefix("argspec:") {
            if !spec.starts_with("lines=") {
                arg_spec = spec.to_string();
            }
        } else if let Some(spec) = line.strip_prefix("retspec:") {
            retval_spec = spec.to_string();
        } else if let Some(kind) = line.strip_prefix("pattern_type:") {
            regex = kind != "glob";
        } else if let Some(name) = line.strip_prefix("exename:") {
            exe = name.to_string();
        } else if let Some(quoted) = line.strip_prefix("cmdline:") {
            cmdline = unquote_cmdline(quoted);
        } else if let Some(list) = line.strip_prefix("taskinfo:tids=") {
            for tid in list.split(',').filter(|s| !s.trim().is_empty()) {
                tids.push(
                    tid.trim()
                        .parse()
                        .map_err(|_| bad(format!("bad tid {tid:?} in line {line:?}")))?,
                );
            }
        }
    }
    Ok(InfoHeader {
        features,
        exe,
        cmdline,
        tids,
        arg_spec,
        retval_spec,
        regex,
        auto: auto_args.then_some(auto),
    })
}

pub(super) fn timestamp(ns: u64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

pub(super) fn parse_timestamp(text: &str) -> Option<u64> {
    let (secs, nanos) = text.split_once('.')?;
    let secs: u64 = secs.parse().ok()?;
    if nanos.len() != 9 {
        return None;
    }
    let nanos: u64 = nanos.parse().ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// The record for `event`, or `None` if uftrace cannot represent it (depth
/// above 1023 or an address wider than 48 bits).
pub(super) fn record(event: &GraphEvent) -> Option<[u8; RECORD_SIZE]> {
    let addr = event.function as u64;
    if event.depth > MAX_DEPTH || addr >> ADDR_BITS != 0 {
        return None;
    }
    let kind = match event.kind {
        EventKind::Entry => TYPE_ENTRY,
        EventKind::Exit => TYPE_EXIT,
    };
    Some(encode(event.time_ns, kind, event.depth, addr))
}

/// A lost record for `count` events, as uftrace 0.13's libmcount writes
/// one (`get_new_shmem_buffer` in `libmcount/record.c`) at the start of
/// the first buffer it gets after losing records: time 0, type lost, more
/// 0, magic 5, the count in the address field (capped at 48 bits). uftrace
/// leaves the depth field as the buffer had it (0 in a fresh buffer, the
/// depth of an old record in a reused one); fntrace writes 0. uftrace's
/// readers ignore a lost record's time and depth.
pub(super) fn lost_record(count: u64) -> [u8; RECORD_SIZE] {
    encode(0, TYPE_LOST, 0, count.min((1 << ADDR_BITS) - 1))
}

#[inline]
pub(super) fn encode(time: u64, kind: u64, depth: u16, addr: u64) -> [u8; RECORD_SIZE] {
    let word = kind | (RECORD_MAGIC << 3) | (u64::from(depth) << 6) | (addr << 16);
    let mut out = [0u8; RECORD_SIZE];
    out[..8].copy_from_slice(&time.to_le_bytes());
    out[8..].copy_from_slice(&word.to_le_bytes());
    out
}

/// The fields of a `.dat` record, as [`encode`] packs them.
pub(super) struct RawRecord {
    pub(super) time: u64,
    pub(super) kind: u64,
    /// Argument or event data follows.
    pub(super) more: bool,
    pub(super) magic: u64,
    pub(super) depth: u16,
    pub(super) addr: u64,
}

/// Unpacks one record.
pub(super) fn decode(bytes: &[u8; RECORD_SIZE]) -> RawRecord {
    let mut time = [0u8; 8];
    time.copy_from_slice(&bytes[..8]);
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[8..]);
    let word = u64::from_le_bytes(word);
    RawRecord {
        time: u64::from_le_bytes(time),
        kind: word & 0b11,
        more: (word >> 2) & 1 != 0,
        magic: (word >> 3) & 0b111,
        depth: ((word >> 6) & 0x3ff) as u16,
        addr: word >> 16,
    }
}

/// Names and paths go into line-based files.
pub(super) fn one_line(s: &str) -> String {
    s.replace(['\n', '\r', '\t'], " ")
}

pub(super) fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

pub(super) use crate::maps::parse_map_line;
