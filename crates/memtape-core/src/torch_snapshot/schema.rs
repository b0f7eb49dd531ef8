//! The schema: which keys each dict has, in order, and which trace actions an event
//! becomes. `research/torch_snapshot.md` specifies it; memory_viz reads it.

use std::marker::PhantomData;

use super::encoding::{Dict, Encoding, List};
use super::frame_cache::FrameCache;
use super::host_segments::{segment_size, HostStep};
use super::memo_entries::{EntryInts, MemoEntries};
use super::safe_ints::SafeInts;
use super::shared_names::Name;
use crate::event::{Action, Event};
use crate::memory_snapshot::{MemorySnapshot, SegmentState};
use crate::stack_table::StackId;

/// The memory_viz trace actions one memtape [`Action`] becomes, in order.
///
/// A free is always `free_requested` then `free_completed` (only the second frees memory
/// in the viewer's timelines; it merges the adjacent pair into one `free`).
pub fn trace_actions(action: Action) -> &'static [&'static str] {
    const ALLOC: &[&str] = &[Name::Alloc.text()];
    const SEGMENT_ALLOC: &[&str] = &[Name::SegmentAlloc.text(), Name::Alloc.text()];
    const FREE: &[&str] = &[Name::FreeRequested.text(), Name::FreeCompleted.text()];
    const FREE_SEGMENT: &[&str] = &[
        Name::FreeRequested.text(),
        Name::FreeCompleted.text(),
        Name::SegmentFree.text(),
    ];
    const SEGMENT_FREE: &[&str] = &[Name::SegmentFree.text()];
    match trace_names(action) {
        [Name::Alloc] => ALLOC,
        [Name::SegmentAlloc, Name::Alloc] => SEGMENT_ALLOC,
        [Name::FreeRequested, Name::FreeCompleted] => FREE,
        [Name::FreeRequested, Name::FreeCompleted, Name::SegmentFree] => FREE_SEGMENT,
        _ => SEGMENT_FREE,
    }
}

/// [`trace_actions`] as [`Name`]s.
pub(super) fn trace_names(action: Action) -> &'static [Name] {
    match action {
        Action::Alloc | Action::AllocReuse => &[Name::Alloc],
        Action::AllocNew | Action::AllocMakeBuffer => &[Name::SegmentAlloc, Name::Alloc],
        Action::Free | Action::FreeActiveToCache => &[Name::FreeRequested, Name::FreeCompleted],
        Action::FreeActiveToOs | Action::Release => {
            &[Name::FreeRequested, Name::FreeCompleted, Name::SegmentFree]
        }
        Action::FreeCacheToOs => &[Name::SegmentFree],
    }
}

/// Writes the dicts of one snapshot: segments, trace entries and allocator settings,
/// with the frames cache, the encoded op names and the 2**53 limit they share.
pub(super) struct Schema<'s, E> {
    snapshot: &'s MemorySnapshot,
    frames: FrameCache,
    /// Entries copied from memoized pieces (shared frames in a pickle only).
    entries: Option<MemoEntries<E>>,
    /// Encoded op names by op id (index 0 and unknown ids: no op).
    op_strings: Vec<Vec<u8>>,
    /// Whether entries carry `category`: see
    /// [`TorchSnapshotStats::categories`](super::TorchSnapshotStats::categories).
    categories: bool,
    pub(super) ints: SafeInts,
    encoding: PhantomData<E>,
}

impl<'s, E: Encoding> Schema<'s, E> {
    /// `copy_entries`: whether entries may be copied from memoized pieces (with
    /// `share_frames`, in a pickle).
    pub(super) fn new(
        snapshot: &'s MemorySnapshot,
        share_frames: bool,
        copy_entries: bool,
    ) -> Self {
        let encoded = |value: &str| {
            let mut bytes = Vec::with_capacity(value.len() + 2);
            E::str(&mut bytes, value);
            bytes
        };
        let categories = snapshot
            .events
            .iter()
            .any(|event| !matches!(snapshot.op_name(event.op), Some(name) if name != "unknown"));
        Schema {
            snapshot,
            frames: FrameCache::new(share_frames),
            entries: MemoEntries::new(share_frames && copy_entries, categories),
            op_strings: snapshot.op_names.iter().map(|name| encoded(name)).collect(),
            categories,
            ints: SafeInts::default(),
            encoding: PhantomData,
        }
    }

