//! [`CaptureFileWriter`]: the file header, compressed blocks and the trailer.

use std::io::{self, Write};

use super::format::{
    BLOCK_HEADER_LEN, BLOCK_MAGIC, COMPRESSION_NONE, COMPRESSION_ZSTD, FILE_MAGIC, FORMAT_VERSION,
    KIND_RECORDS, KIND_TRAILER, MAX_METADATA_LEN, MAX_PAYLOAD_LEN, MAX_RAW_LEN,
};

/// The zstd level of records blocks. Chosen on format 2's records, 20 M events of a
/// synthetic Python-like stream in blocks of 256 KiB raw (the `capture_size_and_speed`
/// test): level 1 gave 1.91 bytes/event, 2 gave 1.84, 3 gave 1.74 for about the same time,
/// 5 gave 1.71 for twice the time. Format 4 moved it to 1: the flusher's compression is
/// CPU the traced program competes with on small machines (level 3 was 6.6 % of all CPU
/// samples of mypy under `memtape run`, level 1 3.8 %), for files 6-14 % larger
/// (alloc_heavy 0.24 bytes/event against 0.21, deep_recursion 0.37 against 0.34;
/// benchmarks/RESULTS.md, section 29).
pub const ZSTD_LEVEL: i32 = 1;

/// Writes a capture file to any [`Write`]: the header at creation, then one block per
/// [`write_block`](Self::write_block), then the trailer at [`finish`](Self::finish).
///
/// Each block goes out in one `write_all` and is flushed, so a process killed at any point
/// leaves a file readable up to its last complete block. After a failed write, every later
/// write fails too (without writing), so a partial block is never followed by another one.
/// Give it an unbuffered `File` or a `BufWriter`: both work, the flush makes them equal.
pub struct CaptureFileWriter<W: Write> {
    out: W,
    level: i32,
    compressor: zstd::bulk::Compressor<'static>,
    compressed: Vec<u8>,
    frame: Vec<u8>,
    bytes_written: u64,
    failed: bool,
    /// Blocks are stored as they are from now on ([`store_blocks`](Self::store_blocks)).
    stored: bool,
}

/// The compressor of the last writer that finished, with its level: the next writer at
/// that level takes it instead of setting up a zstd context again (a capture per test,
/// under the pytest plugin, did at each test). Each block is a frame of its own, which
/// the compressor starts afresh: the bytes are the same either way.
static SPARE: std::sync::Mutex<Option<(i32, zstd::bulk::Compressor<'static>)>> =
    std::sync::Mutex::new(None);

fn compressor(level: i32) -> io::Result<zstd::bulk::Compressor<'static>> {
    let spare = SPARE.lock().unwrap_or_else(|e| e.into_inner()).take();
    match spare {
        Some((spare_level, compressor)) if spare_level == level => Ok(compressor),
        _ => zstd::bulk::Compressor::new(level),
    }
}

impl<W: Write> CaptureFileWriter<W> {
    /// Writes and flushes the file header, with `metadata_json` (a JSON object, at most
    /// 1 MiB).
    pub fn new(out: W, metadata_json: &str) -> io::Result<Self> {
        Self::with_level(out, metadata_json, ZSTD_LEVEL)
    }

    /// [`new`](Self::new) with another zstd level (1..=22; 0 means zstd's default).
    pub fn with_level(out: W, metadata_json: &str, level: i32) -> io::Result<Self> {
        let metadata = metadata_json.as_bytes();
        let metadata_len = u32::try_from(metadata.len())
            .ok()
            .filter(|&len| len <= MAX_METADATA_LEN)
            .ok_or_else(|| {
                invalid_input(format!(
                    "capture metadata is {} bytes, over the {MAX_METADATA_LEN}-byte limit",
                    metadata.len()
                ))
            })?;
        let mut writer = Self {
            out,
            level,
            compressor: compressor(level)?,
            compressed: Vec::new(),
            frame: Vec::with_capacity(16 + metadata.len() + 4),
            bytes_written: 0,
            failed: false,
            stored: false,
        };
        writer.frame.extend_from_slice(&FILE_MAGIC);
        writer
            .frame
            .extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        writer.frame.extend_from_slice(&0u16.to_le_bytes());
        writer.frame.extend_from_slice(&metadata_len.to_le_bytes());
        writer.frame.extend_from_slice(metadata);
        writer
            .frame
            .extend_from_slice(&crc32fast::hash(metadata).to_le_bytes());
        writer.emit_frame()?;
        Ok(writer)
    }

    /// Writes one records block: zstd-compressed, or as is when compression does not
    /// shrink it; with its CRC; then flushes. `raw` is what [`BlockEncoder`] built (at most
    /// 256 MiB).
    ///
    /// [`BlockEncoder`]: super::BlockEncoder
    pub fn write_block(&mut self, raw: &[u8]) -> io::Result<()> {
        self.frame.clear();
        self.frame_block(raw)?;
        self.emit_frame()
    }

