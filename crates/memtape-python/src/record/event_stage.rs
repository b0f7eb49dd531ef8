//! The event recorder's events on their way to the ring: the hooks stage each event (and
//! the Python-heap block it begins or ends) in a batch under the recorder's lock, and the
//! ring and the blocks' table are kept by memtape's events thread on the other core
//! ([`crate::session::event_consumer`]), a batch at a time (HISTORY section 59).
//!
//! The staged batch keeps the order the recorder's lock gave the events, and a batch is
//! applied whole, after the batches before it: the ring reads the same as if each event
//! had been pushed where it was staged. Whoever reads the ring settles first
//! ([`settle`]): the recorder locked, the store locked (after the batch the events thread
//! may be applying), the batch handed over and the one being staged applied there.
//!
//! Locks: the recorder's, then the store's. The events thread takes the store's only, so
//! a hook holding the recorder may wait for the store and never the other way round.

use std::ops::{Deref, DerefMut};
use std::thread::Thread;

use memtape_core::{Action, Event, EventRing, LiveTable, StackId, HOST_DEVICE};

use crate::record::cache_hint;
use crate::record::spin_lock::{SpinGuard, SpinLock};

/// A staged batch is handed to the events thread once it holds this many events (1 MiB
/// of packed entries): each hand-over wakes that thread, a system call that costs the
/// staging thread as much as a thousand events (HISTORY section 59).
pub(crate) const BATCH: usize = 32 * 1024;

/// A staged batch that the events thread could not take (busy with the batch before, or
/// not scheduled) is applied by the staging thread itself once it holds this many: the
/// memory staging takes is bounded, and a recording goes on without the events thread.
pub(crate) const MOST_STAGED: usize = BATCH + BATCH / 2;

/// Room for staged events that do not pack ([`Packed`]): rare (an allocation attributed to
/// an op context, or of 512 MiB or more; a domain number past 2^29), so a batch that fills
/// it goes on at once instead of holding room for a whole batch of them.
const MOST_ASIDE: usize = 4 * 1024;

/// How many more events a staging thread stages after the store was busy before it
/// looks again: the events thread writes the line the store's lock is on at every event
/// it applies, and each look takes that line from it.
const LOOK_AGAIN: usize = 1024;

/// What a staged event asks of the store.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum StagedKind {
    /// The batch's next event kept aside ([`Batch::push`]) is kept as it is (a
    /// framework's, or native memory's).
    Push,
    /// A Python-heap block begins: the store's table learns it, and the event is kept.
    HeapAlloc,
    /// A Python-heap block ends: kept with the block's size when the table knows the
    /// block (a block recorded since the recording began), else dropped.
    HeapFree,
    /// [`StagedKind::HeapFree`] with the block's own stack (a realloc's old block).
    HeapFreeBlockStack,
}

/// A packed entry's kind, in its word's low bits: a [`StagedKind`], or this one, which
/// says the event is kept whole beside the packed entries ([`Batch::aside`]).
const ASIDE: u32 = 4;
const PUSH: u32 = StagedKind::Push as u32;
const HEAP_ALLOC: u32 = StagedKind::HeapAlloc as u32;
const HEAP_FREE: u32 = StagedKind::HeapFree as u32;
const HEAP_FREE_BLOCK_STACK: u32 = StagedKind::HeapFreeBlockStack as u32;
const KIND_BITS: u32 = 3;
/// The largest payload a packed entry's word holds (an allocation's size, a free's
/// domain).
const MOST_PAYLOAD: u64 = (u32::MAX >> KIND_BITS) as u64;

/// A staged event as a batch holds it, in 32 bytes: the commonest events (a Python-heap
/// block's allocation at its own stack, of less than 512 MiB; a free) packed, the size or
/// the domain in one word with the kind; any other kept whole aside, in order.
#[derive(Clone, Copy, Debug)]
struct Packed {
    addr: u64,
    ticks: u64,
    stack: StackId,
    op: u32,
    thread: u32,
    /// The kind in the low [`KIND_BITS`] bits, the payload above them.
    word: u32,
}

