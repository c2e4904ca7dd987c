//! Where the CLI's text goes and how it looks: the pager on a terminal,
//! colour only there (and never with `NO_COLOR`), a quiet end when the reader
//! closes the pipe, and a progress indicator on stderr while a big trace
//! directory is read.

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use fntrace_tools::export::{OutputDir, UftraceReader};

/// Why a command stopped early.
pub enum Failure {
    /// Whoever read stdout closed it (`fntrace replay DIR | head`, or `q`
    /// in the pager): not an error, there is just no one left to write for.
    StdoutClosed,
    /// Anything else, said on stderr.
    Message(String),
}

impl From<String> for Failure {
    fn from(why: String) -> Self {
        Failure::Message(why)
    }
}

/// Classifies an error of writing the command's output.
pub fn output_failure(err: io::Error) -> Failure {
    if err.kind() == io::ErrorKind::BrokenPipe {
        Failure::StdoutClosed
    } else {
        Failure::Message(format!("writing to stdout: {err}"))
    }
}

/// The command's text output: stdout, or a pager reading it.
pub struct Output {
    /// The pager, if one runs.
    pager: Option<Child>,
    /// Where text goes.
    sink: Box<dyn Write>,
    /// Whether to colour.
    pub color: bool,
}

impl Output {
    /// Stdout, through a pager when it is a terminal and `no_pager` is not
    /// set (`$PAGER`, else `less -FRX`: it quits at once on a screenful,
    /// keeps colours and leaves the text on the screen).
    pub fn new(no_pager: bool) -> Output {
        let terminal = io::stdout().is_terminal();
        let color = terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        if terminal && !no_pager {
            if let Some((pager, stdin)) = spawn_pager() {
                return Output {
                    pager: Some(pager),
                    sink: Box::new(io::BufWriter::new(stdin)),
                    color,
                };
            }
        }
        Output {
            pager: None,
            sink: Box::new(io::BufWriter::new(io::stdout().lock())),
            color,
        }
    }

    /// `text` in bold yellow when colouring (warnings).
    pub fn warn(&self, text: &str) -> String {
        self.paint("1;33", text)
    }

    /// `text` in bold when colouring (headers).
    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Flushes, and waits for the pager to be quit.
    pub fn finish(mut self) -> Result<(), Failure> {
        let flushed = self.sink.flush();
        // Closing the pipe tells the pager the text is complete.
        drop(self.sink);
        if let Some(mut pager) = self.pager.take() {
            let _ = pager.wait();
        }
        flushed.map_err(output_failure)
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sink.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sink.flush()
    }
}

/// Where an export (`flame`, `chrome`, `perfetto`) goes: the file `-o`
/// names, or standard output (`-o -`, or no `-o`) when that is not a
/// terminal (an SVG, JSON or protobuf is not for reading on a screen).
pub enum Destination {
    /// A file, created or truncated.
    File(PathBuf),
    /// Standard output: a pipe or a redirection.
    Stdout,
}

impl Destination {
    /// The destination `-o` asks for; `what` names the output in the
    /// error a terminal gets.
    pub fn of(output: Option<&Path>, what: &str) -> Result<Destination, Failure> {
        match output {
            Some(path) if path != Path::new("-") => Ok(Destination::File(path.to_path_buf())),
            _ if io::stdout().is_terminal() => Err(format!(
                "{what} is not for a terminal: name a file with -o FILE, or redirect the output"
            )
            .into()),
            _ => Ok(Destination::Stdout),
        }
    }

    /// How messages name it.
    pub fn name(&self) -> String {
        match self {
            Destination::File(path) => path.display().to_string(),
            Destination::Stdout => "standard output".to_string(),
        }
    }

