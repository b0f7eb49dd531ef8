//! [`CaptureError`]: what is wrong with a capture file, and where.

use std::io;

use super::foreign::ForeignFile;
use super::format::FORMAT_VERSION;

/// Why a capture file could not be read. Every message names the byte offset (in the
/// file, and for a record also inside the decompressed block) of the problem; the caller
/// adds the file name.
///
/// A file that is merely cut short is not an error: see
/// [`ReadSummary`](super::ReadSummary).
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The input could not be read.
    #[error("cannot read the capture at offset {offset}: {source}")]
    Io {
        /// Bytes read before the failure.
        offset: u64,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The input is empty.
    #[error("not a memtape capture (the file is empty: no MEMTAPE magic at offset 0)")]
    Empty,
    /// The input does not start with the capture magic.
    #[error("not a memtape capture (no MEMTAPE magic at offset 0)")]
    NotCapture,
    /// The input is a file of another kind, often taken for a capture.
    #[error("not a memtape capture: {}", .0.describe("FILE"))]
    Foreign(ForeignFile),
    /// A capture of a format version this reader does not know.
    #[error(
        "unsupported capture format version {version} at offset 8 (this memtape reads {} to {}): \
         a newer memtape wrote it, or the file is damaged",
        super::format::OLDEST_FORMAT_VERSION,
        FORMAT_VERSION
    )]
    UnsupportedVersion {
        /// The version in the header.
        version: u16,
    },
    /// The file ends inside its header, so not even the metadata can be trusted.
    #[error("truncated capture: the file ends at offset {offset}, inside the {part}")]
    TruncatedHeader {
        /// The file's length.
        offset: u64,
        /// Which part of the header is incomplete.
        part: &'static str,
    },
    /// The file header is damaged.
    #[error("corrupt capture header at offset {offset}: {reason}")]
    CorruptHeader {
        /// Where the damaged field starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A block is damaged and no records block after it could be read (damage with
    /// blocks to read around it is not an error: see [`ReadSummary`](super::ReadSummary)).
    #[error("corrupt block at offset {offset}: {reason}")]
    CorruptBlock {
        /// Where the block starts in the file.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

impl CaptureError {
    /// The byte offset in the file where the problem is (for a record: its block's).
    pub fn offset(&self) -> u64 {
        match *self {
            CaptureError::Empty | CaptureError::NotCapture | CaptureError::Foreign(_) => 0,
            CaptureError::UnsupportedVersion { .. } => 8,
            CaptureError::Io { offset, .. }
            | CaptureError::TruncatedHeader { offset, .. }
            | CaptureError::CorruptHeader { offset, .. }
            | CaptureError::CorruptBlock { offset, .. } => offset,
        }
    }
}
