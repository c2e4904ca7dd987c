//! One thread's record file (`TID.dat`) read record by record through a
//! buffer: memory does not grow with the file.

use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::path::{Path, PathBuf};

use super::super::dirfd::open_regular;
use super::super::ExportError;
use super::format::{
    decode, RawRecord, RECORD_MAGIC, RECORD_SIZE, TYPE_ENTRY, TYPE_EVENT, TYPE_EXIT, TYPE_LOST,
};
use crate::argspec::{self, ArgSpec};
use crate::trace::{EventKind, GraphEvent};

/// The values a record at an address (at a time) carries, from the
/// directory's specs; an error says why none can be known.
pub(super) type ValuesAt<'a> = Box<dyn Fn(u64, u64) -> Result<Vec<ArgSpec>, String> + Send + 'a>;

/// Bytes read from the file at a time.
const BUFFER_BYTES: usize = 1 << 20;

/// The entries and exits of a `.dat` file in file order, less those whose
/// indices (among entries and exits) fntrace listed as added, with the
/// number of records the lost records among them say were lost. Addresses
/// are as recorded (the reader maps them to functions).
pub(super) struct ThreadRecords<'a> {
    path: PathBuf,
    /// `None`: the file does not exist (uftrace makes none for a thread
    /// that recorded nothing).
    file: Option<BufReader<File>>,
    /// Sorted indices of the records fntrace added.
    added: std::iter::Peekable<std::slice::Iter<'a, usize>>,
    /// Index of the next entry or exit among the file's entries and exits.
    index: usize,
    /// Byte offset of the next record.
    pub(super) offset: u64,
    /// Events lost, from the lost records read so far.
    pub(super) lost: u64,
    /// The values of the records that carry arguments or a return value.
    values_at: Option<ValuesAt<'a>>,
    /// The last event's values and their data (none if it carried none).
    pub(super) values: Vec<ArgSpec>,
    pub(super) data: Vec<u8>,
}

impl<'a> ThreadRecords<'a> {
    /// Opens `path`; `added` are the sorted indices of `fntrace.txt`.
    pub(super) fn open(
        path: &Path,
        added: &'a [usize],
        values_at: Option<ValuesAt<'a>>,
    ) -> Result<Self, ExportError> {
        // A FIFO in place of the file would block a plain open forever.
        let file = open_regular(path)?.map(|file| BufReader::with_capacity(BUFFER_BYTES, file));
        Ok(ThreadRecords {
            path: path.to_path_buf(),
            file,
            added: added.iter().peekable(),
            index: 0,
            offset: 0,
            lost: 0,
            values_at,
            values: Vec::new(),
            data: Vec::new(),
        })
    }

    /// Fills `buf` from the file; returns how many bytes it got (fewer
    /// than asked only at the end of the file).
    fn read_up_to(&mut self, buf: &mut [u8]) -> Result<usize, ExportError> {
        let Some(file) = &mut self.file else {
            return Ok(0);
        };
        let mut got = 0;
        while got < buf.len() {
            match file.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(ExportError::io(&self.path, "reading", e)),
            }
        }
        Ok(got)
    }

    /// The next entry or exit, `None` at the end of the file.
    pub(super) fn next_event(&mut self) -> Result<Option<GraphEvent>, ExportError> {
        loop {
            let mut bytes = [0u8; RECORD_SIZE];
            let at = self.offset;
            match self.read_up_to(&mut bytes)? {
                0 => return Ok(None),
                RECORD_SIZE => {}
                left => {
                    return Err(ExportError::malformed(
                        &self.path,
                        format!(
                            "truncated record at byte {at}: {left} bytes left, records have \
                             {RECORD_SIZE}"
                        ),
                    ))
                }
            }
            self.offset += RECORD_SIZE as u64;
            let RawRecord {
                time,
                kind,
                more,
                magic,
                depth,
                addr,
            } = decode(&bytes);
            if magic != RECORD_MAGIC {
                return Err(ExportError::malformed(
                    &self.path,
                    format!(
                        "bad record magic {magic} (expected {RECORD_MAGIC}) in record {} at byte \
                         {at}",
                        at / RECORD_SIZE as u64
                    ),
                ));
            }
            match kind {
                TYPE_ENTRY | TYPE_EXIT => {
                    self.data.clear();
                    if more {
                        self.read_values(addr, time, kind == TYPE_EXIT, at)?;
                    }
                    self.index += 1;
                    if self.added.next_if_eq(&&(self.index - 1)).is_some() {
                        continue;
                    }
                    let Ok(function) = usize::try_from(addr) else {
                        continue;
                    };
                    return Ok(Some(GraphEvent {
                        time_ns: time,
                        function,
                        depth,
                        kind: if kind == TYPE_ENTRY {
                            EventKind::Entry
                        } else {
                            EventKind::Exit
                        },
                    }));
                }
                TYPE_LOST => self.lost = self.lost.saturating_add(addr),
                _ => {
                    debug_assert_eq!(kind, TYPE_EVENT);
                    if more {
                        self.skip_event_data()?;
                    }
                }
            }
        }
    }

    /// Reads the data of the values after the record at byte `at` (see
    /// [`argspec`]): their layout comes from the directory's specs.
    fn read_values(
        &mut self,
        addr: u64,
        time: u64,
        retval: bool,
        at: u64,
    ) -> Result<(), ExportError> {
        let path = self.path.clone();
        let bad = |why: String| {
            ExportError::malformed(
                &path,
                format!("record at byte {at} carries arguments or a return value: {why}"),
            )
        };
        let values = match &self.values_at {
            Some(values_at) => values_at(addr, time).map_err(bad)?,
            None => return Err(bad("the directory's info gives no spec for them".into())),
        };
        let truncated = || bad("its data is cut short".to_string());
        let mut data = std::mem::take(&mut self.data);
        data.clear();
        for value in values.iter().filter(|v| v.slot.at_exit() == retval) {
            let start = data.len();
            let len = if value.format.is_text() {
                data.resize(start + 2, 0);
                if self.read_up_to(&mut data[start..])? != 2 {
                    return Err(truncated());
                }
                2 + usize::from(u16::from_le_bytes([data[start], data[start + 1]]))
            } else {
                value.data_size()
            };
            let got = data.len();
            data.resize(start + len.next_multiple_of(4), 0);
            if self.read_up_to(&mut data[got..])? != data.len() - got {
                return Err(truncated());
            }
        }
        let got = data.len();
        data.resize(got.next_multiple_of(8), 0);
        if self.read_up_to(&mut data[got..])? != data.len() - got {
            return Err(truncated());
        }
        debug_assert_eq!(argspec::data_len(&values, retval, &data), Some(data.len()));
        self.offset += data.len() as u64;
        self.data = data;
        self.values = values;
        Ok(())
    }

    /// Skips the data after an event record: a u16 length, the data,
    /// padding to 8 bytes.
    fn skip_event_data(&mut self) -> Result<(), ExportError> {
        let at = self.offset;
        let path = self.path.clone();
        let truncated =
            || ExportError::malformed(&path, format!("truncated event data at byte {at}"));
        let mut len = [0u8; 2];
        if self.read_up_to(&mut len)? != 2 {
            return Err(truncated());
        }
        let skip = (usize::from(u16::from_le_bytes(len)) + 2).div_ceil(8) * 8;
        let mut rest = vec![0u8; skip - 2];
        if self.read_up_to(&mut rest)? != rest.len() {
            return Err(truncated());
        }
        self.offset += skip as u64;
        Ok(())
    }
}
