//! Each stack's encoded `frames` list, written once and copied or memoized after.

use std::ops::Range;

use rustc_hash::FxHashMap;

use super::encoding::{Dict, Encoding, List};
use super::shared_names::{Name, NAME_COUNT};
use crate::memory_snapshot::{MemorySnapshot, ResolvedFrame};
use crate::stack_table::StackId;

pub(super) fn write_frames<E: Encoding>(out: &mut Vec<u8>, frames: &[ResolvedFrame]) {
    let mut list = List::<E>::begin(out);
    for frame in frames {
        list.item(out);
        let mut dict = Dict::<E>::begin(out);
        dict.key(out, "filename");
        E::str(out, &frame.filename);
        dict.key(out, "line");
        E::int(out, i64::from(frame.line));
        dict.key(out, "name");
        E::str(out, &frame.name);
        dict.end(out);
    }
    list.end(out);
}

/// One stack's encoded `frames` list.
struct CachedFrames {
    range: Range<usize>,
    /// Pickle memo index, once the list was written and memoized.
    memo: Option<u32>,
}

/// Each stack's encoded `frames` list, built on first use, copied (or, when shared,
/// referenced through the pickle memo) on every later use. When shared, the trace
/// entries' keys, actions and op names are written once too and repeated from the memo
/// (strings are immutable, so sharing them is safe where sharing dicts is not).
pub(super) struct FrameCache {
    arena: Vec<u8>,
    slots: FxHashMap<StackId, u32>,
    cached: Vec<CachedFrames>,
    share: bool,
    memoized: u32,
    /// Memo index of each [`Name`] once written (`u32::MAX`: not yet).
    names: [u32; NAME_COUNT],
    /// Memo index of each op name once written (`u32::MAX`: not yet), by op id.
    op_names: Vec<u32>,
}

impl FrameCache {
    pub(super) fn new(share: bool) -> Self {
        FrameCache {
            arena: Vec::new(),
            slots: FxHashMap::default(),
            cached: Vec::new(),
            share,
            memoized: 0,
            names: [u32::MAX; NAME_COUNT],
            op_names: Vec::new(),
        }
    }

    /// Writes `key` as the next key of `dict`, from the memo when shared.
    pub(super) fn key<E: Encoding>(&mut self, dict: &mut Dict<E>, out: &mut Vec<u8>, key: Name) {
        if self.share && E::HAS_MEMO {
            dict.key_slot(out);
            self.string::<E>(out, key);
        } else {
            dict.key(out, key.text());
        }
    }

    /// Writes `value`, from the memo when shared.
    #[inline]
    pub(super) fn string<E: Encoding>(&mut self, out: &mut Vec<u8>, value: Name) {
        if !(self.share && E::HAS_MEMO) {
            E::str(out, value.text());
            return;
        }
        let memo = &mut self.names[value as usize];
        if *memo != u32::MAX {
            E::memo_get(out, *memo);
        } else {
            E::str(out, value.text());
            if E::memoize(out) {
                *memo = self.memoized;
                self.memoized += 1;
            }
        }
    }

    /// Writes op `op`'s name (`encoded` by `E`), from the memo when shared.
    #[inline]
    pub(super) fn op_name<E: Encoding>(&mut self, out: &mut Vec<u8>, op: usize, encoded: &[u8]) {
        if !(self.share && E::HAS_MEMO) {
            out.extend_from_slice(encoded);
            return;
        }
        if self.op_names.len() <= op {
            self.op_names.resize(op + 1, u32::MAX);
        }
        let memo = &mut self.op_names[op];
        if *memo != u32::MAX {
            E::memo_get(out, *memo);
        } else {
            out.extend_from_slice(encoded);
            if E::memoize(out) {
                *memo = self.memoized;
                self.memoized += 1;
            }
        }
    }

    /// The memo index of `name`, once written.
    pub(super) fn name_memo(&self, name: Name) -> Option<u32> {
        let index = self.names[name as usize];
        (self.share && index != u32::MAX).then_some(index)
    }

    /// The memo index of op `op`'s name, once written.
    pub(super) fn op_memo(&self, op: usize) -> Option<u32> {
        let index = *self.op_names.get(op)?;
        (self.share && index != u32::MAX).then_some(index)
    }

    /// The memo index of the frames list of `slot`, once written.
    pub(super) fn frames_memo(&self, slot: usize) -> Option<u32> {
        self.cached[slot].memo
    }

    /// The cache slot of `stack`'s frames, or None when it has none (an empty range).
    pub(super) fn slot<E: Encoding>(
        &mut self,
        snapshot: &MemorySnapshot,
        stack: StackId,
    ) -> Option<usize> {
        let (arena, cached) = (&mut self.arena, &mut self.cached);
        let slot = *self.slots.entry(stack).or_insert_with(|| {
            let start = arena.len();
            let frames = snapshot.frames(stack);
            if !frames.is_empty() {
                write_frames::<E>(arena, frames);
            }
            cached.push(CachedFrames {
                range: start..arena.len(),
                memo: None,
            });
            (cached.len() - 1) as u32
        }) as usize;
        (!self.cached[slot].range.is_empty()).then_some(slot)
    }

    /// Writes the frames list of `slot`.
    pub(super) fn write<E: Encoding>(&mut self, out: &mut Vec<u8>, slot: usize) {
        let cached = &mut self.cached[slot];
        match cached.memo {
            Some(index) => E::memo_get(out, index),
            None => {
                out.extend_from_slice(&self.arena[cached.range.clone()]);
                if self.share && E::memoize(out) {
                    cached.memo = Some(self.memoized);
                    self.memoized += 1;
                }
            }
        }
    }
}
