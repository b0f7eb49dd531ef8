//! The capture file (`.mtape`): record encoding, the streaming writer and the reader.
//!
//! The format is specified in `docs/capture-format.md` (version 4; readers read versions 1
//! to 4). In short:
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
//!   [`ReadSummary`]; a damaged block is skipped, the read goes on at the next block that
//!   checks out, and the summary lists each [`Damage`] with its byte offset; a damaged
//!   header, or damage that leaves no block to read, is a [`CaptureError`] naming the
//!   byte offset.
//!
//! Every length read from a file is checked against the limits below before anything is
//! allocated for it, and no input makes the reader panic.

mod block_buffer;
mod block_header;
mod damage;
mod decoder;
mod encoder;
mod error;
mod follow;
mod foreign;
mod format;
mod journal;
mod journal_writer;
mod lookahead;
mod pipeline;
mod rare_records;
mod reader;
mod recent_addresses;
mod record;
mod record_error;
mod varint;
mod writer;

#[cfg(test)]
mod tests;

pub use damage::Damage;
pub use decoder::{EachRecord, HeapEvent, RecordVisitor};
pub use encoder::BlockEncoder;
pub use error::CaptureError;
pub use follow::Following;
pub use foreign::ForeignFile;
pub use format::{
    BLOCK_MAGIC, FILE_MAGIC, FORMAT_VERSION, MAX_METADATA_LEN, MAX_PAYLOAD_LEN, MAX_RAW_LEN,
    OLDEST_FORMAT_VERSION,
};
pub use journal::Journal;
pub use journal_writer::JournalWriter;
pub use rare_records::RareRecords;
pub use reader::{CaptureReader, ReadSummary};
pub use record::{Record, Segments};
pub use writer::{CaptureFileWriter, ZSTD_LEVEL};

/// Decoding a raw block directly, for other modules' tests.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::Record;

    /// Hands every record of the raw block `raw` to `f`; panics on a bad block.
    pub(crate) fn decode<'a>(raw: &'a [u8], mut f: impl FnMut(Record<'a>)) {
        super::decoder::decode_block(raw, &mut f).expect("a valid block");
    }
}