impl Packed {
    /// `staged` packed, when it fits.
    #[inline(always)]
    fn of(staged: &Staged) -> Option<Self> {
        let payload = match staged.kind {
            StagedKind::HeapAlloc
                if staged.domain == memtape_core::PYTHON_DOMAIN && staged.own == staged.stack =>
            {
                staged.size
            }
            StagedKind::HeapFree | StagedKind::HeapFreeBlockStack => u64::from(staged.domain),
            _ => return None,
        };
        if payload > MOST_PAYLOAD {
            return None;
        }
        Some(Self {
            addr: staged.addr,
            ticks: staged.ticks,
            stack: staged.stack,
            op: staged.op,
            thread: staged.thread,
            word: ((payload as u32) << KIND_BITS) | staged.kind as u32,
        })
    }

    /// An entry that stands for an event kept elsewhere (`kind`: [`PUSH`] or [`ASIDE`]).
    fn marker(kind: u32) -> Self {
        Self {
            addr: 0,
            ticks: 0,
            stack: 0,
            op: 0,
            thread: 0,
            word: kind,
        }
    }

    fn kind(&self) -> u32 {
        self.word & ((1 << KIND_BITS) - 1)
    }

    /// The staged event this packs (`kind`: one of the packed kinds).
    #[inline(always)]
    fn unpacked(&self, kind: StagedKind) -> Staged {
        let payload = u64::from(self.word >> KIND_BITS);
        let (domain, size) = match kind {
            StagedKind::HeapAlloc => (memtape_core::PYTHON_DOMAIN, payload),
            _ => (payload as u32, 0),
        };
        Staged {
            kind,
            domain,
            addr: self.addr,
            size,
            ticks: self.ticks,
            stack: self.stack,
            own: self.stack,
            op: self.op,
            thread: self.thread,
        }
    }
}

/// One staged Python-heap event as the hooks describe it (48 bytes; a batch holds it
/// packed in 32, [`Packed`], when it can): the host device, no stream, the size asked for
/// the size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Staged {
    pub(crate) kind: StagedKind,
    /// The block's domain (the table's key with the address).
    pub(crate) domain: u32,
    pub(crate) addr: u64,
    /// The block's size (an allocation's; a free's is the table's).
    pub(crate) size: u64,
    /// When, in [`crate::record::event_clock`] ticks.
    pub(crate) ticks: u64,
    /// The stack the event is attributed to.
    pub(crate) stack: StackId,
    /// The stack the block was allocated at, kept in the table (an allocation's event
    /// may be attributed to an op context's stack instead).
    pub(crate) own: StackId,
    pub(crate) op: u32,
    pub(crate) thread: u32,
}

impl Staged {
    /// The event this stands for, for a block of `size` bytes.
    #[inline(always)]
    fn event(&self, action: Action, size: u64) -> Event {
        Event {
            action,
            addr: self.addr,
            size,
            requested_size: size,
            device: HOST_DEVICE,
            stream: 0,
            thread: self.thread,
            time_ns: self.ticks,
            stack: self.stack,
            op: self.op,
        }
    }
}

/// Staged events in order, with the events kept as they are beside them.
#[derive(Default)]
pub(crate) struct Batch {
    staged: Vec<Packed>,
    /// The [`StagedKind::Push`] events' own, in order.
    pushed: Vec<Event>,
    /// The staged events that did not pack, in order.
    aside: Vec<Staged>,
}

impl Batch {
    const fn new() -> Self {
        Self {
            staged: Vec::new(),
            pushed: Vec::new(),
            aside: Vec::new(),
        }
    }

    /// Room for [`MOST_STAGED`] events, so that staging never allocates inside a hook
    /// (without it, the batch grows when needed). Only the pages written are mapped.
    fn reserve(&mut self) {
        let _ = self.staged.try_reserve(MOST_STAGED);
        let _ = self.pushed.try_reserve(MOST_STAGED);
        let _ = self.aside.try_reserve(MOST_ASIDE);
    }

    /// Whether another staged event that does not pack fits the room reserved.
    fn aside_full(&self) -> bool {
        self.aside.len() == self.aside.capacity()
    }

    /// Whether another event kept as it is fits the room reserved.
    fn pushed_full(&self) -> bool {
        self.pushed.len() == self.pushed.capacity()
    }

    fn len(&self) -> usize {
        self.staged.len()
    }

