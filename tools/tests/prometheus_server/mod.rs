//! A real Prometheus server (Debian package `prometheus`) for the tests
//! that have it scrape a traced program's `/metrics`: started in a
//! directory of its own, on a free loopback port, scraping every second;
//! queried through its HTTP API.
// Each test binary uses some of these.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on `127.0.0.1:port`: the status code and body, or why not.
pub fn get(port: u16, path: &str) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| e.to_string())?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP header end in {response:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    Ok((status, body.to_string()))
}

/// `text` percent-encoded for a query string.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server scraping `target` every second; stopped on drop.
pub struct Prometheus {
    /// The server's process.
    pub child: Child,
    /// Its HTTP port.
    pub port: u16,
}

impl Prometheus {
    /// A server with `flags` more, in `test_dir/prometheus`; its log's
    /// path.
    pub fn start_in(test_dir: &Path, target: &str, flags: &[&str]) -> (Prometheus, PathBuf) {
        let dir = test_dir.join("prometheus");
        std::fs::create_dir_all(&dir).unwrap();
        (
            Prometheus::start(&dir, target, flags),
            dir.join("prometheus.log"),
        )
    }

    pub fn start(dir: &Path, target: &str, flags: &[&str]) -> Prometheus {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: fntrace\n    static_configs:\n      \
                 - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(flags)
            .stdout(Stdio::null())
            .stderr(log)
            .current_dir(dir)
            .spawn()
            .expect("prometheus (apt-get install prometheus) must be installed for this test");
        let server = Prometheus { child, port };
        let start = Instant::now();
        while get(port, "/-/ready").map(|(code, _)| code) != Ok(200) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "prometheus is not ready: {}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        server
    }

    /// The value of the instant query `query`'s single series, if it has
    /// one.
    pub fn value(&self, query: &str) -> Option<String> {
        let (code, body) =
            get(self.port, &format!("/api/v1/query?query={}", encode(query))).ok()?;
        assert_eq!(code, 200, "{body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        let result = json["data"]["result"].as_array()?;
        if result.len() != 1 {
            return None;
        }
        result[0]["value"][1].as_str().map(String::from)
    }

    /// Waits (up to 30 s: a few scrapes) until `query` gives `expected`;
    /// the last value seen otherwise.
    pub fn wait_for(&self, query: &str, expected: &str) -> Result<(), Option<String>> {
        let start = Instant::now();
        loop {
            let value = self.value(query);
            if value.as_deref() == Some(expected) {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(30) {
                return Err(value);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The type and unit Prometheus recorded for `metric` (from the
    /// scrape's metadata; only OpenMetrics has units).
    pub fn metadata(&self, metric: &str) -> (String, String) {
        let (_, body) = get(
            self.port,
            &format!("/api/v1/metadata?metric={}", encode(metric)),
        )
        .unwrap();
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        let field = |name: &str| {
            json["data"][metric][0][name]
                .as_str()
                .unwrap_or("")
                .to_string()
        };
        (field("type"), field("unit"))
    }

    /// Checks each `(query, value)`, waiting for the scrapes.
    pub fn expect(&self, log: &Path, expected: &[(&str, &str)]) {
        for (query, value) in expected {
            if let Err(seen) = self.wait_for(query, value) {
                panic!(
                    "{query}: {seen:?}, not {value}\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
