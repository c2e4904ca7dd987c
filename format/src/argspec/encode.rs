//! The bytes a recorder writes after a record for its values
//! ([`encode`]), as uftrace 0.13 writes them, and the room they need.

use super::{text, ArgFormat, ArgSlot, ArgSpec, Registers, DATA_MAX, STR_MAX};

/// Writes the data of `values` (`retval`: the return value's, else the
/// arguments') into `out` as uftrace does, reading strings with `read`
/// (which copies what it can of the bytes at an address into its buffer
/// and returns how many, `None` if the address is unreadable): the length
/// written, padded to 8 (0 if nothing is recorded). Every byte up to that
/// length is written (padding too), so `out` need not be cleared; values
/// that would pass `out`'s length less 4 (at most [`DATA_MAX`]) are left
/// out, as uftrace leaves out what passes its limit. [`encoded_bound`]
/// says how long `out` must be for all of them. Allocates nothing.
pub fn encode(
    values: &[ArgSpec],
    retval: bool,
    regs: &Registers,
    read: &mut dyn FnMut(u64, &mut [u8]) -> Option<usize>,
    out: &mut [u8],
) -> usize {
    encode_with(
        values,
        retval,
        regs,
        &mut |_, addr, buf| read(addr, buf),
        out,
    )
}

/// [`encode_with`]'s reader: `(pinned, address, buffer)`, what [`encode`]'s
/// reader returns (`pinned`: `Some(N)` for a `pinN[OFFSET]`).
pub type ReadAt<'a> = dyn FnMut(Option<u8>, u64, &mut [u8]) -> Option<usize> + 'a;

/// [`encode`], with `read` told for each read whether it is a value's
/// `pinN[OFFSET]` (`Some(N)`: the runtime loads it, see
/// [`ArgSlot::Deref`]) or any other read through memory (`None`).
pub fn encode_with(
    values: &[ArgSpec],
    retval: bool,
    regs: &Registers,
    read: &mut ReadAt<'_>,
    out: &mut [u8],
) -> usize {
    let limit = out.len().saturating_sub(4).min(DATA_MAX);
    let mut at = 0;
    for value in values.iter().filter(|v| v.slot.at_exit() == retval) {
        let raw = match value.slot {
            // A string read through memory reads its words itself.
            ArgSlot::Deref { .. } if matches!(value.format, ArgFormat::Text(_)) => 0,
            ArgSlot::Deref { arg, offset, .. } => {
                let address = regs.int[usize::from(arg - 1)].wrapping_add(u64::from(offset));
                let mut bytes = [0xffu8; 8];
                let size = usize::from(value.size);
                if read(value.pinned_arg(), address, &mut bytes[..size]) != Some(size) {
                    bytes = [0xff; 8];
                }
                u64::from_le_bytes(bytes)
            }
            ArgSlot::Int(n) => regs.int[usize::from(n - 1)],
            ArgSlot::Fp(n) => regs.float[usize::from(n - 1)],
            ArgSlot::Retval if value.format == ArgFormat::Float => regs.xmm0,
            ArgSlot::Poll { at: Some(at), .. } => {
                // The `Poll` returned through memory: rax points at it.
                let address = regs.rax.wrapping_add(u64::from(at));
                let mut bytes = [0xffu8; 8];
                let size = usize::from(value.size);
                if read(None, address, &mut bytes[..size]) != Some(size) {
                    bytes = [0xff; 8];
                }
                u64::from_le_bytes(bytes)
            }
            ArgSlot::Retval | ArgSlot::Poll { at: None, .. } => regs.rax,
        };
        let used = if let ArgFormat::Struct(_) = value.format {
            // Its bytes, from the registers that follow its first; a
            // structure returned: rax's 8 bytes (what uftrace records),
            // zeros after them.
            let (registers, first): (&[u64], usize) = match value.slot {
                ArgSlot::Int(n) => (&regs.int, usize::from(n - 1)),
                ArgSlot::Fp(n) => (&regs.float, usize::from(n - 1)),
                _ => (std::slice::from_ref(&regs.rax), 0),
            };
            let size = usize::from(value.size);
            if at + size > limit {
                break;
            }
            for (k, chunk) in out[at..at + size].chunks_mut(8).enumerate() {
                let register = registers.get(first + k).copied().unwrap_or(0);
                chunk.copy_from_slice(&register.to_le_bytes()[..chunk.len()]);
            }
            size
        } else if value.format.is_text() && value.format != ArgFormat::Str {
            if at + 2 + STR_MAX + 1 > limit {
                break;
            }
            let text = &mut out[at + 2..at + 2 + STR_MAX + 1];
            let len = text::encode(value, raw, regs, &mut |a, b| read(None, a, b), text);
            out[at..at + 2].copy_from_slice(&(len as u16).to_le_bytes());
            2 + len
        } else if let ArgFormat::Tagged(_, tag) = value.format {
            if at + 8 > limit {
                break;
            }
            let recorded = text::tagged(tag, value.size, raw);
            out[at..at + 8].copy_from_slice(&recorded.to_le_bytes());
            8
        } else if value.format == ArgFormat::Str {
            if at + 2 + STR_MAX + 1 > limit {
                break;
            }
            let text = &mut out[at + 2..at + 2 + STR_MAX + 1];
            let len = if raw == 0 {
                text[..4].copy_from_slice(b"NULL");
                4
            } else {
                match read(None, raw, &mut *text) {
                    Some(n) => {
                        let n = text[..n].iter().position(|&b| b == 0).unwrap_or(n);
                        // uftrace cuts at its limit even a string that ends there.
                        if n >= STR_MAX {
                            text[STR_MAX - 3..STR_MAX].copy_from_slice(b"...");
                            STR_MAX
                        } else {
                            n
                        }
                    }
                    None => bad_pointer(raw, text),
                }
            };
            out[at..at + 2].copy_from_slice(&(len as u16).to_le_bytes());
            2 + len
        } else {
            let size = usize::from(value.size);
            if at + size > limit {
                break;
            }
            out[at..at + size].copy_from_slice(&raw.to_le_bytes()[..size]);
            size
        };
        let padded = used.next_multiple_of(4);
        out[at + used..at + padded].fill(0);
        at += padded;
    }
    let len = at.next_multiple_of(8);
    out[at..len].fill(0);
    len
}

/// The length [`encode`]'s `out` needs for every value of `values`
/// (`retval`: the return value's, else the arguments'): their sizes
/// padded, the whole padded to 8, plus [`encode`]'s 4 bytes of room, at
/// most `DATA_MAX + 4`. A string counts at its longest.
pub fn encoded_bound(values: &[ArgSpec], retval: bool) -> usize {
    let len: usize = values
        .iter()
        .filter(|v| v.slot.at_exit() == retval)
        .map(|v| match v.format {
            format if format.is_text() => (2 + STR_MAX + 1).next_multiple_of(4),
            _ => v.data_size().next_multiple_of(4),
        })
        .sum();
    (len.next_multiple_of(8) + 4).min(DATA_MAX + 4)
}

/// `<0x1234>`, uftrace's text for a string at an unreadable address,
/// written into `text`: its length.
pub(crate) fn bad_pointer(addr: u64, text: &mut [u8]) -> usize {
    let mut hex = [0u8; 16];
    let mut n = 0;
    let mut v = addr;
    loop {
        hex[n] = b"0123456789abcdef"[(v & 15) as usize];
        n += 1;
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    text[..3].copy_from_slice(b"<0x");
    for i in 0..n {
        text[3 + i] = hex[n - 1 - i];
    }
    text[3 + n] = b'>';
    4 + n
}
