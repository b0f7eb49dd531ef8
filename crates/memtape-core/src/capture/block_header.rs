//! A block's 20-byte header (magic, kind, compression, payload and raw lengths, CRC),
//! parsed and checked against the format's limits: by the reader for every block, and by
//! the search for the next good block after damage.

use super::format::{
    BLOCK_HEADER_LEN, COMPRESSION_NONE, COMPRESSION_ZSTD, KIND_RECORDS, KIND_TRAILER,
    MAX_PAYLOAD_LEN, MAX_RAW_LEN,
};

/// The fields of a block header, validated.
pub(super) struct BlockHeader {
    pub(super) kind: u8,
    pub(super) compression: u8,
    pub(super) payload_len: u32,
    pub(super) raw_len: u32,
    pub(super) crc: u32,
}

impl BlockHeader {
    pub(super) fn parse(bytes: &[u8; BLOCK_HEADER_LEN]) -> Result<Self, String> {
        let word = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let block = BlockHeader {
            kind: bytes[4],
            compression: bytes[5],
            payload_len: word(8),
            raw_len: word(12),
            crc: word(16),
        };
        if block.kind != KIND_RECORDS && block.kind != KIND_TRAILER {
            return Err(format!("unknown block kind {}", block.kind));
        }
        if block.compression != COMPRESSION_NONE && block.compression != COMPRESSION_ZSTD {
            return Err(format!("unknown compression {}", block.compression));
        }
        if block.payload_len > MAX_PAYLOAD_LEN {
            return Err(format!(
                "payload length {} is over the {MAX_PAYLOAD_LEN}-byte limit",
                block.payload_len
            ));
        }
        if block.raw_len > MAX_RAW_LEN {
            return Err(format!(
                "raw length {} is over the {MAX_RAW_LEN}-byte limit",
                block.raw_len
            ));
        }
        if block.compression == COMPRESSION_NONE && block.payload_len != block.raw_len {
            return Err(format!(
                "uncompressed block with payload length {} but raw length {}",
                block.payload_len, block.raw_len
            ));
        }
        if block.kind == KIND_TRAILER && block.compression != COMPRESSION_NONE {
            return Err("the trailer block is compressed".to_owned());
        }
        Ok(block)
    }
}
