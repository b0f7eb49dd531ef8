//! An event as the event ring keeps it: 32 bytes, two to a cache line, where an
//! [`Event`] takes 64.
//!
//! The ring is written once per event and read only when the events are listed, so its
//! entry's size is what a kept event costs in memory, and what each event's store pulls
//! through the caches (benchmarks/HISTORY.md section 36: half the last-level misses in
//! simulation; no wall-time change measurable on the developers' VM). An event fits the narrow entry
//! when its requested size is its size, its device the host's, its stream 0, its size
//! under 1 TiB and its thread number under 2^20: every Python-heap and native event in
//! practice. Any other event keeps those fields in a [`Wide`] entry that the ring queues
//! beside its narrow entries, in the same order.

use crate::event::{Action, Event, HOST_DEVICE};
use crate::stack_table::StackId;

/// Bits of [`Entry::word`] that hold the size.
const SIZE_BITS: u32 = 40;
/// Bits of [`Entry::word`] above the size that hold the thread number.
const THREAD_BITS: u32 = 20;
/// Where the action's code starts in [`Entry::word`] (4 bits).
const ACTION_SHIFT: u32 = SIZE_BITS + THREAD_BITS;
/// The code in the action's bits of an entry whose fields are in a [`Wide`] entry (no
/// [`Action`] has it).
const WIDE_CODE: u64 = 0xf;

/// One event in the ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Entry {
    addr: u64,
    time_ns: u64,
    /// The size (low [`SIZE_BITS`]), the thread number (next [`THREAD_BITS`]) and the
    /// action's code (top 4 bits; [`WIDE_CODE`]: all three are in the wide entry).
    word: u64,
    stack: StackId,
    op: u32,
}

/// The fields of an event that does not fit an [`Entry`] alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wide {
    action: Action,
    size: u64,
    requested_size: u64,
    device: i32,
    stream: u64,
    thread: u32,
}

impl Entry {
    /// The entry of `e`, and its wide fields when they do not fit the entry.
    #[inline(always)]
    pub(crate) fn pack(e: &Event) -> (Self, Option<Wide>) {
        let narrow = (e.size >> SIZE_BITS)
            | (u64::from(e.thread) >> THREAD_BITS)
            | (e.requested_size ^ e.size)
            | e.stream
            | u64::from((e.device ^ HOST_DEVICE) as u32)
            == 0;
        if narrow {
            let word = e.size
                | (u64::from(e.thread) << SIZE_BITS)
                | (u64::from(e.action as u8) << ACTION_SHIFT);
            return (Self::new(e, word), None);
        }
        let wide = Wide {
            action: e.action,
            size: e.size,
            requested_size: e.requested_size,
            device: e.device,
            stream: e.stream,
            thread: e.thread,
        };
        (Self::new(e, WIDE_CODE << ACTION_SHIFT), Some(wide))
    }

    #[inline(always)]
    fn new(e: &Event, word: u64) -> Self {
        Self {
            addr: e.addr,
            time_ns: e.time_ns,
            word,
            stack: e.stack,
            op: e.op,
        }
    }

    /// Whether the entry's size, thread and action are in a [`Wide`] entry.
    #[inline(always)]
    pub(crate) fn is_wide(&self) -> bool {
        self.word >> ACTION_SHIFT == WIDE_CODE
    }

    /// The event again: `wide` must be the entry's wide fields when [`Entry::is_wide`].
    /// `None` for a wide entry without them, which [`Entry::pack`] never makes.
    pub(crate) fn unpack(&self, wide: Option<&Wide>) -> Option<Event> {
        let mut e = Event {
            action: Action::Alloc,
            addr: self.addr,
            size: 0,
            requested_size: 0,
            device: HOST_DEVICE,
            stream: 0,
            thread: 0,
            time_ns: self.time_ns,
            stack: self.stack,
            op: self.op,
        };
        if self.is_wide() {
            let w = wide?;
            e.action = w.action;
            e.size = w.size;
            e.requested_size = w.requested_size;
            e.device = w.device;
            e.stream = w.stream;
            e.thread = w.thread;
        } else {
            e.action = Action::from_code((self.word >> ACTION_SHIFT) as u8)?;
            e.size = self.word & ((1 << SIZE_BITS) - 1);
            e.requested_size = e.size;
            e.thread = ((self.word >> SIZE_BITS) & ((1 << THREAD_BITS) - 1)) as u32;
        }
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heap(action: Action, size: u64, thread: u32) -> Event {
        Event {
            action,
            addr: 0x7f00_dead_bee0,
            size,
            requested_size: size,
            device: HOST_DEVICE,
            stream: 0,
            thread,
            time_ns: u64::MAX - 7,
            stack: StackId::MAX,
            op: u32::MAX,
        }
    }

    #[test]
    fn an_entry_is_half_an_event() {
        assert_eq!(std::mem::size_of::<Entry>(), 32);
        assert_eq!(std::mem::size_of::<Event>(), 64);
    }

    #[test]
    fn heap_events_fit_the_narrow_entry_and_come_back_whole() {
        for action in Action::ALL {
            for (size, thread) in [(0, 0), (1, 1), ((1 << 40) - 1, (1 << 20) - 1)] {
                let e = heap(action, size, thread);
                let (entry, wide) = Entry::pack(&e);
                assert_eq!(wide, None);
                assert!(!entry.is_wide());
                assert_eq!(entry.unpack(None), Some(e));
            }
        }
    }

    #[test]
    fn any_field_too_large_for_the_entry_goes_wide() {
        let base = heap(Action::AllocNew, 4096, 3);
        let cases = [
            Event {
                size: 1 << 40,
                requested_size: 1 << 40,
                ..base
            },
            Event {
                thread: 1 << 20,
                ..base
            },
            Event {
                requested_size: 4000,
                ..base
            },
            Event { device: 0, ..base },
            Event { stream: 2, ..base },
        ];
        for e in cases {
            let (entry, wide) = Entry::pack(&e);
            assert!(entry.is_wide(), "{e:?}");
            let wide = wide.expect("wide fields");
            assert_eq!(entry.unpack(Some(&wide)), Some(e));
            assert_eq!(entry.unpack(None), None);
        }
    }
}
