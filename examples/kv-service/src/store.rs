//! The key-value store: a map split into shards, each behind its own lock,
//! so that requests for different keys rarely wait for one another. The
//! locks are held only for a map operation, never across an `.await`.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, MutexGuard};

/// Shards: a power of two, a few times the worker threads.
const SHARDS: usize = 16;

/// Keys to values, shared by every connection.
pub struct Store {
    hasher: RandomState,
    shards: Vec<Mutex<HashMap<String, String>>>,
}

impl Store {
    /// An empty store.
    pub fn new() -> Self {
        Store {
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<String> {
        self.shard(key).get(key).cloned()
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: &str, value: &str) {
        self.shard(key).insert(key.to_string(), value.to_string());
    }

    /// Removes `key`; whether it was there.
    pub fn delete(&self, key: &str) -> bool {
        self.shard(key).remove(key).is_some()
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, HashMap<String, String>> {
        let index = self.hasher.hash_one(key) as usize % SHARDS;
        // A panic while a shard was locked leaves a map that is still whole
        // (each operation is one call): keep serving it.
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
