//! Checks that this build's [`BlockEncoder`] writes a capture's blocks byte for byte as
//! they were written: every record block of the file is decoded and re-encoded with
//! [`BlockEncoder::record`], and the result is compared with the block's raw bytes, read
//! straight from the file (its own parsing of the block frames, zstd decompression).
//! Exits with status 1 at the first block that differs.
//!
//! `cargo run --release -p memtape-core --example reencode_blocks -- FILE.mtape...`

use std::process::ExitCode;

use memtape_core::capture::{BlockEncoder, CaptureReader, Record, RecordVisitor};

/// Bytes of the fixed part of the file header: magic, version, flags, metadata length.
const FILE_HEADER_FIXED_LEN: usize = 16;
/// Bytes of a block header: magic, kind, compression, reserved, P, R, CRC.
const BLOCK_HEADER_LEN: usize = 20;

fn u32_at(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize
}

/// The raw (decompressed) bytes of every record block of the file, in order.
fn raw_blocks(file: &[u8]) -> Vec<Vec<u8>> {
    let metadata_len = u32_at(file, 12);
    let mut at = FILE_HEADER_FIXED_LEN + metadata_len + 4;
    let mut blocks = Vec::new();
    while at + BLOCK_HEADER_LEN <= file.len() {
        let header = &file[at..at + BLOCK_HEADER_LEN];
        assert_eq!(&header[..4], b"MTBK", "block magic at {at}");
        let (kind, compression) = (header[4], header[5]);
        let (payload_len, raw_len) = (u32_at(header, 8), u32_at(header, 12));
        let start = at + BLOCK_HEADER_LEN;
        let Some(payload) = file.get(start..start + payload_len) else {
            break; // cut short
        };
        at = start + payload_len;
        if kind != 1 {
            continue; // the trailer
        }
        let raw = match compression {
            0 => payload.to_vec(),
            _ => zstd::bulk::decompress(payload, raw_len).expect("a zstd payload"),
        };
        assert_eq!(raw.len(), raw_len, "raw length of the block before {at}");
        blocks.push(raw);
    }
    blocks
}

/// Re-encodes every record, one block per block read.
struct Reencoder {
    encoder: BlockEncoder,
    blocks: Vec<Vec<u8>>,
}

impl RecordVisitor<'_> for Reencoder {
    fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32) {
        self.encoder.record(&Record::Alloc {
            domain,
            addr,
            size,
            stack,
        });
    }

    fn free(&mut self, domain: Option<u32>, addr: u64) {
        self.encoder.record(&Record::Free { domain, addr });
    }

    fn record(&mut self, record: Record<'_>) {
        self.encoder.record(&record);
    }

    fn block_end(&mut self) {
        self.blocks.push(self.encoder.take());
    }
}

fn check(path: &str) -> Result<String, String> {
    let file = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let originals = raw_blocks(&file);
    let mut reader = CaptureReader::new(&file[..]).map_err(|e| format!("{path}: {e}"))?;
    let mut visitor = Reencoder {
        encoder: BlockEncoder::new(),
        blocks: Vec::new(),
    };
    let summary = reader
        .visit_records(&mut visitor)
        .map_err(|e| format!("{path}: {e}"))?;
    if originals.len() != visitor.blocks.len() {
        return Err(format!(
            "{path}: {} blocks in the file, {} re-encoded",
            originals.len(),
            visitor.blocks.len()
        ));
    }
    let mut bytes = 0;
    for (i, (original, again)) in originals.iter().zip(&visitor.blocks).enumerate() {
        if original != again {
            let first = original
                .iter()
                .zip(again)
                .position(|(a, b)| a != b)
                .unwrap_or(original.len().min(again.len()));
            return Err(format!(
                "{path}: block {i} differs at byte {first} ({} bytes read, {} re-encoded)",
                original.len(),
                again.len()
            ));
        }
        bytes += original.len();
    }
    Ok(format!(
        "{path}: {} blocks, {} events, {bytes} raw bytes re-encoded identically",
        originals.len(),
        summary.events
    ))
}

fn main() -> ExitCode {
    let mut status = ExitCode::SUCCESS;
    for path in std::env::args().skip(1) {
        match check(&path) {
            Ok(line) => println!("{line}"),
            Err(line) => {
                eprintln!("{line}");
                status = ExitCode::FAILURE;
            }
        }
    }
    status
}
