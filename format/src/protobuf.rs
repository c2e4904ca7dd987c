//! The few pieces of the protobuf wire format that fntrace's encoders
//! need (pprof profiles, Prometheus's protobuf exposition): varints,
//! zigzag integers, doubles, length-delimited and packed fields. Written
//! by hand, not generated from schemas: the messages are small and fixed.

/// Wire types.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LENGTH_DELIMITED: u64 = 2;

/// Appends `value` as a base-128 varint, low groups first.
pub(crate) fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// `value` zigzag-encoded, as `sint32` and `sint64` fields carry it:
/// small magnitudes of either sign give small varints.
pub(crate) fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// A varint field; zero, the default, is not written.
pub(crate) fn field_varint(out: &mut Vec<u8>, field: u64, value: u64) {
    if value != 0 {
        varint(out, field << 3 | VARINT);
        varint(out, value);
    }
}

/// A `double` field; zero, the default, is not written.
pub(crate) fn field_double(out: &mut Vec<u8>, field: u64, value: f64) {
    if value != 0.0 {
        varint(out, field << 3 | FIXED64);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

/// A length-delimited field: bytes, a string or an embedded message.
pub(crate) fn field_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    varint(out, field << 3 | LENGTH_DELIMITED);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A packed repeated varint field (nothing when empty).
pub(crate) fn field_packed(out: &mut Vec<u8>, field: u64, values: impl IntoIterator<Item = u64>) {
    let mut packed = Vec::new();
    for value in values {
        varint(&mut packed, value);
    }
    if !packed.is_empty() {
        field_bytes(out, field, &packed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_little_endian_groups_of_seven_bits() {
        let encoded = |value| {
            let mut out = Vec::new();
            varint(&mut out, value);
            out
        };
        assert_eq!(encoded(0), [0]);
        assert_eq!(encoded(1), [1]);
        assert_eq!(encoded(127), [0x7f]);
        assert_eq!(encoded(128), [0x80, 0x01]);
        assert_eq!(encoded(300), [0xac, 0x02]);
        assert_eq!(encoded(u64::MAX).len(), 10);
        let mut field = Vec::new();
        field_packed(&mut field, 2, [3, 270]);
        assert_eq!(field, [0x12, 3, 3, 0x8e, 0x02]);
    }

    #[test]
    fn zigzag_interleaves_signs() {
        let encoded: Vec<u64> = [0, -1, 1, -2, 2, i64::MIN].map(zigzag).into();
        assert_eq!(encoded, [0, 1, 2, 3, 4, u64::MAX]);
    }

    #[test]
    fn doubles_are_fixed64_little_endian() {
        let mut out = Vec::new();
        field_double(&mut out, 2, 1.5);
        assert_eq!(out, [0x11, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f]);
        field_double(&mut out, 2, 0.0);
        assert_eq!(out.len(), 9);
    }
}
