//! Keeps the last N events (a ring buffer), in order.

use std::collections::VecDeque;

use crate::event::Event;
use crate::ring_entry::{Entry, Wide};

/// The last `capacity` events recorded, oldest first; older ones are dropped.
#[derive(Debug, Clone)]
pub struct EventRing {
    /// 32 bytes an event ([`Entry`]).
    events: Vec<Entry>,
    /// The wide fields of the kept events that have them, oldest first, each with its
    /// event's slot in `events`: the ring learns that it overwrites a wide event from this
    /// queue's front, without reading the slot it writes.
    wide: VecDeque<(usize, Wide)>,
    capacity: usize,
    /// Index of the oldest event once the ring is full.
    head: usize,
    /// Events ever pushed (kept and dropped).
    pushed: u64,
    /// The time of the newest event: no event is kept with an earlier one.
    last_time: u64,
}

impl EventRing {
    /// A ring keeping at most `capacity` events (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            events: Vec::new(),
            wide: VecDeque::new(),
            capacity,
            head: 0,
            pushed: 0,
            last_time: 0,
        }
    }

    /// Capacity (the most events kept).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Events kept now.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when no event is kept.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Events ever pushed, including those dropped from the front.
    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    /// Events dropped because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.pushed - self.events.len() as u64
    }

    /// Bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.events.capacity() * std::mem::size_of::<Entry>()
            + self.wide.capacity() * std::mem::size_of::<(usize, Wide)>()
    }

    /// Appends an event, dropping the oldest when full. Never fails: if memory for the
    /// ring cannot be had, the oldest event is overwritten early; if memory for an event's
    /// wide fields cannot be had, the event is dropped (counted in [`dropped`](Self::dropped)).
    ///
    /// Times follow the ring's order: an event whose time is earlier than the one before
    /// it (clocks read by threads racing for the recorder, or a clock stepped back) is
    /// kept with the earlier event's time.
    #[inline(always)]
    pub fn push(&mut self, mut event: Event) {
        self.pushed += 1;
        event.time_ns = event.time_ns.max(self.last_time);
        self.last_time = event.time_ns;
        match Entry::pack(&event) {
            (entry, None) => {
                self.place(entry);
            }
            (entry, Some(wide)) => self.push_wide(entry, wide),
        }
    }

    /// [`push`](Self::push) of an event with wide fields.
    #[cold]
    fn push_wide(&mut self, entry: Entry, wide: Wide) {
        if self.wide.try_reserve(1).is_err() {
            return;
        }
        if let Some(slot) = self.place(entry) {
            self.wide.push_back((slot, wide));
        }
    }

    /// Stores `entry` as the newest; its slot, or `None` when there was no memory for it.
    #[inline(always)]
    fn place(&mut self, entry: Entry) -> Option<usize> {
        // Full (the usual case on a long run): overwrite the oldest, no division.
        if self.events.len() == self.capacity {
            return Some(self.overwrite_oldest(entry));
        }
        if self.events.try_reserve(1).is_ok() {
            self.events.push(entry);
            return Some(self.events.len() - 1);
        }
        if self.events.is_empty() {
            return None;
        }
        // Out of memory: behave as if full at the current length.
        self.capacity = self.events.len();
        Some(self.overwrite_oldest(entry))
    }

    /// Writes `entry` over the oldest event; returns its slot.
    #[inline(always)]
    fn overwrite_oldest(&mut self, entry: Entry) -> usize {
        let at = self.head;
        // The oldest wide event is the oldest event when it is in the slot written.
        if self.wide.front().is_some_and(|w| w.0 == at) {
            self.wide.pop_front();
        }
        if let Some(slot) = self.events.get_mut(at) {
            *slot = entry;
        }
        self.head += 1;
        if self.head == self.events.len() {
            self.head = 0;
        }
        at
    }

    /// Where the push `ahead` pushes from now will write (`ahead` 0: the next), while the
    /// ring is full and longer than `ahead`: an address to prefetch, so that the store of
    /// a long ring's slot finds its cache line loaded. `None` otherwise.
    #[inline(always)]
    pub fn slot_ahead(&self, ahead: usize) -> Option<*const u8> {
        let len = self.events.len();
        if len != self.capacity || ahead >= len {
            return None;
        }
        let at = self.head + ahead;
        let at = if at >= len { at - len } else { at };
        self.events
            .get(at)
            .map(|slot| std::ptr::from_ref(slot).cast())
    }

    /// The kept events, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        let (newer, older) = self.events.split_at(self.head);
        let mut wide = self.wide.iter();
        older.iter().chain(newer).filter_map(move |e| {
            let w = if e.is_wide() {
                wide.next().map(|(_, w)| w)
            } else {
                None
            };
            e.unpack(w)
        })
    }

    /// Appends the kept events, oldest first, to `events`.
    pub fn copy_into(&self, events: &mut Vec<Event>) {
        events.reserve(self.events.len());
        events.extend(self.iter());
    }

    /// Forgets every event (the capacity stays).
    pub fn clear(&mut self) {
        self.events = Vec::new();
        self.wide = VecDeque::new();
        self.head = 0;
        self.pushed = 0;
        self.last_time = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Action, HOST_DEVICE};

    fn ev(addr: u64) -> Event {
        Event {
            action: Action::Alloc,
            addr,
            size: 1,
            requested_size: 1,
            device: HOST_DEVICE,
            stream: 0,
            thread: 0,
            time_ns: addr,
            stack: 0,
            op: 0,
        }
    }

    #[test]
    fn keeps_exactly_the_last_events_in_order() {
        let mut r = EventRing::new(4);
        for a in 1..=3 {
            r.push(ev(a));
        }
        assert_eq!(r.iter().map(|e| e.addr).collect::<Vec<_>>(), vec![1, 2, 3]);
        for a in 4..=10 {
            r.push(ev(a));
        }
        assert_eq!(
            r.iter().map(|e| e.addr).collect::<Vec<_>>(),
            vec![7, 8, 9, 10]
        );
        assert_eq!((r.len(), r.pushed(), r.dropped()), (4, 10, 6));
        let mut copied = vec![ev(1)];
        r.copy_into(&mut copied);
        let copied: Vec<u64> = copied.iter().map(|e| e.addr).collect();
        assert_eq!(copied, vec![1, 7, 8, 9, 10]);
        r.clear();
        assert!(r.is_empty());
        r.push(ev(11));
        assert_eq!(r.iter().map(|e| e.addr).collect::<Vec<_>>(), vec![11]);
    }

    #[test]
    fn the_slot_ahead_is_the_one_that_push_writes() {
        let slot_of = |r: &EventRing, ahead: usize| {
            r.slot_ahead(ahead)
                .map(|p| (p as usize - r.events.as_ptr() as usize) / std::mem::size_of::<Entry>())
        };
        let mut r = EventRing::new(4);
        for a in 1..=3 {
            r.push(ev(a));
            assert_eq!(slot_of(&r, 0), None, "not full yet");
        }
        for a in 4..=13 {
            r.push(ev(a));
            assert_eq!(
                slot_of(&r, 4),
                None,
                "no slot is 4 pushes ahead in a ring of 4"
            );
            for ahead in 0..4 {
                let slot = slot_of(&r, ahead).expect("full");
                let mut later = r.clone();
                for b in 0..=ahead as u64 {
                    later.push(ev(100 + b));
                }
                let last = Entry::pack(&ev(100 + ahead as u64)).0;
                assert_eq!(later.events[slot], last, "push {a}, {ahead} ahead");
            }
        }
    }

    #[test]
    fn times_never_go_back_in_ring_order() {
        let mut r = EventRing::new(3);
        for t in [5, 3, 9, 8, 10] {
            r.push(Event {
                time_ns: t,
                ..ev(t)
            });
        }
        assert_eq!(
            r.iter().map(|e| (e.addr, e.time_ns)).collect::<Vec<_>>(),
            vec![(9, 9), (8, 9), (10, 10)]
        );
        r.clear();
        r.push(Event {
            time_ns: 1,
            ..ev(1)
        });
        assert_eq!(r.iter().next().map(|e| e.time_ns), Some(1));
    }

    #[test]
    fn wide_events_keep_their_place_as_the_ring_wraps() {
        // Every third event has a requested size of its own (a caching allocator's), so
        // its fields live in the wide queue; the ring wraps over both kinds many times.
        let event = |a: u64| Event {
            action: if a % 3 == 0 {
                Action::AllocReuse
            } else {
                Action::Free
            },
            requested_size: if a % 3 == 0 { 1 } else { 2 },
            size: 2,
            device: if a % 3 == 0 { 0 } else { HOST_DEVICE },
            thread: a as u32,
            ..ev(a)
        };
        let mut r = EventRing::new(5);
        for a in 1..=23 {
            r.push(event(a));
            let first = a.saturating_sub(4).max(1);
            let expected: Vec<Event> = (first..=a).map(event).collect();
            assert_eq!(r.iter().collect::<Vec<_>>(), expected);
            // No wide fields outlive their event.
            assert_eq!(r.wide.len(), (first..=a).filter(|x| x % 3 == 0).count());
        }
        let mut copied = Vec::new();
        r.copy_into(&mut copied);
        assert_eq!(copied, (19..=23).map(event).collect::<Vec<_>>());
        r.clear();
        assert!(r.wide.is_empty() && r.is_empty());
    }

    #[test]
    fn capacity_zero_means_one() {
        let mut r = EventRing::new(0);
        r.push(ev(1));
        r.push(ev(2));
        assert_eq!(r.iter().map(|e| e.addr).collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn action_names_round_trip() {
        for a in Action::ALL {
            assert_eq!(Action::from_name(a.name()), Some(a));
            assert_eq!(Action::from_code(a as u8), Some(a));
        }
        assert_eq!(Action::from_name("bogus"), None);
    }
}
