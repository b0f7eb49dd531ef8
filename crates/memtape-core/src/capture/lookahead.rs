//! [`Lookahead`]: a [`Read`] that bytes already read can be handed back to, so that the
//! reader can look for the next good block among the bytes of a damaged one.

use std::io::{self, Read};

/// Reads the bytes handed back with [`unread`](Lookahead::unread) first, then `inner`.
pub(super) struct Lookahead<R> {
    inner: R,
    /// Bytes handed back; `pending[at..]` are still to be read.
    pending: Vec<u8>,
    at: usize,
}

impl<R: Read> Lookahead<R> {
    pub(super) fn new(inner: R) -> Self {
        Self {
            inner,
            pending: Vec::new(),
            at: 0,
        }
    }

    /// Puts `bytes` back in front of what is still to be read.
    pub(super) fn unread(&mut self, bytes: &[u8]) {
        let mut pending = Vec::with_capacity(bytes.len() + self.pending.len() - self.at);
        pending.extend_from_slice(bytes);
        pending.extend_from_slice(&self.pending[self.at..]);
        self.pending = pending;
        self.at = 0;
    }
}

impl<R: Read> Read for Lookahead<R> {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at < self.pending.len() {
            let n = buf.len().min(self.pending.len() - self.at);
            buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
            self.at += n;
            if self.at == self.pending.len() {
                self.pending = Vec::new();
                self.at = 0;
            }
            return Ok(n);
        }
        self.inner.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_was_handed_back_first() {
        let mut input = Lookahead::new(&b"cdef"[..]);
        let mut two = [0u8; 2];
        input.read_exact(&mut two).unwrap();
        assert_eq!(&two, b"cd");
        input.unread(b"ab");
        input.unread(b"_");
        let mut rest = Vec::new();
        input.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"_abef");
    }
}
