//! The final `segments`: sorted, one block each, consistent with the trace.

use super::fixtures::{entries, event, frame, tiny};
use super::pickle_decoder::{decode, pickled, Value};
use crate::event::{Action, HOST_DEVICE};
use crate::memory_snapshot::{MemorySnapshot, SegmentState};
use crate::torch_snapshot::write_pickle;

#[test]
fn segments_are_sorted_and_tiled_by_one_block() {
    let root = decode(&pickled(|o| {
        write_pickle(&tiny(), o).unwrap();
    }));
    let segments = root.at("segments").list();
    let order: Vec<(i64, i64)> = segments
        .iter()
        .map(|s| (s.at("device").int(), s.at("address").int()))
        .collect();
    assert_eq!(order, [(0, 0xE000), (1, 0x9000), (1, 0xD000)]);

    let cached = &segments[0];
    assert_eq!(cached.at("total_size").int(), 2048);
    assert_eq!(cached.at("allocated_size").int(), 0);
    assert_eq!(cached.at("active_size").int(), 0);
    assert_eq!(cached.at("requested_size").int(), 0);
    assert_eq!(cached.at("segment_type").str(), "large");
    assert_eq!(
        cached.at("segment_pool_id"),
        &Value::Tuple(vec![Value::Int(0), Value::Int(0)])
    );
    assert_eq!(cached.at("is_expandable"), &Value::Bool(false));
    assert_eq!(cached.at("frames").list(), []);
    let blocks = cached.at("blocks").list();
    assert_eq!(blocks.len(), 1);
    assert_eq!(
        blocks[0].keys(),
        ["address", "size", "requested_size", "state", "frames"]
    );
    assert_eq!(blocks[0].at("state").str(), "inactive");
    assert_eq!(blocks[0].at("requested_size").int(), 0);
    assert_eq!(blocks[0].at("frames").list(), []);

    let active = &segments[2];
    assert_eq!(active.at("stream").int(), 7);
    assert_eq!(active.at("allocated_size").int(), 1024);
    assert_eq!(active.at("active_size").int(), 1024);
    assert_eq!(active.at("requested_size").int(), 1000);
    let block = &active.at("blocks").list()[0];
    assert_eq!(block.at("address").int(), 0xD000);
    assert_eq!(block.at("size").int(), 1024);
    assert_eq!(block.at("requested_size").int(), 1000);
    assert_eq!(block.at("state").str(), "active_allocated");
    assert_eq!(block.at("frames").list()[0].at("name").str(), "g");

    // Active without a stack: still `frames: []`.
    assert_eq!(segments[1].at("blocks").list()[0].at("frames").list(), []);
}

#[test]
fn host_blocks_get_one_segment_each_consistent_with_the_trace() {
    let mut snapshot = MemorySnapshot::default();
    snapshot.stacks.insert(1, vec![frame("f", 10)]);
    snapshot.events = vec![
        // Allocated before the trace (the ring lost it): live from the start.
        event(Action::Free, 0x100, 48, HOST_DEVICE, 1, 0),
        event(Action::Alloc, 0x200, 32, HOST_DEVICE, 1, 0),
        event(Action::Alloc, 0x300, 0, HOST_DEVICE, 1, 0),
        // Reused without a recorded free: the stale block ends first.
        event(Action::Alloc, 0x200, 64, HOST_DEVICE, 1, 0),
        // A free's size is the live block's.
        event(Action::Free, 0x300, 999, HOST_DEVICE, 0, 0),
    ];
    let root = decode(&pickled(|o| {
        write_pickle(&snapshot, o).unwrap();
    }));
    let trace = &root.at("device_traces").list()[0];
    assert_eq!(
        entries(trace),
        [
            ("free_requested", 0x100, 48),
            ("free_completed", 0x100, 48),
            ("segment_free", 0x100, 48),
            ("segment_alloc", 0x200, 32),
            ("alloc", 0x200, 32),
            ("segment_alloc", 0x300, 1),
            ("alloc", 0x300, 0),
            ("free_requested", 0x200, 32),
            ("free_completed", 0x200, 32),
            ("segment_free", 0x200, 32),
            ("segment_alloc", 0x200, 64),
            ("alloc", 0x200, 64),
            ("free_requested", 0x300, 0),
            ("free_completed", 0x300, 0),
            ("segment_free", 0x300, 1),
        ]
    );
    // The blocks live at the end, each in its own segment on the host's device.
    let segments = root.at("segments").list();
    assert_eq!(segments.len(), 1);
    let segment = &segments[0];
    assert_eq!(segment.at("device").int(), 0);
    assert_eq!(segment.at("address").int(), 0x200);
    assert_eq!(segment.at("total_size").int(), 64);
    let block = &segment.at("blocks").list()[0];
    assert_eq!(block.at("state").str(), "active_allocated");
    assert_eq!(block.at("size").int(), 64);
    assert_eq!(block.at("requested_size").int(), 64);
    assert_eq!(block.at("frames").list()[0].at("name").str(), "f");
}

#[test]
fn framework_segments_are_where_the_trace_ends() {
    let events = vec![
        // Allocated before the trace: first seen going back to the cache.
        event(Action::FreeActiveToCache, 0x1000, 256, 0, 0, 0),
        event(Action::AllocNew, 0x2000, 512, 0, 0, 0),
        event(Action::AllocNew, 0x3000, 128, 0, 0, 0),
        event(Action::FreeActiveToOs, 0x3000, 128, 0, 0, 0),
    ];
    let untouched = SegmentState {
        device: 0,
        addr: 0x4000,
        size: 64,
        requested_size: 64,
        stream: 0,
        active: false,
        stack: 0,
        op: 0,
    };
    // The allocator's state read later: 0x2000 freed since and 0x3000 reused; only
    // the buffer the trace never touched is taken from it.
    let snapshot = MemorySnapshot {
        events,
        segments: vec![
            SegmentState {
                addr: 0x3000,
                active: true,
                ..untouched.clone()
            },
            untouched.clone(),
        ],
        ..MemorySnapshot::default()
    };
    let root = decode(&pickled(|o| {
        write_pickle(&snapshot, o).unwrap();
    }));
    let segments: Vec<(i64, i64, &str)> = root
        .at("segments")
        .list()
        .iter()
        .map(|s| {
            let block = &s.at("blocks").list()[0];
            (
                s.at("address").int(),
                s.at("total_size").int(),
                block.at("state").str(),
            )
        })
        .collect();
    assert_eq!(
        segments,
        [
            (0x1000, 256, "inactive"),
            (0x2000, 512, "active_allocated"),
            (0x4000, 64, "inactive"),
        ]
    );
}
