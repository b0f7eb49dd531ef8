//! The file format's constants: magics, versions, limits and the block header's fields
//! (`docs/capture-format.md`). Every other file of the capture module reads them here.

/// The file magic, at offset 0.
pub const FILE_MAGIC: [u8; 8] = *b"MEMTAPE\0";
/// The format version this module writes (2 added the Module and NativeFrame records, 3
/// the back references AllocReuse and FreeBack, 4 the FreeStep references).
pub const FORMAT_VERSION: u16 = 4;
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
pub(super) const FILE_HEADER_FIXED_LEN: usize = 16;
/// Bytes of a block header: magic, kind, compression, reserved, P, R, CRC.
pub(super) const BLOCK_HEADER_LEN: usize = 20;

/// Block kind: records.
pub(super) const KIND_RECORDS: u8 = 1;
/// Block kind: the trailer (JSON, uncompressed).
pub(super) const KIND_TRAILER: u8 = 2;
/// Block compression: stored as is.
pub(super) const COMPRESSION_NONE: u8 = 0;
/// Block compression: one or more zstd frames.
pub(super) const COMPRESSION_ZSTD: u8 = 1;
