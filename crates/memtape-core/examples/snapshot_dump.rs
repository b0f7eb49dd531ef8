//! Times the memory_viz pickle (and JSON) writer on the events `benchmarks/framework_api.py`
//! dumps: 1,000,000 framework events (AllocNew / FreeActiveToOS pairs from two call sites
//! 18 frames deep), written with shared frames straight to a file (the writer hands it
//! 64 KiB pieces), as `memtape.dump_snapshot` does.
//!
//! `cargo run --release -p memtape-core --example snapshot_dump -- [EVENTS] [OUT_PATH] [json]`

use std::io::Write;
use std::time::Instant;

use memtape_core::{Action, Event, MemorySnapshot, ResolvedFrame, TorchSnapshotWriter};

fn snapshot(events: usize) -> MemorySnapshot {
    let mut snapshot = MemorySnapshot {
        op_names: vec![String::new()],
        ..MemorySnapshot::default()
    };
    for stack in 1..=2u32 {
        let frames = (0..18)
            .map(|depth| ResolvedFrame {
                filename: "benchmarks/framework_api.py".into(),
                name: if depth < 16 {
                    "at_depth".into()
                } else {
                    format!("churn_{stack}")
                },
                line: 30 + depth + stack,
            })
            .collect();
        snapshot.stacks.insert(stack, frames);
    }
    let base = 0x7F00_0000_0000u64;
    for i in 0..events {
        let pair = (i / 2) as u64;
        let addr = base + (pair % 4096) * 0x10000;
        let alloc = i % 2 == 0;
        let size = 4096 + (pair % 7) * 512;
        snapshot.events.push(Event {
            action: if alloc {
                Action::AllocNew
            } else {
                Action::FreeActiveToOs
            },
            addr,
            size,
            requested_size: size,
            device: 0,
            stream: 0,
            thread: 1,
            time_ns: 1_764_000_000_000_000_000 + i as u64 * 700,
            stack: if alloc { 1 } else { 2 },
            op: 0,
        });
    }
    snapshot
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let events: usize = args.get(1).map_or(1_000_000, |n| n.parse().unwrap());
    let path = args
        .get(2)
        .cloned()
        .unwrap_or_else(|| "/tmp/memtape_snapshot_dump.pickle".into());
    let json = args.get(3).is_some_and(|a| a == "json");
    let snapshot = snapshot(events);
    let mut best = f64::MAX;
    let mut bytes = 0;
    for _ in 0..3 {
        let started = Instant::now();
        // No BufWriter: the writer hands the file 64 KiB pieces itself.
        let mut out = std::fs::File::create(&path).unwrap();
        let writer = TorchSnapshotWriter::new(&snapshot).share_frames(true);
        let stats = if json {
            writer.write_json(&mut out).unwrap()
        } else {
            writer.write_pickle(&mut out).unwrap()
        };
        out.flush().unwrap();
        best = best.min(started.elapsed().as_secs_f64());
        bytes = stats.bytes_written;
    }
    println!(
        "{events} events -> {path}: {:.1} MiB in {:.3} s (best of 3)",
        bytes as f64 / (1 << 20) as f64,
        best
    );
}
