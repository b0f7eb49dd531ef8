//! JSON for `--json`: the run, the replay's numbers, and site tables.
//!
//! Sizes are integers in bytes and times integers in ns since the start of the
//! recording; frames are `{"filename", "function", "line"}`, innermost first.

use super::diff::SiteDiff;
use super::json::JsonWriter;
use super::replay::ReplayResult;
use super::rss_account::RssAccount;
use super::run_info::RunInfo;
use super::sites::{Frame, Site};
use crate::memory_source::SourceSplit;

fn frames(w: &mut JsonWriter, frames: &[Frame]) {
    w.key("frames").begin_array();
    for f in frames {
        w.begin_object()
            .key("filename")
            .string(&f.filename)
            .key("function")
            .string(&f.function)
            .key("line")
            .uint(u64::from(f.line))
            .end_object();
    }
    w.end_array();
}

fn sites(w: &mut JsonWriter, key: &str, rows: &[Site]) {
    w.key(key).begin_array();
    for s in rows {
        w.begin_object()
            .key("bytes")
            .uint(s.bytes)
            .key("count")
            .uint(s.count);
        frames(w, &s.frames);
        w.end_object();
    }
    w.end_array();
}

fn run(w: &mut JsonWriter, run: &RunInfo) {
    w.key("run").begin_object();
    w.opt_string("source", run.source.as_deref());
    w.key("argv").begin_array();
    for a in &run.argv {
        w.string(a);
    }
    w.end_array();
    w.opt_string("command", run.command.as_deref())
        .opt_string("python", run.python.as_deref())
        .opt_string("platform", run.platform.as_deref())
        .opt_uint("pid", run.pid)
        .opt_string("tool_version", run.tool_version.as_deref())
        .opt_uint("start_time_ns", run.start_time_ns)
        .opt_string("exit", run.exit.as_deref())
        .opt_int("exit_code", run.exit_code)
        .key("cut_short")
        .bool(run.cut_short)
        .opt_string("damage", run.damage.as_deref())
        .opt_uint("max_rss_bytes", run.max_rss_bytes)
        .opt_uint("native_unknown_frees", run.native_unknown_frees)
        .opt_uint("native_missed_reentrant", run.native_missed_reentrant);
    w.end_object();
}

/// `"rss": {"peak_rss_bytes", "recorded_peak_bytes", "untracked_bytes",
/// "private_allocators": [{"path", "allocator", "symbol"}]}`: the process' peak RSS
/// beside the recorded peak, the part memtape did not see (never negative; null when the
/// peak RSS is unknown), and the loaded objects with an allocator of their own. With the
/// start and end readings (see [`RssAccount`]) also `"at_start"`, `"at_end"` (`{"rss",
/// "hwm", "anon", "file", "shmem"}`), `"peak_in_capture"`, `"added_bytes"`,
/// `"anon_added_bytes"`, `"file_added_bytes"`, `"shmem_added_bytes"`,
/// `"memtape_own_bytes"`, `"compared_bytes"` (the recorded bytes compared) and
/// `"not_seen_bytes"`; `"untracked_bytes"` is then the anonymous memory not seen.
fn rss(w: &mut JsonWriter, run: &RunInfo, r: &ReplayResult) {
    w.key("rss").begin_object();
    let account = RssAccount::of(run, r.peak.bytes, r.end_bytes);
    let untracked = match &account {
        Some(a) => Some(a.not_seen),
        None => run.untracked_rss(r.peak.bytes),
    };
    w.opt_uint("peak_rss_bytes", run.max_rss_bytes)
        .key("recorded_peak_bytes")
        .uint(r.peak.bytes)
        .opt_uint("untracked_bytes", untracked);
    if let Some(a) = &account {
        for (key, reading) in [("at_start", a.at_start), ("at_end", a.at_end)] {
            w.key(key)
                .begin_object()
                .key("rss")
                .uint(reading.rss)
                .key("hwm")
                .uint(reading.hwm)
                .key("anon")
                .uint(reading.anon)
                .key("file")
                .uint(reading.file)
                .key("shmem")
                .uint(reading.shmem);
            w.end_object();
        }
        w.key("peak_in_capture")
            .bool(a.peak_in_capture)
            .opt_int("added_bytes", Some(a.added))
            .opt_int("anon_added_bytes", Some(a.anon_added))
            .opt_int("file_added_bytes", Some(a.file_added))
            .opt_int("shmem_added_bytes", Some(a.shmem_added))
            .key("memtape_own_bytes")
            .uint(a.memtape_own)
            .key("compared_bytes")
            .uint(a.recorded)
            .key("not_seen_bytes")
            .uint(a.not_seen);
    }
    w.key("private_allocators").begin_array();
    for p in &run.private_allocators {
        w.begin_object()
            .key("path")
            .string(&p.path)
            .key("allocator")
            .string(&p.allocator)
            .key("symbol")
            .string(&p.symbol)
            .end_object();
    }
    w.end_array();
    w.end_object();
}

/// `"by_source": {"python": B, "native": B, "framework": B, "mlx": B}`.
fn by_source(w: &mut JsonWriter, split: &SourceSplit) {
    w.key("by_source").begin_object();
    for (source, bytes) in split.iter() {
        w.key(source.name()).uint(bytes);
    }
    w.end_object();
}

