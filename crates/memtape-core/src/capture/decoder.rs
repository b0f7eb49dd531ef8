//! The decoding loop over one raw block: each record's delta encoding undone, then handed
//! to a [`RecordVisitor`].
//!
//! Allocations and frees, nearly every record of a capture, reach the visitor field by
//! field: a report's replay takes them straight from the decoder, with no [`Record`]
//! built and matched again. Every other record comes as a [`Record`]. [`EachRecord`]
//! turns a closure over records into a visitor.

use super::record::{tag, Record, Segments};
use super::record_error::{field, string, uv32, RecordError};
use super::varint::ByteCursor;

/// An allocation or a free, as [`RecordVisitor::events`] hands them over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapEvent {
    /// See [`Record::Alloc`].
    Alloc {
        /// The tracemalloc domain.
        domain: u32,
        /// The stack id.
        stack: u32,
        /// The block's address.
        addr: u64,
        /// The block's size in bytes.
        size: u64,
    },
    /// See [`Record::Free`].
    Free {
        /// The domain, when the recorder knew it.
        domain: Option<u32>,
        /// The freed block's address.
        addr: u64,
    },
}

/// Receives the records of a capture as they are decoded, in file order.
pub trait RecordVisitor<'a> {
    /// A block allocated in tracemalloc `domain` at `addr` (see [`Record::Alloc`]).
    fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32);
    /// The block at `addr` was freed (see [`Record::Free`]).
    fn free(&mut self, domain: Option<u32>, addr: u64);
    /// Any record that is not an allocation or a free.
    fn record(&mut self, record: Record<'a>);
    /// Every record of a block has been handed over (a place for work done now and then,
    /// such as drawing a progress bar).
    fn block_end(&mut self) {}
    /// The reader skipped a damaged part of the file: what follows comes after a gap
    /// (frees of blocks allocated in it, stacks defined in it).
    fn damage(&mut self) {}
    /// The trailer was read: the recording ended cleanly. Whatever follows it (nothing,
    /// in a sound file) is read only to check that, so a reader following a file still
    /// being written can stop waiting for more bytes now (see
    /// [`super::Following`]). Called by both readers, the two-thread one in order after
    /// the last record.
    fn trailer(&mut self) {}

    /// A run of allocations and frees, in order: the same as [`alloc`](Self::alloc) or
    /// [`free`](Self::free) for each (the default). The two-thread reader hands them over
    /// this way, so a visitor can take them in a loop of its own.
    fn events(&mut self, events: &[HeapEvent]) {
        for event in events {
            match *event {
                HeapEvent::Alloc {
                    domain,
                    stack,
                    addr,
                    size,
                } => self.alloc(domain, addr, size, stack),
                HeapEvent::Free { domain, addr } => self.free(domain, addr),
            }
        }
    }
}

/// A visitor that hands every record, allocations and frees included, to a closure.
pub struct EachRecord<F>(pub F);

