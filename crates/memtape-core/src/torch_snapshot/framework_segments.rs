//! A framework device's final `segments`, as its trace leaves them.
//!
//! The allocator's own state ([`MemorySnapshot::segments`]) is read when the snapshot is
//! written, which may be after the recording stopped, and events saved from
//! `get_memory_events` carry none at all; memory_viz undoes the trace backwards from the
//! segments, so they must be the state the trace ends in. Every buffer the trace touches
//! is therefore replayed from the trace (a buffer it first sees freed or reused was
//! allocated before it); buffers it never touches keep the allocator's state.

use rustc_hash::FxHashMap;

use crate::event::{Action, Event};
use crate::memory_snapshot::{MemorySnapshot, SegmentState};

/// Replays the events of one device, buffer by buffer.
pub(super) struct FrameworkReplay {
    device: i32,
    /// Every address the trace touched: its buffer where the trace leaves it, None when
    /// freed (one map, so one lookup per event).
    buffers: FxHashMap<u64, Option<SegmentState>>,
}

impl FrameworkReplay {
    /// An empty replay of `device`.
    pub(super) fn new(device: i32) -> Self {
        FrameworkReplay {
            device,
            buffers: FxHashMap::default(),
        }
    }

    /// Applies one event of this device.
    pub(super) fn step(&mut self, event: &Event) {
        let handed_out = SegmentState {
            device: self.device,
            addr: event.addr,
            size: event.size,
            requested_size: event.requested_size.min(event.size),
            stream: event.stream,
            active: true,
            stack: event.stack,
            op: event.op,
        };
        let buffer = self.buffers.entry(event.addr).or_insert(None);
        match event.action {
            Action::AllocNew | Action::AllocMakeBuffer | Action::Alloc => {
                *buffer = Some(handed_out);
            }
            Action::AllocReuse => {
                let reused = buffer.get_or_insert_with(|| handed_out.clone());
                *reused = SegmentState {
                    size: reused.size,
                    requested_size: handed_out.requested_size.min(reused.size),
                    ..handed_out
                };
            }
            Action::FreeActiveToCache => {
                buffer.get_or_insert(handed_out).active = false;
            }
            Action::FreeActiveToOs | Action::Release | Action::FreeCacheToOs | Action::Free => {
                *buffer = None;
            }
        }
    }

    /// The device's segments at the end: the replayed buffers, and the allocator's
    /// buffers at addresses the trace never touched.
    pub(super) fn segments_at_end(self, snapshot: &MemorySnapshot) -> Vec<SegmentState> {
        let untouched = snapshot
            .segments
            .iter()
            .filter(|s| s.device == self.device && !self.buffers.contains_key(&s.addr))
            .cloned();
        let untouched: Vec<SegmentState> = untouched.collect();
        self.buffers
            .into_values()
            .flatten()
            .chain(untouched)
            .collect()
    }
}