    /// Whether entries carry `category`.
    pub(super) fn categories(&self) -> bool {
        self.categories
    }

    /// Entries copied from memoized pieces so far.
    pub(super) fn copied_entries(&self) -> u64 {
        self.entries.as_ref().map_or(0, |entries| entries.copied)
    }

    pub(super) fn write_segment(&mut self, out: &mut Vec<u8>, segment: &SegmentState) {
        let address = self.ints.masked(segment.addr);
        let size = self.ints.saturated(segment.size);
        let requested = self.ints.saturated(segment.requested_size);
        let stream = self.ints.masked(segment.stream);
        let (active_size, requested_size, state) = if segment.active {
            (size, requested, "active_allocated")
        } else {
            (0, 0, "inactive")
        };

        let mut dict = Dict::<E>::begin(out);
        dict.key(out, "device");
        E::int(out, i64::from(segment.device));
        dict.key(out, "address");
        E::int(out, address);
        dict.key(out, "total_size");
        E::int(out, size);
        dict.key(out, "allocated_size");
        E::int(out, active_size);
        dict.key(out, "active_size");
        E::int(out, active_size);
        dict.key(out, "requested_size");
        E::int(out, requested_size);
        dict.key(out, "stream");
        E::int(out, stream);
        dict.key(out, "segment_type");
        E::str(out, "large");
        dict.key(out, "segment_pool_id");
        E::int_pair(out, 0, 0);
        dict.key(out, "is_expandable");
        E::bool(out, false);
        dict.key(out, "frames");
        List::<E>::begin(out).end(out);
        dict.key(out, "blocks");
        let mut blocks = List::<E>::begin(out);
        blocks.item(out);
        let mut block = Dict::<E>::begin(out);
        block.key(out, "address");
        E::int(out, address);
        block.key(out, "size");
        E::int(out, size);
        block.key(out, "requested_size");
        E::int(out, requested_size);
        block.key(out, "state");
        E::str(out, state);
        block.key(out, "frames");
        let frames = if segment.active {
            self.frames.slot::<E>(self.snapshot, segment.stack)
        } else {
            None
        };
        match frames {
            Some(slot) => self.frames.write::<E>(out, slot),
            None => List::<E>::begin(out).end(out),
        }
        block.end(out);
        blocks.end(out);
        dict.end(out);
    }

    /// The entries of one host event (see [`host_segments`](super::host_segments)).
    pub(super) fn write_host_entries(
        &mut self,
        out: &mut Vec<u8>,
        trace: &mut List<E>,
        step: HostStep,
        index: usize,
    ) {
        let events = &self.snapshot.events;
        let event = &events[index];
        let mut write = |schema: &mut Self, action: Name, event: &Event, size: u64| {
            trace.item(out);
            schema.write_entry(out, action, event, size);
        };
        match step {
            HostStep::Alloc { replaces } => {
                if let Some(stale) = replaces {
                    // Its free was never recorded: it ends where the address is reused.
                    let ended = Event {
                        time_ns: event.time_ns,
                        ..events[stale]
                    };
                    write(self, Name::FreeRequested, &ended, ended.size);
                    write(self, Name::FreeCompleted, &ended, ended.size);
                    write(self, Name::SegmentFree, &ended, segment_size(ended.size));
                }
                write(self, Name::SegmentAlloc, event, segment_size(event.size));
                write(self, Name::Alloc, event, event.size);
            }
            HostStep::Free { size } => {
                write(self, Name::FreeRequested, event, size);
                write(self, Name::FreeCompleted, event, size);
                write(self, Name::SegmentFree, event, segment_size(size));
            }
            HostStep::Skip => {}
        }
    }

