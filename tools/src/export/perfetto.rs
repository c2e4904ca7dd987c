//! Perfetto's native trace format: a protobuf `perfetto.protos.Trace` of
//! `TracePacket`s carrying `TrackEvent` slices ([`write_perfetto`]), which
//! the Perfetto UI and trace processor open directly, several times smaller
//! than the Chrome JSON of the same trace. The layout is described at
//! [`write_perfetto`].

use std::collections::HashMap;
use std::io::{BufWriter, Write};

use super::chrome::PROGRESS_CALLS;
use super::spool::{AsyncSlice, CallExportOptions, SpooledCalls};
use super::ExportError;
use fntrace_format::Trace;

/// `Trace.packet`.
const TRACE_PACKET: u32 = 1;

/// `TracePacket.compressed_packets`.
const COMPRESSED_PACKETS: u32 = 50;

/// Uncompressed size of a bundle of packets: Perfetto wants each packet of
/// compressed packets under 512 KiB, which deflate (whose worst case adds a
/// few bytes per 16 KiB block) keeps this well under.
const BUNDLE_BYTES: usize = 256 << 10;

/// Fields of `TracePacket`.
mod packet {
    pub const TIMESTAMP: u32 = 8;
    pub const TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    pub const INTERNED_DATA: u32 = 12;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const CLOCK_SNAPSHOT: u32 = 6;
    pub const TRACE_PACKET_DEFAULTS: u32 = 59;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    /// `SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED`.
    pub const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
    /// `SequenceFlags.SEQ_NEEDS_INCREMENTAL_STATE`.
    pub const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
}

/// Fields of `TrackEvent`.
mod track_event {
    pub const DEBUG_ANNOTATIONS: u32 = 4;
    pub const TYPE: u32 = 9;
    pub const NAME_IID: u32 = 10;
    pub const TRACK_UUID: u32 = 11;
    pub const NAME: u32 = 23;
    /// `Type.TYPE_SLICE_BEGIN`.
    pub const SLICE_BEGIN: u64 = 1;
    /// `Type.TYPE_SLICE_END`.
    pub const SLICE_END: u64 = 2;
}

/// Fields of `DebugAnnotation` (a slice's args).
mod debug_annotation {
    pub const BOOL_VALUE: u32 = 2;
    pub const UINT_VALUE: u32 = 3;
    pub const STRING_VALUE: u32 = 6;
    pub const NAME: u32 = 10;
}

/// Fields of `TrackDescriptor`, `ProcessDescriptor` and `ThreadDescriptor`.
mod track {
    pub const UUID: u32 = 1;
    pub const NAME: u32 = 2;
    pub const PROCESS: u32 = 3;
    pub const THREAD: u32 = 4;
    pub const PARENT_UUID: u32 = 5;
    pub const PROCESS_PID: u32 = 1;
    pub const PROCESS_NAME: u32 = 6;
    pub const THREAD_PID: u32 = 1;
    pub const THREAD_TID: u32 = 2;
    pub const THREAD_NAME: u32 = 5;
}

/// Fields of `InternedData` and `EventName`.
mod interned {
    pub const EVENT_NAMES: u32 = 2;
    pub const IID: u32 = 1;
    pub const NAME: u32 = 2;
}

/// Fields of `ClockSnapshot`, `ClockSnapshot.Clock`, `TracePacketDefaults`
/// and `TrackEventDefaults`.
mod clock {
    pub const CLOCKS: u32 = 1;
    pub const CLOCK_ID: u32 = 1;
    pub const TIMESTAMP: u32 = 2;
    pub const IS_INCREMENTAL: u32 = 3;
    /// `BuiltinClock.BOOTTIME`, Perfetto's default trace clock. The events
    /// were taken on CLOCK_MONOTONIC, but a snapshot relating them to
    /// MONOTONIC alone would leave the trace processor without a path to its
    /// trace clock; their times are shown as they are either way.
    pub const TRACE_CLOCK: u64 = 6;
    /// The first of the sequence-scoped, user-defined clock ids.
    pub const INCREMENTAL: u64 = 64;
    pub const DEFAULTS_TIMESTAMP_CLOCK_ID: u32 = 58;
    pub const DEFAULTS_TRACK_EVENT_DEFAULTS: u32 = 11;
    pub const TRACK_EVENT_DEFAULTS_TRACK_UUID: u32 = 11;
}

/// A protobuf message being encoded.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    /// A varint field (wire type 0).
    fn uint(&mut self, field: u32, value: u64) -> &mut Self {
        self.varint(u64::from(field) << 3);
        self.varint(value);
        self
    }

    /// A length-delimited field (wire type 2).
    fn bytes(&mut self, field: u32, bytes: &[u8]) -> &mut Self {
        self.varint((u64::from(field) << 3) | 2);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
        self
    }

    fn string(&mut self, field: u32, text: &str) -> &mut Self {
        self.bytes(field, text.as_bytes())
    }

    fn message(&mut self, field: u32, message: &Message) -> &mut Self {
        self.bytes(field, &message.0)
    }
}

