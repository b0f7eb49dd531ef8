//! The large buffers of a capture (two journals of about 800 KiB and the block encoder's
//! 1.1 MiB), kept from one capture to the next while captures follow one another (the
//! pytest plugin's capture per test) instead of allocated and freed at each: each of those
//! made the C heap grow and shrink (`brk`, page faults, TLB shootdowns across the threads),
//! about a third of a tiny test's cost (benchmarks/HISTORY.md, section 49).
//!
//! Only `try_lock` touches the store: a thread that finds it locked (or a forked child
//! whose parent forked while another thread held it) allocates or frees as before.

use std::sync::Mutex;

use memtape_core::capture::{BlockEncoder, Journal};

use crate::sinks::capture_sink::JOURNAL_CAPACITY;

/// At most this many journals are kept: the sink's, the flusher's, and the last one a
/// stop takes.
const JOURNALS_KEPT: usize = 3;

struct Spares {
    /// False: nothing is kept (no captures in a series).
    keeping: bool,
    journals: Vec<Journal>,
    encoder: Option<BlockEncoder>,
}

static SPARES: Mutex<Spares> = Mutex::new(Spares {
    keeping: false,
    journals: Vec::new(),
    encoder: None,
});

/// Keeps the buffers given back from now on (`on`), or drops those kept and keeps none.
pub(crate) fn keep(on: bool) {
    let dropped = SPARES.try_lock().ok().map(|mut spares| {
        spares.keeping = on;
        if on {
            (Vec::new(), None)
        } else {
            (std::mem::take(&mut spares.journals), spares.encoder.take())
        }
    });
    drop(dropped); // freed outside the lock
}

/// An empty journal with room for a capture's journal target: a kept one, or a new one.
pub(crate) fn journal() -> Journal {
    SPARES
        .try_lock()
        .ok()
        .and_then(|mut spares| spares.journals.pop())
        .unwrap_or_else(|| Journal::with_capacity(JOURNAL_CAPACITY))
}

/// Gives `journal` back for the next capture (emptied), or frees it when nothing is kept.
pub(crate) fn give_journal(mut journal: Journal) {
    if journal.capacity() < JOURNAL_CAPACITY {
        return;
    }
    journal.clear();
    if let Ok(mut spares) = SPARES.try_lock() {
        if spares.keeping && spares.journals.len() < JOURNALS_KEPT {
            spares.journals.push(journal);
        }
    }
}

/// A kept block encoder, if there is one.
pub(crate) fn encoder() -> Option<BlockEncoder> {
    SPARES
        .try_lock()
        .ok()
        .and_then(|mut spares| spares.encoder.take())
}

/// Gives `encoder` back for the next capture's writer, or frees it when nothing is kept.
pub(crate) fn give_encoder(encoder: BlockEncoder) {
    if let Ok(mut spares) = SPARES.try_lock() {
        if spares.keeping && spares.encoder.is_none() {
            spares.encoder = Some(encoder);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_kept_only_while_keeping_and_come_back_empty() {
        keep(false);
        let mut j = journal();
        j.time(5);
        give_journal(j);
        assert!(SPARES.lock().unwrap().journals.is_empty(), "not keeping");
        keep(true);
        let mut j = journal();
        j.time(5);
        let at = j.capacity();
        give_journal(j);
        give_journal(Journal::default()); // too small to keep
        let back = journal();
        assert!(back.is_empty());
        assert_eq!(back.capacity(), at);
        give_journal(back);
        for _ in 0..5 {
            give_journal(Journal::with_capacity(JOURNAL_CAPACITY));
        }
        assert_eq!(SPARES.lock().unwrap().journals.len(), JOURNALS_KEPT);
        give_encoder(BlockEncoder::with_capacity(64));
        assert!(encoder().is_some());
        assert!(encoder().is_none());
        give_encoder(BlockEncoder::new());
        keep(false);
        assert!(SPARES.lock().unwrap().journals.is_empty());
        assert!(encoder().is_none());
    }
}