    fn is_empty(&self) -> bool {
        self.staged.is_empty()
    }

    fn clear(&mut self) {
        self.staged.clear();
        self.pushed.clear();
        self.aside.clear();
    }

    fn memory_bytes(&self) -> usize {
        self.staged.capacity() * std::mem::size_of::<Packed>()
            + self.pushed.capacity() * std::mem::size_of::<Event>()
            + self.aside.capacity() * std::mem::size_of::<Staged>()
    }

    /// Stages `staged`, packed or aside (the tests' way; [`Staging::stage`] checks the
    /// room aside first).
    #[cfg(test)]
    fn stage(&mut self, staged: Staged) {
        match Packed::of(&staged) {
            Some(packed) => self.stage_packed(packed),
            None => self.stage_aside(staged),
        }
    }

    #[cold]
    fn stage_aside(&mut self, staged: Staged) {
        self.aside.push(staged);
        self.staged.push(Packed::marker(ASIDE));
    }

    #[inline(always)]
    fn stage_packed(&mut self, staged: Packed) {
        self.staged.push(staged);
        // The slot a later event will write, loaded for writing now: the events thread
        // read it last, from the other core.
        if let Some(slot) = self
            .staged
            .spare_capacity_mut()
            .get(cache_hint::STAGE_AHEAD)
        {
            cache_hint::prefetch(slot.as_ptr().cast());
        }
    }

    fn push(&mut self, event: Event) {
        self.pushed.push(event);
        self.staged.push(Packed::marker(PUSH));
    }
}

/// The kept events and what keeping them needs, behind [`STORE`].
pub(crate) struct EventStore {
    pub(crate) ring: EventRing,
    /// The Python-heap blocks recorded since the recording began: a free's size.
    live: LiveTable,
    /// A batch handed over and not applied yet (empty when none), kept with its room.
    inbox: Batch,
    /// The events thread of this process, once started.
    consumer: Option<Thread>,
}

/// The event store, made by the first recording; only the recorder's holder or the
/// events thread lock it. On cache lines of its own: the events thread writes it at
/// every event it applies, and the recorder's lock, which every hook takes, may follow it
/// in memory.
static STORE: OwnLines<SpinLock<Option<EventStore>>> = OwnLines(SpinLock::new(None));

/// A value on cache lines of its own (two lines: the pair a neighbour's prefetcher
/// fetches together).
#[repr(align(128))]
struct OwnLines<T>(T);

