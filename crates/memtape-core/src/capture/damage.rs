//! Damage in a capture: what the reader skipped ([`Damage`]), and how it finds the next
//! block that checks out after a damaged one ([`find_next_block`]).
//!
//! Every block carries its magic, its lengths and a CRC-32 of its payload, and decodes on
//! its own (only the string, frame and stack tables span blocks), so the blocks after a
//! damaged one can still be read: the reader looks for the next block magic whose header
//! is valid and whose payload matches its checksum. The work is bounded: each byte is
//! searched once, and the checksums of candidates that turn out false (a header that
//! looks valid in damaged or foreign bytes) cost at most [`MAX_PAYLOAD_LEN`] plus twice
//! the bytes searched, so a file of garbage is read in linear time.

use std::io::{self, Read};

use super::block_header::BlockHeader;
use super::format::{BLOCK_HEADER_LEN, BLOCK_MAGIC, MAX_PAYLOAD_LEN};
use super::lookahead::Lookahead;

/// A damaged part of a capture that the reader skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Where the damaged block starts in the file.
    pub offset: u64,
    /// Where reading went on: the next block that checks out. `None`: none did, and the
    /// rest of the file was skipped.
    pub resumed_at: Option<u64>,
    /// Bytes skipped: from `offset` to `resumed_at` (or to where the search stopped).
    pub skipped_bytes: u64,
    /// Records of the damaged block read before its damage (a block that passed its
    /// checksum but holds an undecodable record), else 0.
    pub records_read: u64,
    /// What is wrong with the block.
    pub reason: String,
}

/// Where [`find_next_block`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    /// A block that checks out starts at this offset; the input reads from there.
    Block(u64),
    /// The file ends at this offset with no good block after the damage.
    End(u64),
    /// The checksum budget ran out at this offset (a file full of false block headers).
    GaveUp(u64),
}

/// Bytes read at a time while searching.
const PIECE: usize = 64 << 10;
/// Bytes searched past before the window is trimmed.
const TRIM_AT: usize = 1 << 20;

/// Searches `window` (the bytes at file offset `start` onward, already read) and then the
/// rest of `input` for the next block that checks out. `budget`: the checksum bytes that
/// may still be spent on candidates (grows by two for each byte read here).
pub(super) fn find_next_block<R: Read>(
    input: &mut Lookahead<R>,
    mut window: Vec<u8>,
    start: u64,
    budget: &mut u64,
) -> io::Result<Found> {
    let mut base = start; // the file offset of window[0]
    let mut from = 0; // where the search goes on in window
    loop {
        if from >= TRIM_AT {
            window.drain(..from);
            base += from as u64;
            from = 0;
        }
        let Some(found) = find_magic(&window[from..]) else {
            // A magic may straddle the next piece: keep its first bytes.
            let keep = window.len().saturating_sub(BLOCK_MAGIC.len() - 1).max(from);
            window.drain(..keep);
            base += keep as u64;
            from = 0;
            if read_more(input, &mut window, PIECE, budget)? == 0 {
                return Ok(Found::End(base + window.len() as u64));
            }
            continue;
        };
        let at = from + found;
        if !fill_to(input, &mut window, at + BLOCK_HEADER_LEN, budget)? {
            // No complete block header after this point: nothing more to find.
            return Ok(Found::End(base + window.len() as u64));
        }
        let mut header = [0u8; BLOCK_HEADER_LEN];
        header.copy_from_slice(&window[at..at + BLOCK_HEADER_LEN]);
        if let Ok(block) = BlockHeader::parse(&header) {
            let end = at + BLOCK_HEADER_LEN + block.payload_len as usize;
            if fill_to(input, &mut window, end, budget)? {
                let cost = u64::from(block.payload_len);
                if cost > *budget {
                    return Ok(Found::GaveUp(base + at as u64));
                }
                *budget -= cost;
                if crc32fast::hash(&window[at + BLOCK_HEADER_LEN..end]) == block.crc {
                    input.unread(&window[at..]);
                    return Ok(Found::Block(base + at as u64));
                }
            }
        }
        from = at + 1;
    }
}

/// The checksum budget a reader starts with: one block of the largest size.
pub(super) const START_BUDGET: u64 = MAX_PAYLOAD_LEN as u64;

/// The index of the first block magic in `bytes`.
fn find_magic(bytes: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = bytes[from..].iter().position(|&b| b == BLOCK_MAGIC[0]) {
        let at = from + i;
        if bytes.len() - at < BLOCK_MAGIC.len() {
            return None;
        }
        if bytes[at..at + BLOCK_MAGIC.len()] == BLOCK_MAGIC {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Reads until `window` holds `len` bytes; false when the input ends first.
fn fill_to<R: Read>(
    input: &mut Lookahead<R>,
    window: &mut Vec<u8>,
    len: usize,
    budget: &mut u64,
) -> io::Result<bool> {
    while window.len() < len {
        if read_more(input, window, (len - window.len()).max(PIECE), budget)? == 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Appends up to `len` bytes of `input` to `window`; returns how many (0: the end).
fn read_more<R: Read>(
    input: &mut Lookahead<R>,
    window: &mut Vec<u8>,
    len: usize,
    budget: &mut u64,
) -> io::Result<usize> {
    let got = input.by_ref().take(len as u64).read_to_end(window)?;
    *budget = budget.saturating_add(2 * got as u64);
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_magic_anywhere() {
        assert_eq!(find_magic(b"MTBK"), Some(0));
        assert_eq!(find_magic(b"MMTMTBMTBK.."), Some(6));
        assert_eq!(find_magic(b"MTB"), None);
        assert_eq!(find_magic(b"xxMTBX MTB"), None);
        assert_eq!(find_magic(b""), None);
    }
}
