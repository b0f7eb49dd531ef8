//! [`CaptureReader`]: validates the header, then streams the records of every block.

use std::cell::Cell;
use std::io::{self, Read};

use super::block_header::BlockHeader;
use super::damage::{find_next_block, Damage, Found, START_BUDGET};
use super::decoder::{decode_block_into, DeltaState, EachRecord, RecordVisitor};
use super::error::CaptureError;
use super::foreign::{ForeignFile, PREFIX_LEN};
use super::format::{
    BLOCK_HEADER_LEN, BLOCK_MAGIC, COMPRESSION_ZSTD, FILE_HEADER_FIXED_LEN, FILE_MAGIC,
    FORMAT_VERSION, KIND_TRAILER, MAX_METADATA_LEN, OLDEST_FORMAT_VERSION,
};
use super::lookahead::Lookahead;
use super::record::Record;

/// What [`CaptureReader::for_each_record`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadSummary {
    /// Records blocks read whole (the trailer is not counted).
    pub blocks: u64,
    /// Records of any kind.
    pub records: u64,
    /// Alloc and Free records.
    pub events: u64,
    /// Whether the trailer was seen: the recording ended cleanly.
    pub complete: bool,
    /// Where the file was cut short (the offset of the first incomplete or missing block)
    /// when it has no trailer (`None` also when the file ends in a damaged part).
    pub cut_short_at: Option<u64>,
    /// The trailer's JSON, when there is one.
    pub trailer_json: Option<String>,
    /// The damaged parts skipped, in file order (empty for an undamaged file).
    pub damage: Vec<Damage>,
}

/// Reads a capture file from any [`Read`] (wrap a `File` in a `BufReader` or not: blocks
/// are read in large pieces either way).
pub struct CaptureReader<R: Read> {
    input: Lookahead<R>,
    /// Bytes consumed from `input`.
    offset: u64,
    version: u16,
    flags: u16,
    metadata: String,
    /// The current block's header, as read (`header_got` bytes of it).
    header: [u8; BLOCK_HEADER_LEN],
    header_got: usize,
    /// The current block's payload, reused.
    payload: Vec<u8>,
    /// The current block decompressed, reused; records borrow from it.
    raw: Vec<u8>,
    decompressor: Option<zstd::bulk::Decompressor<'static>>,
    /// The decoder's per-block state, reused.
    delta: DeltaState,
    /// How the file ended, once known.
    end: Option<ReadSummary>,
    /// Checksum bytes the search for a good block after damage may still spend.
    search_budget: u64,
}

/// What [`CaptureReader::next_block`] found.
enum NextBlock {
    /// A block that checks out; its payload is in `payload`.
    Block(BlockHeader),
    /// The file ends before the block is complete (or where a block would start).
    CutShort,
    /// The block is damaged: why.
    Damaged(String),
}

impl<R: Read> CaptureReader<R> {
    /// Reads and validates the file header: magic, version, metadata length and checksum.
    pub fn new(mut input: R) -> Result<Self, CaptureError> {
        let mut fixed = [0u8; FILE_HEADER_FIXED_LEN];
        let got = read_full(&mut input, &mut fixed).map_err(|source| io_error(0, source))?;
        if got == 0 {
            return Err(CaptureError::Empty);
        }
        let magic_len = got.min(FILE_MAGIC.len());
        if fixed[..magic_len] != FILE_MAGIC[..magic_len] {
            // Say what the file is, when it is a kind often taken for a capture.
            let mut prefix = fixed[..got].to_vec();
            read_up_to(&mut input, (PREFIX_LEN - got) as u64, &mut prefix)
                .map_err(|source| io_error(got as u64, source))?;
            return Err(match ForeignFile::recognize(&prefix) {
                Some(kind) => CaptureError::Foreign(kind),
                None => CaptureError::NotCapture,
            });
        }
        if got < FILE_HEADER_FIXED_LEN {
            return Err(CaptureError::TruncatedHeader {
                offset: got as u64,
                part: "file header",
            });
        }
        let version = u16::from_le_bytes([fixed[8], fixed[9]]);
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(CaptureError::UnsupportedVersion { version });
        }
        let flags = u16::from_le_bytes([fixed[10], fixed[11]]);
        let metadata_len = u32::from_le_bytes([fixed[12], fixed[13], fixed[14], fixed[15]]);
        if metadata_len > MAX_METADATA_LEN {
            return Err(CaptureError::CorruptHeader {
                offset: 12,
                reason: format!(
                    "metadata length {metadata_len} is over the {MAX_METADATA_LEN}-byte limit"
                ),
            });
        }

