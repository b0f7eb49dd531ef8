//! What a write produced.

/// What a write produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TorchSnapshotStats {
    /// Trace entries written, over all devices.
    pub trace_entries: u64,
    /// Lists in `device_traces`.
    pub device_traces: usize,
    /// Index of the Python-heap list, if any.
    pub host_index: Option<usize>,
    /// Segments written.
    pub segments: usize,
    /// Segments left out because their device was negative.
    pub skipped_segments: usize,
    /// Ints that were ≥ 2**53 and were masked (addresses, streams) or saturated.
    pub clamped_ints: u64,
    /// Whether entries carry `category`. It is left out when no entry would be
    /// `'unknown'`: MemoryViz.js throws on categories without an `'unknown'` one.
    pub categories: bool,
    /// Trace entries copied from memoized pieces (shared frames in a pickle: every entry
    /// after the first use of its action, op and stack).
    pub copied_entries: u64,
    /// Bytes handed to the output.
    pub bytes_written: u64,
}
