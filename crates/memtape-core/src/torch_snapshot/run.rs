//! One write: the top-level dict, the segments list and the `device_traces` lists,
//! streamed to the output in pieces.

use std::io;

use super::device_layout::DeviceLayout;
use super::encoding::{Dict, Encoding, List};
use super::host_segments::HostReplay;
use super::pieces::PieceSink;
use super::schema::{trace_names, Schema};
use super::segments::final_segments;
use super::stats::TorchSnapshotStats;
use crate::memory_snapshot::MemorySnapshot;

/// Bytes buffered before they are handed to the output. A piece handed to a writer
/// thread wakes it: 1 MiB pieces wake it 130 times for a 126 MiB snapshot (64 KiB
/// pieces: 2,000 times, 0.03 s more CPU time in all).
pub const FLUSH_AT: usize = 1024 * 1024;

/// Room in each piece's buffer: a piece ends after the entry that crosses
/// [`FLUSH_AT`], so a little more than that is written into it.
pub const PIECE_CAPACITY: usize = FLUSH_AT + 4096;

/// One write of one snapshot to one output.
pub(super) struct Run<'s, 'w, S: PieceSink + ?Sized, E> {
    snapshot: &'s MemorySnapshot,
    layout: DeviceLayout,
    out: &'w mut S,
    buf: Vec<u8>,
    schema: Schema<'s, E>,
    stats: TorchSnapshotStats,
}

impl<'s, 'w, S: PieceSink + ?Sized, E: Encoding> Run<'s, 'w, S, E> {
    /// `share_frames` and `copy_entries`: see [`Schema::new`].
    pub(super) fn new(
        snapshot: &'s MemorySnapshot,
        layout: DeviceLayout,
        (share_frames, copy_entries): (bool, bool),
        out: &'w mut S,
    ) -> Self {
        Run {
            snapshot,
            layout,
            out,
            buf: Vec::with_capacity(PIECE_CAPACITY),
            schema: Schema::new(snapshot, share_frames, copy_entries),
            stats: TorchSnapshotStats::default(),
        }
    }

    pub(super) fn write(mut self) -> io::Result<TorchSnapshotStats> {
        self.layout.check()?;
        self.stats.device_traces = self.layout.trace_count();
        self.stats.host_index = self.layout.host_index;
        self.stats.categories = self.schema.categories();

        E::header(&mut self.buf);
        let mut top = Dict::<E>::begin(&mut self.buf);
        top.key(&mut self.buf, "segments");
        self.write_segments()?;
        top.key(&mut self.buf, "device_traces");
        self.write_device_traces()?;
        top.key(&mut self.buf, "allocator_settings");
        self.schema
            .write_allocator_settings(&mut self.buf, self.layout.host_index);
        top.end(&mut self.buf);
        E::footer(&mut self.buf);

        self.flush()?;
        self.out.finish()?;
        self.stats.clamped_ints = self.schema.ints.clamped;
        self.stats.copied_entries = self.schema.copied_entries();
        Ok(self.stats)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stats.bytes_written += self.buf.len() as u64;
        let piece = std::mem::take(&mut self.buf);
        self.buf = self.out.put(piece)?;
        Ok(())
    }

    fn flush_if_full(&mut self) -> io::Result<()> {
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    fn write_segments(&mut self) -> io::Result<()> {
        self.stats.skipped_segments = self
            .snapshot
            .segments
            .iter()
            .filter(|segment| segment.device < 0)
            .count();
        let mut segments = final_segments(self.snapshot, self.layout);
        segments.sort_by_key(|segment| (segment.device, segment.addr));

        let mut list = List::<E>::begin(&mut self.buf);
        for segment in &segments {
            list.item(&mut self.buf);
            self.schema.write_segment(&mut self.buf, segment);
            self.stats.segments += 1;
            self.flush_if_full()?;
        }
        list.end(&mut self.buf);
        Ok(())
    }

    fn write_device_traces(&mut self) -> io::Result<()> {
        let snapshot = self.snapshot;
        let slots = self.layout.trace_count();
        // Event indices grouped by list, each group in event order (a counting sort).
        let mut starts = vec![0usize; slots + 1];
        for event in &snapshot.events {
            starts[self.layout.slot(event.device) + 1] += 1;
        }
        for slot in 0..slots {
            starts[slot + 1] += starts[slot];
        }
        // With one list (one device, the usual case) the order is the events' own: no
        // array (at a million events it would be 8 MB of fresh pages).
        let order = (slots > 1).then(|| {
            let mut order = vec![0usize; snapshot.events.len()];
            let mut next = starts.clone();
            for (index, event) in snapshot.events.iter().enumerate() {
                let slot = self.layout.slot(event.device);
                order[next[slot]] = index;
                next[slot] += 1;
            }
            order
        });

        let mut traces = List::<E>::begin(&mut self.buf);
        for slot in 0..slots {
            traces.item(&mut self.buf);
            let mut trace = List::<E>::begin(&mut self.buf);
            let mut host = (Some(slot) == self.layout.host_index).then(HostReplay::default);
            for at in starts[slot]..starts[slot + 1] {
                let index = order.as_ref().map_or(at, |order| order[at]);
                let event = &snapshot.events[index];
                match host.as_mut() {
                    Some(replay) => {
                        let step = replay.step(&snapshot.events, index);
                        self.schema
                            .write_host_entries(&mut self.buf, &mut trace, step, index);
                    }
                    None => self.schema.write_event_entries(
                        &mut self.buf,
                        &mut trace,
                        trace_names(event.action),
                        event,
                    ),
                }
                self.flush_if_full()?;
            }
            self.stats.trace_entries += trace.len as u64;
            trace.end(&mut self.buf);
        }
        traces.end(&mut self.buf);
        Ok(())
    }
}
