//! The control protocol's replies: a [`Reply`] encoded as lines (see the
//! module above for the protocol; the requests are parsed by
//! `fntrace_format::wire::request`, which `fntrace ctl` writes them
//! with).

/// A reply: `ok` with a summary and lines, or an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    ok: bool,
    first: String,
    lines: Vec<String>,
}

impl Reply {
    /// `ok SUMMARY`.
    pub(crate) fn ok(summary: impl Into<String>) -> Reply {
        Reply {
            ok: true,
            first: summary.into(),
            lines: Vec::new(),
        }
    }

    /// `error: MESSAGE`.
    pub(crate) fn error(message: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            first: message.into(),
            lines: Vec::new(),
        }
    }

    /// Adds `text`'s lines after the first.
    pub(crate) fn with_lines(mut self, text: &str) -> Reply {
        self.lines.extend(text.lines().map(String::from));
        self
    }

    /// Adds a `key: value` line.
    pub(crate) fn with(mut self, key: &str, value: impl std::fmt::Display) -> Reply {
        self.lines.push(format!("{key}: {value}"));
        self
    }

    /// The bytes sent: the first line, the others, then an empty line. No
    /// line of a reply is empty (an empty one is sent as one space) and
    /// none holds a control character, so the empty line always ends it.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let clean = |line: &str| -> String {
            let line: String = line
                .chars()
                .map(|c| if c.is_control() && c != '\t' { ' ' } else { c })
                .collect();
            if line.is_empty() {
                " ".to_string()
            } else {
                line
            }
        };
        let mut out = String::new();
        match (self.ok, self.first.is_empty()) {
            (true, true) => out.push_str("ok"),
            (true, false) => out.push_str(&format!("ok {}", clean(&self.first))),
            (false, _) => out.push_str(&format!("error: {}", clean(&self.first))),
        }
        out.push('\n');
        for line in &self.lines {
            out.push_str(&clean(line));
            out.push('\n');
        }
        out.push('\n');
        out.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_end_with_an_empty_line_and_hold_none() {
        let reply = Reply::ok("done").with("events", 3).with_lines("a\n\nb\x07");
        assert_eq!(reply.encode(), b"ok done\nevents: 3\na\n \nb \n\n");
        assert_eq!(Reply::ok("").encode(), b"ok\n\n");
        assert_eq!(Reply::error("bad\nthing").encode(), b"error: bad thing\n\n");
    }
}
