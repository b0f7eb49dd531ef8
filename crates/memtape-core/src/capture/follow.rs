//! Reading a capture file while it is still being written.
//!
//! The writer only appends (header, then whole blocks, then the trailer), so a reader that
//! meets the end of the file has only to wait for more bytes. [`Following`] does that
//! until the writer says it has finished; then the end of the file is the end for good.
//! A [`super::CaptureReader`] over it reads the records as they are flushed, and its
//! result is the one it would give on the finished file.

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A [`Read`] over a growing file: at the end it waits (parking the thread for at most
/// `poll` at a time; unpark it to look again at once) until more bytes come or `finished`
/// is set.
pub struct Following<R> {
    inner: R,
    finished: Arc<AtomicBool>,
    poll: Duration,
}

impl<R: Read> Following<R> {
    /// Follows `inner`; the writer sets `finished` once its last byte is written.
    pub fn new(inner: R, finished: Arc<AtomicBool>, poll: Duration) -> Self {
        Self {
            inner,
            finished,
            poll,
        }
    }
}

impl<R: Read> Read for Following<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = self.inner.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            if self.finished.load(Ordering::Acquire) {
                // What was written before the flag was set is there now.
                return self.inner.read(buf);
            }
            std::thread::park_timeout(self.poll);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{File, OpenOptions};
    use std::io::Write;

    fn temp_file(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("memtape-follow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn waits_for_bytes_written_later_and_ends_only_when_finished() {
        let path = temp_file("grow");
        let mut writer = File::create(&path).unwrap();
        writer.write_all(b"ab").unwrap();
        let finished = Arc::new(AtomicBool::new(false));
        let mut reader = Following::new(
            File::open(&path).unwrap(),
            Arc::clone(&finished),
            Duration::from_millis(1),
        );
        let flag = Arc::clone(&finished);
        let writing = std::thread::spawn(move || {
            for chunk in [b"cd", b"ef"] {
                std::thread::sleep(Duration::from_millis(20));
                writer.write_all(chunk).unwrap();
            }
            flag.store(true, Ordering::Release);
        });
        let mut all = Vec::new();
        reader.read_to_end(&mut all).unwrap();
        writing.join().unwrap();
        assert_eq!(all, b"abcdef");
        std::fs::remove_file(&path).unwrap();
    }

    /// Sets the writer's flag when the reader meets the trailer, as a live view does.
    struct EndsAtTrailer {
        finished: Arc<AtomicBool>,
        events: u64,
    }

    impl crate::capture::RecordVisitor<'_> for EndsAtTrailer {
        fn alloc(&mut self, _: u32, _: u64, _: u64, _: u32) {
            self.events += 1;
        }
        fn free(&mut self, _: Option<u32>, _: u64) {
            self.events += 1;
        }
        fn record(&mut self, _: crate::capture::Record<'_>) {}
        fn trailer(&mut self) {
            self.finished.store(true, Ordering::Release);
        }
    }

    #[test]
    fn a_reader_of_a_finished_capture_ends_at_its_trailer_when_the_visitor_says_so() {
        use crate::capture::{BlockEncoder, CaptureFileWriter, CaptureReader, Record};
        let path = temp_file("trailer");
        let mut w = CaptureFileWriter::new(File::create(&path).unwrap(), "{}").unwrap();
        let mut enc = BlockEncoder::new();
        enc.record(&Record::Alloc {
            domain: 0,
            addr: 0x10,
            size: 8,
            stack: 0,
        });
        w.write_block(&enc.take()).unwrap();
        w.finish("{}").unwrap();
        // The writer never says it has finished: only the trailer ends the reading (an
        // hour between looks: a reader waiting for more bytes would not end in time).
        let finished = Arc::new(AtomicBool::new(false));
        let input = Following::new(
            File::open(&path).unwrap(),
            Arc::clone(&finished),
            Duration::from_secs(3600),
        );
        let (done, outcome) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut visitor = EndsAtTrailer {
                finished,
                events: 0,
            };
            let summary = CaptureReader::new(input)
                .unwrap()
                .visit_records(&mut visitor)
                .unwrap();
            let _ = done.send((summary.complete, visitor.events));
        });
        let ended = outcome.recv_timeout(Duration::from_secs(30));
        assert_eq!(ended, Ok((true, 1)));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn an_unparked_reader_looks_again_at_once() {
        let path = temp_file("last");
        File::create(&path).unwrap();
        let finished = Arc::new(AtomicBool::new(false));
        let mut reader = Following::new(
            File::open(&path).unwrap(),
            Arc::clone(&finished),
            Duration::from_secs(3600),
        );
        // The reader waits at the end (an hour between looks); the writer appends, finishes
        // and wakes it: it reads the last bytes now.
        let mut buf = [0u8; 8];
        let reading = std::thread::spawn(move || {
            let n = reader.read(&mut buf).unwrap();
            (n, buf)
        });
        std::thread::sleep(Duration::from_millis(20));
        let mut writer = OpenOptions::new().append(true).open(&path).unwrap();
        writer.write_all(b"end").unwrap();
        finished.store(true, Ordering::Release);
        reading.thread().unpark();
        let (n, buf) = reading.join().unwrap();
        assert_eq!(&buf[..n], b"end");
        std::fs::remove_file(&path).unwrap();
    }
}
