//! A capture file's records as they are recorded (docs/capture-format.md).
//!
//! Hooks append fixed-size entries to a [`Journal`] under the recorder lock (three stores
//! an event); the flusher thread ([`crate::session::capture_session`]) swaps the journal
//! out, encodes it into blocks and writes them, and stack resolution
//! ([`crate::session::stack_resolution`]) adds the Stack records for the stacks interned
//! meanwhile.

use std::time::Instant;

use memtape_core::capture::{Journal, RareRecords};
use rustc_hash::FxHashMap;

use super::flusher_wake::wake_flusher;
use super::journal_backlog::{self, JOURNAL_TARGET};
use crate::native::unwind::loaded_modules::LoadedModule;

/// Entries a journal has room for before it grows: the target, and the events counted
/// until the next look at it.
pub(crate) const JOURNAL_CAPACITY: usize = JOURNAL_TARGET + 2 * CLOCK_EVERY as usize;
/// Events between two looks at the clock (and at the block's size) in the hooks.
const CLOCK_EVERY: u32 = 256;

/// What a capture records, appended to by the hooks under the recorder lock.
pub(crate) struct CaptureSink {
    journal: Journal,
    min_size: u64,
    /// False once stopping began: nothing more is recorded.
    accepting: bool,
    start: Instant,
    last_time_ns: u64,
    /// Events left before the next look at the clock.
    tick: u32,
    /// The flusher was woken for the journal being filled: further events leave it be (a
    /// wake-up is a system call, and each one made the flusher fight the hooks for the
    /// recorder lock).
    flusher_woken: bool,
    /// Stack nodes `1..=resolved_upto` have been written as Stack records.
    resolved_upto: usize,
    strings: FxHashMap<String, u32>,
    frames: FxHashMap<(u32, u32, u32), u32>,
    /// Native frames written, by return address (their ids share the frames' space).
    native_frames: FxHashMap<u64, u32>,
    /// Modules written, by `(load bias, path)`.
    modules: FxHashMap<(u64, String), u32>,
    /// Events of the journals taken (the journal counts its own).
    taken_events: u64,
    /// The address of the last free recorded, 0 once an allocation was recorded since.
    last_freed: u64,
}

impl CaptureSink {
    /// A sink recording allocations of at least `min_size` bytes, starting now.
    #[cfg(test)]
    pub(crate) fn new(min_size: u64) -> CaptureSink {
        Self::with_journal(min_size, Journal::with_capacity(JOURNAL_CAPACITY))
    }

    /// As [`new`](Self::new), appending to `journal` (empty) until the flusher takes it.
    pub(crate) fn with_journal(min_size: u64, mut journal: Journal) -> CaptureSink {
        journal_backlog::reset();
        journal.time(0);
        CaptureSink {
            journal,
            min_size,
            accepting: true,
            start: Instant::now(),
            last_time_ns: 0,
            tick: CLOCK_EVERY,
            flusher_woken: false,
            resolved_upto: 0,
            strings: FxHashMap::default(),
            frames: FxHashMap::default(),
            native_frames: FxHashMap::default(),
            modules: FxHashMap::default(),
            taken_events: 0,
            last_freed: 0,
        }
    }

    /// The smallest allocation recorded.
    pub(crate) fn min_size(&self) -> u64 {
        self.min_size
    }

    /// The journal being filled, for another capture once this one is over.
    pub(crate) fn into_journal(self) -> Journal {
        self.journal
    }

    /// Records nothing more (the capture is stopping).
    pub(crate) fn stop_accepting(&mut self) {
        self.accepting = false;
    }

    /// Events recorded so far.
    pub(crate) fn events(&self) -> u64 {
        self.taken_events + self.journal.events()
    }

    /// Adds a marker (for diffs between moments); false once stopping began.
    pub(crate) fn mark(&mut self, label: &str) -> bool {
        if self.accepting {
            self.journal.marker(label);
        }
        self.accepting
    }

    /// Stack nodes `1..=resolved_upto()` have been written as Stack records.
    pub(crate) fn resolved_upto(&self) -> usize {
        self.resolved_upto
    }

    /// Writes Stack records (with the String, Frame and Module records they need) for the
    /// nodes after `from`, in order; nothing when another resolution already wrote them.
    pub(crate) fn write_stacks(&mut self, from: usize, resolved: &[(u32, u32, Resolved)]) {
        if self.resolved_upto != from {
            return; // another resolution won the race and wrote these
        }
        for (id, parent, frame) in resolved {
            let frame = match frame {
                Resolved::Python(file, name, line) => self.intern_frame(file, name, *line),
                Resolved::Native(ip, module) => self.intern_native_frame(*ip, module.as_ref()),
            };
            self.journal.stack(*id, *parent, frame);
        }
        self.resolved_upto = from + resolved.len();
    }