/// Writes `trace` as a Perfetto protobuf trace. Output is buffered here.
///
/// # Layout
///
/// The field numbers written are those of Perfetto's published schema
/// (`protos/perfetto/trace/trace_packet.proto`, `track_event/*.proto`,
/// `interned_data/interned_data.proto`, `clock_snapshot.proto`,
/// `trace_packet_defaults.proto`), written by hand here: the few messages
/// used do not justify a protobuf code generator in the build.
///
/// - One packet describes the process track (`TrackDescriptor` with a
///   `ProcessDescriptor`: pid and executable).
/// - Each thread is its own packet sequence (`trusted_packet_sequence_id`),
///   so that its state is its own. Its first packet clears the incremental
///   state, defines clock 64 as *incremental* (each timestamp a delta from the
///   previous packet's, in ns) against Perfetto's trace clock (the events'
///   monotonic times taken as they are), and sets the sequence's defaults: that clock, and the thread's
///   track for every `TrackEvent`. Its second packet describes the thread's
///   track (`ThreadDescriptor`: pid, tid, name).
/// - Each call is then a `TYPE_SLICE_BEGIN` and a `TYPE_SLICE_END` packet.
///   A begin names its function by an interned id (`name_iid`), the name
///   itself written once per sequence (`InternedData.event_names`) in the
///   first packet that uses it.
///
/// So a call costs about 26 bytes (two packets of a one- or two-byte delta,
/// the sequence, the event type and the name id), against 100 or more in
/// JSON. These packets repeat themselves, so they are written deflated:
/// bundles of packets of at most 256 KiB (before compression), each
/// the `compressed_packets` field of one packet (zlib format, which
/// Perfetto's trace processor inflates), which brings a call to a few bytes.
/// Calls are placed in time as for the Chrome JSON (see [`crate::export`]).
pub fn write_perfetto(trace: &Trace, out: &mut dyn Write) -> Result<(), ExportError> {
    SpooledCalls::new(trace, &CallExportOptions::default())?.write_perfetto(out)
}

impl SpooledCalls {
    /// Writes the calls as a Perfetto protobuf trace, as [`write_perfetto`]
    /// describes it. Output is buffered here.
    pub fn write_perfetto(&self, out: &mut dyn Write) -> Result<(), ExportError> {
        self.write_perfetto_with_progress(out, &mut |_| {})
    }

    /// [`write_perfetto`](Self::write_perfetto), calling
    /// `progress(calls_written)` every 65,536 calls, for a progress bar.
    pub fn write_perfetto_with_progress(
        &self,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), ExportError> {
        let mut out = BufWriter::with_capacity(1 << 20, out);
        write_packets(self, &mut out, progress)?;
        out.flush().map_err(output_error)
    }
}

fn output_error(source: std::io::Error) -> ExportError {
    ExportError::Output {
        what: "Perfetto protobuf trace",
        source,
    }
}

/// Collects framed packets into bundles and writes each, deflated, as one
/// packet of compressed packets.
struct Bundler<W: Write> {
    out: W,
    /// Framed packets (`Trace.packet` fields) not written yet.
    pending: Vec<u8>,
}

impl<W: Write> Bundler<W> {
    fn packet(&mut self, packet: &Message) -> std::io::Result<()> {
        let mut framed = Message::default();
        framed.message(TRACE_PACKET, packet);
        if !self.pending.is_empty() && self.pending.len() + framed.0.len() > BUNDLE_BYTES {
            self.flush_bundle()?;
        }
        self.pending.extend_from_slice(&framed.0);
        Ok(())
    }

    fn flush_bundle(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut encoder =
            flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(&self.pending)?;
        let compressed = encoder.finish()?;
        self.pending.clear();
        let mut packet = Message::default();
        packet.bytes(COMPRESSED_PACKETS, &compressed);
        let mut framed = Message::default();
        framed.message(TRACE_PACKET, &packet);
        self.out.write_all(&framed.0)
    }
}

