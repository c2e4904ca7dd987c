//! The hash of the latency report's maps, which are keyed by function
//! addresses and hit once per recorded call: std's SipHash was a tenth of a
//! report's time on big traces. It is rustc's FxHash (an add and a multiply
//! per word, as the rustc-hash crate computes it for integers), written out
//! here so that a service linking the runtime builds one crate fewer; the
//! CLI's reports take it from rustc-hash.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` hashed with [`FxHasher`] (made with `HashMap::default()`).
pub(crate) type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// FxHash: not resistant to chosen keys, which a trace's addresses and
/// names are not.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FxHasher {
    hash: u64,
}

/// rustc-hash's multiplier (64-bit).
const K: u64 = 0xf1357aea2e62a9c5;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.hash = self.hash.wrapping_add(word).wrapping_mul(K);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Names (the by-name rows): word by word, the last one zero-padded,
        // then the length, so that "a" and "a\0" differ.
        for chunk in bytes.chunks(8) {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        self.add(bytes.len() as u64);
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        // The multiply leaves its entropy in the top bits; hashbrown picks
        // buckets from the bottom ones.
        self.hash.rotate_left(26)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash(value: impl Hash) -> u64 {
        BuildHasherDefault::<FxHasher>::default().hash_one(value)
    }

    #[test]
    fn distinct_keys_hash_apart() {
        assert_ne!(hash(0x1000usize), hash(0x1010usize));
        assert_ne!(hash("a"), hash("a\0"));
        assert_ne!(hash("main"), hash("mainx"));
        assert_eq!(hash("work"), hash(String::from("work")));
        let mut map: FxHashMap<usize, u32> = FxHashMap::default();
        for address in (0..1000).map(|i| 0x40_0000 + 16 * i) {
            *map.entry(address).or_default() += 1;
        }
        assert_eq!(map.len(), 1000);
    }
}
