//! The `device_traces`: layout, actions, categories, ints, streaming and shared frames.

use std::io::{self, Write};

use super::fixtures::{actions, event, synthetic, tiny};
use super::pickle_decoder::{decode, pickled};
use crate::event::{Action, HOST_DEVICE};
use crate::memory_snapshot::MemorySnapshot;
use crate::torch_snapshot::{
    host_trace_index, write_json, write_pickle, DeviceLayout, PieceSink, TorchSnapshotWriter,
    MAX_DEVICE_INDEX, MAX_SAFE_INT,
};

#[test]
fn layout_puts_the_host_after_the_framework_devices() {
    let snapshot = tiny();
    let layout = DeviceLayout::of(&snapshot);
    assert_eq!(layout.framework_devices, 2);
    assert_eq!(layout.host_index, Some(2));
    assert_eq!(layout.trace_count(), 3);
    assert_eq!(host_trace_index(&snapshot), Some(2));

    let host_only = MemorySnapshot {
        events: vec![event(Action::Alloc, 1, 1, HOST_DEVICE, 0, 0)],
        ..MemorySnapshot::default()
    };
    assert_eq!(host_trace_index(&host_only), Some(0));
    assert_eq!(DeviceLayout::of(&host_only).trace_count(), 1);

    let mut framework_only = tiny();
    framework_only.events.retain(|e| e.device >= 0);
    assert_eq!(host_trace_index(&framework_only), None);

    // A segment on a device with no events still gets its list.
    let mut segment_device = framework_only;
    segment_device.segments[0].device = 3;
    assert_eq!(DeviceLayout::of(&segment_device).trace_count(), 4);
}

#[test]
fn tiny_snapshot_maps_actions_devices_and_ops() {
    let snapshot = tiny();
    let mut bytes = Vec::new();
    let stats = write_pickle(&snapshot, &mut bytes).unwrap();
    assert_eq!(stats.bytes_written, bytes.len() as u64);
    assert_eq!(stats.device_traces, 3);
    assert_eq!(stats.host_index, Some(2));
    assert_eq!(stats.segments, 3);
    assert_eq!(stats.clamped_ints, 0);
    assert!(stats.categories);

    let root = decode(&bytes);
    assert_eq!(
        root.keys(),
        ["segments", "device_traces", "allocator_settings"]
    );
    let traces = root.at("device_traces").list();
    assert_eq!(traces.len(), 3);
    assert_eq!(
        actions(&traces[0]),
        [
            "segment_alloc",
            "alloc",
            "free_requested",
            "free_completed",
            "segment_free"
        ]
    );
    assert_eq!(
        actions(&traces[1]),
        [
            "alloc",
            "free_requested",
            "free_completed",
            "segment_alloc",
            "alloc",
            "free_requested",
            "free_completed",
            "segment_free",
            "segment_free"
        ]
    );
    // The host heap: a segment per block, with the block.
    assert_eq!(
        actions(&traces[2]),
        [
            "segment_alloc",
            "alloc",
            "free_requested",
            "free_completed",
            "segment_free"
        ]
    );
    let entries: usize = traces.iter().map(|t| t.list().len()).sum();
    assert_eq!(stats.trace_entries, entries as u64);

    let first = &traces[0].list()[0];
    assert_eq!(
        first.keys(),
        [
            "action",
            "addr",
            "size",
            "stream",
            "time_us",
            "compile_context",
            "user_metadata",
            "category",
            "frames"
        ]
    );
    assert_eq!(first.at("addr").int(), 0xA000);
    assert_eq!(first.at("size").int(), 4096);
    assert_eq!(first.at("time_us").int(), 1_700_000_000_000_000);
    assert_eq!(first.at("compile_context").str(), "");
    assert_eq!(first.at("user_metadata").str(), "matmul");
    assert_eq!(first.at("category").str(), "matmul");
    let frames = first.at("frames").list();
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0].keys(), ["filename", "line", "name"]);
    assert_eq!(frames[0].at("name").str(), "f");
    assert_eq!(frames[0].at("line").int(), 10);
    assert_eq!(frames[1].at("name").str(), "main");

    // A free without op or stack: 'unknown', '' and no frames.
    let free = &traces[0].list()[2];
    assert_eq!(free.at("category").str(), "unknown");
    assert_eq!(free.at("user_metadata").str(), "");
    assert!(free.get("frames").is_none());

    let mut categories: Vec<&str> = traces
        .iter()
        .flat_map(|t| t.list())
        .map(|e| e.at("category").str())
        .collect();
    categories.sort_unstable();
    categories.dedup();
    assert_eq!(categories, ["add", "matmul", "unknown"]);

    let settings = root.at("allocator_settings");
    assert!(settings.at("producer").str().starts_with("memtape "));
    assert_eq!(settings.at("python_heap_device_index").int(), 2);
}

