//! Entries copied from memoized pieces are byte for byte the entries written key by key.

use super::fixtures::{event, synthetic, tiny};
use super::pickle_decoder::decode;
use crate::event::{Action, HOST_DEVICE};
use crate::memory_snapshot::MemorySnapshot;
use crate::torch_snapshot::{TorchSnapshotStats, TorchSnapshotWriter};

/// The shared-frames pickle, with entries copied and key by key.
fn both_ways(snapshot: &MemorySnapshot) -> (Vec<u8>, Vec<u8>) {
    let writer = TorchSnapshotWriter::new(snapshot).share_frames(true);
    let mut copied = Vec::new();
    let copied_stats = writer.write_pickle(&mut copied).unwrap();
    let mut key_by_key = Vec::new();
    let key_by_key_stats = writer
        .entries_key_by_key()
        .write_pickle(&mut key_by_key)
        .unwrap();
    assert_eq!(key_by_key_stats.copied_entries, 0);
    if copied_stats.trace_entries > 100 {
        // All but the first use of each action, op and stack.
        assert!(copied_stats.copied_entries * 10 > copied_stats.trace_entries * 9);
    }
    assert_eq!(
        TorchSnapshotStats {
            copied_entries: 0,
            ..copied_stats
        },
        key_by_key_stats
    );
    (copied, key_by_key)
}

/// The synthetic snapshot plus the odd cases: a stack without frames, an unknown op id,
/// ints above 2**53, a zero size, a stream, and a host block freed twice.
fn odd(stacks: u32, ops_always: bool) -> MemorySnapshot {
    let mut snapshot = synthetic(6_000, stacks);
    if ops_always {
        for (n, e) in snapshot.events.iter_mut().enumerate() {
            e.op = 1 + (n % 3) as u32;
        }
    }
    let mut big = event(Action::AllocNew, u64::MAX, u64::MAX, 1, 999, 77);
    big.stream = 7;
    big.time_ns = u64::MAX;
    snapshot.events.extend([
        big,
        event(Action::FreeActiveToOs, u64::MAX, 0, 1, 999, 77),
        event(Action::Alloc, 0x10, 0, HOST_DEVICE, 999, 2),
        event(Action::Free, 0x10, 0, HOST_DEVICE, 1, 0),
        event(Action::Free, 0x10, 0, HOST_DEVICE, 1, 0),
    ]);
    snapshot
}

#[test]
fn copied_entries_are_the_entries_written_key_by_key() {
    let cases = [
        ("tiny", tiny()),
        ("synthetic, 300 stacks: LONG_BINGET", odd(300, false)),
        ("synthetic, 3 stacks", odd(3, false)),
        ("every entry has an op: no categories", odd(40, true)),
        ("no events", MemorySnapshot::default()),
    ];
    for (name, snapshot) in cases {
        let (copied, key_by_key) = both_ways(&snapshot);
        assert!(copied == key_by_key, "{name}: the bytes differ");
        if !snapshot.events.is_empty() {
            // And they are what the pickle decodes to without sharing anything.
            let mut plain = Vec::new();
            TorchSnapshotWriter::new(&snapshot)
                .write_pickle(&mut plain)
                .unwrap();
            assert!(
                decode(&copied) == decode(&plain),
                "{name}: decodes differently"
            );
        }
    }
}