    /// Appends one records block's frame (as [`write_block`](Self::write_block) writes
    /// it) to `self.frame`.
    fn frame_block(&mut self, raw: &[u8]) -> io::Result<()> {
        let raw_len = u32::try_from(raw.len())
            .ok()
            .filter(|&len| len <= MAX_RAW_LEN)
            .ok_or_else(|| {
                invalid_input(format!(
                    "capture block is {} bytes, over the {MAX_RAW_LEN}-byte limit",
                    raw.len()
                ))
            })?;
        self.check_usable()?;
        // Stored blocks skip compression unless too large to be stored.
        let compressed = (!self.stored || raw_len > MAX_PAYLOAD_LEN) && self.compress(raw);
        if compressed {
            append_block_frame(
                &mut self.frame,
                KIND_RECORDS,
                COMPRESSION_ZSTD,
                &self.compressed,
                raw_len,
            );
        } else if raw_len <= MAX_PAYLOAD_LEN {
            append_block_frame(
                &mut self.frame,
                KIND_RECORDS,
                COMPRESSION_NONE,
                raw,
                raw_len,
            );
        } else {
            return Err(invalid_input(format!(
                "capture block of {} bytes does not compress below the {MAX_PAYLOAD_LEN}-byte payload limit",
                raw.len()
            )));
        }
        Ok(())
    }

    /// Compresses `raw` into `self.compressed`; whether that shrank it to a payload that
    /// fits.
    fn compress(&mut self, raw: &[u8]) -> bool {
        self.compressed.clear();
        self.compressed
            .reserve(zstd::zstd_safe::compress_bound(raw.len()));
        match self
            .compressor
            .compress_to_buffer(raw, &mut self.compressed)
        {
            Ok(len) => len < raw.len() && len <= MAX_PAYLOAD_LEN as usize,
            // Not expected with a buffer of compress_bound bytes; storing is always right.
            Err(_) => false,
        }
    }

    /// Stores the blocks written from now on as they are (unless one is too large to be
    /// stored), for a file read once at once and then dropped: the pytest plugin's capture
    /// of a test that ends in memory, whose last block the test's own thread would
    /// otherwise compress only for the reader to decompress it (about 10 us a test).
    pub fn store_blocks(&mut self) {
        self.stored = true;
    }

    /// Writes the trailer block (uncompressed `trailer_json`), flushes, and returns the
    /// output.
    pub fn finish(self, trailer_json: &str) -> io::Result<W> {
        self.finish_after_block(None, trailer_json)
            .map(|(out, _)| out)
    }

    /// Writes the records block `raw` if given, then the trailer, in one write (a stop's
    /// last block and the trailer go out together), flushes, and returns the output and
    /// the bytes written before the trailer: the header and the records blocks.
    pub fn finish_after_block(
        mut self,
        raw: Option<&[u8]>,
        trailer_json: &str,
    ) -> io::Result<(W, u64)> {
        let trailer = trailer_json.as_bytes();
        let len = u32::try_from(trailer.len())
            .ok()
            .filter(|&len| len <= MAX_PAYLOAD_LEN)
            .ok_or_else(|| {
                invalid_input(format!(
                    "capture trailer is {} bytes, over the {MAX_PAYLOAD_LEN}-byte limit",
                    trailer.len()
                ))
            })?;
        self.check_usable()?;
        self.frame.clear();
        if let Some(raw) = raw {
            self.frame_block(raw)?;
        }
        let blocks_bytes = self.bytes_written + self.frame.len() as u64;
        append_block_frame(
            &mut self.frame,
            KIND_TRAILER,
            COMPRESSION_NONE,
            trailer,
            len,
        );
        self.emit_frame()?;
        *SPARE.lock().unwrap_or_else(|e| e.into_inner()) = Some((self.level, self.compressor));
        Ok((self.out, blocks_bytes))
    }

    /// Bytes written so far: header and complete blocks.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// The output.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    fn check_usable(&self) -> io::Result<()> {
        if self.failed {
            Err(io::Error::other(
                "an earlier write to this capture failed; nothing more is written",
            ))
        } else {
            Ok(())
        }
    }

    /// Writes `self.frame` in one go and flushes.
    fn emit_frame(&mut self) -> io::Result<()> {
        let result = self
            .out
            .write_all(&self.frame)
            .and_then(|()| self.out.flush());
        match result {
            Ok(()) => {
                self.bytes_written += self.frame.len() as u64;
                Ok(())
            }
            Err(error) => {
                self.failed = true;
                Err(error)
            }
        }
    }
}