#[test]
fn categories_are_left_out_without_an_unknown_one() {
    let mut snapshot = tiny();
    for event in &mut snapshot.events {
        event.op = 1;
    }
    let mut bytes = Vec::new();
    let stats = write_pickle(&snapshot, &mut bytes).unwrap();
    assert!(!stats.categories);
    let root = decode(&bytes);
    for trace in root.at("device_traces").list() {
        for entry in trace.list() {
            assert!(entry.get("category").is_none());
            assert_eq!(entry.at("user_metadata").str(), "matmul");
        }
    }

    // An op literally named 'unknown' satisfies the viewer.
    snapshot.op_names[1] = "unknown".into();
    assert!(write_pickle(&snapshot, &mut Vec::new()).unwrap().categories);
}

#[test]
fn an_unknown_op_id_counts_as_no_op() {
    let mut snapshot = tiny();
    snapshot.events.truncate(1);
    snapshot.events[0].op = 99;
    snapshot.segments.clear();
    let root = decode(&pickled(|o| {
        write_pickle(&snapshot, o).unwrap();
    }));
    let entry = &root.at("device_traces").list()[0].list()[0];
    assert_eq!(entry.at("category").str(), "unknown");
    assert_eq!(entry.at("user_metadata").str(), "");
}

#[test]
fn big_ints_are_masked_or_saturated() {
    let mut snapshot = MemorySnapshot::default();
    let mut e = event(Action::AllocNew, 0xAB00_0000_0000_1000, u64::MAX, 0, 0, 0);
    e.stream = 1 << 60 | 5;
    e.time_ns = u64::MAX;
    snapshot.events.push(e);
    let mut bytes = Vec::new();
    let stats = write_pickle(&snapshot, &mut bytes).unwrap();
    // Two entries, four big ints each, and the segment it leaves (address, size,
    // requested size and stream).
    assert_eq!(stats.clamped_ints, 12);
    let root = decode(&bytes);
    let entry = &root.at("device_traces").list()[0].list()[1];
    assert_eq!(entry.at("addr").int(), 0x1000);
    assert_eq!(entry.at("size").int(), MAX_SAFE_INT as i64);
    assert_eq!(entry.at("stream").int(), 5);
    assert_eq!(entry.at("time_us").int(), MAX_SAFE_INT as i64);
}

#[test]
fn empty_and_odd_inputs() {
    let root = decode(&pickled(|o| {
        write_pickle(&MemorySnapshot::default(), o).unwrap();
    }));
    assert_eq!(root.at("segments").list(), []);
    assert_eq!(root.at("device_traces").list(), []);
    assert!(root
        .at("allocator_settings")
        .get("python_heap_device_index")
        .is_none());

    let mut json = Vec::new();
    write_json(&MemorySnapshot::default(), &mut json).unwrap();
    assert_eq!(
        String::from_utf8(json).unwrap(),
        concat!(
            r#"{"segments":[],"device_traces":[],"allocator_settings":{"producer":"memtape "#,
            env!("CARGO_PKG_VERSION"),
            "\"}}\n"
        )
    );

    let mut negative_segment = tiny();
    negative_segment.segments[0].device = -1;
    let stats = write_pickle(&negative_segment, &mut Vec::new()).unwrap();
    assert_eq!((stats.segments, stats.skipped_segments), (2, 1));

    let mut wild = tiny();
    wild.events[1].device = MAX_DEVICE_INDEX + 1;
    let mut out = Vec::new();
    let error = write_pickle(&wild, &mut out).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    assert!(error.to_string().contains("65536"));
    assert!(out.is_empty(), "nothing written on bad input");
}

