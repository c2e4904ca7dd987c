//! A small gzip compressor for text the runtime serves (`/metrics` when
//! the scraper sends `Accept-Encoding: gzip`): deflate (RFC 1951) with
//! the fixed Huffman codes and greedy LZ77 matching, in one gzip member
//! (RFC 1952). The runtime links no compression crate (`tests/programs/layers.rs`
//! counts its crates); metrics text repeats its family and label names on
//! every line, which matching alone takes most of. Not a general
//! compressor: no dynamic codes, no lazy matching.

use super::pprof::crc32;

/// The farthest back a match may reach (deflate's window).
const WINDOW: usize = 32 * 1024;
/// The shortest and longest match deflate encodes.
const MIN_MATCH: usize = 3;
const MAX_MATCH: usize = 258;
/// Candidates tried per position: enough for text whose lines repeat.
const MAX_CHAIN: usize = 32;
/// Bits of the hash of three bytes.
const HASH_BITS: u32 = 15;

/// Length symbols 257..=285: the shortest length of each and its extra
/// bits.
const LENGTH_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LENGTH_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
/// Distance symbols 0..=29: the shortest distance of each and its extra
/// bits.
const DISTANCE_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
const DISTANCE_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];

/// Bits written least significant first, as deflate packs them.
struct Bits {
    out: Vec<u8>,
    acc: u64,
    count: u32,
}

impl Bits {
    fn put(&mut self, value: u32, bits: u32) {
        self.acc |= u64::from(value) << self.count;
        self.count += bits;
        while self.count >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.count -= 8;
        }
    }

    /// A Huffman code: deflate writes codes from their most significant
    /// bit.
    fn code(&mut self, code: u32, bits: u32) {
        self.put(code.reverse_bits() >> (32 - bits), bits);
    }

    /// A literal/length symbol in the fixed code (RFC 1951, 3.2.6).
    fn symbol(&mut self, symbol: u32) {
        match symbol {
            0..=143 => self.code(0x30 + symbol, 8),
            144..=255 => self.code(0x190 + symbol - 144, 9),
            256..=279 => self.code(symbol - 256, 7),
            _ => self.code(0xc0 + symbol - 280, 8),
        }
    }

    fn finish(mut self) -> Vec<u8> {
        if self.count > 0 {
            self.out.push(self.acc as u8);
        }
        self.out
    }
}

/// The hash of the three bytes at `at`.
fn hash(bytes: &[u8], at: usize) -> usize {
    let three =
        u32::from(bytes[at]) | u32::from(bytes[at + 1]) << 8 | u32::from(bytes[at + 2]) << 16;
    (three.wrapping_mul(0x9e37_79b1) >> (32 - HASH_BITS)) as usize
}

/// `bytes` as one gzip member of one deflate block in the fixed codes.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut bits = Bits {
        out: Vec::with_capacity(bytes.len() / 4 + 64),
        acc: 0,
        count: 0,
    };
    // ID1 ID2, CM 8 (deflate), no flags, no time, XFL 0, OS 255 (unknown).
    bits.out
        .extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]);
    // BFINAL 1, BTYPE 01 (fixed codes).
    bits.put(1, 1);
    bits.put(1, 2);
    // The last position of each hash (+1; 0: none), and for each
    // position the previous one of the same hash.
    let mut head = vec![0u32; 1 << HASH_BITS];
    let mut previous = vec![0u32; bytes.len()];
    let mut at = 0;
    let insert = |head: &mut Vec<u32>, previous: &mut Vec<u32>, at: usize| {
        if at + MIN_MATCH <= bytes.len() {
            let h = hash(bytes, at);
            previous[at] = head[h];
            head[h] = at as u32 + 1;
        }
    };
    while at < bytes.len() {
        let (mut best_length, mut best_distance) = (0, 0);
        if at + MIN_MATCH <= bytes.len() {
            let mut candidate = head[hash(bytes, at)];
            let longest = (bytes.len() - at).min(MAX_MATCH);
            for _ in 0..MAX_CHAIN {
                let Some(from) = (candidate as usize).checked_sub(1) else {
                    break;
                };
                if at - from > WINDOW {
                    break;
                }
                let length = bytes[from..]
                    .iter()
                    .zip(&bytes[at..at + longest])
                    .take_while(|(a, b)| a == b)
                    .count();
                if length > best_length {
                    (best_length, best_distance) = (length, at - from);
                    if length == longest {
                        break;
                    }
                }
                candidate = previous[from];
            }
        }
        if best_length >= MIN_MATCH {
            let index = LENGTH_BASE
                .iter()
                .rposition(|&base| usize::from(base) <= best_length)
                .unwrap_or(0);
            bits.symbol(257 + index as u32);
            bits.put(
                (best_length - usize::from(LENGTH_BASE[index])) as u32,
                u32::from(LENGTH_EXTRA[index]),
            );
            let index = DISTANCE_BASE
                .iter()
                .rposition(|&base| usize::from(base) <= best_distance)
                .unwrap_or(0);
            bits.code(index as u32, 5);
            bits.put(
                (best_distance - usize::from(DISTANCE_BASE[index])) as u32,
                u32::from(DISTANCE_EXTRA[index]),
            );
            for position in at..at + best_length {
                insert(&mut head, &mut previous, position);
            }
            at += best_length;
        } else {
            bits.symbol(u32::from(bytes[at]));
            insert(&mut head, &mut previous, at);
            at += 1;
        }
    }
    bits.symbol(256);
    let mut out = bits.finish();
    out.extend_from_slice(&crc32(bytes).to_le_bytes());
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::gzip;
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// What the system's `gzip -dc` makes of `compressed`.
    fn gunzip(compressed: &[u8]) -> Vec<u8> {
        let mut child = Command::new("gzip")
            .arg("-dc")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gzip");
        let mut stdin = child.stdin.take().unwrap();
        let input = compressed.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let output = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    }

    #[test]
    fn gzip_reads_back_what_was_compressed() {
        let mut text = String::new();
        for n in 0..3000 {
            text += &format!(
                "fntrace_function_duration_seconds_bucket{{function=\"f{}\",le=\"{}\"}} {}\n",
                n % 97,
                n % 32,
                n * 7919 % 1013
            );
        }
        // Every byte value, runs longer than a match, matches at the
        // window's far end, nothing at all.
        let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        let run = vec![b'a'; 1000];
        let mut far = vec![0u8; 40_000];
        for (i, b) in far.iter_mut().enumerate() {
            *b = (i * 31 % 251) as u8;
        }
        for input in [text.as_bytes(), &bytes, &run, &far, b"", b"ab"] {
            let compressed = gzip(input);
            assert_eq!(gunzip(&compressed), input);
        }
        // Metrics text shrinks many times.
        let compressed = gzip(text.as_bytes());
        assert!(
            compressed.len() * 5 < text.len(),
            "{} of {}",
            compressed.len(),
            text.len()
        );
    }
}