        let start = FILE_HEADER_FIXED_LEN as u64;
        let mut metadata = Vec::new();
        let got = read_up_to(&mut input, u64::from(metadata_len), &mut metadata)
            .map_err(|source| io_error(start, source))?;
        if got < u64::from(metadata_len) {
            return Err(CaptureError::TruncatedHeader {
                offset: start + got,
                part: "metadata",
            });
        }
        let crc_at = start + got;
        let mut crc = [0u8; 4];
        let got = read_full(&mut input, &mut crc).map_err(|source| io_error(crc_at, source))?;
        if got < crc.len() {
            return Err(CaptureError::TruncatedHeader {
                offset: crc_at + got as u64,
                part: "metadata checksum",
            });
        }
        if crc32fast::hash(&metadata) != u32::from_le_bytes(crc) {
            return Err(CaptureError::CorruptHeader {
                offset: start,
                reason: "metadata checksum mismatch".to_owned(),
            });
        }
        let metadata =
            String::from_utf8(metadata).map_err(|error| CaptureError::CorruptHeader {
                offset: start + error.utf8_error().valid_up_to() as u64,
                reason: "metadata is not UTF-8".to_owned(),
            })?;

        Ok(Self {
            input: Lookahead::new(input),
            offset: crc_at + crc.len() as u64,
            version,
            flags,
            metadata,
            header: [0; BLOCK_HEADER_LEN],
            header_got: 0,
            payload: Vec::new(),
            raw: Vec::new(),
            decompressor: None,
            delta: DeltaState::default(),
            end: None,
            search_budget: START_BUDGET,
        })
    }

    /// The metadata JSON of the header.
    pub fn metadata_json(&self) -> &str {
        &self.metadata
    }

    /// The format version of the file.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// The header flags (0 in version 1; unknown bits are ignored).
    pub fn flags(&self) -> u16 {
        self.flags
    }

    /// Streams every record of every complete block to `f`, in file order.
    ///
    /// Truncation (EOF in the middle of a block, or no trailer) is not an error: it ends
    /// the read and is reported in the summary (`complete == false`,
    /// `cut_short_at == Some(offset)`). Only whole blocks reach `f`. Damage is not an
    /// error either while something can be read: a damaged block (bad block magic or
    /// header, checksum mismatch, lengths over the limits, decompression failure, an
    /// undecodable record, data after the trailer) is skipped, the read goes on at the
    /// next block that checks out (see [`super::damage`]), and each skipped part is
    /// listed in [`ReadSummary::damage`] with its offset, length and reason. (A block
    /// whose checksum matches but holds an undecodable record, which only a faulty writer
    /// makes, has had the records before the bad one streamed.) The error is a damaged
    /// file with no records block read whole, naming the first damaged block.
    ///
    /// A second call streams nothing and returns the same ending.
    pub fn for_each_record(
        &mut self,
        f: impl FnMut(Record<'_>),
    ) -> Result<ReadSummary, CaptureError> {
        self.visit_records(&mut EachRecord(f))
    }

    /// [`for_each_record`](Self::for_each_record) into a [`RecordVisitor`]: allocations
    /// and frees come field by field, without a [`Record`] built for them,
    /// [`RecordVisitor::block_end`] is called after each block and
    /// [`RecordVisitor::damage`] after each damaged part skipped.
    pub fn visit_records<V>(&mut self, visitor: &mut V) -> Result<ReadSummary, CaptureError>
    where
        V: for<'r> RecordVisitor<'r>,
    {
        if let Some(end) = &self.end {
            return Ok(ReadSummary {
                complete: end.complete,
                cut_short_at: end.cut_short_at,
                trailer_json: end.trailer_json.clone(),
                damage: end.damage.clone(),
                ..ReadSummary::default()
            });
        }
        let mut summary = ReadSummary::default();
        loop {
            let block_offset = self.offset;
            let block = match self.next_block()? {
                NextBlock::Block(block) => block,
                NextBlock::CutShort => {
                    // A damaged length can make a block run past the end: a good block
                    // among the bytes read says so. Otherwise the file was cut short.
                    if self.header_got == BLOCK_HEADER_LEN {
                        let reason = format!(
                            "its length ({} bytes) runs past the end of the file",
                            self.payload_len_read()
                        );
                        if self.skip_damaged(block_offset, reason, &mut summary, visitor)? {
                            continue;
                        }
                        summary.damage.pop();
                    }
                    summary.cut_short_at = Some(block_offset);
                    return self.ended(summary);
                }
                NextBlock::Damaged(reason) => {
                    if self.skip_damaged(block_offset, reason, &mut summary, visitor)? {
                        continue;
                    }
                    return self.ended(summary);
                }
            };
            let raw: &[u8] = match block.compression {
                COMPRESSION_ZSTD => {
                    if let Err(reason) = decompress(
                        &mut self.decompressor,
                        &self.payload,
                        &mut self.raw,
                        block.raw_len,
                    ) {
                        self.skip_block(block_offset, reason, 0, &mut summary, visitor);
                        continue;
                    }
                    &self.raw
                }
                _ => &self.payload,
            };
            if block.kind == KIND_TRAILER {
                let Ok(trailer) = std::str::from_utf8(raw) else {
                    let reason = "the trailer is not UTF-8".to_owned();
                    self.skip_block(block_offset, reason, 0, &mut summary, visitor);
                    continue;
                };
                summary.complete = true;
                summary.trailer_json = Some(trailer.to_owned());
                visitor.trailer();
                self.skip_after_trailer(&mut summary)?;
                return self.ended(summary);
            }
            let (counts, decoded) = decode_block_into(raw, &mut self.delta, visitor);
            summary.records += counts.records;
            summary.events += counts.events;
            match decoded {
                Ok(()) => summary.blocks += 1,
                Err((record_offset, error)) => {
                    let reason =
                        format!("corrupt record at offset {record_offset} of the block: {error}");
                    self.skip_block(block_offset, reason, counts.records, &mut summary, visitor);
                }
            }
        }
    }

    /// The payload length in the current block's header (read whole: `header_got` is 20).
    fn payload_len_read(&self) -> u32 {
        let h = &self.header;
        u32::from_le_bytes([h[8], h[9], h[10], h[11]])
    }

    /// Skips the damaged block at `block_offset` (the bytes up to `self.offset` read):
    /// looks for the next block that checks out, from the byte after the block's start.
    /// True when one was found (the input reads from it); false at the end of the file.
    fn skip_damaged<V>(
        &mut self,
        block_offset: u64,
        reason: String,
        summary: &mut ReadSummary,
        visitor: &mut V,
    ) -> Result<bool, CaptureError>
    where
        V: for<'r> RecordVisitor<'r>,
    {
        let mut window = Vec::with_capacity(self.header_got + self.payload.len());
        window.extend_from_slice(&self.header[..self.header_got]);
        window.extend_from_slice(&self.payload);
        if !window.is_empty() {
            window.remove(0);
        }
        let found = find_next_block(
            &mut self.input,
            window,
            block_offset + 1,
            &mut self.search_budget,
        )
        .map_err(|source| io_error(block_offset, source))?;
        let (resumed_at, stopped_at, reason) = match found {
            Found::Block(at) => (Some(at), at, reason),
            Found::End(at) => (None, at, reason),
            Found::GaveUp(at) => (
                None,
                at,
                format!("{reason}; the search for a good block after it gave up at offset {at}"),
            ),
        };
        summary.damage.push(Damage {
            offset: block_offset,
            resumed_at,
            skipped_bytes: stopped_at.saturating_sub(block_offset),
            records_read: 0,
            reason,
        });
        self.offset = stopped_at;
        if resumed_at.is_some() {
            visitor.damage();
        }
        Ok(resumed_at.is_some())
    }

    /// Skips a block that passed its checksum but cannot be used (`records_read` of its
    /// records streamed): its length is sound, so the next block starts where it ends.
    fn skip_block<V>(
        &mut self,
        block_offset: u64,
        reason: String,
        records_read: u64,
        summary: &mut ReadSummary,
        visitor: &mut V,
    ) where
        V: for<'r> RecordVisitor<'r>,
    {
        summary.damage.push(Damage {
            offset: block_offset,
            resumed_at: Some(self.offset),
            skipped_bytes: self.offset - block_offset,
            records_read,
            reason,
        });
        visitor.damage();
    }

    /// Remembers how the file ended and hands the summary back; a damaged file of which
    /// no records block could be read whole is an error.
    fn ended(&mut self, summary: ReadSummary) -> Result<ReadSummary, CaptureError> {
        if summary.blocks == 0 {
            if let Some(first) = summary.damage.first() {
                return Err(corrupt_block(
                    first.offset,
                    format!("{}; no records block after it checks out", first.reason),
                ));
            }
        }
        self.end = Some(ReadSummary {
            complete: summary.complete,
            cut_short_at: summary.cut_short_at,
            trailer_json: summary.trailer_json.clone(),
            damage: summary.damage.clone(),
            ..ReadSummary::default()
        });
        Ok(summary)
    }

    /// Reads the next block header and its payload (into `self.payload`), checking the
    /// limits before reading and the checksum after.
    fn next_block(&mut self) -> Result<NextBlock, CaptureError> {
        let block_offset = self.offset;
        self.payload.clear();
        let got = read_full(&mut self.input, &mut self.header)
            .map_err(|source| io_error(block_offset, source))?;
        self.header_got = got;
        self.offset += got as u64;
        let magic_len = got.min(BLOCK_MAGIC.len());
        if self.header[..magic_len] != BLOCK_MAGIC[..magic_len] {
            return Ok(NextBlock::Damaged("no MTBK block magic".into()));
        }
        if got < BLOCK_HEADER_LEN {
            return Ok(NextBlock::CutShort);
        }
        let block = match BlockHeader::parse(&self.header) {
            Ok(block) => block,
            Err(reason) => return Ok(NextBlock::Damaged(reason)),
        };
        let got = read_up_to(
            &mut self.input,
            u64::from(block.payload_len),
            &mut self.payload,
        )
        .map_err(|source| io_error(self.offset, source))?;
        self.offset += got;
        if got < u64::from(block.payload_len) {
            return Ok(NextBlock::CutShort);
        }
        if crc32fast::hash(&self.payload) != block.crc {
            return Ok(NextBlock::Damaged("checksum mismatch".into()));
        }
        Ok(NextBlock::Block(block))
    }

    /// After the trailer, the file must end: bytes after it are skipped as damage.
    fn skip_after_trailer(&mut self, summary: &mut ReadSummary) -> Result<(), CaptureError> {
        let at = self.offset;
        let extra =
            io::copy(&mut self.input, &mut io::sink()).map_err(|source| io_error(at, source))?;
        if extra > 0 {
            summary.damage.push(Damage {
                offset: at,
                resumed_at: None,
                skipped_bytes: extra,
                records_read: 0,
                reason: "unexpected data after the trailer block".into(),
            });
            self.offset += extra;
        }
        Ok(())
    }
}

