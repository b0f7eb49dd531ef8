//! Where a write's pieces go: the writer fills a buffer and hands the whole buffer over,
//! so an output that writes on another thread gets it without a copy.

use std::io::{self, Write};

/// Takes the pieces of one snapshot, in order.
pub trait PieceSink {
    /// Takes a filled piece and returns an empty buffer for the next one (the same
    /// buffer cleared, or another).
    fn put(&mut self, piece: Vec<u8>) -> io::Result<Vec<u8>>;

    /// After the last piece.
    fn finish(&mut self) -> io::Result<()>;
}

/// A [`Write`] as a [`PieceSink`]: each piece is written, and its buffer reused.
pub struct WritePieces<'w, W: Write + ?Sized>(pub &'w mut W);

impl<W: Write + ?Sized> PieceSink for WritePieces<'_, W> {
    fn put(&mut self, mut piece: Vec<u8>) -> io::Result<Vec<u8>> {
        self.0.write_all(&piece)?;
        piece.clear();
        Ok(piece)
    }

    fn finish(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}
