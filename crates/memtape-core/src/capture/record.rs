//! The records of a raw block: their tags, the [`Record`] a reader hands out, and the
//! decoding loop over one decompressed block.

use std::fmt;

use super::varint::{ByteCursor, VarintError};

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
    /// the others), 0x04 with one; 0x0E and 0x0F (version 3) when it was allocated
    /// earlier in the block.
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
    count: u64,
    raw: &'a [u8],
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

/// Why a record could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordError {
    /// A tag byte this version does not know.
    UnknownTag(u8),
    /// A field could not be read.
    Field {
        field: &'static str,
        error: VarintError,
    },
    /// A field's value does not fit its type (a 32-bit id, a stack after its delta).
    OutOfRange { field: &'static str, value: i128 },
    /// A string that is not UTF-8.
    InvalidUtf8 { field: &'static str },
    /// A back reference to before the block's start.
    BadBackReference { field: &'static str, back: u64 },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RecordError::UnknownTag(tag) => write!(f, "unknown tag {tag:#04x}"),
            RecordError::Field {
                field,
                error: VarintError::Truncated,
            } => write!(f, "the block ends inside the {field}"),
            RecordError::Field {
                field,
                error: VarintError::Overlong,
            } => write!(f, "the {field} is a varint longer than 64 bits"),
            RecordError::OutOfRange { field, value } => {
                write!(f, "the {field} is {value}, outside 0..=4294967295")
            }
            RecordError::InvalidUtf8 { field } => write!(f, "the {field} is not UTF-8"),
            RecordError::BadBackReference { field, back } => {
                write!(
                    f,
                    "the {field} refers {back} back, before the block's start"
                )
            }
        }
    }
}

/// What one block held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BlockCounts {
    /// Records of any kind.
    pub(crate) records: u64,
    /// Alloc and Free records.
    pub(crate) events: u64,
}

/// Decodes every record of one raw block, in order, handing each to `f`.
///
/// On failure, returns the offset of the bad record inside `raw` and what is wrong; the
/// records before it have been handed out.
pub(crate) fn decode_block<'a, F>(
    raw: &'a [u8],
    f: &mut F,
) -> Result<BlockCounts, (usize, RecordError)>
where
    F: FnMut(Record<'a>),
{
    let mut cursor = ByteCursor::new(raw);
    let mut delta = DeltaState::default();
    let mut counts = BlockCounts::default();
    while !cursor.at_end() {
        let start = cursor.pos();
        match decode_record(&mut cursor, &mut delta) {
            Ok(record) => {
                counts.records += 1;
                counts.events += u64::from(record.is_event());
                f(record);
            }
            Err(error) => return Err((start, error)),
        }
    }
    Ok(counts)
}

/// The delta state of a block, reset at its start: the previous address and stack, and
/// the addresses of the block's allocations and frees so far (for back references).
#[derive(Default)]
struct DeltaState {
    prev_addr: u64,
    prev_stack: u32,
    allocs: Vec<u64>,
    frees: Vec<u64>,
}

/// The address `back` entries before the end of `seen` (0: the last one).
#[inline(always)]
fn back_reference(seen: &[u64], back: u64, name: &'static str) -> Result<u64, RecordError> {
    usize::try_from(back)
        .ok()
        .and_then(|back| seen.len().checked_sub(back + 1))
        .map(|at| seen[at])
        .ok_or(RecordError::BadBackReference { field: name, back })
}

#[inline(always)]
fn field<T>(result: Result<T, VarintError>, field: &'static str) -> Result<T, RecordError> {
    result.map_err(|error| RecordError::Field { field, error })
}

#[inline(always)]
fn uv32(cursor: &mut ByteCursor<'_>, name: &'static str) -> Result<u32, RecordError> {
    let value = field(cursor.uv(), name)?;
    u32::try_from(value).map_err(|_| RecordError::OutOfRange {
        field: name,
        value: i128::from(value),
    })
}

#[inline(always)]
fn string<'a>(cursor: &mut ByteCursor<'a>, name: &'static str) -> Result<&'a str, RecordError> {
    let len = field(cursor.uv(), name)?;
    let bytes = field(cursor.bytes(len), name)?;
    std::str::from_utf8(bytes).map_err(|_| RecordError::InvalidUtf8 { field: name })
}

#[inline(always)]
fn addr(
    cursor: &mut ByteCursor<'_>,
    delta: &mut DeltaState,
    name: &'static str,
) -> Result<u64, RecordError> {
    let step = field(cursor.sv(), name)?;
    // The writer took a wrapping difference, so adding it back wraps the same way.
    let addr = delta.prev_addr.wrapping_add(step as u64);
    delta.prev_addr = addr;
    Ok(addr)
}

#[inline(always)]
fn stack(
    cursor: &mut ByteCursor<'_>,
    delta: &mut DeltaState,
    name: &'static str,
) -> Result<u32, RecordError> {
    let step = field(cursor.sv(), name)?;
    let value = i128::from(delta.prev_stack) + i128::from(step);
    let stack = u32::try_from(value).map_err(|_| RecordError::OutOfRange { field: name, value })?;
    delta.prev_stack = stack;
    Ok(stack)
}

#[inline(always)]
fn alloc<'a>(
    cursor: &mut ByteCursor<'a>,
    delta: &mut DeltaState,
    domain: u32,
) -> Result<Record<'a>, RecordError> {
    let addr = addr(cursor, delta, "address delta of an Alloc")?;
    alloc_at(cursor, delta, domain, addr)
}

