//! A Python-heap block's start and end as the recorder's tables and the capture sink see
//! them, shared by the general hooks ([`crate::intercept::hooks`]) and the repeat path
//! ([`crate::record::repeat_alloc`]), so that both record the same thing.
//!
//! The live table is kept only while something needs it ([`Recorder::keep_live`]); a
//! capture records a free by its address whether or not the table knows the block.

use memtape_core::{LiveEntry, StackId};

use crate::record::recorder::Recorder;

impl Recorder {
    /// Records the start of block `addr` of `size` bytes in `domain`, allocated at `stack`,
    /// in the live table (when kept) and the capture.
    #[inline(always)]
    pub(crate) fn begin_heap_block(&mut self, domain: u32, addr: u64, size: u64, stack: StackId) {
        if self.keep_live {
            // A full table drops this one trace; the traced program keeps running.
            let _ = self.live.insert(domain, addr, size, stack);
        }
        if let Some(sink) = self.capture.as_mut() {
            sink.alloc(domain, addr, size, stack);
        }
    }

    /// Records the end of block `addr` of the Python domain when that is quick: only the
    /// live table needs to know (no capture), or only a capture (no live table) and its
    /// journal takes the free without a call. True when it was done, as
    /// [`Recorder::end_heap_block`] would have done it; false when nothing changed.
    #[inline(always)]
    pub(crate) fn end_heap_block_quickly(&mut self, addr: u64) -> bool {
        if self.keep_live {
            return self.capture.is_none() && self.live.remove_small_quickly(addr);
        }
        self.capture
            .as_mut()
            .is_some_and(|sink| sink.free_unsized_quickly(addr))
    }

    /// Records the end of block `addr` in `domain` in the live table (when kept) and the
    /// capture; the block's entry when the live table knew it (what an event needs).
    #[inline(always)]
    pub(crate) fn end_heap_block(&mut self, domain: u32, addr: u64) -> Option<LiveEntry> {
        if !self.keep_live {
            if let Some(sink) = self.capture.as_mut() {
                sink.free_unsized(domain, addr);
            }
            return None;
        }
        let old = self.live.remove(domain, addr);
        if let Some(sink) = self.capture.as_mut() {
            match &old {
                Some(old) => sink.free(domain, old.addr, old.size),
                None => sink.free_unsized(domain, addr),
            }
        }
        old
    }
}