    /// The entries `names` of one framework event: they share its ints and op, worked
    /// out once (each entry still counts its clamped ints, as if it had its own).
    #[inline]
    pub(super) fn write_event_entries(
        &mut self,
        out: &mut Vec<u8>,
        trace: &mut List<E>,
        names: &[Name],
        event: &Event,
    ) {
        let before = self.ints.clamped;
        let ints = self.entry_ints(event, event.size);
        let clamped = self.ints.clamped - before;
        self.ints.clamped += clamped * (names.len() as u64).saturating_sub(1);
        let op = self.op_of(event);
        for &action in names {
            trace.item(out);
            self.write_entry_ints(out, action, ints, op, event.stack);
        }
    }

    #[inline]
    pub(super) fn write_entry(
        &mut self,
        out: &mut Vec<u8>,
        action: Name,
        event: &Event,
        size: u64,
    ) {
        let ints = self.entry_ints(event, size);
        let op = self.op_of(event);
        self.write_entry_ints(out, action, ints, op, event.stack);
    }

    /// `addr`, `size`, `stream` and `time_us` as written.
    #[inline]
    fn entry_ints(&mut self, event: &Event, size: u64) -> EntryInts {
        [
            self.ints.masked(event.addr),
            self.ints.saturated(size),
            self.ints.masked(event.stream),
            self.ints.saturated(event.time_ns / 1000),
        ]
    }

    /// The event's op id, if it names a known op.
    #[inline]
    fn op_of(&self, event: &Event) -> Option<usize> {
        let op = event.op as usize;
        (op != 0 && op < self.op_strings.len()).then_some(op)
    }

    #[inline]
    fn write_entry_ints(
        &mut self,
        out: &mut Vec<u8>,
        action: Name,
        ints: EntryInts,
        op: Option<usize>,
        stack: StackId,
    ) {
        if let Some(entries) = self.entries.as_mut() {
            let (snapshot, cache) = (self.snapshot, &mut self.frames);
            if entries.write(out, cache, snapshot, action, op, stack, ints) {
                return;
            }
        }
        self.write_entry_dict(out, action, ints, op, stack);
    }

    /// The entry written key by key (memoizing its strings when frames are shared).
    #[inline(never)]
    fn write_entry_dict(
        &mut self,
        out: &mut Vec<u8>,
        action: Name,
        [addr, size, stream, time_us]: EntryInts,
        op: Option<usize>,
        stack: StackId,
    ) {
        let memo = &mut self.frames;
        let mut dict = Dict::<E>::begin(out);
        memo.key(&mut dict, out, Name::Action);
        memo.string::<E>(out, action);
        memo.key(&mut dict, out, Name::Addr);
        E::int(out, addr);
        memo.key(&mut dict, out, Name::Size);
        E::int(out, size);
        memo.key(&mut dict, out, Name::Stream);
        E::int(out, stream);
        memo.key(&mut dict, out, Name::TimeUs);
        E::int(out, time_us);
        memo.key(&mut dict, out, Name::CompileContext);
        memo.string::<E>(out, Name::Empty);
        memo.key(&mut dict, out, Name::UserMetadata);
        match op {
            Some(op) => memo.op_name::<E>(out, op, &self.op_strings[op]),
            None => memo.string::<E>(out, Name::Empty),
        }
        if self.categories {
            memo.key(&mut dict, out, Name::Category);
            match op {
                Some(op) => memo.op_name::<E>(out, op, &self.op_strings[op]),
                None => memo.string::<E>(out, Name::Unknown),
            }
        }
        if let Some(slot) = memo.slot::<E>(self.snapshot, stack) {
            memo.key(&mut dict, out, Name::Frames);
            memo.write::<E>(out, slot);
        }
        dict.end(out);
    }

    pub(super) fn write_allocator_settings(&self, out: &mut Vec<u8>, host_index: Option<usize>) {
        let mut dict = Dict::<E>::begin(out);
        dict.key(out, "producer");
        E::str(out, concat!("memtape ", env!("CARGO_PKG_VERSION")));
        if let Some(host) = host_index {
            dict.key(out, "python_heap_device_index");
            E::int(out, host as i64);
        }
        dict.end(out);
    }
}