fn stats(w: &mut JsonWriter, r: &ReplayResult) {
    let t = &r.totals;
    w.key("duration_ns").uint(r.duration_ns);
    w.key("events").uint(r.events);
    w.key("totals")
        .begin_object()
        .key("allocs")
        .uint(t.allocs)
        .key("frees")
        .uint(t.frees)
        .key("bytes_allocated")
        .uint(t.bytes_allocated)
        .key("bytes_freed")
        .uint(t.bytes_freed)
        .key("unknown_frees")
        .uint(t.unknown_frees)
        .key("replaced")
        .uint(t.replaced)
        .key("untracked")
        .uint(t.untracked)
        .end_object();
    w.key("peak")
        .begin_object()
        .key("bytes")
        .uint(r.peak.bytes)
        .key("blocks")
        .uint(r.peak.blocks)
        .key("time_ns")
        .uint(r.peak.time_ns)
        .key("event_index")
        .uint(r.peak.event_index);
    by_source(w, &r.peak_by_source);
    w.end_object();
    w.key("end")
        .begin_object()
        .key("bytes")
        .uint(r.end_bytes)
        .key("blocks")
        .uint(r.end_blocks);
    by_source(w, &r.end_by_source);
    w.end_object();
    w.key("dropped").uint(r.dropped);
    w.key("markers").begin_array();
    for m in &r.markers {
        w.begin_object()
            .key("label")
            .string(&m.label)
            .key("time_ns")
            .uint(m.time_ns)
            .key("event_index")
            .uint(m.event_index)
            .end_object();
    }
    w.end_array();
}

/// `{"run", "duration_ns", "events", "totals", "peak", "end", "dropped", "markers",
/// "top", "leaks"}`: `top` is the sites at the peak and `leaks` the sites still live at
/// the end, as the caller grouped and cut them.
pub fn json_summary(info: &RunInfo, r: &ReplayResult, top: &[Site], leaks: &[Site]) -> String {
    let mut w = JsonWriter::new();
    w.begin_object();
    run(&mut w, info);
    stats(&mut w, r);
    rss(&mut w, info, r);
    sites(&mut w, "top", top);
    sites(&mut w, "leaks", leaks);
    w.end_object();
    let mut out = w.finish();
    out.push('\n');
    out
}

/// `{"total_bytes", "sites": [{"bytes", "count", "frames"}]}`.
pub fn json_sites(rows: &[Site], total_bytes: u64) -> String {
    let mut w = JsonWriter::new();
    w.begin_object().key("total_bytes").uint(total_bytes);
    sites(&mut w, "sites", rows);
    w.end_object();
    let mut out = w.finish();
    out.push('\n');
    out
}

/// `{"diffs": [{"bytes", "bytes_diff", "count", "count_diff", "frames"}]}`.
pub fn json_diff(rows: &[SiteDiff]) -> String {
    let mut w = JsonWriter::new();
    w.begin_object().key("diffs").begin_array();
    for r in rows {
        w.begin_object()
            .key("bytes")
            .uint(r.bytes)
            .key("bytes_diff")
            .int(r.bytes_diff)
            .key("count")
            .uint(r.count)
            .key("count_diff")
            .int(r.count_diff);
        frames(&mut w, &r.frames);
        w.end_object();
    }
    w.end_array().end_object();
    let mut out = w.finish();
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::replay::Peak;

    #[test]
    fn summary_shape() {
        let info = RunInfo {
            argv: vec!["a\"b.py".into()],
            pid: Some(42),
            ..RunInfo::default()
        };
        let r = ReplayResult {
            peak: Peak {
                bytes: 10,
                blocks: 1,
                time_ns: 5,
                event_index: 0,
            },
            events: 1,
            ..ReplayResult::default()
        };
        let top = [Site {
            frames: vec![Frame {
                filename: "a.py".into(),
                function: "f".into(),
                line: 3,
            }],
            bytes: 10,
            count: 1,
        }];
        let json = json_summary(&info, &r, &top, &[]);
        assert_eq!(
            json,
            concat!(
                r#"{"run":{"source":null,"argv":["a\"b.py"],"command":null,"python":null,"#,
                r#""platform":null,"pid":42,"tool_version":null,"start_time_ns":null,"#,
                r#""exit":null,"exit_code":null,"cut_short":false,"damage":null,"max_rss_bytes":null,"#,
                r#""native_unknown_frees":null,"native_missed_reentrant":null},"#,
                r#""duration_ns":0,"events":1,"#,
                r#""totals":{"allocs":0,"frees":0,"bytes_allocated":0,"bytes_freed":0,"#,
                r#""unknown_frees":0,"replaced":0,"untracked":0},"#,
                r#""peak":{"bytes":10,"blocks":1,"time_ns":5,"event_index":0,"#,
                r#""by_source":{"python":0,"native":0,"framework":0,"mlx":0}},"#,
                r#""end":{"bytes":0,"blocks":0,"#,
                r#""by_source":{"python":0,"native":0,"framework":0,"mlx":0}},"dropped":0,"markers":[],"#,
                r#""rss":{"peak_rss_bytes":null,"recorded_peak_bytes":10,"untracked_bytes":null,"#,
                r#""private_allocators":[]},"#,
                r#""top":[{"bytes":10,"count":1,"frames":[{"filename":"a.py","function":"f","line":3}]}],"#,
                r#""leaks":[]}"#,
                "\n"
            )
        );
        assert_eq!(
            json_diff(&[SiteDiff {
                frames: vec![],
                bytes: 0,
                bytes_diff: -4,
                count: 0,
                count_diff: -1
            }]),
            "{\"diffs\":[{\"bytes\":0,\"bytes_diff\":-4,\"count\":0,\"count_diff\":-1,\"frames\":[]}]}\n"
        );
        assert_eq!(json_sites(&[], 0), "{\"total_bytes\":0,\"sites\":[]}\n");
    }
}
