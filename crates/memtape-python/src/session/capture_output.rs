//! Where a capture's bytes go: its file, or memory first (the pytest plugin's capture of
//! one test, read once the test ends and then removed). Creating a file and writing to it
//! cost a tiny test more than its whole recording did (about 40 us on ext4, and more when
//! the disk is busy); most tests' captures are a few kilobytes. A capture held in memory
//! becomes its file once it outgrows [`MEMORY_LIMIT`] (a long test: the follower thread
//! then reads it as it grows); one that ends in memory is handed to whoever reads it
//! ([`take_finished`]) and no file is ever made.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The most bytes a capture holds in memory before it makes its file.
const MEMORY_LIMIT: usize = 1 << 20;

/// A capture's output.
pub(crate) enum CaptureOutput {
    File(BufWriter<File>),
    /// The bytes written so far, and the file they go to once there are too many.
    Memory {
        bytes: Vec<u8>,
        path: PathBuf,
    },
}

impl CaptureOutput {
    /// The file at `path`, created (or truncated) now.
    pub(crate) fn create(path: &Path) -> io::Result<Self> {
        Ok(CaptureOutput::File(BufWriter::new(File::create(path)?)))
    }

    /// Memory, for a capture whose file would be `path`.
    pub(crate) fn in_memory(path: &Path) -> Self {
        CaptureOutput::Memory {
            bytes: Vec::new(),
            path: path.to_owned(),
        }
    }

    /// Whether the capture is still held in memory (it made no file).
    pub(crate) fn is_in_memory(&self) -> bool {
        matches!(self, CaptureOutput::Memory { .. })
    }

    /// The capture is over: one still in memory is kept for its reader
    /// ([`take_finished`]).
    pub(crate) fn finished(self) {
        if let CaptureOutput::Memory { bytes, path } = self {
            *FINISHED.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((path, Arc::new(bytes)));
        }
    }

    /// Makes the file and writes what memory held to it.
    fn make_file(&mut self) -> io::Result<&mut BufWriter<File>> {
        if let CaptureOutput::Memory { bytes, path } = self {
            let mut file = BufWriter::new(File::create(&*path)?);
            file.write_all(bytes)?;
            *self = CaptureOutput::File(file);
        }
        match self {
            CaptureOutput::File(file) => Ok(file),
            CaptureOutput::Memory { .. } => unreachable!("made into a file above"),
        }
    }
}

impl Write for CaptureOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            CaptureOutput::Memory { bytes, .. } if bytes.len() + buf.len() <= MEMORY_LIMIT => {
                bytes.extend_from_slice(buf);
                Ok(buf.len())
            }
            _ => self.make_file()?.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            CaptureOutput::File(file) => file.flush(),
            CaptureOutput::Memory { .. } => Ok(()),
        }
    }
}

/// The last capture that ended in memory: its path and bytes.
type Finished = Option<(PathBuf, Arc<Vec<u8>>)>;

static FINISHED: Mutex<Finished> = Mutex::new(None);

/// The bytes of the capture of `path` if it ended in memory (taken: asked again, None).
pub(crate) fn take_finished(path: &Path) -> Option<Arc<Vec<u8>>> {
    let mut finished = FINISHED.lock().unwrap_or_else(PoisonError::into_inner);
    if finished.as_ref().is_some_and(|(p, _)| p == path) {
        return finished.take().map(|(_, bytes)| bytes);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_becomes_the_file_past_the_limit_and_a_small_one_never_does() {
        let dir = std::env::temp_dir().join(format!("memtape-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let small = dir.join("small");
        let mut out = CaptureOutput::in_memory(&small);
        out.write_all(b"header").unwrap();
        out.flush().unwrap();
        out.finished();
        assert!(!small.exists());
        assert!(take_finished(&dir.join("other")).is_none());
        assert_eq!(
            take_finished(&small).as_deref().map(Vec::as_slice),
            Some(&b"header"[..])
        );
        assert!(take_finished(&small).is_none(), "taken once");

        let big = dir.join("big");
        let mut out = CaptureOutput::in_memory(&big);
        out.write_all(b"head").unwrap();
        assert!(!big.exists());
        let block = vec![7u8; MEMORY_LIMIT];
        out.write_all(&block).unwrap();
        out.flush().unwrap();
        out.finished();
        let written = std::fs::read(&big).unwrap();
        assert_eq!(written.len(), 4 + MEMORY_LIMIT);
        assert_eq!(&written[..4], b"head");
        assert!(take_finished(&big).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