    /// A directory for scratch files while it is written: beside the file
    /// (its file system has room for it), else the temporary directory.
    pub fn scratch_dir(&self) -> PathBuf {
        match self {
            Destination::File(path) => match path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                _ => PathBuf::from("."),
            },
            Destination::Stdout => std::env::temp_dir(),
        }
    }

    /// Writes it with `write`; a file written is said on stderr, a reader
    /// that closes standard output early ends the command quietly.
    pub fn write(
        &self,
        write: impl FnOnce(&mut dyn Write) -> Result<(), String>,
    ) -> Result<(), Failure> {
        match self {
            Destination::File(path) => {
                save(path, |out| write(out))?;
                eprintln!("fntrace: wrote {}", path.display());
                Ok(())
            }
            Destination::Stdout => {
                let mut out = PipeWatch {
                    inner: io::BufWriter::new(io::stdout().lock()),
                    closed: false,
                };
                let written = write(&mut out).and_then(|()| out.flush().map_err(|e| e.to_string()));
                match written {
                    Err(_) if out.closed => Err(Failure::StdoutClosed),
                    Err(why) => Err(format!("writing to standard output: {why}").into()),
                    Ok(()) => Ok(()),
                }
            }
        }
    }
}

/// Writes the file `path` whole with `write`, as every file fntrace makes
/// is written (`fntrace_tools::export::OutputDir`): its directory opened
/// without following a link anywhere in the path and refused if someone
/// else could plant names in it, a temporary file created exclusively
/// there, renamed over `path` once complete. A link or another user's file
/// at `path` is refused, never written through; on any failure nothing
/// is left behind.
pub fn save(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<(), String>,
) -> Result<(), String> {
    let cannot =
        |e: fntrace_tools::export::ExportError| format!("cannot write {}: {e}", path.display());
    let (dir, name) = OutputDir::of_file(path).map_err(cannot)?;
    let mut replacement = dir.replace(&name).map_err(cannot)?;
    let mut out = io::BufWriter::new(replacement.file());
    write(&mut out)?;
    out.flush()
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    drop(out);
    replacement.commit().map_err(cannot)
}

/// A writer that notes whether its reader went away (a broken pipe), which
/// the exporters' errors, made text, no longer say.
struct PipeWatch<W> {
    inner: W,
    closed: bool,
}

impl<W: Write> PipeWatch<W> {
    fn noted<T>(&mut self, result: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &result {
            self.closed |= e.kind() == io::ErrorKind::BrokenPipe;
        }
        result
    }
}

impl<W: Write> Write for PipeWatch<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let result = self.inner.write(buf);
        self.noted(result)
    }

    fn flush(&mut self) -> io::Result<()> {
        let result = self.inner.flush();
        self.noted(result)
    }
}

/// Starts the pager with a pipe to its stdin; `None` if it cannot run (then
/// the text goes to stdout).
fn spawn_pager() -> Option<(Child, ChildStdin)> {
    let pager = std::env::var("PAGER")
        .ok()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| "less -FRX".to_string());
    let mut words = pager.split_whitespace();
    let mut child = Command::new(words.next()?)
        .args(words)
        .stdin(Stdio::piped())
        .spawn()
        .ok()?;
    let stdin = child.stdin.take()?;
    Some((child, stdin))
}

/// Opens the trace directory `dir`, saying plainly when it is not one.
/// `passes` is how many times the command will read every thread's
/// records: the progress bar (on stderr, only when it is a terminal and
/// only once reading has taken a moment) counts that many times the
/// directory's record bytes; 0: no bar. The bar goes when the returned
/// guard is dropped.
pub fn open_trace(dir: &Path, passes: u64) -> Result<(UftraceReader, ProgressBar), Failure> {
    let shown = dir.display();
    if !dir.exists() {
        return Err(format!("{shown} does not exist").into());
    }
    if is_snapshot_file(dir) {
        return Err(not_a_trace(dir).into());
    }
    if let Some(kind) = std::fs::metadata(dir)
        .ok()
        .and_then(|m| not_a_directory(&m))
    {
        return Err(format!("{shown} is {kind}, not a directory (give a trace directory)").into());
    }
    // Only a missing `info` is said here: anything else there (a FIFO, a
    // link) the reader refuses with what it is.
    if std::fs::symlink_metadata(dir.join("info")).is_err() {
        return Err(format!(
            "{shown} is not a trace directory (no info file); fntrace::dump and \
             `uftrace record` write one"
        )
        .into());
    }
    let reader = UftraceReader::open(dir).map_err(|e| e.to_string())?;
    let unfinished = fntrace_tools::export::process_ledger(dir).unfinished();
    if unfinished > 0 {
        // Before the numbers they lack, as lost events are said.
        eprintln!(
            "fntrace: {shown}: {unfinished} process(es) did not finish their part of the \
             recording (killed by SIGKILL?): what they held after their last drain is missing \
             below, and cannot be counted"
        );
    }
    let bar = ProgressBar::new(shown.to_string(), reader.data_bytes() * passes);
    let shown_bar = bar.0.clone();
    let total = reader.data_bytes() * passes;
    let started = Instant::now();
    reader.set_progress(move |done| {
        if started.elapsed() > PROGRESS_DELAY {
            shown_bar.set_length(total.max(done));
            shown_bar.set_position(done);
        }
    });
    Ok((reader, bar))
}