fn write_packets(
    calls: &SpooledCalls,
    out: &mut impl Write,
    progress: &mut dyn FnMut(u64),
) -> Result<(), ExportError> {
    let mut written = 0u64;
    let mut bundler = Bundler {
        out,
        pending: Vec::new(),
    };
    let out = &mut bundler;
    let emit = |out: &mut Bundler<_>, packet: &Message| out.packet(packet);
    // Track uuids: the process's is its pid, a thread's is its tid with a
    // high bit set, so that the two never collide.
    let process_uuid = u64::from(calls.pid);
    let thread_uuid = |tid: u32| (1 << 32) | u64::from(tid);

    let mut process = Message::default();
    process.uint(track::PROCESS_PID, u64::from(calls.pid));
    if !calls.exe.is_empty() {
        process.string(track::PROCESS_NAME, &calls.exe);
    }
    let mut descriptor = Message::default();
    descriptor
        .uint(track::UUID, process_uuid)
        .message(track::PROCESS, &process);
    let mut packet = Message::default();
    packet
        .uint(packet::TRUSTED_PACKET_SEQUENCE_ID, 1)
        .message(packet::TRACK_DESCRIPTOR, &descriptor);
    emit(out, &packet).map_err(output_error)?;

    for (index, thread) in calls.threads.iter().enumerate() {
        let mut thread_calls = calls.thread_calls(index)?.peekable();
        let sequence = index as u64 + 2;
        let uuid = thread_uuid(thread.info.tid);
        let start = match thread_calls.peek() {
            Some(Ok((_, call))) => call.start,
            _ => 0,
        };

        // Incremental clock and defaults.
        let mut snapshot = Message::default();
        let mut incremental = Message::default();
        incremental
            .uint(clock::CLOCK_ID, clock::INCREMENTAL)
            .uint(clock::TIMESTAMP, start)
            .uint(clock::IS_INCREMENTAL, 1);
        let mut trace_clock = Message::default();
        trace_clock
            .uint(clock::CLOCK_ID, clock::TRACE_CLOCK)
            .uint(clock::TIMESTAMP, start);
        snapshot
            .message(clock::CLOCKS, &incremental)
            .message(clock::CLOCKS, &trace_clock);
        let mut event_defaults = Message::default();
        event_defaults.uint(clock::TRACK_EVENT_DEFAULTS_TRACK_UUID, uuid);
        let mut defaults = Message::default();
        defaults
            .uint(clock::DEFAULTS_TIMESTAMP_CLOCK_ID, clock::INCREMENTAL)
            .message(clock::DEFAULTS_TRACK_EVENT_DEFAULTS, &event_defaults);
        let mut packet = Message::default();
        packet
            .uint(packet::TRUSTED_PACKET_SEQUENCE_ID, sequence)
            .uint(
                packet::SEQUENCE_FLAGS,
                packet::SEQ_INCREMENTAL_STATE_CLEARED,
            )
            .message(packet::CLOCK_SNAPSHOT, &snapshot)
            .message(packet::TRACE_PACKET_DEFAULTS, &defaults);
        emit(out, &packet).map_err(output_error)?;

        // The thread's track.
        let name = thread
            .info
            .name
            .clone()
            .unwrap_or_else(|| format!("thread {}", thread.info.tid));
        let mut descriptor_thread = Message::default();
        descriptor_thread
            .uint(track::THREAD_PID, u64::from(calls.pid))
            .uint(track::THREAD_TID, u64::from(thread.info.tid))
            .string(track::THREAD_NAME, &name);
        let mut descriptor = Message::default();
        descriptor
            .uint(track::UUID, uuid)
            .uint(track::PARENT_UUID, process_uuid)
            .string(track::NAME, &name)
            .message(track::THREAD, &descriptor_thread);
        let mut packet = Message::default();
        packet
            .uint(packet::TRUSTED_PACKET_SEQUENCE_ID, sequence)
            .uint(packet::SEQUENCE_FLAGS, packet::SEQ_NEEDS_INCREMENTAL_STATE)
            .message(packet::TRACK_DESCRIPTOR, &descriptor);
        emit(out, &packet).map_err(output_error)?;

        // The slices, in time order: before a call begins, the open calls
        // that are not its callers end.
        let mut iids: HashMap<usize, u64> = HashMap::new();
        let mut last = start;
        // Calls begun and not ended yet: index and end.
        let mut open: Vec<(usize, u64)> = Vec::new();
        let name_of = |function| calls.names.get(&function).map_or("", String::as_str);
        let mut slice = |out: &mut Bundler<_>, time: u64, begin: Option<usize>| {
            // Never backwards: the clock is incremental and unsigned.
            let time = time.max(last);
            let mut event = Message::default();
            let mut packet = Message::default();
            packet
                .uint(packet::TIMESTAMP, time - last)
                .uint(packet::TRUSTED_PACKET_SEQUENCE_ID, sequence)
                .uint(packet::SEQUENCE_FLAGS, packet::SEQ_NEEDS_INCREMENTAL_STATE);
            last = time;
            match begin {
                Some(function) => {
                    let next = iids.len() as u64 + 1;
                    let iid = *iids.entry(function).or_insert(next);
                    event
                        .uint(track_event::TYPE, track_event::SLICE_BEGIN)
                        .uint(track_event::NAME_IID, iid);
                    if iid == next {
                        let mut event_name = Message::default();
                        event_name
                            .uint(interned::IID, iid)
                            .string(interned::NAME, name_of(function));
                        let mut data = Message::default();
                        data.message(interned::EVENT_NAMES, &event_name);
                        packet.message(packet::INTERNED_DATA, &data);
                    }
                }
                None => {
                    event.uint(track_event::TYPE, track_event::SLICE_END);
                }
            }
            packet.message(packet::TRACK_EVENT, &event);
            emit(out, &packet)
        };
        for call in thread_calls {
            let (index, call) = call?;
            written += 1;
            if written.is_multiple_of(PROGRESS_CALLS) {
                progress(written);
            }
            while let Some(&(top, end)) = open.last() {
                if Some(top) == call.parent {
                    break;
                }
                open.pop();
                slice(out, end, None).map_err(output_error)?;
            }
            slice(out, call.start, Some(call.function)).map_err(output_error)?;
            open.push((index, call.end));
        }
        while let Some((_, end)) = open.pop() {
            slice(out, end, None).map_err(output_error)?;
        }
    }
    write_futures(calls, out, calls.threads.len() as u64 + 2, process_uuid)
        .map_err(output_error)?;
    out.flush_bundle().map_err(output_error)
}

