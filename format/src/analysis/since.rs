//! The calls made between two snapshots of one live profile
//! ([`ProfileSnapshot::since`]): what the metrics endpoint's
//! `/debug/pprof/profile?seconds=N` serves, the calls of those N seconds,
//! as Go's `net/http/pprof` serves the CPU samples of a window.

use std::collections::HashMap;
use std::fmt;

use super::histogram::Histogram;
use super::profile::{NotKept, PathProfile, ProfileSnapshot};

/// Why two snapshots have no difference: a number of the earlier one is
/// larger than the later one's, or a path or function of the earlier one
/// is gone, which only a reset of the profile between them (or snapshots
/// of different processes) makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotLater {
    /// What went down or is gone (`calls of path main > handle`).
    pub what: String,
}

impl fmt::Display for NotLater {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the profile was reset between the two snapshots: {} went down",
            self.what
        )
    }
}

impl std::error::Error for NotLater {}

impl ProfileSnapshot {
    /// The calls made between `earlier` and this snapshot of the same
    /// profile: every function and call path of this one (same indexes),
    /// its numbers minus those of the same function (same address) and
    /// the same path (same chain of addresses) in `earlier`. Durations'
    /// buckets, counts and sums are differences too; their minimum and
    /// maximum, which no difference gives, are this snapshot's, of every
    /// call so far. Calls running are this snapshot's; `taken_ns` and
    /// `threads` too. Functions and paths without calls in between are
    /// kept, with zeros (the pprof writer leaves them out).
    pub fn since(&self, earlier: &ProfileSnapshot) -> Result<ProfileSnapshot, NotLater> {
        let down = |what: String| NotLater { what };
        let of_address: HashMap<usize, usize> = earlier
            .functions
            .iter()
            .enumerate()
            .map(|(index, f)| (f.function, index))
            .collect();
        let mut functions = Vec::with_capacity(self.functions.len());
        let mut matched_functions = 0;
        for function in &self.functions {
            let mut row = function.clone();
            if let Some(&at) = of_address.get(&function.function) {
                matched_functions += 1;
                let before = &earlier.functions[at];
                let name = &function.name;
                row.durations = durations_since(&function.durations, &before.durations)
                    .ok_or_else(|| down(format!("the durations of {name}")))?;
                row.total_ns = less(function.total_ns, before.total_ns)
                    .ok_or_else(|| down(format!("the total time of {name}")))?;
                row.self_ns = less(function.self_ns, before.self_ns)
                    .ok_or_else(|| down(format!("the self time of {name}")))?;
            }
            functions.push(row);
        }
        if matched_functions < earlier.functions.len() {
            return Err(down("the number of functions".into()));
        }
        // Earlier paths by (earlier parent, address); a later path's match
        // follows from its parent's (parents come first).
        let address = |snapshot: &ProfileSnapshot, path: &PathProfile| {
            snapshot.functions.get(path.function).map(|f| f.function)
        };
        let earlier_paths: HashMap<(Option<usize>, Option<usize>), usize> = earlier
            .paths
            .iter()
            .enumerate()
            .map(|(index, p)| ((p.parent, address(earlier, p)), index))
            .collect();
        let mut matches: Vec<Option<usize>> = Vec::with_capacity(self.paths.len());
        let mut paths = Vec::with_capacity(self.paths.len());
        let mut matched_paths = 0;
        for path in &self.paths {
            let parent = match path.parent {
                None => Some(None),
                Some(p) => matches.get(p).copied().flatten().map(Some),
            };
            let found = parent.and_then(|parent| earlier_paths.get(&(parent, address(self, path))));
            let mut row = path.clone();
            if let Some(&at) = found {
                matched_paths += 1;
                let before = &earlier.paths[at];
                let what = || down(format!("a call path of {}", self.name_of(path)));
                row.calls = less(path.calls, before.calls).ok_or_else(what)?;
                row.total_ns = less(path.total_ns, before.total_ns).ok_or_else(what)?;
                row.self_ns = less(path.self_ns, before.self_ns).ok_or_else(what)?;
            }
            matches.push(found.copied());
            paths.push(row);
        }
        if matched_paths < earlier.paths.len() {
            return Err(down("the number of call paths".into()));
        }
        Ok(ProfileSnapshot {
            taken_ns: self.taken_ns,
            threads: self.threads,
            functions,
            paths,
            not_kept: NotKept {
                paths: self.not_kept.paths.saturating_sub(earlier.not_kept.paths),
                functions: self
                    .not_kept
                    .functions
                    .saturating_sub(earlier.not_kept.functions),
            },
        })
    }

