//! The pprof profile the CLI writes: the format's `profile.proto` message
//! ([`pprof_message`]) compressed by flate2's gzip, a fifth of its size or
//! less (the runtime, without a compressor, frames it in stored blocks).

use std::io::Write;

use super::ExportError;
use crate::analysis::ProfileSnapshot;
use fntrace_format::export::{pprof_message, PprofInfo};

/// Writes `snapshot`'s call paths as a gzipped pprof profile
/// ([`pprof_message`], gzipped). Paths with nothing to count are left out;
/// an empty snapshot makes a profile without samples.
pub fn write_pprof(
    snapshot: &ProfileSnapshot,
    info: &PprofInfo,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    let bytes = pprof_message(snapshot, info);
    let failed = |source| ExportError::Output {
        what: "pprof profile",
        source,
    };
    let mut gzip = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gzip.write_all(&bytes).map_err(failed)?;
    gzip.finish().map_err(failed)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{FunctionProfile, PathProfile};
    use fntrace_format::export::gzip_stored;
    use std::io::Read;

    /// Both gzip forms, flate2's and the runtime's stored blocks, read
    /// back by flate2 as the message.
    #[test]
    fn both_gzip_forms_hold_the_message() {
        let snapshot = ProfileSnapshot {
            functions: vec![FunctionProfile {
                function: 0x401136,
                name: "leaf".into(),
                total_ns: 30,
                self_ns: 30,
                ..FunctionProfile::default()
            }],
            paths: vec![PathProfile {
                parent: None,
                function: 0,
                calls: 2,
                total_ns: 30,
                self_ns: 30,
            }],
            ..ProfileSnapshot::default()
        };
        let message = pprof_message(&snapshot, &PprofInfo::default());
        let mut gzipped = Vec::new();
        write_pprof(&snapshot, &PprofInfo::default(), &mut gzipped).unwrap();
        let big: Vec<u8> = (0..200_000u32).map(|n| (n % 251) as u8).collect();
        for (what, gzipped, expected) in [
            ("flate2", gzipped, &message),
            ("stored", gzip_stored(&message), &message),
            ("stored, 4 blocks", gzip_stored(&big), &big),
        ] {
            assert_eq!(gzipped[..2], [0x1f, 0x8b], "{what}");
            let mut read = Vec::new();
            flate2::read::GzDecoder::new(&gzipped[..])
                .read_to_end(&mut read)
                .unwrap();
            assert_eq!(&read, expected, "{what}");
        }
        // The sample's name is in the message.
        assert!(message.windows(4).any(|w| w == b"leaf"));
    }
}