thread_local! {
    /// The zstd context of the last reader this thread dropped, for its next one: a
    /// context is about 96 KiB to allocate and set up, more than reading a small
    /// capture's block (the pytest plugin reads one capture per test).
    static SPARE_DECOMPRESSOR: Cell<Option<zstd::bulk::Decompressor<'static>>> =
        const { Cell::new(None) };
}

impl<R: Read> Drop for CaptureReader<R> {
    fn drop(&mut self) {
        if let Some(decompressor) = self.decompressor.take() {
            // A thread being torn down has no spare to keep: the context is freed.
            let _ = SPARE_DECOMPRESSOR.try_with(|spare| spare.set(Some(decompressor)));
        }
    }
}

/// Decompresses `payload` into `raw`, which must come out exactly `raw_len` bytes long.
fn decompress(
    decompressor: &mut Option<zstd::bulk::Decompressor<'static>>,
    payload: &[u8],
    raw: &mut Vec<u8>,
    raw_len: u32,
) -> Result<(), String> {
    // The frame header states the content size: check it before allocating for it.
    match zstd::zstd_safe::get_frame_content_size(payload) {
        Ok(Some(size)) if size != u64::from(raw_len) => {
            return Err(format!(
                "the zstd frame holds {size} bytes but the block header says {raw_len}"
            ));
        }
        Ok(_) => {}
        Err(_) => return Err("the payload is not a zstd frame".to_owned()),
    }
    let decompressor = match decompressor {
        Some(decompressor) => decompressor,
        None => decompressor.insert(match SPARE_DECOMPRESSOR.with(Cell::take) {
            Some(spare) => spare,
            None => zstd::bulk::Decompressor::new()
                .map_err(|error| format!("cannot set up zstd decompression: {error}"))?,
        }),
    };
    raw.clear();
    // Capacity bounds the output: at most `raw_len` (<= 256 MiB), or what an earlier block
    // needed.
    raw.reserve(raw_len as usize);
    let len = decompressor
        .decompress_to_buffer(payload, raw)
        .map_err(|error| format!("zstd decompression failed: {error}"))?;
    if len != raw_len as usize || raw.len() != len {
        return Err(format!(
            "decompressed to {len} bytes but the block header says {raw_len}"
        ));
    }
    Ok(())
}

/// Reads until `buf` is full or the input ends; returns how much was read.
fn read_full<R: Read>(input: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while let Some(rest) = buf.get_mut(filled..).filter(|rest| !rest.is_empty()) {
        match input.read(rest) {
            Ok(0) => break,
            // `min` guards against a reader that claims more than it was given.
            Ok(n) => filled = filled.saturating_add(n).min(buf.len()),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

/// Appends up to `len` bytes to `out`; returns how many. The buffer grows with the data
/// that actually arrives, so a corrupt length in a short file allocates nothing big.
fn read_up_to<R: Read>(input: &mut R, len: u64, out: &mut Vec<u8>) -> io::Result<u64> {
    input
        .by_ref()
        .take(len)
        .read_to_end(out)
        .map(|got| got as u64)
}

fn io_error(offset: u64, source: io::Error) -> CaptureError {
    CaptureError::Io { offset, source }
}

fn corrupt_block(offset: u64, reason: String) -> CaptureError {
    CaptureError::CorruptBlock { offset, reason }
}