/// What a path that is not a directory is, for the error that says so
/// (`None` for a directory).
fn not_a_directory(metadata: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let kind = metadata.file_type();
    Some(if kind.is_dir() {
        return None;
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "a regular file"
    })
}

/// Wait before a progress bar shows: small directories read in no time.
const PROGRESS_DELAY: Duration = Duration::from_millis(300);

/// A bar of the record bytes read, cleared when dropped.
pub struct ProgressBar(indicatif::ProgressBar);

impl ProgressBar {
    /// A bar of `total` calls written to `destination`, shown as the
    /// reading bar is.
    pub fn writing(destination: &Destination, total: u64) -> ProgressBar {
        ProgressBar::with_template(
            destination.name(),
            total,
            "{spinner} writing {msg} {wide_bar} {human_pos}/{human_len} calls {elapsed}",
        )
    }

    /// Moves the bar to `done`.
    pub fn set_position(&self, done: u64) {
        self.0.set_position(done);
    }

    /// Takes the bar off the screen (before a line is written to stderr).
    pub fn clear(&self) {
        self.0.finish_and_clear();
    }

    fn new(message: String, total: u64) -> ProgressBar {
        ProgressBar::with_template(
            message,
            total,
            "{spinner} reading {msg} {wide_bar} {binary_bytes}/{binary_total_bytes} {elapsed}",
        )
    }

    fn with_template(message: String, total: u64, template: &str) -> ProgressBar {
        if total == 0 || !io::stderr().is_terminal() {
            return ProgressBar(indicatif::ProgressBar::hidden());
        }
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(total),
            indicatif::ProgressDrawTarget::stderr(),
        );
        bar.set_style(indicatif::ProgressStyle::with_template(template).expect("a valid template"));
        // One record file can be most of the data: keep the bar moving
        // (spinner, elapsed time) while it is read.
        let ticking = bar.clone();
        std::thread::spawn(move || {
            std::thread::sleep(PROGRESS_DELAY);
            if !ticking.is_finished() {
                ticking.set_message(message);
                ticking.enable_steady_tick(Duration::from_millis(100));
            }
        });
        ProgressBar(bar)
    }
}

impl Drop for ProgressBar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// Whether `path` holds a live profile's snapshot (its text form) rather
/// than being a trace directory. Only a regular file is opened, and
/// without blocking: a FIFO (or a device) named there must not hang the
/// command in `open` or `read`; the trace's opening then says what it is.
pub fn is_snapshot_file(path: &std::path::Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut start = [0; 16];
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .and_then(|file| {
            // Swapped for something else since `metadata`: not read.
            match file.metadata()?.is_file() {
                true => Ok(file),
                false => Err(std::io::ErrorKind::InvalidInput.into()),
            }
        })
        .and_then(|mut file| file.read_exact(&mut start))
        .is_ok_and(|()| &start == b"fntrace-profile ")
}

/// Why a command that reads trace directories cannot read the snapshot at
/// `path`, and which commands can.
pub fn not_a_trace(path: &std::path::Path) -> String {
    let shown = path.display();
    format!(
        "{shown} is a live profile's snapshot, not a trace directory: only \
         `fntrace report {shown}`, `fntrace flame {shown}` and `fntrace pprof {shown}` \
         read snapshots"
    )
}
