//! The file a memory_viz snapshot is written to. A second thread writes each piece into
//! the file while the writer encodes the next ones: copying 126 MiB into the page cache
//! is about a third of a big dump's CPU time. An existing file is overwritten in place
//! and cut to length at the end: truncating it first would free its page-cache pages
//! (and start their writeback when the file is closed) only for the write to allocate
//! them again.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use memtape_core::torch_snapshot::{PieceSink, WritePieces, PIECE_CAPACITY};
use pyo3::Python;

use crate::native;
use crate::session::signal_mask::spawn_own_thread;
use crate::thread::hook_mode::HookMode;

/// Pieces handed over and not yet written (1 MiB each: at most 2 MiB waiting).
const IN_FLIGHT: usize = 2;

/// A snapshot file opened for writing, with its writer thread when it has one.
pub(crate) struct SnapshotFile {
    file: File,
    background: Option<Background>,
}

impl SnapshotFile {
    /// Opens `path`, creating it if needed (errors as `File::create` reports them); a
    /// symlink is followed, as `File::create` follows it, and nothing is cut yet.
    ///
    /// The writer thread is started here, with the GIL held, and only while no native
    /// allocation is being recorded: a new thread's start-up allocates (the C library's
    /// list of its thread-local destructors) before it can mark itself as memtape's, and
    /// native tracing would record that as the program's. Native tracing only starts from
    /// Python, so it cannot start before the thread is ready. While it is on, the pieces
    /// are written by the calling thread.
    pub(crate) fn create(_gil: Python<'_>, path: &Path) -> io::Result<Self> {
        Self::open(path, !native::ACTIVE.load(Ordering::Acquire))
    }

    /// Opens `path`, with a writer thread if `threaded` (and one can be started).
    fn open(path: &Path, threaded: bool) -> io::Result<Self> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let background = threaded.then(|| Background::start(&file).ok()).flatten();
        Ok(SnapshotFile { file, background })
    }

    /// Writes the file with `write`, which hands its pieces to the sink it is given,
    /// then cuts it to the bytes written. Errors are those of the writes or of the cut.
    pub(crate) fn write<T>(
        mut self,
        write: impl FnOnce(&mut dyn PieceSink) -> io::Result<T>,
    ) -> io::Result<T> {
        let (result, written) = match self.background.as_mut() {
            Some(background) => {
                let result = write(background);
                let (written, thread) = background.stop();
                // The thread's error is the real one: a piece it could not take failed after.
                (thread.and(result), written)
            }
            None => {
                let mut counted = Counted {
                    out: WritePieces(&mut self.file),
                    written: 0,
                };
                let result = write(&mut counted);
                (result, counted.written)
            }
        };
        // Cut what is left of a longer file that was there before (after a failed write
        // too: then the file ends where the written bytes end). Devices and pipes have no
        // length.
        let cut = match self.file.metadata() {
            Ok(meta) if meta.is_file() => self.file.set_len(written),
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        let value = result?;
        cut?;
        Ok(value)
    }
}

/// Hands each piece to a thread that writes it.
struct Background {
    pieces: Option<SyncSender<Vec<u8>>>,
    empties: Receiver<Vec<u8>>,
    thread: Option<JoinHandle<(u64, io::Result<()>)>>,
}

impl Background {
    fn start(file: &File) -> io::Result<Self> {
        let mut out = file.try_clone()?;
        let (pieces, to_write) = mpsc::sync_channel::<Vec<u8>>(IN_FLIGHT);
        let (give_back, empties) = mpsc::sync_channel::<Vec<u8>>(IN_FLIGHT + 2);
        // Whatever this thread allocates is memtape's own work, never recorded; its
        // start-up is over when this returns (an error: it ended, and `stop` says why).
        let thread = spawn_own_thread("memtape-snapshot", HookMode::Untraced, move || {
            let mut written = 0u64;
            for mut piece in to_write {
                if let Err(e) = out.write_all(&piece) {
                    return (written, Err(e));
                }
                written += piece.len() as u64;
                piece.clear();
                // Full only if the writer stopped taking buffers back: drop it then.
                let _ = give_back.try_send(piece);
            }
            (written, Ok(()))
        })?;
        Ok(Background {
            pieces: Some(pieces),
            empties,
            thread: Some(thread),
        })
    }

