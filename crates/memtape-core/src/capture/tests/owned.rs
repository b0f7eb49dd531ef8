//! Records as owned values, sample files and how the tests read them.

use super::super::*;

/// An owned copy of a [`Record`], to compare what was written with what was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Owned {
    Alloc {
        domain: u32,
        addr: u64,
        size: u64,
        stack: u32,
    },
    Free {
        domain: Option<u32>,
        addr: u64,
    },
    Time(u64),
    String(u32, String),
    Frame(u32, u32, u32, u32),
    Stack(u32, u32, u32),
    Marker(String),
    Dropped(u64),
    Module(u32, String, u64, Vec<u8>, Vec<(u64, u64)>),
    NativeFrame(u32, u32, u64),
}

impl From<Record<'_>> for Owned {
    fn from(record: Record<'_>) -> Self {
        match record {
            Record::Alloc {
                domain,
                addr,
                size,
                stack,
            } => Owned::Alloc {
                domain,
                addr,
                size,
                stack,
            },
            Record::Free { domain, addr } => Owned::Free { domain, addr },
            Record::Time { ns } => Owned::Time(ns),
            Record::String { id, value } => Owned::String(id, value.to_owned()),
            Record::Frame {
                id,
                filename,
                name,
                line,
            } => Owned::Frame(id, filename, name, line),
            Record::Stack { id, parent, frame } => Owned::Stack(id, parent, frame),
            Record::Marker { label } => Owned::Marker(label.to_owned()),
            Record::Dropped { count } => Owned::Dropped(count),
            Record::Module {
                id,
                path,
                base,
                build_id,
                segments,
            } => Owned::Module(
                id,
                path.to_owned(),
                base,
                build_id.to_vec(),
                segments.iter().collect(),
            ),
            Record::NativeFrame { id, module, offset } => Owned::NativeFrame(id, module, offset),
        }
    }
}

impl Owned {
    pub(super) fn encode(&self, encoder: &mut BlockEncoder) {
        match *self {
            Owned::Alloc {
                domain,
                addr,
                size,
                stack,
            } => encoder.alloc(domain, addr, size, stack),
            Owned::Free { domain, addr } => encoder.free(domain, addr),
            Owned::Time(ns) => encoder.time(ns),
            Owned::String(id, ref value) => encoder.string(id, value),
            Owned::Frame(id, filename, name, line) => encoder.frame(id, filename, name, line),
            Owned::Stack(id, parent, frame) => encoder.stack(id, parent, frame),
            Owned::Marker(ref label) => encoder.marker(label),
            Owned::Dropped(count) => encoder.dropped(count),
            Owned::Module(id, ref path, base, ref build_id, ref segments) => {
                encoder.module(id, path, base, build_id, segments)
            }
            Owned::NativeFrame(id, module, offset) => encoder.native_frame(id, module, offset),
        }
    }
}

pub(super) const METADATA: &str = r#"{"tool": "memtape", "tool_version": "0.1.0", "pid": 42, "argv": ["x.py"], "start_time_ns": 1700000000000000000, "nframe": 0}"#;
pub(super) const TRAILER: &str = r#"{"events": 0, "end_time_ns": 5, "exit": "normal"}"#;

/// A written file and where each of its blocks ends.
pub(super) struct Sample {
    pub(super) bytes: Vec<u8>,
    pub(super) header_len: u64,
    /// `(end offset, records so far)` after each records block.
    pub(super) block_ends: Vec<(u64, usize)>,
    pub(super) records: Vec<Owned>,
}

pub(super) fn write_file(blocks: &[Vec<Owned>], trailer: Option<&str>) -> Sample {
    write_file_with(BlockEncoder::new(), blocks, trailer)
}

fn write_file_with(
    mut encoder: BlockEncoder,
    blocks: &[Vec<Owned>],
    trailer: Option<&str>,
) -> Sample {
    let mut writer = CaptureFileWriter::new(Vec::new(), METADATA).unwrap();
    let header_len = writer.bytes_written();
    let mut block_ends = Vec::new();
    let mut records = Vec::new();
    for block in blocks {
        for record in block {
            record.encode(&mut encoder);
            records.push(record.clone());
        }
        writer.write_block(&encoder.take()).unwrap();
        block_ends.push((writer.bytes_written(), records.len()));
    }
    let bytes = match trailer {
        Some(trailer) => writer.finish(trailer).unwrap(),
        None => writer.get_ref().clone(),
    };
    Sample {
        bytes,
        header_len,
        block_ends,
        records,
    }
}

/// What a visitor was handed: every record, how many had come at each block's end, and
/// how many had come when the trailer was read.
#[derive(Debug, Default, PartialEq, Eq)]
struct Collected {
    records: Vec<Owned>,
    block_ends: Vec<usize>,
    trailer_at: Option<usize>,
}

impl<'a> RecordVisitor<'a> for Collected {
    fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32) {
        self.records.push(Owned::Alloc {
            domain,
            addr,
            size,
            stack,
        });
    }

    fn free(&mut self, domain: Option<u32>, addr: u64) {
        self.records.push(Owned::Free { domain, addr });
    }

    fn record(&mut self, record: Record<'a>) {
        self.records.push(record.into());
    }

    fn block_end(&mut self) {
        self.block_ends.push(self.records.len());
    }

    fn trailer(&mut self) {
        assert!(self.trailer_at.is_none(), "a second trailer");
        self.trailer_at = Some(self.records.len());
    }
}

