//! Keeps the last N events (a ring buffer), in order.

use crate::event::Event;

/// The last `capacity` events recorded, oldest first; older ones are dropped.
#[derive(Debug, Clone)]
pub struct EventRing {
    events: Vec<Event>,
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
        self.events.capacity() * std::mem::size_of::<Event>()
    }

    /// Appends an event, dropping the oldest when full. Never fails: if memory for the
    /// ring cannot be had, the oldest event is overwritten early.
    ///
    /// Times follow the ring's order: an event whose time is earlier than the one before
    /// it (clocks read by threads racing for the recorder, or a clock stepped back) is
    /// kept with the earlier event's time.
    #[inline(always)]
    pub fn push(&mut self, mut event: Event) {
        self.pushed += 1;
        event.time_ns = event.time_ns.max(self.last_time);
        self.last_time = event.time_ns;
        // Full (the usual case on a long run): overwrite the oldest, no division.
        if self.events.len() == self.capacity {
            self.overwrite_oldest(event);
            return;
        }
        if self.events.try_reserve(1).is_ok() {
            self.events.push(event);
            return;
        }
        if self.events.is_empty() {
            return;
        }
        // Out of memory: behave as if full at the current length.
        self.capacity = self.events.len();
        self.overwrite_oldest(event);
    }

    #[inline(always)]
    fn overwrite_oldest(&mut self, event: Event) {
        if let Some(slot) = self.events.get_mut(self.head) {
            *slot = event;
        }
        self.head += 1;
        if self.head == self.events.len() {
            self.head = 0;
        }
    }

    /// The kept events, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Event> + '_ {
        let (newer, older) = self.events.split_at(self.head);
        older.iter().chain(newer.iter())
    }

    /// Appends the kept events, oldest first, to `events` (two block copies).
    pub fn copy_into(&self, events: &mut Vec<Event>) {
        let (newer, older) = self.events.split_at(self.head);
        events.reserve(self.events.len());
        events.extend_from_slice(older);
        events.extend_from_slice(newer);
    }

    /// Forgets every event (the capacity stays).
    pub fn clear(&mut self) {
        self.events = Vec::new();
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