    /// Counts an event; every `CLOCK_EVERY`th looks at the clock and the journal's size.
    #[inline(always)]
    fn clock(&mut self) {
        self.tick -= 1;
        if self.tick == 0 {
            self.now_and_then();
        }
    }

    /// Writes a Time record when a millisecond or more passed since the last one, wakes
    /// the flusher when the journal is full (at most `CLOCK_EVERY` entries late), and has
    /// the recording threads wait for it when the journal is far beyond that
    /// ([`journal_backlog`]).
    #[cold]
    #[inline(never)]
    fn now_and_then(&mut self) {
        self.tick = CLOCK_EVERY;
        let ns = self.start.elapsed().as_nanos() as u64;
        if ns.saturating_sub(self.last_time_ns) >= 1_000_000 {
            self.journal.time(ns);
            self.last_time_ns = ns;
        }
        if self.journal.len() >= JOURNAL_TARGET && !self.flusher_woken {
            self.flusher_woken = wake_flusher();
        }
        journal_backlog::note_len(self.journal.len());
    }

    /// Records an allocation (if it is at least `min_size`).
    #[inline(always)]
    pub(crate) fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32) {
        if !self.accepting || size < self.min_size {
            return;
        }
        self.clock();
        self.last_freed = 0;
        self.journal.alloc(domain, addr, size, stack);
    }

    /// Records a free of a block of `size` bytes (dropped like its allocation was).
    #[inline(always)]
    pub(crate) fn free(&mut self, domain: u32, addr: u64, size: u64) {
        if !self.accepting || size < self.min_size {
            return;
        }
        self.clock();
        self.last_freed = addr;
        self.journal.free((domain != 0).then_some(domain), addr);
    }

    /// Records a free of a block whose size is not known here (the recorder keeps no live
    /// table, or the block is not in it): the replay finds the block by its address, and
    /// ignores the free when it never saw the block (allocated before the capture began,
    /// or smaller than `min_size`).
    ///
    /// A free of the address freed last, with no allocation recorded since, is dropped:
    /// the same block handed on to another domain's free by the allocator beneath
    /// (pymalloc's large blocks end in PyMem_RawFree). Any other such free is of a block
    /// the capture never saw allocated, which the replay would ignore.
    #[inline(always)]
    pub(crate) fn free_unsized(&mut self, domain: u32, addr: u64) {
        if !self.accepting || addr == self.last_freed {
            return;
        }
        self.clock();
        self.last_freed = addr;
        self.journal.free((domain != 0).then_some(domain), addr);
    }

    /// [`free_unsized`](Self::free_unsized) of a Python-heap block when that needs no
    /// call: not the event that looks at the clock, room in the journal, and no wait for
    /// the flusher due after it. True when it was done (recorded, or dropped as
    /// `free_unsized` drops it); false when nothing changed.
    #[inline(always)]
    pub(crate) fn free_unsized_quickly(&mut self, addr: u64) -> bool {
        if !self.accepting
            || self.tick <= 1
            || !self.journal.has_room()
            || journal_backlog::is_full()
        {
            return false;
        }
        // The clock's tick stays above 0 and the journal does not grow: no call.
        self.free_unsized(0, addr);
        true
    }

    /// Hands the entries appended since the last call to the flusher: swaps them with
    /// `spare` (empty), and starts the next journal with the time. False (and `spare`
    /// left as it is) when there were none.
    pub(crate) fn take_journal(&mut self, spare: &mut Journal) -> bool {
        if self.journal.is_empty() {
            return false;
        }
        debug_assert!(spare.is_empty());
        self.taken_events += self.journal.events();
        std::mem::swap(&mut self.journal, spare);
        journal_backlog::taken();
        self.flusher_woken = false;
        let ns = self.start.elapsed().as_nanos() as u64;
        self.journal.time(ns);
        self.last_time_ns = ns;
        true
    }

    fn intern_string(&mut self, value: &str) -> u32 {
        if let Some(id) = self.strings.get(value) {
            return *id;
        }
        let id = self.strings.len() as u32 + 1;
        self.journal.string(id, value);
        self.strings.insert(value.to_owned(), id);
        id
    }

    fn next_frame_id(&self) -> u32 {
        (self.frames.len() + self.native_frames.len()) as u32 + 1
    }

    fn intern_frame(&mut self, filename: &str, name: &str, line: u32) -> u32 {
        let key = (self.intern_string(filename), self.intern_string(name), line);
        if let Some(id) = self.frames.get(&key) {
            return *id;
        }
        let id = self.next_frame_id();
        self.journal.frame(id, key.0, key.1, key.2);
        self.frames.insert(key, id);
        id
    }
}

