//! The file a memory_viz snapshot is written to. A second thread writes each piece into
//! the file while the writer encodes the next ones: copying 126 MiB into the page cache
//! is about a third of a big dump's CPU time. An existing file is overwritten in place
//! and cut to length at the end: truncating it first would free its page-cache pages
//! (and start their writeback when the file is closed) only for the write to allocate
//! them again.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use memtape_core::torch_snapshot::{PieceSink, WritePieces, PIECE_CAPACITY};

use crate::session::signal_mask::spawn_without_signals;
use crate::thread::hook_mode::{self, HookMode};

/// Pieces handed over and not yet written (at 64 KiB each: at most 512 KiB waiting).
const IN_FLIGHT: usize = 8;

/// Writes `path` with `write`, which hands its pieces to the sink it is given. Errors
/// are those of opening `path` (as `File::create` reports them), of the writes, or of
/// cutting the file to its new length.
pub(crate) fn write_file<T>(
    path: &Path,
    write: impl FnOnce(&mut dyn PieceSink) -> io::Result<T>,
) -> io::Result<T> {
    // Created if missing; not truncated (see the module's comment). A symlink is followed,
    // as `File::create` follows it.
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let (result, written) = match Background::start(&file) {
        Ok(mut background) => {
            let result = write(&mut background);
            let (written, thread) = background.stop();
            // The thread's error is the real one: a piece it could not take failed after.
            (thread.and(result), written)
        }
        Err(_) => {
            let mut counted = Counted {
                out: WritePieces(&mut file),
                written: 0,
            };
            let result = write(&mut counted);
            (result, counted.written)
        }
    };
    // Cut what is left of a longer file that was there before (after a failed write too:
    // then the file ends where the written bytes end). Devices and pipes have no length.
    let cut = match file.metadata() {
        Ok(meta) if meta.is_file() => file.set_len(written),
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    };
    let value = result?;
    cut?;
    Ok(value)
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
        let thread = spawn_without_signals(
            std::thread::Builder::new().name("memtape-snapshot".into()),
            move || {
                // Whatever this thread allocates is memtape's own work, never recorded.
                hook_mode::set(HookMode::Untraced);
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
            },
        )?;
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
        let path = scratch_path("longer");
        std::fs::write(&path, vec![b'x'; 1 << 20]).unwrap();
        let pieces: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 1000 + usize::from(i)]).collect();
        let slices: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
        write_file(&path, |sink| put_all(sink, &slices)).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), pieces.concat());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_failed_write_ends_the_file_where_its_bytes_end() {
        let path = scratch_path("failed");
        std::fs::write(&path, vec![b'x'; 1 << 16]).unwrap();
        let result = write_file(&path, |sink| -> io::Result<()> {
            put_all(sink, &[b"written"])?;
            Err(io::Error::other("the writer gave up"))
        });
        assert_eq!(result.unwrap_err().to_string(), "the writer gave up");
        assert_eq!(std::fs::read(&path).unwrap(), b"written");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_threads_error_is_the_one_returned() {
        // /dev/full takes no byte: the thread's first write fails with ENOSPC.
        let full = Path::new("/dev/full");
        if !full.exists() {
            return;
        }
        let piece = vec![0u8; 1 << 16];
        let err = write_file(full, |sink| put_all(sink, &[piece.as_slice(); 64])).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        // A device has no length to cut: /dev/null takes everything.
        write_file(Path::new("/dev/null"), |sink| {
            put_all(sink, &[piece.as_slice(); 4])
        })
        .unwrap();
    }

    #[test]
    fn opening_errors_are_those_of_creating_the_file() {
        let missing = scratch_path("missing-dir").join("snapshot.pickle");
        let err = write_file(&missing, |sink| put_all(sink, &[b"x"])).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let dir = std::env::temp_dir();
        let err = write_file(&dir, |sink| put_all(sink, &[b"x"])).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EISDIR));
    }
}
