//! The segment model: every device's segments where its trace ends, so that every block
//! lies in a segment at every point of the trace.

use super::device_layout::DeviceLayout;
use super::framework_segments::FrameworkReplay;
use super::host_segments::{segment_size, HostReplay};
use crate::memory_snapshot::{MemorySnapshot, SegmentState};

/// Every device's segments where its trace ends: a framework device's buffers as its
/// trace leaves them ([`framework_segments`](super::framework_segments)), the host's blocks one segment each
/// ([`host_segments`](super::host_segments)).
pub(super) fn final_segments(snapshot: &MemorySnapshot, layout: DeviceLayout) -> Vec<SegmentState> {
    let events = &snapshot.events;
    let mut host = HostReplay::default();
    let mut framework: Vec<FrameworkReplay> = (0..layout.framework_devices)
        .map(|device| FrameworkReplay::new(device as i32))
        .collect();
    for (index, event) in events.iter().enumerate() {
        match usize::try_from(event.device) {
            Ok(device) => framework[device].step(event),
            Err(_) => {
                host.step(events, index);
            }
        }
    }
    let mut segments: Vec<SegmentState> = framework
        .into_iter()
        .flat_map(|replay| replay.segments_at_end(snapshot))
        .collect();
    if let Some(host_index) = layout.host_index {
        segments.extend(host.live_at_end(events).into_iter().map(|index| {
            let block = &events[index];
            SegmentState {
                device: host_index as i32,
                addr: block.addr,
                size: segment_size(block.size),
                requested_size: block.size,
                stream: block.stream,
                active: true,
                stack: block.stack,
                op: block.op,
            }
        }));
    }
    segments
}
