//! Memory over time as CSV: the points of the report's chart, each split by source.

use std::fmt::Write as _;

use crate::memory_source::MemorySource;

use super::replay::ReplayResult;

/// The header of [`timeline_csv`].
pub const TIMELINE_CSV_HEADER: &str =
    "time_s,time_ns,event_index,python_bytes,native_bytes,framework_bytes,mlx_bytes,total_bytes";

/// One row per point of the memory-over-time series (the highest live bytes of each
/// stretch of time, as the chart draws it): when, and live bytes by source and in all.
pub fn timeline_csv(r: &ReplayResult) -> String {
    let mut out = String::with_capacity(64 * (r.series.len() + 1));
    out.push_str(TIMELINE_CSV_HEADER);
    out.push('\n');
    for p in &r.series {
        let _ = write!(
            out,
            "{}.{:09},{},{}",
            p.time_ns / 1_000_000_000,
            p.time_ns % 1_000_000_000,
            p.time_ns,
            p.event_index
        );
        for source in MemorySource::ALL {
            let _ = write!(out, ",{}", p.by_source.get(source));
        }
        let _ = writeln!(out, ",{}", p.bytes);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory_source::NATIVE_DOMAIN;
    use crate::report::record::Record;
    use crate::report::replay::Replay;

    #[test]
    fn rows_split_by_source_and_add_up() {
        let mut replay = Replay::default();
        for r in [
            Record::Alloc {
                domain: 0,
                addr: 0x10,
                size: 100,
                stack: 1,
            },
            Record::Time { ns: 1_500_000_000 },
            Record::Alloc {
                domain: NATIVE_DOMAIN,
                addr: 0x1000,
                size: 1000,
                stack: 1,
            },
        ] {
            replay.feed(&r);
        }
        let csv = timeline_csv(&replay.finish());
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], TIMELINE_CSV_HEADER);
        assert_eq!(lines[1], "0.000000000,0,0,100,0,0,0,100");
        assert_eq!(lines[2], "1.500000000,1500000000,1,100,1000,0,0,1100");
        assert_eq!(lines.len(), 3);
    }
}
