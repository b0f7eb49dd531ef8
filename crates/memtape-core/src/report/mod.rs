//! Reports over a capture: replay, peak and leak attribution, sites, diffs, flamegraphs,
//! the offline HTML report and exports.
//!
//! Reports take records, never a file: feed each [`Record`] the reader yields to an
//! [`Analysis`] (or to [`Symbols`] and [`Replay`] separately), then `finish` it and hand
//! the per-stack tables it found ([`ReplayResult::live_at_peak`], `live_at_end`, or a
//! [`Moment`]) to a renderer:
//!
//! - [`group_sites`]: tracemalloc-style statistics by line, file or traceback;
//! - [`compare`]: tracemalloc's `compare_to` between two grouped tables;
//! - [`folded`] and [`flamegraph_html`]: flame graphs;
//! - [`html_report`]: the offline report page;
//! - [`stats_text`], [`top_text`], [`diff_text`]: terminal tables;
//! - [`json_summary`], [`json_sites`], [`json_diff`]: `--json` output.

mod analysis;
mod bucket_clock;
mod damage_note;
mod diff;
mod flamegraph;
mod html;
mod html_report;
mod import_frames;
mod json;
mod json_out;
mod live_by_stack;
mod live_set;
mod memory_chart;
mod native_symbols;
mod private_allocator;
mod record;
mod replay;
mod rss_account;
mod rss_reading;
mod run_info;
mod series;
mod sites;
mod slot_palette;
mod small_blocks;
mod stretch_top;
mod symbols;
mod text;
mod ticks;
mod time_histogram;
mod time_window_html;
mod timeline_csv;
mod units;

#[cfg(all(test, feature = "slow-tests"))]
mod perf_tests;

pub use analysis::{Analysis, Analyzed};
pub use bucket_clock::MAX_BUCKETS;
pub use damage_note::damage_note;
pub use diff::{compare, SiteDiff};
pub use flamegraph::{flamegraph_html, folded, FlameGraph, NO_PYTHON_FRAME};
pub use html_report::{html_report, HtmlReportOptions};
pub use import_frames::{fold_name, module_name, ImportFrames};
pub use json_out::{json_diff, json_sites, json_summary};
pub use live_by_stack::{total_bytes, StackTotal};
pub use native_symbols::{symbolize_module, NativeModule, NativeSymbol};
pub use private_allocator::{private_allocator, PrivateAllocator};
pub use record::Record;
pub use replay::{MarkerAt, Moment, Peak, Replay, ReplayNow, ReplayOptions, ReplayResult, Totals};
pub use rss_account::{RssAccount, NOT_SEEN_NOISE};
pub use rss_reading::RssReading;
pub use run_info::RunInfo;
pub use series::{SeriesPoint, DEFAULT_MAX_POINTS};
pub use sites::{
    compare_frames, group_sites, group_sites_with_tracebacks, sort_sites, Frame, Site, SiteDetail,
};
pub use symbols::{is_launcher_file, FrameKey, FrameRef, Symbols, LOST_IN_DAMAGE, UNRESOLVED};
pub use text::{
    diff_text, frame_location, has_several_sources, site_location, source_split_text, stats_text,
    top_text,
};
pub use ticks::{Tick, Ticks, DEFAULT_MAX_TICKS, FIRST_TICK_SHIFT};
pub use time_histogram::{BoundedHistogram, HistRow, TimeHistogram};
pub use time_window_html::MAX_WINDOW_ROWS;
pub use timeline_csv::{timeline_csv, TIMELINE_CSV_HEADER};
pub use units::{grouped, human_duration, human_size, human_size_diff, percent, signed_count};

pub use crate::trace_set::GroupBy;