impl<T> Deref for OwnLines<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The store, locked.
pub(crate) struct StoreGuard(SpinGuard<'static, Option<EventStore>>);

impl Deref for StoreGuard {
    type Target = EventStore;
    fn deref(&self) -> &EventStore {
        match self.0.as_ref() {
            Some(store) => store,
            None => unreachable!("a StoreGuard is made only for a store that exists"),
        }
    }
}

impl DerefMut for StoreGuard {
    fn deref_mut(&mut self) -> &mut EventStore {
        match self.0.as_mut() {
            Some(store) => store,
            None => unreachable!("a StoreGuard is made only for a store that exists"),
        }
    }
}

/// Wraps a locked store, making it first if no recording has yet.
fn made(mut guard: SpinGuard<'static, Option<EventStore>>) -> StoreGuard {
    guard.get_or_insert_with(EventStore::new);
    StoreGuard(guard)
}

/// The store, locked (made if needed).
pub(crate) fn lock_store() -> StoreGuard {
    made(STORE.lock())
}

impl EventStore {
    fn new() -> Self {
        Self {
            ring: EventRing::new(1),
            live: LiveTable::new(),
            inbox: Batch::new(),
            consumer: None,
        }
    }

    /// Starts a new recording keeping at most `max_entries` events; earlier events and
    /// blocks are forgotten.
    pub(crate) fn restart(&mut self, max_entries: usize) {
        self.ring = EventRing::new(max_entries);
        self.live = LiveTable::new();
        self.inbox.clear();
        // The batch swapped out for it is staged into next.
        self.inbox.reserve();
    }

    /// A recording stopped, with every event applied: the blocks' table and the room for
    /// batches are let go; the kept events stay.
    pub(crate) fn stopped(&mut self) {
        self.live = LiveTable::new();
        self.inbox = Batch::new();
    }

    /// Bytes held.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.ring.memory_bytes() + self.live.memory_bytes() + self.inbox.memory_bytes()
    }

    /// The events thread to hand batches to, when this process has one.
    pub(crate) fn set_consumer(&mut self, consumer: Option<Thread>) {
        self.consumer = consumer;
    }

    /// Whether this process has an events thread.
    pub(crate) fn has_consumer(&self) -> bool {
        self.consumer.is_some()
    }

    /// Applies the batch handed over, if any.
    pub(crate) fn apply_inbox(&mut self) {
        let mut inbox = std::mem::take(&mut self.inbox);
        self.apply(&mut inbox);
        self.inbox = inbox;
    }

    /// Applies `batch` in order, leaving it empty (its room kept).
    pub(crate) fn apply(&mut self, batch: &mut Batch) {
        let mut pushed = batch.pushed.drain(..);
        let mut aside = batch.aside.drain(..);
        for packed in batch.staged.drain(..) {
            let staged = match packed.kind() {
                HEAP_ALLOC => packed.unpacked(StagedKind::HeapAlloc),
                HEAP_FREE => packed.unpacked(StagedKind::HeapFree),
                HEAP_FREE_BLOCK_STACK => packed.unpacked(StagedKind::HeapFreeBlockStack),
                ASIDE => match aside.next() {
                    Some(staged) => staged,
                    None => continue,
                },
                PUSH => {
                    if let Some(event) = pushed.next() {
                        self.push(event);
                    }
                    continue;
                }
                // No other kind is ever packed.
                _ => continue,
            };
            match staged.kind {
                StagedKind::Push => {}
                StagedKind::HeapAlloc => {
                    // A full table drops this one block (its free then has no event); the
                    // traced program keeps running.
                    let _ = self
                        .live
                        .insert(staged.domain, staged.addr, staged.size, staged.own);
                    self.push(staged.event(Action::Alloc, staged.size));
                }
                StagedKind::HeapFree | StagedKind::HeapFreeBlockStack => {
                    let Some(old) = self.live.remove(staged.domain, staged.addr) else {
                        continue;
                    };
                    let mut event = staged.event(Action::Free, old.size);
                    if staged.kind == StagedKind::HeapFreeBlockStack {
                        event.stack = old.stack;
                    }
                    self.push(event);
                }
            }
        }
    }

    /// Keeps `event`, then starts loading the slot a later push will write: in a ring
    /// larger than the cache each store would otherwise wait for its line.
    #[inline(always)]
    fn push(&mut self, event: Event) {
        self.ring.push(event);
        if let Some(slot) = self.ring.slot_ahead(cache_hint::RING_AHEAD) {
            cache_hint::prefetch(slot);
        }
    }

    /// Hands `batch` to the events thread when it has none waiting; true when it was
    /// (`batch` then holds the emptied room of the one before).
    fn hand_over(&mut self, batch: &mut Batch) -> bool {
        let Some(consumer) = self.consumer.as_ref() else {
            return false;
        };
        if !self.inbox.is_empty() {
            return false;
        }
        std::mem::swap(&mut self.inbox, batch);
        consumer.unpark();
        true
    }
}

/// The events staged since the last hand-over, in the recorder (under its lock).
pub(crate) struct Staging {
    batch: Batch,
    /// The batch's length at which the store is looked at next ([`BATCH`], or later
    /// after a look found it busy).
    look_at: usize,
}

impl Staging {
    /// An empty batch with room for [`MOST_STAGED`] events, so that staging never
    /// allocates inside a hook.
    pub(crate) fn new() -> Self {
        let mut batch = Batch::new();
        batch.reserve();
        Self {
            batch,
            look_at: BATCH,
        }
    }

    /// Stages a Python-heap event; a full batch goes to the events thread, or is applied
    /// here.
    #[inline(always)]
    pub(crate) fn stage(&mut self, staged: Staged) {
        match Packed::of(&staged) {
            Some(packed) => self.batch.stage_packed(packed),
            None => {
                if self.batch.aside_full() {
                    self.batch_full(true);
                }
                self.batch.stage_aside(staged);
            }
        }
        if self.batch.len() >= self.look_at {
            self.batch_full(false);
        }
    }

