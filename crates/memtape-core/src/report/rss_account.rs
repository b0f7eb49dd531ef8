//! Whose resident memory is whose: the process' RSS when the capture started (the
//! interpreter's start-up, memtape loaded, and for a notebook cell the whole kernel), what
//! the program added to it, split by the kernel into anonymous, file-backed and shared
//! memory, memtape's own share of it, and the anonymous and shared memory (a shared
//! anonymous mapping counts as shared) left once the recorded bytes and memtape's own are
//! taken out: memory memtape did not see (an allocator of its own, a direct `mmap`).
//! File-backed memory (code, mapped files) is never counted as not seen: it is the page
//! cache's, and the kernel can drop it.
//!
//! The readings come from `/proc/self/status` (`VmRSS`, `VmHWM`, `RssAnon`, `RssFile`,
//! `RssShmem`) at the start (the capture's metadata) and at the end (its trailer).
//! memtape's own share is what its Rust code held at its peak (a counting allocator),
//! resident or not: where some of it was never touched, the memory not seen is
//! under-estimated by at most that much, never over-estimated.
//!
//! The kernel splits the current RSS only, not its peak: the split of what was added is
//! the end's, and the anonymous and shared memory at the peak is the peak's growth less
//! the file-backed memory added by the end.

use super::rss_reading::RssReading;
use super::run_info::RunInfo;
use super::units::{human_size, human_size_diff};

/// Anonymous memory not seen below this much is noise (allocator slack, page rounding,
/// the interpreter's own bookkeeping), not worth a warning.
pub const NOT_SEEN_NOISE: u64 = 2 << 20;

/// The capture's RSS, accounted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RssAccount {
    pub at_start: RssReading,
    pub at_end: RssReading,
    /// The process reached its peak RSS during the capture (else before it: a notebook
    /// kernel that was bigger before the cell).
    pub peak_in_capture: bool,
    /// RSS added over the start: at the peak when it fell in the capture, else at the end.
    pub added: i64,
    /// Of what was there at the end, added over the start: anonymous, file-backed, shared.
    pub anon_added: i64,
    pub file_added: i64,
    pub shmem_added: i64,
    /// memtape's own memory (its tables, buffers and analyses) at its peak.
    pub memtape_own: u64,
    /// What memtape recorded at the moment compared: the peak, or the end.
    pub recorded: u64,
    /// Anonymous and shared memory added beyond the recorded bytes and memtape's own.
    pub not_seen: u64,
    /// The capture began by attaching to the running process (its start is the attach).
    pub attached: bool,
}

impl RssAccount {
    /// The account of a run whose capture has both readings (`None` for captures written
    /// before memtape took them). `recorded_peak` and `recorded_end`: the live bytes at
    /// the recorded peak and at the end.
    pub fn of(run: &RunInfo, recorded_peak: u64, recorded_end: u64) -> Option<Self> {
        let (start, end) = (run.rss_at_start?, run.rss_at_end?);
        let signed = |a: u64, b: u64| a as i64 - b as i64;
        let peak_in_capture = end.hwm > start.hwm;
        let file_added = signed(end.file, start.file);
        let shmem_added = signed(end.shmem, start.shmem);
        let anon_added = signed(end.anon, start.anon);
        let shared = shmem_added.max(0) as u64;
        let (added, anon, recorded) = if peak_in_capture {
            let added = signed(end.hwm, start.rss);
            let anon = added - file_added.max(0) - shared as i64;
            (added, anon.max(0) as u64, recorded_peak)
        } else {
            (
                signed(end.rss, start.rss),
                anon_added.max(0) as u64,
                recorded_end,
            )
        };
        let memtape_own = run.memtape_own_peak_bytes.unwrap_or(0);
        // memtape's own memory is private and anonymous; the recorded bytes may be either
        // (a shared mapping memtape saw): what the anonymous memory does not hold of them
        // accounts for shared memory.
        let anon_left = anon.saturating_sub(memtape_own + recorded);
        let recorded_left = recorded.saturating_sub(anon.saturating_sub(memtape_own));
        let not_seen = anon_left + shared.saturating_sub(recorded_left);
        Some(Self {
            at_start: start,
            at_end: end,
            peak_in_capture,
            added,
            anon_added,
            file_added,
            shmem_added,
            memtape_own,
            recorded,
            not_seen,
            attached: run.attached,
        })
    }

