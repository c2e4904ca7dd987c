//! Decoding a Perfetto protobuf trace as `fntrace perfetto` writes it,
//! with Perfetto's published schema (`tests/perfetto/trace.proto`), for the
//! tests that read one.

use prost_reflect::{DescriptorPool, DynamicMessage, Value};

/// A field of a decoded message.
pub fn field(message: &DynamicMessage, name: &str) -> Value {
    message.get_field_by_name(name).unwrap().into_owned()
}

/// A varint field as a u64.
pub fn uint(message: &DynamicMessage, name: &str) -> u64 {
    match field(message, name) {
        Value::U64(v) => v,
        Value::U32(v) => u64::from(v),
        Value::I32(v) => v as u64,
        Value::EnumNumber(v) => v as u64,
        other => panic!("{name}: {other:?}"),
    }
}

/// The packets of the trace `bytes`, decoded with the schema: they come
/// deflated in bundles (`compressed_packets`: zlib, each under Perfetto's
/// 512 KiB limit), whose contents are Trace messages.
pub fn packets(bytes: &[u8]) -> Vec<DynamicMessage> {
    let schema_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/perfetto");
    let files = protox::compile(["trace.proto"], [schema_dir]).expect("the schema compiles");
    let pool = DescriptorPool::from_file_descriptor_set(files).unwrap();
    let trace_type = pool.get_message_by_name("perfetto.protos.Trace").unwrap();
    let trace = DynamicMessage::decode(trace_type.clone(), bytes).expect("a valid Trace");
    let Value::List(bundles) = field(&trace, "packet") else {
        panic!("no packets")
    };
    let mut packets = Vec::new();
    for bundle in &bundles {
        let Value::Message(bundle) = bundle else {
            panic!("{bundle:?}")
        };
        let Value::Bytes(compressed) = field(bundle, "compressed_packets") else {
            panic!("a packet outside a bundle: {bundle:?}")
        };
        assert!(compressed.len() < 512 << 10);
        let mut inflated = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::ZlibDecoder::new(&compressed[..]),
            &mut inflated,
        )
        .expect("zlib data");
        let inner = DynamicMessage::decode(trace_type.clone(), inflated.as_slice()).unwrap();
        let Value::List(inner) = field(&inner, "packet") else {
            unreachable!()
        };
        packets.extend(inner.into_iter().map(|packet| match packet {
            Value::Message(packet) => packet,
            other => panic!("{other:?}"),
        }));
    }
    packets
}