    /// Stages `event`, to be kept as it is. When its room is used up (a batch of nothing
    /// else), the batch goes on at once, so that the room never grows inside a hook.
    pub(crate) fn push(&mut self, event: Event) {
        if self.batch.pushed_full() {
            self.batch_full(true);
        }
        self.batch.push(event);
        if self.batch.len() >= self.look_at {
            self.batch_full(false);
        }
    }

    /// A batch of [`BATCH`] events or more: handed over when the store is free and the
    /// events thread has taken the one before; applied here, after the one handed over,
    /// when there is no events thread or the batch reached [`MOST_STAGED`] (or `now`).
    ///
    /// The store is never waited for by the thread that holds it: a signal handler's
    /// hook that interrupted a thread holding the store stages on.
    #[cold]
    #[inline(never)]
    fn batch_full(&mut self, now: bool) {
        let most = now || self.batch.len() >= MOST_STAGED;
        let store = match STORE.try_lock() {
            Some(store) => Some(store),
            None if most => STORE.lock_unless_held_here(),
            None => None,
        };
        let Some(store) = store else {
            // The events thread is applying the batch before: stage on, and look again
            // a little later.
            self.look_at = self.batch.len() + LOOK_AGAIN;
            return;
        };
        let mut store = made(store);
        self.look_at = BATCH;
        if store.hand_over(&mut self.batch) {
            return;
        }
        if most || !store.has_consumer() {
            store.apply_inbox();
            store.apply(&mut self.batch);
        } else {
            self.look_at = self.batch.len() + LOOK_AGAIN;
        }
    }

    /// Bytes held.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.batch.memory_bytes()
    }

    /// Applies every staged event (the batch handed over first) and returns the store,
    /// locked: what every reader of the ring does first.
    pub(crate) fn settle(&mut self) -> StoreGuard {
        let mut store = lock_store();
        store.apply_inbox();
        store.apply(&mut self.batch);
        self.look_at = BATCH;
        store
    }

    /// The recording stopped: every staged event applied, then the batches' room and
    /// the blocks' table let go (nothing is staged after a stop).
    pub(crate) fn stop(&mut self) {
        self.settle().stopped();
        self.batch = Batch::new();
    }
}

/// Bytes the event store holds (none before the first recording).
pub(crate) fn store_memory_bytes() -> usize {
    STORE.lock().as_ref().map_or(0, EventStore::memory_bytes)
}

/// The events thread's work: applies each batch handed over, then waits for the next.
/// Never returns.
pub(crate) fn consume() -> ! {
    loop {
        // A hand-over made before this thread parks makes `park` return at once.
        std::thread::park();
        lock_store().apply_inbox();
    }
}

/// In a forked child: the events thread was the parent's. Batches are applied by the
/// threads that stage them until a recording started in the child starts its own.
pub(crate) fn forget_in_child() {
    if let Some(store) = STORE.lock().as_mut() {
        store.consumer = None;
    }
}

/// Before `fork()`, after the recorder: takes the store, so that the events thread is
/// not halfway through a batch.
pub(crate) fn acquire_for_fork() {
    STORE.acquire_for_fork();
}