/// Writes each future added to `calls` as a slice across its polls on a
/// track of its own (a child of the process's, named after its async
/// function; futures of one function overlap, and a track's slices must
/// nest), in sequence `sequence`, with absolute timestamps on the trace
/// clock (the threads' incremental clocks start from the same values).
fn write_futures(
    calls: &SpooledCalls,
    out: &mut Bundler<impl Write>,
    sequence: u64,
    process_uuid: u64,
) -> std::io::Result<()> {
    for slice in &calls.futures {
        // Above the threads' uuids (bit 32 and a tid).
        let uuid = (1 << 40) | slice.id;
        let mut descriptor = Message::default();
        descriptor
            .uint(track::UUID, uuid)
            .uint(track::PARENT_UUID, process_uuid)
            .string(track::NAME, &slice.name);
        let mut packet = Message::default();
        packet
            .uint(packet::TRUSTED_PACKET_SEQUENCE_ID, sequence)
            .message(packet::TRACK_DESCRIPTOR, &descriptor);
        out.packet(&packet)?;
        for (time, kind) in [
            (slice.future.start_ns, track_event::SLICE_BEGIN),
            (slice.end_ns, track_event::SLICE_END),
        ] {
            let mut event = Message::default();
            event
                .uint(track_event::TYPE, kind)
                .uint(track_event::TRACK_UUID, uuid);
            if kind == track_event::SLICE_BEGIN {
                event.string(track_event::NAME, &slice.name);
                for arg in future_args(slice) {
                    event.message(track_event::DEBUG_ANNOTATIONS, &arg);
                }
            }
            let mut packet = Message::default();
            packet
                .uint(packet::TIMESTAMP, time)
                .uint(packet::TRUSTED_PACKET_SEQUENCE_ID, sequence)
                .message(packet::TRACK_EVENT, &event);
            out.packet(&packet)?;
        }
    }
    Ok(())
}

/// A future's slice's args, as the Chrome JSON's: `polls`, `busy_ns`,
/// `tids` (comma-separated), `address` (hex), and `unfinished` for one
/// still pending when the trace ends.
fn future_args(slice: &AsyncSlice) -> Vec<Message> {
    use debug_annotation::{BOOL_VALUE, NAME, STRING_VALUE, UINT_VALUE};
    let future = &slice.future;
    let tids: Vec<String> = future.tids.iter().map(u32::to_string).collect();
    let named = |name: &str, value: &dyn Fn(&mut Message)| {
        let mut arg = Message::default();
        arg.string(NAME, name);
        value(&mut arg);
        arg
    };
    let tids = tids.join(",");
    let address = format!("{:#x}", future.address);
    let mut args = vec![
        named("polls", &|arg| {
            arg.uint(UINT_VALUE, future.polls);
        }),
        named("busy_ns", &|arg| {
            arg.uint(UINT_VALUE, future.busy_ns);
        }),
        named("tids", &|arg| {
            arg.string(STRING_VALUE, &tids);
        }),
        named("address", &|arg| {
            arg.string(STRING_VALUE, &address);
        }),
    ];
    if slice.unfinished {
        args.push(named("unfinished", &|arg| {
            arg.uint(BOOL_VALUE, 1);
        }));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_as_protobuf_encodes_them() {
        let mut message = Message::default();
        message.uint(1, 150);
        assert_eq!(message.0, [0x08, 0x96, 0x01]);
        let mut message = Message::default();
        message.string(2, "testing");
        assert_eq!(message.0, b"\x12\x07testing");
        let mut message = Message::default();
        message.uint(60, 1);
        assert_eq!(message.0, [0xe0, 0x03, 0x01]);
    }
}
