//! Writes a [`MemorySnapshot`] as the snapshot PyTorch's memory viewer (memory_viz) opens,
//! as a pickle or as the same structure in JSON.
//!
//! The layout follows `research/torch_snapshot.md`: a top-level dict with `segments`,
//! `device_traces` and `allocator_settings`; plain types only; pickle protocol 4 with no
//! memo (every trace entry is a distinct dict, because the viewer mutates them in place;
//! [`TorchSnapshotWriter::share_frames`] memoizes the read-only `frames` lists only);
//! lists and dicts in batches of at most 1000; every int below 2**53.
//!
//! Devices: framework events (`device >= 0`) go to `device_traces[device]`; Python-heap
//! events ([`HOST_DEVICE`]) go to one extra list after the last framework device, the
//! *host index* ([`DeviceLayout::host_index`]).
//!
//! Segments: a framework device's are its buffers where its trace ends
//! ([`framework_segments`]: replayed from the trace, the allocator's own state for
//! buffers the trace never touches); the host's are one per block ([`host_segments`]).
//! So every block lies in a segment at every point of the trace, as the viewer's
//! "Allocator State History" needs.
//!
//! Both encodings are streamed: the writer fills a buffer and hands it to the output in
//! 1 MiB pieces (a [`Write`], or any [`PieceSink`], which gets each buffer itself); a
//! stack's encoded frames are built once and copied.

use std::io::{self, Write};

mod device_layout;
mod encoding;
mod frame_cache;
mod framework_segments;
mod host_segments;
mod json;
mod memo_entries;
mod pickle;
mod pieces;
mod run;
mod safe_ints;
mod schema;
mod segments;
mod shared_names;
mod stats;

#[cfg(test)]
mod tests;

pub use device_layout::{host_trace_index, DeviceLayout, MAX_DEVICE_INDEX};
pub use json::push_json_string;
pub use pieces::{PieceSink, WritePieces};
pub use run::PIECE_CAPACITY;
pub use safe_ints::MAX_SAFE_INT;
pub use schema::trace_actions;
pub use stats::TorchSnapshotStats;

use json::Json;
use pickle::Pickle;
use run::Run;

use crate::event::HOST_DEVICE;
use crate::memory_snapshot::MemorySnapshot;

/// Writes one [`MemorySnapshot`] as a memory_viz snapshot.
#[derive(Clone, Copy, Debug)]
pub struct TorchSnapshotWriter<'a> {
    snapshot: &'a MemorySnapshot,
    layout: DeviceLayout,
    share_frames: bool,
    /// Whether entries may be copied from memoized pieces ([`memo_entries`]); tests turn
    /// it off to compare with entries written key by key.
    copy_entries: bool,
}

impl<'a> TorchSnapshotWriter<'a> {
    /// A writer for `snapshot`.
    pub fn new(snapshot: &'a MemorySnapshot) -> Self {
        TorchSnapshotWriter {
            snapshot,
            layout: DeviceLayout::of(snapshot),
            share_frames: false,
            copy_entries: true,
        }
    }

    /// Pickle only: write each stack's `frames` list once and refer to it through the
    /// pickle memo afterwards (`MEMOIZE`, then `BINGET`/`LONG_BINGET`), as torch's own
    /// snapshots do (it shares one list per traceback). Entries stay distinct dicts. This
    /// makes files with deep stacks many times smaller. Off by default.
    pub fn share_frames(mut self, share: bool) -> Self {
        self.share_frames = share;
        self
    }

    /// Every entry written key by key, as before [`memo_entries`] (tests compare).
    #[cfg(test)]
    pub(crate) fn entries_key_by_key(mut self) -> Self {
        self.copy_entries = false;
        self
    }

    /// `(share_frames, copy_entries)`.
    fn sharing(&self) -> (bool, bool) {
        (self.share_frames, self.copy_entries)
    }

    /// Which list each device's events go to.
    pub fn layout(&self) -> DeviceLayout {
        self.layout
    }

    /// The `device_traces` index of the Python-heap events, if there are any.
    pub fn host_index(&self) -> Option<usize> {
        self.layout.host_index
    }

    /// Writes the snapshot as a protocol-4 pickle (what `torch.cuda.memory._dump_snapshot`
    /// writes, and what both `_memory_viz.py` and the web viewer read).
    pub fn write_pickle<W: Write + ?Sized>(&self, out: &mut W) -> io::Result<TorchSnapshotStats> {
        self.write_pickle_pieces(&mut WritePieces(out))
    }

    /// [`TorchSnapshotWriter::write_pickle`], handing each piece's buffer to `sink`.
    pub fn write_pickle_pieces<S: PieceSink + ?Sized>(
        &self,
        sink: &mut S,
    ) -> io::Result<TorchSnapshotStats> {
        Run::<S, Pickle>::new(self.snapshot, self.layout, self.sharing(), sink).write()
    }

    /// Writes the snapshot as compact JSON (UTF-8, one trailing newline). The web viewer
    /// accepts it; `_memory_viz.py` does not. Tuples become arrays.
    pub fn write_json<W: Write + ?Sized>(&self, out: &mut W) -> io::Result<TorchSnapshotStats> {
        self.write_json_pieces(&mut WritePieces(out))
    }

    /// [`TorchSnapshotWriter::write_json`], handing each piece's buffer to `sink`.
    pub fn write_json_pieces<S: PieceSink + ?Sized>(
        &self,
        sink: &mut S,
    ) -> io::Result<TorchSnapshotStats> {
        Run::<S, Json>::new(self.snapshot, self.layout, self.sharing(), sink).write()
    }
}

/// Writes `snapshot` as a memory_viz pickle; see [`TorchSnapshotWriter::write_pickle`].
pub fn write_pickle<W: Write + ?Sized>(
    snapshot: &MemorySnapshot,
    out: &mut W,
) -> io::Result<TorchSnapshotStats> {
    TorchSnapshotWriter::new(snapshot).write_pickle(out)
}

/// Writes `snapshot` as memory_viz JSON; see [`TorchSnapshotWriter::write_json`].
pub fn write_json<W: Write + ?Sized>(
    snapshot: &MemorySnapshot,
    out: &mut W,
) -> io::Result<TorchSnapshotStats> {
    TorchSnapshotWriter::new(snapshot).write_json(out)
}

const _: () = assert!(
    HOST_DEVICE < 0,
    "host events are told apart by a negative device"
);