    /// The name of `path`'s function (`?` if its index is out of range).
    fn name_of(&self, path: &PathProfile) -> &str {
        self.functions
            .get(path.function)
            .map_or("?", |f| f.name.as_str())
    }
}

/// `later - earlier`, if not negative.
fn less(later: u64, earlier: u64) -> Option<u64> {
    later.checked_sub(earlier)
}

/// The durations recorded in `later` and not in `earlier`, bucket by
/// bucket; `None` if a bucket went down.
fn durations_since(later: &Histogram, earlier: &Histogram) -> Option<Histogram> {
    let before: HashMap<usize, u64> = earlier.buckets().collect();
    let mut left = before.len();
    let mut buckets = Vec::new();
    for (index, count) in later.buckets() {
        let had = before.get(&index).copied();
        left -= usize::from(had.is_some());
        buckets.push((index, less(count, had.unwrap_or(0))?));
    }
    if left != 0 {
        return None;
    }
    let sum = less(later.sum(), earlier.sum())?;
    Some(Histogram::from_buckets(
        buckets,
        sum,
        later.min(),
        later.max(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::FunctionProfile;

    /// A snapshot of `main → work`, `main → leaf`: each function's calls
    /// (durations of 100 ns each) and each path's.
    fn snapshot(work: u64, leaf: u64, with_leaf: bool) -> ProfileSnapshot {
        let function = |address: usize, name: &str, calls: u64| {
            let mut durations = Histogram::new();
            durations.record_n(100, calls);
            FunctionProfile {
                function: address,
                name: name.into(),
                durations,
                total_ns: calls * 100,
                self_ns: calls * 100,
                running: 0,
            }
        };
        let path = |parent, function, calls: u64| PathProfile {
            parent,
            function,
            calls,
            total_ns: calls * 100,
            self_ns: calls * 100,
        };
        let mut snapshot = ProfileSnapshot {
            taken_ns: 1,
            threads: 1,
            functions: vec![function(0x10, "main", 0), function(0x20, "work", work)],
            paths: vec![path(None, 0, 0), path(Some(0), 1, work)],
            not_kept: NotKept::default(),
        };
        if with_leaf {
            // Listed before work in the later snapshot: matched by
            // address, not index.
            snapshot.functions.insert(1, function(0x30, "leaf", leaf));
            snapshot.functions[2].function = 0x20;
            snapshot.paths[1].function = 2;
            snapshot.paths.push(path(Some(0), 1, leaf));
        }
        snapshot
    }

    #[test]
    fn the_difference_is_the_calls_in_between() {
        let earlier = snapshot(3, 0, false);
        let later = snapshot(10, 4, true);
        let window = later.since(&earlier).unwrap();
        let calls: Vec<(Option<usize>, &str, u64, u64)> = window
            .paths
            .iter()
            .map(|p| (p.parent, later.name_of(p), p.calls, p.total_ns))
            .collect();
        assert_eq!(
            calls,
            [
                (None, "main", 0, 0),
                (Some(0), "work", 7, 700),
                (Some(0), "leaf", 4, 400)
            ]
        );
        let work = &window.functions[2];
        assert_eq!((work.name.as_str(), work.durations.count()), ("work", 7));
        assert_eq!((work.durations.sum(), work.total_ns), (700, 700));
        assert_eq!(window.functions[1].durations.count(), 4);
        assert_eq!(later.since(&later).unwrap().paths[1].calls, 0);
    }

    #[test]
    fn a_reset_in_between_is_refused() {
        let earlier = snapshot(10, 4, true);
        let why = snapshot(3, 4, true).since(&earlier).unwrap_err();
        assert!(why.to_string().contains("the durations of work"), "{why}");
        let why = snapshot(10, 0, false).since(&earlier).unwrap_err();
        assert!(
            why.to_string().starts_with("the profile was reset"),
            "{why}"
        );
        assert!(ProfileSnapshot::default().since(&earlier).is_err());
    }
}
