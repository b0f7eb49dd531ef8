//! The real loaders: Python's `pickle` and torch's `_memory_viz.py`; the 1 M-event timing.

#[cfg(feature = "slow-tests")]
use std::io;
use std::io::Write;

#[cfg(feature = "slow-tests")]
use super::fixtures::synthetic;
use super::fixtures::tiny;
#[cfg(feature = "slow-tests")]
use crate::torch_snapshot::TorchSnapshotStats;
use crate::torch_snapshot::{write_json, write_pickle, TorchSnapshotWriter};

#[test]
fn loads_in_python() {
    use std::process::{Command, Stdio};

    let snapshot = tiny();
    let mut pickle = Vec::new();
    write_pickle(&snapshot, &mut pickle).unwrap();
    let mut shared = Vec::new();
    TorchSnapshotWriter::new(&snapshot)
        .share_frames(true)
        .write_pickle(&mut shared)
        .unwrap();
    let mut json = Vec::new();
    write_json(&snapshot, &mut json).unwrap();
    let path = std::env::temp_dir().join(format!("memtape-torch-{}.json", std::process::id()));
    std::fs::write(&path, &json).unwrap();
    let shared_path = path.with_extension("pickle");
    std::fs::write(&shared_path, &shared).unwrap();

    // Loads the pickle from stdin, checks its opcodes are ones the viewer's VM knows,
    // compares it with the expected structure and with the JSON (tuples as lists).
    let script = r#"
import json, pickle, pickletools, sys
data = sys.stdin.buffer.read()
allowed = {"PROTO", "EMPTY_DICT", "EMPTY_LIST", "MARK", "SETITEMS", "APPENDS",
           "SHORT_BINUNICODE", "BINUNICODE", "BININT1", "BININT2", "BININT", "LONG1",
           "TUPLE2", "NEWTRUE", "NEWFALSE", "STOP"}
used = {op.name for op, _, _ in pickletools.genops(data)}
assert used <= allowed, used - allowed
snap = pickle.loads(data)
F = lambda n, l: {"filename": "/app/train.py", "line": l, "name": n}
T = 1700000000000000
def E(action, addr, size, op, frames):
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": T,
         "compile_context": "", "user_metadata": op, "category": op or "unknown"}
    if frames:
        e["frames"] = frames
    return e
s1, s2 = [F("f", 10), F("main", 3)], [F("g", 20)]
def seg(device, addr, size, req, stream, active, frames):
    return {"device": device, "address": addr, "total_size": size,
            "allocated_size": size if active else 0, "active_size": size if active else 0,
            "requested_size": req if active else 0, "stream": stream,
            "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
            "frames": [], "blocks": [{"address": addr, "size": size,
            "requested_size": req if active else 0,
            "state": "active_allocated" if active else "inactive",
            "frames": frames if active else []}]}
expected = {
 "segments": [seg(0, 0xE000, 2048, 2000, 0, False, s1), seg(1, 0x9000, 128, 100, 0, True, []),
              seg(1, 0xD000, 1024, 1000, 7, True, s2)],
 "device_traces": [
  [E("segment_alloc", 0xA000, 4096, "matmul", s1), E("alloc", 0xA000, 4096, "matmul", s1),
   E("free_requested", 0xA000, 4096, "", None), E("free_completed", 0xA000, 4096, "", None),
   E("segment_free", 0xA000, 4096, "", None)],
  [E("alloc", 0xB000, 512, "add", s2),
   E("free_requested", 0xB000, 512, "", None), E("free_completed", 0xB000, 512, "", None),
   E("segment_alloc", 0xC000, 256, "add", None), E("alloc", 0xC000, 256, "add", None),
   E("free_requested", 0xC000, 256, "", None), E("free_completed", 0xC000, 256, "", None),
   E("segment_free", 0xC000, 256, "", None), E("segment_free", 0xB000, 512, "", None)],
  [E("segment_alloc", 0x1000, 64, "", s1), E("alloc", 0x1000, 64, "", s1),
   E("free_requested", 0x1000, 64, "", None), E("free_completed", 0x1000, 64, "", None),
   E("segment_free", 0x1000, 64, "", None)]],
 "allocator_settings": {"producer": snap["allocator_settings"]["producer"],
                        "python_heap_device_index": 2},
}
assert snap == expected, snap
listify = lambda v: json.loads(json.dumps(v))
with open(sys.argv[1], encoding="utf-8") as f:
    assert json.load(f) == listify(snap)
with open(sys.argv[2], "rb") as f:
    shared = f.read()
used = {op.name for op, _, _ in pickletools.genops(shared)}
assert used <= allowed | {"MEMOIZE", "BINGET", "LONG_BINGET"}, used
shared = pickle.loads(shared)
assert shared == snap
# One frames list per stack, shared by the entries that use it; entries stay distinct.
t = shared["device_traces"]
assert t[0][0]["frames"] is t[0][1]["frames"] is t[2][0]["frames"]
assert t[0][0] is not t[0][1]
print("ok")
"#;
    let child = Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .arg(&shared_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = child.expect("python3 must be on PATH for this test");
    child.stdin.take().unwrap().write_all(&pickle).unwrap();
    let output = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&shared_path);
    assert!(
        output.status.success(),
        "python3 rejected the snapshot:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "ok");
}

