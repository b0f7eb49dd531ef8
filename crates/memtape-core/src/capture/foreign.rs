//! [`ForeignFile`]: files a user may pass for a capture by mistake, recognized by their
//! first bytes, so that the error says what the file is and what reads it.

use std::io::Read;

use super::format::FILE_MAGIC;

/// Bytes of a file's start looked at to recognize it.
pub(super) const PREFIX_LEN: usize = 4096;

/// memray's file magic: `memray` and a NUL, at offset 0 (memray's `records.h`).
const MEMRAY_MAGIC: &[u8] = b"memray\0";
/// An LZ4 frame's magic (memray compresses its captures with LZ4 when tracking ends).
const LZ4_MAGIC: [u8; 4] = [0x04, 0x22, 0x4d, 0x18];
/// A zstd frame's magic.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// A gzip member's magic.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// The PROTO opcode that starts a pickle of protocol 2 or later.
const PICKLE_PROTO: u8 = 0x80;

/// A kind of file that is not a memtape capture but is often taken for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForeignFile {
    /// A memray capture (`memray run`), LZ4-compressed (memray's default) or not.
    Memray,
    /// A tracemalloc snapshot (`Snapshot.dump`, a pickle).
    TracemallocSnapshot,
    /// A PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`,
    /// `memtape.dump_snapshot`: the pickle PyTorch's memory_viz opens).
    TorchSnapshot,
    /// Another Python pickle.
    Pickle,
    /// A memtape capture compressed with zstd.
    ZstdCapture,
    /// A gzip-compressed file (a compressed capture, perhaps).
    Gzip,
    /// Another zstd-compressed file.
    Zstd,
    /// An HTML page (a memtape report, perhaps).
    Html,
}

impl ForeignFile {
    /// What the file at `prefix` (its first bytes, up to [`PREFIX_LEN`]) is, when it is
    /// one of the known kinds.
    pub fn recognize(prefix: &[u8]) -> Option<Self> {
        if prefix.starts_with(MEMRAY_MAGIC)
            || lz4_first_literals(prefix).is_some_and(|data| data.starts_with(MEMRAY_MAGIC))
        {
            return Some(Self::Memray);
        }
        if prefix.first() == Some(&PICKLE_PROTO) && prefix.get(1).is_some_and(|&p| p <= 5) {
            let head = &prefix[..prefix.len().min(64)];
            return Some(
                if contains(head, b"tracemalloc") && contains(head, b"Snapshot") {
                    Self::TracemallocSnapshot
                } else if contains(head, b"\x08segments") {
                    Self::TorchSnapshot
                } else {
                    Self::Pickle
                },
            );
        }
        if prefix.starts_with(&ZSTD_MAGIC) {
            return Some(if zstd_starts_with(prefix, &FILE_MAGIC) {
                Self::ZstdCapture
            } else {
                Self::Zstd
            });
        }
        if prefix.starts_with(&GZIP_MAGIC) {
            return Some(Self::Gzip);
        }
        let text = String::from_utf8_lossy(&prefix[..prefix.len().min(64)]).to_ascii_lowercase();
        let text = text.trim_start_matches('\u{feff}').trim_start();
        if text.starts_with("<!doctype html") || text.starts_with("<html") {
            return Some(Self::Html);
        }
        None
    }

    /// What the file is and what reads it; `file` is the file's name as a shell command
    /// would take it.
    pub fn describe(self, file: &str) -> String {
        match self {
            Self::Memray => format!(
                "this is a memray capture (memray's own reader opens it: memray stats {file})"
            ),
            Self::TracemallocSnapshot => "this is a tracemalloc snapshot (Snapshot.dump): load \
                it with tracemalloc.Snapshot.load or memtape.tracemalloc.Snapshot.load"
                .to_owned(),
            Self::TorchSnapshot => "this is a PyTorch memory snapshot (a memory_viz pickle): \
                open it in PyTorch's memory viewer, https://pytorch.org/memory_viz"
                .to_owned(),
            Self::Pickle => "this is a Python pickle".to_owned(),
            Self::ZstdCapture => format!(
                "this is a zstd-compressed memtape capture: decompress it first (zstd -d {file})"
            ),
            Self::Gzip => format!(
                "this is a gzip-compressed file: if it holds a capture, decompress it first \
                 (gunzip -k {file})"
            ),
            Self::Zstd => "this is a zstd-compressed file, and not of a memtape capture".to_owned(),
            Self::Html => {
                "this is an HTML page (memtape report writes one): open it in a browser".to_owned()
            }
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The literal bytes an LZ4 frame's data starts with, read from its first block without
/// decompressing it: the whole block when stored, else the literals of its first
/// sequence (the data's first bytes up to the first repeat).
fn lz4_first_literals(prefix: &[u8]) -> Option<&[u8]> {
    if !prefix.starts_with(&LZ4_MAGIC) {
        return None;
    }
    let flags = *prefix.get(4)?;
    // FLG, BD; the content size and dictionary id when flagged; the header checksum.
    let mut at = 6 + if flags & 0x08 != 0 { 8 } else { 0 } + if flags & 0x01 != 0 { 4 } else { 0 };
    at += 1;
    let size = u32::from_le_bytes(prefix.get(at..at + 4)?.try_into().ok()?);
    at += 4;
    if size & 0x8000_0000 != 0 {
        return prefix.get(at..);
    }
    let token = *prefix.get(at)?;
    at += 1;
    let mut literals = usize::from(token >> 4);
    if literals == 15 {
        loop {
            let more = *prefix.get(at)?;
            at += 1;
            literals += usize::from(more);
            if more != 255 {
                break;
            }
        }
    }
    let end = (at + literals).min(prefix.len());
    prefix.get(at..end)
}

/// Whether the zstd data at `prefix` decompresses to something that starts with `magic`.
fn zstd_starts_with(prefix: &[u8], magic: &[u8]) -> bool {
    let Ok(mut decoder) = zstd::stream::read::Decoder::new(prefix) else {
        return false;
    };
    let mut start = vec![0u8; magic.len()];
    decoder.read_exact(&mut start).is_ok() && start == magic
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_first_literals_of_an_lz4_frame() {
        // A frame with a content size, then a block whose first sequence has 20 literals.
        let mut frame = LZ4_MAGIC.to_vec();
        frame.extend_from_slice(&[0x68, 0x40]);
        frame.extend_from_slice(&[0; 8]);
        frame.push(0xaa);
        frame.extend_from_slice(&100u32.to_le_bytes());
        frame.push(0xf0);
        frame.push(5);
        frame.extend_from_slice(b"memray\0\x0d\0\0\0abcdefghi");
        assert_eq!(
            lz4_first_literals(&frame),
            Some(&b"memray\0\x0d\0\0\0abcdefghi"[..])
        );
        assert_eq!(ForeignFile::recognize(&frame), Some(ForeignFile::Memray));
        // Cut anywhere: no panic, and nothing recognized from a frame cut before the data.
        for len in 0..frame.len() {
            let _ = ForeignFile::recognize(&frame[..len]);
        }
        assert_eq!(ForeignFile::recognize(&frame[..21]), None);
    }

    #[test]
    fn a_compressed_capture_is_told_from_other_compressed_data() {
        let capture = zstd::bulk::compress(b"MEMTAPE\0\x04\0\0\0", 3).unwrap();
        assert_eq!(
            ForeignFile::recognize(&capture),
            Some(ForeignFile::ZstdCapture)
        );
        let other = zstd::bulk::compress(b"just some text", 3).unwrap();
        assert_eq!(ForeignFile::recognize(&other), Some(ForeignFile::Zstd));
    }
}
