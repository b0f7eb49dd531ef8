//! One reading of the process' resident memory from `/proc/self/status`, as a capture
//! keeps it at its start (metadata) and end (trailer); [`super::rss_account`] accounts
//! for the difference.

/// One reading of the process' memory, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RssReading {
    /// Resident set size (`VmRSS`).
    pub rss: u64,
    /// Its peak so far, over the process' life (`VmHWM`).
    pub hwm: u64,
    /// Anonymous (heap, stacks, anonymous mappings: `RssAnon`).
    pub anon: u64,
    /// File-backed (code, mapped files: `RssFile`).
    pub file: u64,
    /// Shared memory (`RssShmem`).
    pub shmem: u64,
}