/// After `fork()`, in the parent or the child.
pub(crate) fn release_after_fork() {
    STORE.release_after_fork();
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtape_core::Action;

    fn staged(kind: StagedKind, addr: u64, size: u64, stack: StackId) -> Staged {
        Staged {
            kind,
            domain: 0,
            addr,
            size,
            ticks: addr,
            stack,
            own: stack,
            op: 0,
            thread: 1,
        }
    }

    fn batch(staged: &[Staged]) -> Batch {
        let mut batch = Batch::new();
        for s in staged {
            batch.stage(*s);
        }
        batch
    }

    fn store() -> EventStore {
        let mut store = EventStore::new();
        store.restart(100);
        store
    }

    #[test]
    fn a_free_takes_its_blocks_size_and_unknown_blocks_are_dropped() {
        let mut s = store();
        let mut b = batch(&[
            staged(StagedKind::HeapAlloc, 0x1000, 48, 7),
            staged(StagedKind::HeapFree, 0x2000, 0, 9),
            staged(StagedKind::HeapFree, 0x1000, 0, 9),
        ]);
        s.apply(&mut b);
        assert!(b.is_empty());
        let kept: Vec<Event> = s.ring.iter().collect();
        assert_eq!(kept.len(), 2);
        assert_eq!(
            (kept[1].action, kept[1].size, kept[1].stack),
            (Action::Free, 48, 9)
        );
    }

    #[test]
    fn a_realloc_free_takes_the_blocks_own_stack() {
        let mut s = store();
        let mut alloc = staged(StagedKind::HeapAlloc, 0x1000, 48, 7);
        alloc.stack = 3; // attributed to an op context's stack
        let mut b = batch(&[alloc, staged(StagedKind::HeapFreeBlockStack, 0x1000, 0, 9)]);
        s.apply(&mut b);
        let kept: Vec<Event> = s.ring.iter().collect();
        assert_eq!((kept[0].stack, kept[1].stack), (3, 7));
    }

    #[test]
    fn events_kept_as_they_are_stay_in_their_place_among_the_staged() {
        let mut s = store();
        let mut b = Batch::new();
        b.stage(staged(StagedKind::HeapAlloc, 0x1000, 8, 1));
        let mut framework =
            staged(StagedKind::HeapAlloc, 0x9000, 512, 2).event(Action::AllocNew, 512);
        framework.device = 0;
        b.push(framework);
        b.stage(staged(StagedKind::HeapFree, 0x1000, 0, 2));
        s.apply(&mut b);
        let kept: Vec<(Action, u64)> = s.ring.iter().map(|e| (e.action, e.addr)).collect();
        assert_eq!(
            kept,
            [
                (Action::Alloc, 0x1000),
                (Action::AllocNew, 0x9000),
                (Action::Free, 0x1000)
            ]
        );
    }

    #[test]
    fn a_batch_handed_over_is_applied_before_the_one_staged_after_it() {
        let mut s = store();
        s.inbox = batch(&[staged(StagedKind::HeapAlloc, 0x1000, 8, 1)]);
        s.apply_inbox();
        let mut later = batch(&[staged(StagedKind::HeapFree, 0x1000, 0, 2)]);
        s.apply(&mut later);
        let sizes: Vec<(Action, u64)> = s.ring.iter().map(|e| (e.action, e.size)).collect();
        assert_eq!(sizes, [(Action::Alloc, 8), (Action::Free, 8)]);
    }

    #[test]
    fn events_that_do_not_pack_keep_their_place_and_their_values() {
        let mut s = store();
        let small = staged(StagedKind::HeapAlloc, 0x1000, 48, 7);
        let huge = staged(StagedKind::HeapAlloc, 0x2000, 3 << 30, 8);
        let mut at_op = staged(StagedKind::HeapAlloc, 0x3000, 64, 9);
        at_op.own = 10;
        let mut other_domain = staged(StagedKind::HeapAlloc, 0x4000, 16, 11);
        other_domain.domain = 389_047;
        let mut free_other = staged(StagedKind::HeapFree, 0x4000, 0, 12);
        free_other.domain = 389_047;
        let mut b = batch(&[
            small,
            huge,
            at_op,
            other_domain,
            staged(StagedKind::HeapFreeBlockStack, 0x3000, 0, 13),
            free_other,
            staged(StagedKind::HeapFree, 0x2000, 0, 14),
        ]);
        assert_eq!(b.aside.len(), 3);
        s.apply(&mut b);
        assert!(b.aside.is_empty() && b.staged.is_empty());
        let got: Vec<_> = s
            .ring
            .iter()
            .map(|e| (e.action, e.addr, e.size, e.stack))
            .collect();
        assert_eq!(
            got,
            vec![
                (Action::Alloc, 0x1000, 48, 7),
                (Action::Alloc, 0x2000, 3 << 30, 8),
                (Action::Alloc, 0x3000, 64, 9),
                (Action::Alloc, 0x4000, 16, 11),
                // The realloc's free takes the block's own stack, kept aside.
                (Action::Free, 0x3000, 64, 10),
                (Action::Free, 0x4000, 16, 12),
                (Action::Free, 0x2000, 3 << 30, 14),
            ]
        );
    }

    #[test]
    fn a_staged_event_takes_32_bytes() {
        assert_eq!(std::mem::size_of::<Packed>(), 32);
    }
}