impl<'a, F: FnMut(Record<'a>)> RecordVisitor<'a> for EachRecord<F> {
    #[inline]
    fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32) {
        (self.0)(Record::Alloc {
            domain,
            addr,
            size,
            stack,
        });
    }

    #[inline]
    fn free(&mut self, domain: Option<u32>, addr: u64) {
        (self.0)(Record::Free { domain, addr });
    }

    #[inline]
    fn record(&mut self, record: Record<'a>) {
        (self.0)(record);
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

/// The delta state of a block, reset at its start: the previous address and stack, the
/// ordinal of the allocation the previous FreeStep freed, and the addresses of the
/// block's allocations and frees so far (for back references). The
/// reader keeps one for the whole file, so the address lists keep their memory from one
/// block to the next.
#[derive(Debug, Default)]
pub(crate) struct DeltaState {
    prev_addr: u64,
    prev_stack: u32,
    prev_freed: u64,
    allocs: Vec<u64>,
    frees: Vec<u64>,
}

impl DeltaState {
    fn reset(&mut self) {
        self.prev_addr = 0;
        self.prev_stack = 0;
        self.prev_freed = 0;
        self.allocs.clear();
        self.frees.clear();
    }
}

/// Decodes every record of one raw block, in order, into `f` (a fresh delta state: for
/// tests and one-off blocks).
#[cfg(test)]
pub(crate) fn decode_block<'a, F>(
    raw: &'a [u8],
    f: &mut F,
) -> Result<BlockCounts, (usize, RecordError)>
where
    F: FnMut(Record<'a>),
{
    let (counts, decoded) = decode_block_into(raw, &mut DeltaState::default(), &mut EachRecord(f));
    decoded.map(|()| counts)
}

/// Decodes every record of one raw block, in order, handing each to `visitor`, then
/// calls its [`RecordVisitor::block_end`]. `delta` is reset first.
///
/// Returns what was handed out, and on failure the offset of the bad record inside `raw`
/// and what is wrong (the records before it have been handed out; `block_end` is not
/// called).
pub(crate) fn decode_block_into<'a, V: RecordVisitor<'a>>(
    raw: &'a [u8],
    delta: &mut DeltaState,
    visitor: &mut V,
) -> (BlockCounts, Result<(), (usize, RecordError)>) {
    delta.reset();
    let mut cursor = ByteCursor::new(raw);
    let mut counts = BlockCounts::default();
    while !cursor.at_end() {
        let start = cursor.pos();
        match decode_record(&mut cursor, delta, visitor) {
            Ok(is_event) => {
                counts.records += 1;
                counts.events += u64::from(is_event);
            }
            Err(error) => return (counts, Err((start, error))),
        }
    }
    visitor.block_end();
    (counts, Ok(()))
}

/// The address `back` entries before the end of `seen` (0: the last one).
#[inline(always)]
fn back_reference(seen: &[u64], back: u64, name: &'static str) -> Result<u64, RecordError> {
    usize::try_from(back)
        .ok()
        .and_then(|back| back.checked_add(1))
        .and_then(|distance| seen.len().checked_sub(distance))
        .map(|at| seen[at])
        .ok_or(RecordError::BadBackReference { field: name, back })
}

/// The address of the allocation a FreeStep names: the step read plus the ordinal the
/// previous FreeStep named.
#[inline(always)]
fn step_reference(
    cursor: &mut ByteCursor<'_>,
    delta: &mut DeltaState,
    name: &'static str,
) -> Result<u64, RecordError> {
    let step = field(cursor.sv(), name)?;
    // A wrapping sum, as for addresses: a step before 0 wraps far past the end.
    let at = delta.prev_freed.wrapping_add(step as u64);
    let Some(&addr) = usize::try_from(at).ok().and_then(|at| delta.allocs.get(at)) else {
        return Err(RecordError::BadStepReference {
            field: name,
            at: i128::from(delta.prev_freed) + i128::from(step),
            allocs: delta.allocs.len(),
        });
    };
    delta.prev_freed = at;
    Ok(addr)
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

/// The rest of an Alloc at `addr` (its size and stack), then the visitor's call.
#[inline(always)]
fn alloc_at<'a, V: RecordVisitor<'a>>(
    cursor: &mut ByteCursor<'a>,
    delta: &mut DeltaState,
    visitor: &mut V,
    domain: u32,
    addr: u64,
) -> Result<(), RecordError> {
    let size = field(cursor.uv(), "size of an Alloc")?;
    let stack = stack(cursor, delta, "stack of an Alloc")?;
    delta.allocs.push(addr);
    visitor.alloc(domain, addr, size, stack);
    Ok(())
}

/// A Free at `addr`, remembered for later back references.
#[inline(always)]
fn free<'a, V: RecordVisitor<'a>>(
    delta: &mut DeltaState,
    visitor: &mut V,
    domain: Option<u32>,
    addr: u64,
) {
    delta.frees.push(addr);
    visitor.free(domain, addr);
}

/// Decodes one record into `visitor`; says whether it was an allocation or a free.
#[inline(always)]
fn decode_record<'a, V: RecordVisitor<'a>>(
    cursor: &mut ByteCursor<'a>,
    delta: &mut DeltaState,
    visitor: &mut V,
) -> Result<bool, RecordError> {
    let tag = field(cursor.byte(), "tag")?;
    match tag {
        tag::ALLOC => {
            let addr = addr(cursor, delta, "address delta of an Alloc")?;
            alloc_at(cursor, delta, visitor, 0, addr)?;
        }
        tag::FREE => {
            let addr = addr(cursor, delta, "address delta of a Free")?;
            free(delta, visitor, None, addr);
        }
        tag::ALLOC_REUSE => {
            let back = field(cursor.uv(), "free reference of an AllocReuse")?;
            let addr = back_reference(&delta.frees, back, "free reference of an AllocReuse")?;
            alloc_at(cursor, delta, visitor, 0, addr)?;
        }
        tag::FREE_BACK => {
            let back = field(cursor.uv(), "alloc reference of a FreeBack")?;
            let addr = back_reference(&delta.allocs, back, "alloc reference of a FreeBack")?;
            free(delta, visitor, None, addr);
        }
        tag::FREE_STEP => {
            let addr = step_reference(cursor, delta, "alloc reference of a FreeStep")?;
            free(delta, visitor, None, addr);
        }
        tag::ALLOC_IN_DOMAIN => {
            let domain = uv32(cursor, "domain of an Alloc")?;
            let addr = addr(cursor, delta, "address delta of an Alloc")?;
            alloc_at(cursor, delta, visitor, domain, addr)?;
        }
        tag::FREE_IN_DOMAIN => {
            let domain = uv32(cursor, "domain of a Free")?;
            let addr = addr(cursor, delta, "address delta of a Free")?;
            free(delta, visitor, Some(domain), addr);
        }
        tag::FREE_BACK_IN_DOMAIN => {
            let domain = uv32(cursor, "domain of a FreeBack")?;
            let back = field(cursor.uv(), "alloc reference of a FreeBack")?;
            let addr = back_reference(&delta.allocs, back, "alloc reference of a FreeBack")?;
            free(delta, visitor, Some(domain), addr);
        }
        tag::FREE_STEP_IN_DOMAIN => {
            let domain = uv32(cursor, "domain of a FreeStep")?;
            let addr = step_reference(cursor, delta, "alloc reference of a FreeStep")?;
            free(delta, visitor, Some(domain), addr);
        }
        other => {
            visitor.record(other_record(other, cursor)?);
            return Ok(false);
        }
    }
    Ok(true)
}

/// A record that is not an allocation or a free (a few thousand in a capture of millions
/// of events: kept out of the loop).
#[inline(never)]
fn other_record<'a>(tag: u8, cursor: &mut ByteCursor<'a>) -> Result<Record<'a>, RecordError> {
    match tag {
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

#[cfg(test)]
mod tests;