/// Appends a block header and `payload` (whose length fits in u32) to `frame`.
fn append_block_frame(
    frame: &mut Vec<u8>,
    kind: u8,
    compression: u8,
    payload: &[u8],
    raw_len: u32,
) {
    frame.reserve(BLOCK_HEADER_LEN + payload.len());
    frame.extend_from_slice(&BLOCK_MAGIC);
    frame.extend_from_slice(&[kind, compression, 0, 0]);
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&raw_len.to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    frame.extend_from_slice(payload);
}

fn invalid_input(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout_matches_the_spec() {
        let out = CaptureFileWriter::new(Vec::new(), "{}")
            .unwrap()
            .finish("{\"events\": 0}")
            .unwrap();
        assert_eq!(&out[..8], b"MEMTAPE\0");
        assert_eq!(&out[8..10], &[4, 0]);
        assert_eq!(&out[10..12], &[0, 0]);
        assert_eq!(&out[12..16], &[2, 0, 0, 0]);
        assert_eq!(&out[16..18], b"{}");
        assert_eq!(&out[18..22], &crc32fast::hash(b"{}").to_le_bytes());
        let block = &out[22..];
        assert_eq!(&block[..4], b"MTBK");
        assert_eq!(&block[4..8], &[KIND_TRAILER, COMPRESSION_NONE, 0, 0]);
        assert_eq!(&block[8..12], &13u32.to_le_bytes());
        assert_eq!(&block[12..16], &13u32.to_le_bytes());
        assert_eq!(
            &block[16..20],
            &crc32fast::hash(b"{\"events\": 0}").to_le_bytes()
        );
        assert_eq!(&block[20..], b"{\"events\": 0}");
    }

    #[test]
    fn a_writer_after_another_writes_the_same_bytes() {
        // The second writer compresses with the compressor the first one left.
        let raw: Vec<u8> = (0..200_000u32)
            .map(|i| (i % 251) as u8 ^ (i / 997) as u8)
            .collect();
        let write = || {
            let mut writer = CaptureFileWriter::new(Vec::new(), "{}").unwrap();
            writer.write_block(&raw).unwrap();
            writer.write_block(&raw[..70_000]).unwrap();
            writer.finish("{}").unwrap()
        };
        let first = write();
        assert!(first.len() < raw.len(), "the blocks were compressed");
        for _ in 0..3 {
            assert_eq!(write(), first);
        }
    }

    #[test]
    fn blocks_compress_only_when_it_shrinks_them() {
        let mut writer = CaptureFileWriter::new(Vec::new(), "{}").unwrap();
        let header_len = writer.bytes_written() as usize;
        writer.write_block(&[0x05, 0x00]).unwrap();
        let small_end = writer.bytes_written() as usize;
        writer.write_block(&[0x05; 4096]).unwrap();
        let out = writer.finish("{}").unwrap();
        let small = &out[header_len..small_end];
        assert_eq!(small[5], COMPRESSION_NONE);
        assert_eq!(small.len(), BLOCK_HEADER_LEN + 2);
        let big = &out[small_end..];
        assert_eq!(big[5], COMPRESSION_ZSTD);
        let payload_len = u32::from_le_bytes([big[8], big[9], big[10], big[11]]) as usize;
        let payload = &big[BLOCK_HEADER_LEN..BLOCK_HEADER_LEN + payload_len];
        // The frame records its content size, which the reader checks before allocating.
        assert!(matches!(
            zstd::zstd_safe::get_frame_content_size(payload),
            Ok(Some(4096))
        ));
    }

    #[test]
    fn oversized_metadata_is_refused() {
        let metadata = " ".repeat(MAX_METADATA_LEN as usize + 1);
        let error = CaptureFileWriter::new(Vec::new(), &metadata)
            .err()
            .expect("refused");
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }

    /// Accepts `budget` bytes, then fails.
    struct FullDisk {
        written: Vec<u8>,
        budget: usize,
    }

    impl Write for FullDisk {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.budget == 0 {
                return Err(io::Error::other("disk full"));
            }
            let n = buf.len().min(self.budget);
            self.written.extend_from_slice(&buf[..n]);
            self.budget -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_stops_all_later_writes() {
        let out = FullDisk {
            written: Vec::new(),
            budget: 50,
        };
        let mut writer = CaptureFileWriter::new(out, "{}").unwrap();
        assert!(writer.write_block(&[0x05, 0x01]).is_ok());
        assert!(writer.write_block(&[0x05, 0x02]).is_err());
        let before = writer.get_ref().written.len();
        writer.out.budget = 1000;
        assert!(writer.write_block(&[0x05, 0x03]).is_err());
        assert!(writer.get_ref().written.len() == before);
        assert!(writer.finish("{}").is_err());
    }
}
