//! What a report says about the run itself (from the capture's header and trailer).

use super::private_allocator::PrivateAllocator;
use super::rss_reading::RssReading;

/// The recorded run. Every field is optional: a report shows what it is given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunInfo {
    /// The capture file the report was made from.
    pub source: Option<String>,
    /// The program's command line.
    pub argv: Vec<String>,
    /// How the program was run: "script", "-m", "-c".
    pub command: Option<String>,
    /// Python version, e.g. "3.11.7".
    pub python: Option<String>,
    /// Platform string.
    pub platform: Option<String>,
    /// Process id.
    pub pid: Option<u64>,
    /// memtape version that recorded.
    pub tool_version: Option<String>,
    /// Start of the recording, Unix epoch ns.
    pub start_time_ns: Option<u64>,
    /// How the program ended: "normal", "exception", "signal", "os._exit" (from the
    /// trailer).
    pub exit: Option<String>,
    /// The program's exit status as a shell sees it (128 + N after signal N; from the
    /// trailer).
    pub exit_code: Option<i64>,
    /// The capture has no trailer: the program was killed or the disk filled up, and the
    /// report covers everything up to the last complete block.
    pub cut_short: bool,
    /// The recording began by attaching to a running process (`memtape attach`): the
    /// process and its memory were there before it started.
    pub attached: bool,
    /// The capture was read around damaged blocks: what was skipped and lost (see
    /// [`super::damage_note`]); the figures are incomplete.
    pub damage: Option<String>,
    /// The process' peak resident set size (from the trailer).
    pub max_rss_bytes: Option<u64>,
    /// The process' memory when the capture started (from the metadata) and when it
    /// ended (from the trailer): see [`super::rss_account`].
    pub rss_at_start: Option<RssReading>,
    pub rss_at_end: Option<RssReading>,
    /// memtape's own memory at its peak during the capture (from the trailer).
    pub memtape_own_peak_bytes: Option<u64>,
    /// Native frees, munmaps and mremaps of memory allocated before tracing started (or
    /// by an object memtape did not patch): ignored (from the trailer).
    pub native_unknown_frees: Option<u64>,
    /// Native calls made while their thread was inside memtape's recorder (a signal
    /// handler that allocates, interrupting it): passed through unrecorded (from the
    /// trailer).
    pub native_missed_reentrant: Option<u64>,
    /// Loaded objects with an allocator of their own, whose memory memtape does not see
    /// (from the trailer).
    pub private_allocators: Vec<PrivateAllocator>,
}

impl RunInfo {
    /// The process' peak RSS beyond the recorded peak `recorded` (never negative): memory
    /// memtape did not see. `None` when the peak RSS is unknown.
    pub fn untracked_rss(&self, recorded: u64) -> Option<u64> {
        self.max_rss_bytes
            .filter(|&b| b > 0)
            .map(|rss| rss.saturating_sub(recorded))
    }

    /// The command line as one string, or `None` when unknown.
    pub fn command_line(&self) -> Option<String> {
        (!self.argv.is_empty()).then(|| self.argv.join(" "))
    }
}