    /// Whether the memory not seen is more than noise and more than the allocators' own
    /// overhead can explain (a tenth of the recorded bytes: pymalloc's arenas and
    /// malloc's free lists hold memory beyond what was asked for).
    pub fn has_gap(&self) -> bool {
        self.not_seen >= NOT_SEEN_NOISE.max(self.recorded / 10)
    }

    /// The account as `(key, name, text)` rows, for the text and HTML reports.
    pub fn rows(&self) -> Vec<(&'static str, &'static str, String)> {
        let mut rows = Vec::new();
        let start = human_size(self.at_start.rss);
        let (began, at_start, during) = if self.attached {
            (
                "at the attach",
                "at the attach (the process until then, memtape)",
                "while recorded",
            )
        } else {
            (
                "at the start",
                "at the start (the interpreter, memtape)",
                "during the run",
            )
        };
        if self.peak_in_capture {
            rows.push((
                "peak-rss",
                "Peak RSS",
                format!(
                    "{}: {start} {at_start}, {} {during}",
                    human_size(self.at_end.hwm),
                    human_size_diff(self.added)
                ),
            ));
        } else {
            rows.push((
                "rss",
                "RSS",
                format!(
                    "{start} {began}, {} at the end ({}); the process' peak, {}, came \
                     before the capture",
                    human_size(self.at_end.rss),
                    human_size_diff(self.added),
                    human_size(self.at_end.hwm)
                ),
            ));
        }
        rows.push((
            "rss-added",
            "  RSS added",
            format!(
                "anonymous {}, file-backed {}, shared {} (at the end)",
                human_size_diff(self.anon_added),
                human_size_diff(self.file_added),
                human_size_diff(self.shmem_added)
            ),
        ));
        rows.push((
            "rss-memtape",
            "  memtape's own",
            format!(
                "{} (its tables, buffers and analyses at their peak, resident or not)",
                human_size(self.memtape_own)
            ),
        ));
        let compared = if self.peak_in_capture {
            "the recorded peak"
        } else {
            "what was live at the end"
        };
        rows.push((
            "untracked-rss",
            "  not seen",
            if self.has_gap() {
                format!(
                    "{} (anonymous and shared memory added beyond {compared} and memtape's \
                     own: memory memtape did not see, such as an allocator of its own or a \
                     direct mmap)",
                    human_size(self.not_seen)
                )
            } else if self.not_seen >= NOT_SEEN_NOISE {
                format!(
                    "{} beyond {compared} and memtape's own, within the allocators' own \
                     overhead (under a tenth of it)",
                    human_size(self.not_seen)
                )
            } else {
                format!(
                    "none ({} and memtape's own account for the anonymous and shared memory \
                     added)",
                    compared
                )
            },
        ));
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn reading(rss: u64, hwm: u64, anon: u64, file: u64) -> RssReading {
        RssReading {
            rss: rss * MIB,
            hwm: hwm * MIB,
            anon: anon * MIB,
            file: file * MIB,
            shmem: 0,
        }
    }

    fn run(start: RssReading, end: RssReading, own: u64) -> RunInfo {
        RunInfo {
            rss_at_start: Some(start),
            rss_at_end: Some(end),
            memtape_own_peak_bytes: Some(own * MIB),
            ..RunInfo::default()
        }
    }

    #[test]
    fn a_program_that_adds_nothing_has_no_gap() {
        let r = run(reading(16, 16, 4, 12), reading(17, 17, 5, 12), 1);
        let a = RssAccount::of(&r, 0, 0).unwrap();
        assert!(a.peak_in_capture);
        assert_eq!(a.added, MIB as i64);
        assert_eq!(a.not_seen, 0);
        assert!(!a.has_gap());
    }

    #[test]
    fn an_attached_capture_counts_from_the_attach() {
        let attached = RunInfo {
            attached: true,
            ..run(reading(80, 80, 60, 20), reading(90, 90, 70, 20), 1)
        };
        let peak = format!("{:?}", RssAccount::of(&attached, 0, 0).unwrap().rows());
        assert!(
            peak.contains("80.0 MiB at the attach (the process until then, memtape), +10.0 MiB while recorded"),
            "{peak}"
        );
        assert!(!peak.contains("at the start"), "{peak}");
        let before = RunInfo {
            attached: true,
            ..run(reading(80, 200, 60, 20), reading(90, 200, 70, 20), 1)
        };
        let rows = format!("{:?}", RssAccount::of(&before, 0, 0).unwrap().rows());
        assert!(
            rows.contains("80.0 MiB at the attach, 90.0 MiB at the end"),
            "{rows}"
        );
    }

    #[test]
    fn anonymous_memory_beyond_the_recorded_peak_is_not_seen() {
        // 64 MiB mapped directly, 10 MiB recorded, 1 MiB of memtape's own, 3 MiB of code.
        let r = run(reading(16, 16, 4, 12), reading(94, 94, 79, 15), 1);
        let a = RssAccount::of(&r, 10 * MIB, 10 * MIB).unwrap();
        assert_eq!(a.file_added, 3 * MIB as i64);
        assert_eq!(a.not_seen, 64 * MIB);
        assert!(a.has_gap());
        let text = format!("{:?}", a.rows());
        assert!(
            text.contains("64.0 MiB (anonymous and shared memory added"),
            "{text}"
        );
    }

    #[test]
    fn a_shared_anonymous_mapping_is_not_seen_too() {
        let mut end = reading(81, 81, 4, 13);
        end.shmem = 64 * MIB;
        let r = run(reading(16, 16, 4, 12), end, 0);
        let a = RssAccount::of(&r, 0, 0).unwrap();
        assert_eq!(a.shmem_added, 64 * MIB as i64);
        assert_eq!(a.not_seen, 64 * MIB);
    }

    #[test]
    fn allocator_overhead_is_no_gap() {
        // 100 MiB recorded, 106 MiB of anonymous memory added: malloc's and pymalloc's.
        let r = run(reading(16, 16, 4, 12), reading(122, 122, 110, 12), 0);
        let a = RssAccount::of(&r, 100 * MIB, 100 * MIB).unwrap();
        assert_eq!(a.not_seen, 6 * MIB);
        assert!(!a.has_gap());
        assert!(a.rows()[3]
            .2
            .contains("within the allocators' own overhead"));
    }

    #[test]
    fn a_file_read_through_mmap_is_file_backed_not_unseen() {
        let r = run(reading(16, 16, 4, 12), reading(80, 80, 4, 76), 0);
        let a = RssAccount::of(&r, 0, 0).unwrap();
        assert_eq!(a.file_added, 64 * MIB as i64);
        assert_eq!(a.not_seen, 0);
    }

    #[test]
    fn a_cell_in_a_kernel_that_was_bigger_before_is_its_own_delta() {
        let r = run(reading(110, 130, 90, 20), reading(111, 130, 91, 20), 0);
        let a = RssAccount::of(&r, 50 * MIB, 712).unwrap();
        assert!(!a.peak_in_capture);
        assert_eq!(a.added, MIB as i64);
        assert_eq!(a.recorded, 712);
        let rows = a.rows();
        assert_eq!(rows[0].0, "rss");
        assert!(rows[0].2.contains("+1.0 MiB"), "{rows:?}");
    }

    #[test]
    fn captures_without_readings_have_no_account() {
        assert_eq!(RssAccount::of(&RunInfo::default(), 0, 0), None);
    }
}
