//! Times what `memtape stats` and `memtape flamegraph` do in Rust on one capture file:
//! one streaming pass (decode, replay with its clock ticks, symbols), then the report.
//!
//! `cargo run --release -p memtape-core --example capture_reports -- FILE [stats|flamegraph|read]`
//! prints the seconds and the process's peak RSS (VmHWM). The pass runs on two threads
//! (reading and decoding on one, the replay on this one) unless `ONE_THREAD` is set.

use std::time::Instant;

use memtape_core::capture::CaptureReader;
use memtape_core::report::{
    flamegraph_html, group_sites, stats_text, top_text, total_bytes, Analysis, ReplayOptions,
    RunInfo,
};
use memtape_core::GroupBy;

fn vm_hwm_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .expect("usage: capture_reports FILE [stats|flamegraph|read]");
    let what = args.get(2).map_or("stats", String::as_str);
    let started = Instant::now();
    let file = std::io::BufReader::with_capacity(1 << 16, std::fs::File::open(path).unwrap());
    let mut reader = CaptureReader::new(file).unwrap();
    let mut records = 0u64;
    if what == "read" {
        reader.for_each_record(|_| records += 1).unwrap();
        println!(
            "read: {records} records in {:.3} s, VmHWM {:.1} MiB",
            started.elapsed().as_secs_f64(),
            vm_hwm_mib()
        );
        return;
    }
    let options = ReplayOptions {
        time_histogram: false,
        ..ReplayOptions::default()
    };
    let mut analysis = Analysis::new(options);
    let summary = if std::env::var_os("ONE_THREAD").is_some() {
        reader.visit_records(&mut analysis).unwrap()
    } else {
        reader.visit_records_pipelined(&mut analysis).unwrap()
    };
    let analyzed = analysis.finish();
    let pass = started.elapsed().as_secs_f64();
    let table = &analyzed.result.live_at_peak;
    let text = match what {
        "flamegraph" => flamegraph_html(table, &analyzed.symbols, "title", "subtitle"),
        _ => {
            let info = RunInfo::default();
            let sites = group_sites(table, &analyzed.symbols, GroupBy::Lineno, 25);
            stats_text(&info, &analyzed.result) + &top_text(&sites, total_bytes(table), 10)
        }
    };
    println!(
        "{what}: {} events ({} records) pass {pass:.3} s, total {:.3} s, {} bytes out, \
         VmHWM {:.1} MiB",
        analyzed.result.events,
        summary.records,
        started.elapsed().as_secs_f64(),
        text.len(),
        vm_hwm_mib()
    );
}