    /// Waits for the thread: the bytes it wrote, and whether every write succeeded.
    fn stop(&mut self) -> (u64, io::Result<()>) {
        // No more pieces: the thread's loop ends once it has written those it has.
        self.pieces = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(done)) => done,
            Some(Err(_)) => (
                0,
                Err(io::Error::other("the snapshot writer thread failed")),
            ),
            None => (0, Ok(())),
        }
    }
}

impl PieceSink for Background {
    fn put(&mut self, piece: Vec<u8>) -> io::Result<Vec<u8>> {
        let sent = self.pieces.as_ref().map(|pieces| pieces.send(piece));
        if !matches!(sent, Some(Ok(()))) {
            // The thread stopped at a failed write; `stop` returns its error.
            return Err(io::Error::other("the snapshot writer thread stopped"));
        }
        Ok(self
            .empties
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(PIECE_CAPACITY)))
    }

    fn finish(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A sink that writes on the calling thread and counts the bytes written.
struct Counted<'f> {
    out: WritePieces<'f, File>,
    written: u64,
}

impl PieceSink for Counted<'_> {
    fn put(&mut self, piece: Vec<u8>) -> io::Result<Vec<u8>> {
        let len = piece.len() as u64;
        let empty = self.out.put(piece)?;
        self.written += len;
        Ok(empty)
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path of its own in the temporary directory.
    fn scratch_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("memtape-{}-{name}", std::process::id()))
    }

    /// Writes `path` with `write`, on a thread of its own or not.
    fn write_file<T>(
        path: &Path,
        threaded: bool,
        write: impl FnOnce(&mut dyn PieceSink) -> io::Result<T>,
    ) -> io::Result<T> {
        SnapshotFile::open(path, threaded)?.write(write)
    }

    /// Hands `pieces` to the sink, one buffer each.
    fn put_all(sink: &mut dyn PieceSink, pieces: &[&[u8]]) -> io::Result<()> {
        for piece in pieces {
            let mut buf = Vec::with_capacity(PIECE_CAPACITY);
            buf.extend_from_slice(piece);
            let empty = sink.put(buf)?;
            assert!(empty.is_empty());
        }
        sink.finish()
    }

    #[test]
    fn a_longer_file_is_overwritten_and_cut() {
        for threaded in [true, false] {
            let path = scratch_path(&format!("longer-{threaded}"));
            std::fs::write(&path, vec![b'x'; 1 << 20]).unwrap();
            let pieces: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 1000 + usize::from(i)]).collect();
            let slices: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
            write_file(&path, threaded, |sink| put_all(sink, &slices)).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), pieces.concat());
            std::fs::remove_file(&path).unwrap();
        }
    }

    #[test]
    fn a_failed_write_ends_the_file_where_its_bytes_end() {
        for threaded in [true, false] {
            let path = scratch_path(&format!("failed-{threaded}"));
            std::fs::write(&path, vec![b'x'; 1 << 16]).unwrap();
            let result = write_file(&path, threaded, |sink| -> io::Result<()> {
                put_all(sink, &[b"written"])?;
                Err(io::Error::other("the writer gave up"))
            });
            assert_eq!(result.unwrap_err().to_string(), "the writer gave up");
            assert_eq!(std::fs::read(&path).unwrap(), b"written");
            std::fs::remove_file(&path).unwrap();
        }
    }

    #[test]
    fn a_failed_write_is_reported_with_its_own_error() {
        // /dev/full takes no byte: the first write fails with ENOSPC (on the thread, the
        // pieces handed over after it fail too, and the thread's error is the one seen).
        let full = Path::new("/dev/full");
        if !full.exists() {
            return;
        }
        let piece = vec![0u8; 1 << 16];
        for threaded in [true, false] {
            let err = write_file(full, threaded, |sink| {
                put_all(sink, &[piece.as_slice(); 64])
            })
            .unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
            // A device has no length to cut: /dev/null takes everything.
            write_file(Path::new("/dev/null"), threaded, |sink| {
                put_all(sink, &[piece.as_slice(); 4])
            })
            .unwrap();
        }
    }

    #[test]
    fn opening_errors_are_those_of_creating_the_file() {
        let missing = scratch_path("missing-dir").join("snapshot.pickle");
        let err = write_file(&missing, true, |sink| put_all(sink, &[b"x"])).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let dir = std::env::temp_dir();
        let err = write_file(&dir, true, |sink| put_all(sink, &[b"x"])).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EISDIR));
    }
}