#[test]
fn json_matches_the_pickle_structure() {
    let snapshot = tiny();
    let mut json = Vec::new();
    let stats = write_json(&snapshot, &mut json).unwrap();
    let text = String::from_utf8(json).unwrap();
    assert!(text.starts_with(r#"{"segments":[{"device":0,"address":57344,"#));
    assert!(text.contains(
        r#"{"action":"segment_alloc","addr":40960,"size":4096,"stream":0,"time_us":1700000000000000,"compile_context":"","user_metadata":"matmul","category":"matmul","frames":[{"filename":"/app/train.py","line":10,"name":"f"},{"filename":"/app/train.py","line":3,"name":"main"}]}"#
    ));
    assert!(text.contains(r#""segment_pool_id":[0,0],"is_expandable":false"#));
    assert_eq!(
        text.matches(r#""action":"#).count() as u64,
        stats.trace_entries
    );
    assert!(text.ends_with("}\n"));
}

#[test]
fn output_is_streamed_in_pieces() {
    /// Counts the writes.
    struct Pieces {
        data: Vec<u8>,
        writes: usize,
    }
    impl Write for Pieces {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.writes += 1;
            self.data.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let snapshot = synthetic(20_000, 50);
    let mut pieces = Pieces {
        data: Vec::new(),
        writes: 0,
    };
    let stats = write_pickle(&snapshot, &mut pieces).unwrap();
    assert!(pieces.writes > 1);
    assert_eq!(stats.bytes_written, pieces.data.len() as u64);
    let root = decode(&pieces.data);
    let entries: usize = root
        .at("device_traces")
        .list()
        .iter()
        .map(|t| t.list().len())
        .sum();
    assert_eq!(entries as u64, stats.trace_entries);
    let mut whole = Vec::new();
    write_pickle(&snapshot, &mut whole).unwrap();
    assert_eq!(whole, pieces.data);
}

#[test]
fn a_piece_sink_gets_every_buffer_in_order() {
    /// Keeps each piece it is handed and gives back a new, empty vector.
    struct Kept(Vec<Vec<u8>>, bool);
    impl PieceSink for Kept {
        fn put(&mut self, piece: Vec<u8>) -> io::Result<Vec<u8>> {
            assert!(!self.1, "a piece after finish");
            self.0.push(piece);
            Ok(Vec::new())
        }
        fn finish(&mut self) -> io::Result<()> {
            self.1 = true;
            Ok(())
        }
    }
    let snapshot = synthetic(20_000, 50);
    for shared in [false, true] {
        let writer = TorchSnapshotWriter::new(&snapshot).share_frames(shared);
        let mut kept = Kept(Vec::new(), false);
        let stats = writer.write_pickle_pieces(&mut kept).unwrap();
        let mut whole = Vec::new();
        writer.write_pickle(&mut whole).unwrap();
        assert!(kept.1 && kept.0.len() > 1);
        assert_eq!(kept.0.concat(), whole);
        assert_eq!(stats.bytes_written, whole.len() as u64);
        let mut kept = Kept(Vec::new(), false);
        writer.write_json_pieces(&mut kept).unwrap();
        let mut whole = Vec::new();
        writer.write_json(&mut whole).unwrap();
        assert_eq!(kept.0.concat(), whole);
    }
}

#[test]
fn shared_frames_decode_to_the_same_snapshot() {
    let snapshot = synthetic(5_000, 300); // more than 256 stacks: LONG_BINGET too
    let mut plain = Vec::new();
    write_pickle(&snapshot, &mut plain).unwrap();
    let mut shared = Vec::new();
    let writer = TorchSnapshotWriter::new(&snapshot).share_frames(true);
    let stats = writer.write_pickle(&mut shared).unwrap();
    assert_eq!(stats.bytes_written, shared.len() as u64);
    assert!(
        shared.len() * 4 < plain.len(),
        "{} vs {}",
        shared.len(),
        plain.len()
    );
    assert!(shared.contains(&b'j'));
    assert_eq!(decode(&shared), decode(&plain));
    // Entry keys and actions are written once and repeated from the memo.
    let count =
        |bytes: &[u8], word: &[u8]| bytes.windows(word.len()).filter(|w| *w == word).count();
    assert_eq!(count(&shared, b"compile_context"), 1);
    assert_eq!(count(&shared, b"free_requested"), 1);
    assert!(count(&plain, b"compile_context") > 1000);

    // JSON has no memo: sharing changes nothing there.
    let mut json = Vec::new();
    write_json(&snapshot, &mut json).unwrap();
    let mut json_shared = Vec::new();
    writer.write_json(&mut json_shared).unwrap();
    assert_eq!(json, json_shared);

    let mut tiny_shared = Vec::new();
    TorchSnapshotWriter::new(&tiny())
        .share_frames(true)
        .write_pickle(&mut tiny_shared)
        .unwrap();
    assert_eq!(
        decode(&tiny_shared),
        decode(&pickled(|o| {
            write_pickle(&tiny(), o).unwrap();
        }))
    );
}
