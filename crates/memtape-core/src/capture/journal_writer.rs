//! [`JournalWriter`]: the flusher's half of a capture. It encodes the [`Journal`]s the
//! recording threads fill into blocks of about a target size and writes them with a
//! [`CaptureFileWriter`].

use std::io::{self, Write};

use super::encoder::BlockEncoder;
use super::journal::Journal;
use super::writer::CaptureFileWriter;

/// Encodes journals, in the order given, into blocks of `block_target` raw bytes (one
/// record more at most), each starting with a Time record, and writes each full block.
/// The block being filled is written by [`flush_block`](Self::flush_block), and last by
/// [`finish`](Self::finish).
pub struct JournalWriter<W: Write> {
    file: CaptureFileWriter<W>,
    encoder: BlockEncoder,
    block_target: usize,
}

impl<W: Write> JournalWriter<W> {
    /// Writes blocks of about `block_target` raw bytes to `file`.
    pub fn new(file: CaptureFileWriter<W>, block_target: usize) -> Self {
        Self::with_encoder(
            file,
            block_target,
            BlockEncoder::with_capacity(block_target + block_target / 8),
        )
    }

    /// As [`new`](Self::new), encoding with `encoder`'s buffer (one an earlier capture
    /// gave back with [`finish_keeping_encoder`](Self::finish_keeping_encoder)); what it
    /// held is dropped.
    pub fn with_encoder(
        file: CaptureFileWriter<W>,
        block_target: usize,
        mut encoder: BlockEncoder,
    ) -> Self {
        encoder.restart();
        JournalWriter {
            file,
            encoder,
            block_target: block_target.max(1),
        }
    }

    /// Encodes `journal`, writing each block that reaches the target on the way.
    pub fn add(&mut self, journal: &Journal) -> io::Result<()> {
        let mut at = 0;
        while at < journal.len() {
            if self.encoder.is_empty() && !journal.is_time(at) {
                // The spec wants a Time record at the start of every block.
                self.encoder.time(self.encoder.last_time());
            }
            at = journal.encode_into(&mut self.encoder, at, self.block_target);
            if self.encoder.len() >= self.block_target {
                self.flush_block()?;
            }
        }
        Ok(())
    }

    /// Whether the block being filled holds records not yet written.
    pub fn holds_records(&self) -> bool {
        !self.encoder.is_empty()
    }

    /// Writes the block being filled, if it holds any record.
    pub fn flush_block(&mut self) -> io::Result<()> {
        if self.encoder.is_empty() {
            return Ok(());
        }
        let written = self.file.write_block(self.encoder.as_bytes());
        self.encoder.clear();
        written
    }

    /// Bytes written so far: the header and the blocks written.
    pub fn bytes_written(&self) -> u64 {
        self.file.bytes_written()
    }

    /// The output, as written so far.
    pub fn get_ref(&self) -> &W {
        self.file.get_ref()
    }

    /// Stores the blocks written from now on as they are
    /// ([`CaptureFileWriter::store_blocks`]).
    pub fn store_blocks(&mut self) {
        self.file.store_blocks();
    }

    /// Writes the block being filled, then the trailer; returns the output.
    pub fn finish(self, trailer_json: &str) -> io::Result<W> {
        self.finish_keeping_encoder(trailer_json)
            .0
            .map(|(out, _)| out)
    }