/// Reads `bytes` whole; on error, also what was streamed before it. Checks on the way
/// that a visitor, on one thread and on two, is handed the same records and gets the
/// same result.
pub(super) fn read(bytes: &[u8]) -> (Vec<Owned>, Result<ReadSummary, CaptureError>) {
    let mut records = Vec::new();
    let result = CaptureReader::new(bytes)
        .and_then(|mut reader| reader.for_each_record(|record| records.push(record.into())));
    let mut one = Collected::default();
    let one_result = CaptureReader::new(bytes).and_then(|mut r| r.visit_records(&mut one));
    let mut two = Collected::default();
    let two_result =
        CaptureReader::new(bytes).and_then(|mut r| r.visit_records_pipelined(&mut two));
    assert_eq!(one.records, records);
    assert_eq!(two, one);
    assert_eq!(format!("{one_result:?}"), format!("{result:?}"));
    assert_eq!(format!("{two_result:?}"), format!("{result:?}"));
    if let Ok(summary) = &result {
        assert_eq!(one.block_ends.len() as u64, summary.blocks);
        assert_eq!(one.trailer_at.is_some(), summary.complete);
    }
    (records, result)
}

pub(super) fn read_ok(bytes: &[u8]) -> (Vec<Owned>, ReadSummary) {
    let (records, result) = read(bytes);
    (records, result.expect("a readable capture"))
}

pub(super) fn error_message(bytes: &[u8]) -> String {
    read(bytes).1.expect_err("an error").to_string()
}

pub(super) fn every_kind() -> Vec<Owned> {
    vec![
        Owned::Time(0),
        Owned::String(1, String::new()),
        Owned::String(2, "héllo wörld ✓ 𝄞 日本".to_owned()),
        Owned::String(u32::MAX, "/usr/lib/python3.11/json/decoder.py".to_owned()),
        Owned::Frame(1, 2, 3, 4),
        Owned::Frame(u32::MAX, u32::MAX, u32::MAX, u32::MAX),
        Owned::Stack(1, 0, 1),
        Owned::Stack(u32::MAX, u32::MAX - 1, u32::MAX),
        Owned::Module(
            1,
            "/usr/lib/libc.so.6".to_owned(),
            0x7f00_0000_0000,
            vec![7; 20],
            vec![(0, 0x28000), (0x28000, u64::MAX)],
        ),
        Owned::Module(u32::MAX, String::new(), 0, Vec::new(), Vec::new()),
        Owned::NativeFrame(3, 1, 0x2_8123),
        Owned::NativeFrame(u32::MAX, u32::MAX, u64::MAX),
        Owned::Alloc {
            domain: 0,
            addr: 0x7f12_3456_7890,
            size: 32,
            stack: 1,
        },
        Owned::Alloc {
            domain: 0,
            addr: 0x10,
            size: u64::MAX,
            stack: u32::MAX,
        },
        Owned::Alloc {
            domain: 389_047,
            addr: u64::MAX,
            size: 0,
            stack: 0,
        },
        Owned::Alloc {
            domain: u32::MAX,
            addr: 0,
            size: 1,
            stack: u32::MAX,
        },
        Owned::Free {
            domain: None,
            addr: u64::MAX,
        },
        Owned::Free {
            domain: Some(389_047),
            addr: 0,
        },
        Owned::Free {
            domain: Some(0),
            addr: 0x7f12_3456_7890,
        },
        Owned::Free {
            domain: None,
            addr: 0x7f12_3456_7880,
        },
        Owned::Time(u64::MAX),
        Owned::Marker(String::new()),
        Owned::Marker("après le chargement".to_owned()),
        Owned::Dropped(0),
        Owned::Dropped(u64::MAX),
    ]
}

/// Three blocks: one that compresses, one too small to, one mixed.
pub(super) fn three_blocks() -> Vec<Vec<Owned>> {
    let mut first = vec![Owned::Time(10)];
    for i in 0..200u64 {
        first.push(Owned::Alloc {
            domain: 0,
            addr: 0x7f00_0000_0000 + 32 * i,
            size: 32,
            stack: 3 + (i % 4) as u32,
        });
        if i % 3 == 0 {
            first.push(Owned::Free {
                domain: None,
                addr: 0x7f00_0000_0000 + 32 * i,
            });
        }
    }
    let second = vec![Owned::Time(2000), Owned::Marker("mid".to_owned())];
    let mut third = every_kind();
    third.insert(0, Owned::Time(3000));
    vec![first, second, third]
}

/// A file header with the given metadata length field and metadata.
pub(super) fn header(metadata_len: u32, metadata: &[u8]) -> Vec<u8> {
    let mut bytes = b"MEMTAPE\0\x01\0\0\0".to_vec();
    bytes.extend_from_slice(&metadata_len.to_le_bytes());
    bytes.extend_from_slice(metadata);
    bytes.extend_from_slice(&crc32fast::hash(metadata).to_le_bytes());
    bytes
}

/// A block with a correct CRC and the given header fields.
pub(super) fn block(kind: u8, compression: u8, payload: &[u8], raw_len: u32) -> Vec<u8> {
    let mut bytes = b"MTBK".to_vec();
    bytes.extend_from_slice(&[kind, compression, 0, 0]);
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&raw_len.to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes
}