/// Bytes written, counted (the stats must agree) and thrown away.
#[cfg(feature = "slow-tests")]
struct CountingSink(u64);

#[cfg(feature = "slow-tests")]
impl Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A million events (3 M trace entries, 1,000 stacks of 16 frames) through each writer:
/// the counts agree between the three, the stats count the bytes that left, shared
/// frames make the pickle over ten times smaller, and Python's own `pickle` loads that
/// pickle whole with every entry present, the opcodes within the viewer's subset even
/// where the memo outgrows one- and two-byte indices, and one frames list per stack.
/// The times are printed, not asserted (`benchmarks/framework_api.py` measures them).
#[test]
#[cfg(feature = "slow-tests")]
fn one_million_events() {
    use std::process::Command;

    const EVENTS: usize = 1_000_000;
    const STACKS: u32 = 1000;
    let snapshot = synthetic(EVENTS, STACKS);
    let plain = TorchSnapshotWriter::new(&snapshot);
    let shared = plain.share_frames(true);
    type WriteFn<'a> = Box<dyn Fn(&mut dyn Write) -> io::Result<TorchSnapshotStats> + 'a>;
    let cases: [(&str, WriteFn); 3] = [
        ("pickle", Box::new(|out| plain.write_pickle(out))),
        (
            "pickle, shared frames",
            Box::new(|out| shared.write_pickle(out)),
        ),
        ("json", Box::new(|out| plain.write_json(out))),
    ];
    let mut written = Vec::new();
    for (name, write) in cases {
        let mut best = f64::MAX;
        let mut stats = TorchSnapshotStats::default();
        for _ in 0..3 {
            let mut sink = CountingSink(0);
            let start = std::time::Instant::now();
            stats = write(&mut sink).unwrap();
            best = best.min(start.elapsed().as_secs_f64());
            assert_eq!(stats.bytes_written, sink.0, "{name}");
        }
        println!(
            "{name}: {EVENTS} events -> {} entries, {:.1} MB in {:.0} ms",
            stats.trace_entries,
            stats.bytes_written as f64 / 1e6,
            best * 1e3
        );
        written.push(stats);
    }
    let [pickle, shared_pickle, json] = &written[..] else {
        unreachable!()
    };
    // Every event becomes one to three entries (a free: requested + completed, a segment
    // of its own around the Python heap's blocks), whichever writer wrote them.
    assert!(
        (EVENTS as u64..=3 * EVENTS as u64).contains(&pickle.trace_entries),
        "{pickle:?}"
    );
    assert_eq!(shared_pickle.trace_entries, pickle.trace_entries);
    assert_eq!(json.trace_entries, pickle.trace_entries);
    assert!(
        shared_pickle.bytes_written * 10 < pickle.bytes_written,
        "{shared_pickle:?} against {pickle:?}"
    );

    let path = std::env::temp_dir().join(format!("memtape-torch-1m-{}.pickle", std::process::id()));
    shared
        .write_pickle(&mut io::BufWriter::new(
            std::fs::File::create(&path).unwrap(),
        ))
        .unwrap();
    let script = r#"
import pickle, pickletools, sys
with open(sys.argv[1], "rb") as f:
    data = f.read()
allowed = {"PROTO", "EMPTY_DICT", "EMPTY_LIST", "MARK", "SETITEMS", "APPENDS",
           "SHORT_BINUNICODE", "BINUNICODE", "BININT1", "BININT2", "BININT", "LONG1",
           "TUPLE2", "NEWTRUE", "NEWFALSE", "STOP", "MEMOIZE", "BINGET", "LONG_BINGET"}
used = {op.name for op, _, _ in pickletools.genops(data)}
assert used <= allowed, used - allowed
snap = pickle.loads(data)
del data
traces = snap["device_traces"]
entries = sum(len(trace) for trace in traces)
frames = {id(e["frames"]) for trace in traces for e in trace if "frames" in e}
times = [e["time_us"] for trace in traces for e in trace]
print(entries, len(frames), min(times), max(times))
"#;
    let output = Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .output();
    let _ = std::fs::remove_file(&path);
    let output = output.expect("python3 must be on PATH for this test");
    assert!(
        output.status.success(),
        "python3 rejected the snapshot:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen = String::from_utf8_lossy(&output.stdout).trim().to_string();
    // The synthetic events are a microsecond apart from 1.7e15 us on.
    let first_us = 1_700_000_000_000_000u64;
    let last_us = first_us + EVENTS as u64 - 1;
    assert_eq!(
        seen,
        format!("{} {STACKS} {first_us} {last_us}", pickle.trace_entries)
    );
}