/// The rest of an Alloc at `addr`: its size and stack.
#[inline(always)]
fn alloc_at<'a>(
    cursor: &mut ByteCursor<'a>,
    delta: &mut DeltaState,
    domain: u32,
    addr: u64,
) -> Result<Record<'a>, RecordError> {
    let size = field(cursor.uv(), "size of an Alloc")?;
    let stack = stack(cursor, delta, "stack of an Alloc")?;
    delta.allocs.push(addr);
    Ok(Record::Alloc {
        domain,
        addr,
        size,
        stack,
    })
}

fn module<'a>(cursor: &mut ByteCursor<'a>) -> Result<Record<'a>, RecordError> {
    let id = uv32(cursor, "id of a Module")?;
    let path = string(cursor, "path of a Module")?;
    let base = field(cursor.uv(), "base of a Module")?;
    let len = field(cursor.uv(), "build id of a Module")?;
    let build_id = field(cursor.bytes(len), "build id of a Module")?;
    let count = field(cursor.uv(), "segment count of a Module")?;
    let start = cursor.pos();
    for _ in 0..count {
        field(cursor.uv(), "segments of a Module")?;
        field(cursor.uv(), "segments of a Module")?;
    }
    let raw = cursor.slice_from(start);
    Ok(Record::Module {
        id,
        path,
        base,
        build_id,
        segments: Segments { count, raw },
    })
}

/// A Free at `addr`, remembered for later back references.
#[inline(always)]
fn free(delta: &mut DeltaState, domain: Option<u32>, addr: u64) -> Record<'static> {
    delta.frees.push(addr);
    Record::Free { domain, addr }
}

#[inline(always)]
fn decode_record<'a>(
    cursor: &mut ByteCursor<'a>,
    delta: &mut DeltaState,
) -> Result<Record<'a>, RecordError> {
    let tag = field(cursor.byte(), "tag")?;
    match tag {
        tag::ALLOC => alloc(cursor, delta, 0),
        tag::FREE => {
            let addr = addr(cursor, delta, "address delta of a Free")?;
            Ok(free(delta, None, addr))
        }
        tag::ALLOC_IN_DOMAIN => {
            let domain = uv32(cursor, "domain of an Alloc")?;
            alloc(cursor, delta, domain)
        }
        tag::FREE_IN_DOMAIN => {
            let domain = uv32(cursor, "domain of a Free")?;
            let addr = addr(cursor, delta, "address delta of a Free")?;
            Ok(free(delta, Some(domain), addr))
        }
        tag::ALLOC_REUSE => {
            let back = field(cursor.uv(), "free reference of an AllocReuse")?;
            let addr = back_reference(&delta.frees, back, "free reference of an AllocReuse")?;
            alloc_at(cursor, delta, 0, addr)
        }
        tag::FREE_BACK => {
            let back = field(cursor.uv(), "alloc reference of a FreeBack")?;
            let addr = back_reference(&delta.allocs, back, "alloc reference of a FreeBack")?;
            Ok(free(delta, None, addr))
        }
        tag::FREE_BACK_IN_DOMAIN => {
            let domain = uv32(cursor, "domain of a FreeBack")?;
            let back = field(cursor.uv(), "alloc reference of a FreeBack")?;
            let addr = back_reference(&delta.allocs, back, "alloc reference of a FreeBack")?;
            Ok(free(delta, Some(domain), addr))
        }
        tag::TIME => Ok(Record::Time {
            ns: field(cursor.uv(), "time of a Time")?,
        }),
        tag::STRING => Ok(Record::String {
            id: uv32(cursor, "id of a String")?,
            value: string(cursor, "value of a String")?,
        }),
        tag::FRAME => Ok(Record::Frame {
            id: uv32(cursor, "id of a Frame")?,
            filename: uv32(cursor, "filename of a Frame")?,
            name: uv32(cursor, "function name of a Frame")?,
            line: uv32(cursor, "line of a Frame")?,
        }),
        tag::STACK => Ok(Record::Stack {
            id: uv32(cursor, "id of a Stack")?,
            parent: uv32(cursor, "parent of a Stack")?,
            frame: uv32(cursor, "frame of a Stack")?,
        }),
        tag::MARKER => Ok(Record::Marker {
            label: string(cursor, "label of a Marker")?,
        }),
        tag::DROPPED => Ok(Record::Dropped {
            count: field(cursor.uv(), "count of a Dropped")?,
        }),
        tag::MODULE => module(cursor),
        tag::NATIVE_FRAME => Ok(Record::NativeFrame {
            id: uv32(cursor, "id of a NativeFrame")?,
            module: uv32(cursor, "module of a NativeFrame")?,
            offset: field(cursor.uv(), "offset of a NativeFrame")?,
        }),
        unknown => Err(RecordError::UnknownTag(unknown)),
    }
}

#[cfg(test)]
mod tests;
