//! The capture file (`.mtape`): record encoding, the streaming writer and the reader.
//!
//! The format is specified in `docs/capture-format.md` (version 1). In short:
//!
//! ```text
//! file := file_header block* [trailer_block]
//! ```
//!
//! - [`BlockEncoder`] appends [`Record`]s to an in-memory raw block, with the per-block
//!   delta state of the spec (previous address and stack).
//! - [`CaptureFileWriter`] writes the file header, then each raw block zstd-compressed
//!   (stored as is when compression does not shrink it) with its CRC-32, flushing after
//!   every block, and the trailer at the end. A process killed mid-run leaves a file
//!   readable up to its last flushed block.
//! - [`CaptureReader`] validates the header and streams every record of every complete
//!   block. Truncation (a file cut short) ends the read and is reported in
//!   [`ReadSummary`]; corruption is a [`CaptureError`] naming the byte offset.
//!
//! Every length read from a file is checked against the limits below before anything is
//! allocated for it, and no input makes the reader panic.

mod encoder;
mod error;
mod reader;
mod record;
mod varint;
mod writer;

#[cfg(test)]
mod tests;

pub use encoder::BlockEncoder;
pub use error::CaptureError;
pub use reader::{CaptureReader, ReadSummary};
pub use record::{Record, Segments};
pub use writer::{CaptureFileWriter, ZSTD_LEVEL};

/// The file magic, at offset 0.
pub const FILE_MAGIC: [u8; 8] = *b"MEMTAPE\0";
/// The format version this module writes (2 added the Module and NativeFrame records).
pub const FORMAT_VERSION: u16 = 2;
/// The oldest format version this module reads.
pub const OLDEST_FORMAT_VERSION: u16 = 1;
/// The magic at the start of every block.
pub const BLOCK_MAGIC: [u8; 4] = *b"MTBK";
/// The largest metadata JSON the header may carry (1 MiB).
pub const MAX_METADATA_LEN: u32 = 1 << 20;
/// The largest payload (compressed) length of a block (64 MiB).
pub const MAX_PAYLOAD_LEN: u32 = 64 << 20;
/// The largest raw (decompressed) length of a block (256 MiB).
pub const MAX_RAW_LEN: u32 = 256 << 20;

/// Bytes of the fixed part of the file header: magic, version, flags, metadata length.
const FILE_HEADER_FIXED_LEN: usize = 16;
/// Bytes of a block header: magic, kind, compression, reserved, P, R, CRC.
const BLOCK_HEADER_LEN: usize = 20;

/// Block kind: records.
const KIND_RECORDS: u8 = 1;
/// Block kind: the trailer (JSON, uncompressed).
const KIND_TRAILER: u8 = 2;
/// Block compression: stored as is.
const COMPRESSION_NONE: u8 = 0;
/// Block compression: one or more zstd frames.
const COMPRESSION_ZSTD: u8 = 1;

/// Decoding a raw block directly, for other modules' tests.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::Record;

    /// Hands every record of the raw block `raw` to `f`; panics on a bad block.
    pub(crate) fn decode<'a>(raw: &'a [u8], mut f: impl FnMut(Record<'a>)) {
        super::record::decode_block(raw, &mut f).expect("a valid block");
    }
}