    /// As [`finish`](Self::finish) (the block being filled and the trailer in one write),
    /// with the bytes written before the trailer; and gives the encoder back for another
    /// capture's writer ([`with_encoder`](Self::with_encoder)): its buffer is not made
    /// again.
    pub fn finish_keeping_encoder(
        self,
        trailer_json: &str,
    ) -> (io::Result<(W, u64)>, BlockEncoder) {
        let JournalWriter {
            file, mut encoder, ..
        } = self;
        let block = (!encoder.is_empty()).then(|| encoder.as_bytes());
        let finished = file.finish_after_block(block, trailer_json);
        encoder.clear();
        (finished, encoder)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{CaptureReader, RareRecords, Record};
    use super::*;

    fn journal_of(first: u64, n: u64, time: u64) -> Journal {
        let mut journal = Journal::default();
        journal.time(time);
        for i in first..first + n {
            journal.alloc(0, 0x1000 + 16 * (i % 512), 32 + i % 64, (i % 7) as u32);
            journal.free(None, 0x1000 + 16 * ((i * 7) % 512));
        }
        journal.marker("m");
        journal
    }

    /// Every record but the Time records, each with the time in force at it.
    fn timed(records: &[String]) -> Vec<(String, String)> {
        let mut now = String::new();
        let mut out = Vec::new();
        for r in records {
            if r.starts_with("Time") {
                now = r.clone();
            } else {
                out.push((now.clone(), r.clone()));
            }
        }
        out
    }

    /// Every record read back, as text, and the blocks' count.
    fn read_back(bytes: &[u8]) -> (Vec<String>, u64) {
        let mut reader = CaptureReader::new(bytes).expect("a capture");
        let mut seen = Vec::new();
        let summary = reader
            .for_each_record(|record: Record<'_>| seen.push(format!("{record:?}")))
            .expect("readable");
        assert!(summary.complete);
        (seen, summary.blocks)
    }

    #[test]
    fn journals_become_blocks_of_the_target_each_with_a_time_first() {
        let journals: Vec<Journal> = (0..4)
            .map(|k| journal_of(k * 5000, 5000, 1000 * k))
            .collect();
        let file = CaptureFileWriter::new(Vec::new(), "{}").unwrap();
        let mut writer = JournalWriter::new(file, 8192);
        for journal in &journals {
            writer.add(journal).unwrap();
        }
        let file = writer.finish("{}").unwrap();

        let mut direct = BlockEncoder::new();
        for journal in &journals {
            journal.encode_into(&mut direct, 0, usize::MAX);
        }
        let mut expected = Vec::new();
        super::super::tests_support::decode(direct.as_bytes(), |r| expected.push(format!("{r:?}")));
        let (seen, blocks) = read_back(&file);
        assert!(blocks >= 8, "{blocks} blocks of about 8 KiB");
        assert_eq!(timed(&seen), timed(&expected));
    }

    #[test]
    fn flush_block_writes_what_is_held_and_nothing_twice() {
        let mut writer =
            JournalWriter::new(CaptureFileWriter::new(Vec::new(), "{}").unwrap(), 1 << 20);
        writer.add(&journal_of(0, 10, 5)).unwrap();
        assert!(writer.holds_records());
        let before = writer.bytes_written();
        writer.flush_block().unwrap();
        assert!(writer.bytes_written() > before);
        assert!(!writer.holds_records());
        let after = writer.bytes_written();
        writer.flush_block().unwrap();
        assert_eq!(
            writer.bytes_written(),
            after,
            "an empty block is not written"
        );
        writer.add(&Journal::default()).unwrap();
        assert!(!writer.holds_records());
        let file = writer.finish("{}").unwrap();
        let (seen, blocks) = read_back(&file);
        assert_eq!(blocks, 1);
        assert_eq!(seen.len(), 1 + 20 + 1, "{seen:?}");
    }

    #[test]
    fn stored_blocks_read_back_as_the_compressed_ones_do() {
        let write = |stored: bool| {
            let file = CaptureFileWriter::new(Vec::new(), "{}").unwrap();
            let mut writer = JournalWriter::new(file, 1 << 16);
            writer.add(&journal_of(0, 3000, 7)).unwrap();
            if stored {
                writer.store_blocks();
            }
            writer.add(&journal_of(3000, 3000, 9)).unwrap();
            assert_eq!(writer.get_ref().len() as u64, writer.bytes_written());
            writer.finish("{}").unwrap()
        };
        let (compressed, stored) = (write(false), write(true));
        assert!(
            stored.len() > compressed.len() + 10_000,
            "the blocks after store_blocks are stored as they are: {} against {} bytes",
            stored.len(),
            compressed.len()
        );
        assert_eq!(read_back(&stored), read_back(&compressed));
    }
}
