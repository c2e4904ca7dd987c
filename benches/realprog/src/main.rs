//! A real program for `cargo bench --bench record`: two threads each
//! serialise JSON documents with `serde_json`, parse them back and search
//! them with `regex-automata`. `realprog DOCS [PER_MS]`: DOCS documents
//! per thread, PER_MS documents between 1 ms sleeps (0: no sleep).

use regex_automata::meta::Regex;
use serde_json::{json, Value};

fn document(i: u64) -> Value {
    json!({
        "id": i,
        "name": format!("user-{i}"),
        "email": format!("user{i}@example.com"),
        "tags": ["alpha", "beta", i % 7],
        "score": i as f64 * 1.5,
        "address": { "street": format!("{} Main St", i % 1000), "zip": format!("{:05}", i % 100_000) },
    })
}

/// Returns (regex matches, bytes of JSON) for `docs` documents.
fn work(thread: u64, docs: u64, per_ms: u64) -> (usize, usize) {
    let email = Regex::new(r"[a-z0-9]+@[a-z]+\.com").expect("regex");
    let zip = Regex::new(r#""zip":"([0-9]{5})""#).expect("regex");
    let (mut matches, mut bytes) = (0, 0);
    for i in 0..docs {
        let id = thread * docs + i;
        let text = serde_json::to_string(&document(id)).expect("serialise");
        let parsed: Value = serde_json::from_str(&text).expect("parse");
        assert_eq!(parsed["id"], id);
        bytes += text.len();
        matches += email.find_iter(&text).count() + zip.find_iter(&text).count();
        if per_ms != 0 && i % per_ms == per_ms - 1 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    (matches, bytes)
}

fn main() {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let (docs, per_ms) = (arg(1, 10_000), arg(2, 0));
    let threads: Vec<_> = (0..2)
        .map(|t| std::thread::spawn(move || work(t, docs, per_ms)))
        .collect();
    for thread in threads {
        let (matches, bytes) = thread.join().expect("worker");
        println!("{matches} matches in {bytes} bytes");
    }
}
