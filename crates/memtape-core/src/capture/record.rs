//! The records of a raw block: their tags and the [`Record`] a reader hands out (the
//! decoding loop is in [`super::decoder`]).

use super::varint::ByteCursor;

/// Record tags (docs/capture-format.md, "Records").
pub(crate) mod tag {
    pub(crate) const ALLOC: u8 = 0x01;
    pub(crate) const ALLOC_IN_DOMAIN: u8 = 0x02;
    pub(crate) const FREE: u8 = 0x03;
    pub(crate) const FREE_IN_DOMAIN: u8 = 0x04;
    pub(crate) const TIME: u8 = 0x05;
    pub(crate) const STRING: u8 = 0x06;
    pub(crate) const FRAME: u8 = 0x07;
    pub(crate) const STACK: u8 = 0x08;
    pub(crate) const MARKER: u8 = 0x09;
    pub(crate) const DROPPED: u8 = 0x0A;
    pub(crate) const MODULE: u8 = 0x0B;
    pub(crate) const NATIVE_FRAME: u8 = 0x0C;
    pub(crate) const ALLOC_REUSE: u8 = 0x0D;
    pub(crate) const FREE_BACK: u8 = 0x0E;
    pub(crate) const FREE_BACK_IN_DOMAIN: u8 = 0x0F;
    pub(crate) const FREE_STEP: u8 = 0x10;
    pub(crate) const FREE_STEP_IN_DOMAIN: u8 = 0x11;
}

/// One record of a capture file, with its delta encoding already undone.
///
/// Strings borrow from the reader's decompression buffer: copy what must outlive the
/// callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// A block allocated in tracemalloc `domain` (0: the Python heap) by `stack`.
    /// Tag 0x01 when `domain == 0`, 0x02 otherwise, 0x0D (version 3) for domain 0 at the
    /// address of a block freed earlier in the block.
    Alloc {
        /// The tracemalloc domain (389047: NumPy).
        domain: u32,
        /// The block's address.
        addr: u64,
        /// The block's size in bytes.
        size: u64,
        /// The stack id (0: no Python frame).
        stack: u32,
    },
    /// The block at `addr` was freed. Tag 0x03 without a domain (domain 0 first, then
    /// the others), 0x04 with one; 0x0E and 0x0F (version 3), or 0x10 and 0x11 (version
    /// 4, what this version writes), when it was allocated earlier in the block.
    Free {
        /// The domain, when the recorder knew it.
        domain: Option<u32>,
        /// The freed block's address.
        addr: u64,
    },
    /// The time of the records that follow, in ns since the metadata's `start_time_ns`.
    Time {
        /// Nanoseconds since the start of the recording.
        ns: u64,
    },
    /// An interned string (a filename or a function name).
    String {
        /// Its id, dense from 1.
        id: u32,
        /// The string.
        value: &'a str,
    },
    /// A resolved frame.
    Frame {
        /// Its id, dense from 1.
        id: u32,
        /// The string id of the filename.
        filename: u32,
        /// The string id of the function name.
        name: u32,
        /// The line number.
        line: u32,
    },
    /// A stack (trie node): `parent` plus the innermost `frame`.
    Stack {
        /// The recorder's stack id.
        id: u32,
        /// The parent stack id (0: this frame is the outermost).
        parent: u32,
        /// The innermost frame id.
        frame: u32,
    },
    /// A user mark (`memtape.mark(label)`).
    Marker {
        /// The label given.
        label: &'a str,
    },
    /// Events the recorder had to drop.
    Dropped {
        /// How many.
        count: u64,
    },
    /// A loaded ELF object native frames refer to (format version 2).
    Module {
        /// Its id, dense from 1.
        id: u32,
        /// The file's path when it was loaded.
        path: &'a str,
        /// The load bias: where file address 0 was in memory.
        base: u64,
        /// The GNU build id (empty when the object has none).
        build_id: &'a [u8],
        /// Its `PT_LOAD` segments.
        segments: Segments<'a>,
    },
    /// A native frame: a return address inside a module (format version 2). Its id is
    /// a frame id, in the same space as [`Record::Frame`]'s.
    NativeFrame {
        /// Its frame id.
        id: u32,
        /// The module id.
        module: u32,
        /// The return address minus the module's load bias (a file address).
        offset: u64,
    },
}

/// The `PT_LOAD` segments of a [`Record::Module`]: `(file address, size in memory)`
/// pairs, still encoded (iterate them with [`Segments::iter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segments<'a> {
    pub(super) count: u64,
    pub(super) raw: &'a [u8],
}

impl<'a> Segments<'a> {
    /// The segments, in the order written.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        let mut cursor = ByteCursor::new(self.raw);
        (0..self.count).map_while(move |_| Some((cursor.uv().ok()?, cursor.uv().ok()?)))
    }

    /// Encodes `segments` as a Module record carries them (count first).
    pub(crate) fn encode(segments: &[(u64, u64)], out: &mut Vec<u8>) {
        super::varint::put_uv(out, segments.len() as u64);
        for &(vaddr, size) in segments {
            super::varint::put_uv(out, vaddr);
            super::varint::put_uv(out, size);
        }
    }
}

impl Record<'_> {
    /// Whether this record is an allocation or a free (what `events` counts).
    #[inline]
    pub fn is_event(&self) -> bool {
        matches!(self, Record::Alloc { .. } | Record::Free { .. })
    }
}