impl CaptureSink {
    /// The frame id of the native frame at `ip` in `module` (None: in no known module),
    /// writing the Module and NativeFrame records the first time.
    fn intern_native_frame(&mut self, ip: u64, module: Option<&LoadedModule>) -> u32 {
        if let Some(id) = self.native_frames.get(&ip) {
            return *id;
        }
        let (module_id, offset) = match module {
            Some(m) => (self.intern_module(m), ip.wrapping_sub(m.base)),
            None => (0, ip),
        };
        let id = self.next_frame_id();
        self.journal.native_frame(id, module_id, offset);
        self.native_frames.insert(ip, id);
        id
    }

    fn intern_module(&mut self, m: &LoadedModule) -> u32 {
        let key = (m.base, m.path.clone());
        if let Some(id) = self.modules.get(&key) {
            return *id;
        }
        let id = self.modules.len() as u32 + 1;
        let segments: Vec<(u64, u64)> = m.segments.iter().map(|s| (s.0, s.1)).collect();
        self.journal
            .module(id, &m.path, m.base, &m.build_id, &segments);
        self.modules.insert(key, id);
        id
    }
}

/// A stack node's innermost frame, resolved.
pub(crate) enum Resolved {
    /// File, function name, line.
    Python(String, String, u32),
    /// Return address, and the loaded object holding it.
    Native(u64, Option<LoadedModule>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::flusher_wake::posted;

    /// Allocations of 64 bytes at distinct addresses until the journal holds
    /// `JOURNAL_TARGET` entries, then `extra` more; returns how many.
    fn fill(sink: &mut CaptureSink, next: &mut u64, extra: usize) -> u64 {
        let mut made = 0;
        let mut alloc = |sink: &mut CaptureSink| {
            sink.alloc(0, *next, 64, 1);
            *next += 0x1_0000;
            made += 1;
        };
        while sink.journal.len() < JOURNAL_TARGET {
            alloc(sink);
        }
        for _ in 0..extra {
            alloc(sink);
        }
        made
    }

    #[test]
    fn a_full_journal_wakes_the_flusher_once() {
        let mut sink = CaptureSink::new(0);
        let mut next = 0x10_0000;
        let before = posted();
        let first = fill(&mut sink, &mut next, 10_000);
        assert_eq!(posted() - before, 1, "one wake-up per full journal");
        let mut spare = Journal::default();
        assert!(sink.take_journal(&mut spare));
        assert_eq!(spare.events(), first);
        let second = fill(&mut sink, &mut next, 10_000);
        assert_eq!(posted() - before, 2, "the next journal wakes it again");
        assert_eq!(sink.events(), first + second);
    }

    /// Frees as the free hook's quick path makes them, with `free_unsized` where it
    /// declines: what `free_unsized` alone records, and a decline at each look at the
    /// clock (the quick path makes no call).
    #[test]
    fn quick_frees_record_what_free_unsized_records() {
        let mut quick = CaptureSink::new(0);
        let mut plain = CaptureSink::new(0);
        let mut declined = 0;
        for i in 0..5_000u64 {
            let addr = 0x10_0000 + (i % 7) * 0x40;
            if i % 3 == 0 {
                quick.alloc(0, addr, 32, 1);
                plain.alloc(0, addr, 32, 1);
            }
            // Every other address freed twice in a row: both drop the repeat.
            for _ in 0..=(i % 2) {
                let tick = quick.tick;
                if !quick.free_unsized_quickly(addr) {
                    assert_eq!(tick, 1, "a decline where the clock is looked at only");
                    declined += 1;
                    quick.free_unsized(0, addr);
                }
                plain.free_unsized(0, addr);
            }
        }
        assert_eq!(quick.events(), plain.events());
        assert!(quick.events() < 5_000 * 2, "repeats were dropped");
        assert_eq!(
            (quick.tick, quick.last_freed),
            (plain.tick, plain.last_freed)
        );
        assert!(declined > 5, "{declined} declines");
        quick.stop_accepting();
        assert!(!quick.free_unsized_quickly(0x99), "not once stopping began");
    }

    #[test]
    fn a_quick_free_never_grows_the_journal() {
        let mut sink = CaptureSink::with_journal(0, Journal::with_capacity(64));
        let mut next = 0x10_0000;
        while sink.journal.has_room() {
            sink.alloc(0, next, 64, 1);
            next += 0x40;
        }
        let capacity = sink.journal.capacity();
        assert!(!sink.free_unsized_quickly(0x10_0000));
        assert_eq!(sink.journal.capacity(), capacity);
        sink.free_unsized(0, 0x10_0000); // the general path grows it
        assert!(sink.journal.capacity() > capacity);
    }
}
