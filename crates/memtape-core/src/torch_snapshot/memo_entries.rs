//! Trace entries copied from precomputed bytes. With shared frames, once every key and
//! string an entry repeats is in the pickle memo, the entry is nothing but memo
//! references and four ints: a *head* per action (`{`, the `action` key and value, the
//! `addr` key), the `size`, `stream` and `time_us` keys, and a *tail* per (stack, op)
//! (`compile_context`, `user_metadata`, `category`, `frames` and the dict's end). The
//! pieces are fixed-size arrays, so an entry is assembled in a scratch array with a few
//! constant-size copies and handed to the buffer in one copy.
//!
//! The pieces are written by the same [`Encoding`] calls as
//! [`Schema::write_entry`](super::schema::Schema::write_entry)'s general path, in the
//! same order, so the bytes are the same; an entry with a string not memoized yet (the
//! first use of an action, an op or a stack) takes the general path, which memoizes it.

use std::marker::PhantomData;

use rustc_hash::FxHashMap;

use super::encoding::{Encoding, INT_BYTES};
use super::frame_cache::FrameCache;
use super::shared_names::{Name, NAME_COUNT};
use crate::memory_snapshot::MemorySnapshot;
use crate::stack_table::StackId;

/// Bytes of a head: the dict's start and three memo references (at most 2 + 3 x 5).
const HEAD: usize = 24;
/// Bytes of a key: one memo reference (at most 5).
const KEY: usize = 8;
/// Bytes of a tail: eight memo references and the dict's end (at most 8 x 5 + 1).
const TAIL: usize = 48;
/// Bytes of a middle: four ints and the three keys between them.
const MIDDLE: usize = 4 * INT_BYTES + 3 * KEY;
/// The scratch array: every piece copied whole, at the most its length can advance.
const SCRATCH: usize = HEAD + MIDDLE + TAIL;

/// Encoded bytes padded to `N`, copied whole and then counted as `len`.
#[derive(Clone, Copy)]
struct Piece<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Piece<N> {
    const EMPTY: Self = Piece {
        bytes: [0; N],
        len: 0,
    };

    /// What `write` writes, or None if it is longer than `N`.
    fn build(write: impl FnOnce(&mut Vec<u8>)) -> Option<Self> {
        let mut written = Vec::with_capacity(N);
        write(&mut written);
        let mut piece = Piece {
            bytes: [0; N],
            len: written.len(),
        };
        piece
            .bytes
            .get_mut(..written.len())?
            .copy_from_slice(&written);
        Some(piece)
    }
}

/// The `size`, `stream` and `time_us` keys.
type Keys = [Piece<KEY>; 3];

/// The pieces built so far, and the scratch array entries are assembled in.
pub(super) struct MemoEntries<E> {
    /// By action [`Name`] (empty: not built yet).
    heads: [Piece<HEAD>; NAME_COUNT],
    /// Empty: not built yet.
    keys: Keys,
    /// The ints of the entry written last (the entries of one event share them) ...
    last_ints: EntryInts,
    /// ... and their middle piece.
    middle: Piece<MIDDLE>,
    tails: Vec<Piece<TAIL>>,
    /// Index in `tails` by [`tail_key`].
    tail_index: FxHashMap<u64, u32>,
    /// The tail used last: `(key, index)`.
    last_tail: (u64, u32),
    /// Whether entries carry `category`.
    categories: bool,
    scratch: [u8; SCRATCH],
    /// Entries written.
    pub(super) copied: u64,
    encoding: PhantomData<E>,
}

/// A tail's key: its stack and its op (0: none).
fn tail_key(stack: StackId, op: Option<usize>) -> u64 {
    (u64::from(stack) << 32) | op.unwrap_or(0) as u64
}

/// The ints of one entry: `addr`, `size`, `stream`, `time_us`.
pub(super) type EntryInts = [i64; 4];

impl<E: Encoding> MemoEntries<E> {
    /// Copied entries, or None when `E` has no memo or frames are not shared.
    pub(super) fn new(share: bool, categories: bool) -> Option<Self> {
        (share && E::HAS_MEMO).then(|| MemoEntries {
            heads: [Piece::EMPTY; NAME_COUNT],
            keys: [Piece::EMPTY; 3],
            last_ints: [-1; 4],
            middle: Piece::EMPTY,
            tails: Vec::new(),
            tail_index: FxHashMap::default(),
            last_tail: (u64::MAX, 0),
            categories,
            scratch: [0; SCRATCH],
            copied: 0,
            encoding: PhantomData,
        })
    }

    /// Writes the entry if every string it repeats is memoized; false (and nothing
    /// written) otherwise. `op` is a valid op id or None.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn write(
        &mut self,
        out: &mut Vec<u8>,
        cache: &mut FrameCache,
        snapshot: &MemorySnapshot,
        action: Name,
        op: Option<usize>,
        stack: StackId,
        ints: EntryInts,
    ) -> bool {
        let head = action as usize;
        if (self.heads[head].len == 0 && !self.build_head(cache, action))
            || (self.keys[0].len == 0 && !self.build_keys(cache))
            || !self.find_tail(cache, snapshot, op, stack)
        {
            return false;
        }
        if ints != self.last_ints {
            self.last_ints = ints;
            self.middle = middle::<E>(&self.keys, ints);
        }
        let (head, middle) = (&self.heads[head], &self.middle);
        let tail = &self.tails[self.last_tail.1 as usize];
        let scratch = &mut self.scratch;
        scratch[..HEAD].copy_from_slice(&head.bytes);
        let mut at = head.len;
        scratch[at..at + MIDDLE].copy_from_slice(&middle.bytes);
        at += middle.len;
        scratch[at..at + TAIL].copy_from_slice(&tail.bytes);
        at += tail.len;
        out.extend_from_slice(&scratch[..at]);
        self.copied += 1;
        true
    }

    #[cold]
    fn build_head(&mut self, cache: &FrameCache, action: Name) -> bool {
        let head = (|| {
            let key = cache.name_memo(Name::Action)?;
            let value = cache.name_memo(action)?;
            let addr = cache.name_memo(Name::Addr)?;
            Piece::build(|out| {
                E::dict_begin(out);
                E::dict_key_slot(out, 0);
                E::memo_get(out, key);
                E::memo_get(out, value);
                E::dict_key_slot(out, 1);
                E::memo_get(out, addr);
            })
        })();
        match head {
            Some(head) => {
                self.heads[action as usize] = head;
                true
            }
            None => false,
        }
    }

    #[cold]
    fn build_keys(&mut self, cache: &FrameCache) -> bool {
        let key = |index: usize, name: Name| {
            let memo = cache.name_memo(name)?;
            Piece::build(|out| {
                E::dict_key_slot(out, index);
                E::memo_get(out, memo);
            })
        };
        match (
            key(2, Name::Size),
            key(3, Name::Stream),
            key(4, Name::TimeUs),
        ) {
            (Some(size), Some(stream), Some(time)) => {
                self.keys = [size, stream, time];
                true
            }
            _ => false,
        }
    }

    /// Makes `last_tail` the tail of `(stack, op)`; false if it cannot be built yet.
    #[inline]
    fn find_tail(
        &mut self,
        cache: &mut FrameCache,
        snapshot: &MemorySnapshot,
        op: Option<usize>,
        stack: StackId,
    ) -> bool {
        let key = tail_key(stack, op);
        if self.last_tail.0 == key {
            return true;
        }
        let index = match self.tail_index.get(&key) {
            Some(&index) => index,
            None => {
                let Some(tail) = self.build_tail(cache, snapshot, op, stack) else {
                    return false;
                };
                self.tails.push(tail);
                let index = (self.tails.len() - 1) as u32;
                self.tail_index.insert(key, index);
                index
            }
        };
        self.last_tail = (key, index);
        true
    }

    #[cold]
    fn build_tail(
        &self,
        cache: &mut FrameCache,
        snapshot: &MemorySnapshot,
        op: Option<usize>,
        stack: StackId,
    ) -> Option<Piece<TAIL>> {
        let frames = match cache.slot::<E>(snapshot, stack) {
            Some(slot) => Some((cache.name_memo(Name::Frames)?, cache.frames_memo(slot)?)),
            None => None,
        };
        let op = match op {
            Some(op) => Some(cache.op_memo(op)?),
            None => None,
        };
        let empty = cache.name_memo(Name::Empty)?;
        let mut pairs = vec![
            (cache.name_memo(Name::CompileContext)?, empty),
            (cache.name_memo(Name::UserMetadata)?, op.unwrap_or(empty)),
        ];
        if self.categories {
            let unknown = match op {
                Some(op) => op,
                None => cache.name_memo(Name::Unknown)?,
            };
            pairs.push((cache.name_memo(Name::Category)?, unknown));
        }
        pairs.extend(frames);
        Piece::build(|out| {
            // The keys after `action`, `addr`, `size`, `stream` and `time_us`.
            let first = 5;
            for (index, &(key, value)) in pairs.iter().enumerate() {
                E::dict_key_slot(out, first + index);
                E::memo_get(out, key);
                E::memo_get(out, value);
            }
            E::dict_end(out, first + pairs.len());
        })
    }
}

/// The ints of an entry and the keys between them: `addr`'s value, then `size`, `stream`
/// and `time_us`, each key and value.
fn middle<E: Encoding>(keys: &Keys, ints: EntryInts) -> Piece<MIDDLE> {
    let mut piece = Piece::EMPTY;
    let bytes = &mut piece.bytes;
    let mut at = int_at::<E>(bytes, 0, ints[0]);
    for (key, &value) in keys.iter().zip(&ints[1..]) {
        bytes[at..at + KEY].copy_from_slice(&key.bytes);
        at += key.len;
        at += int_at::<E>(bytes, at, value);
    }
    piece.len = at;
    piece
}

/// Writes `value` at `bytes[at..]`; returns its length.
#[inline]
fn int_at<E: Encoding>(bytes: &mut [u8; MIDDLE], at: usize, value: i64) -> usize {
    let slot: &mut [u8; INT_BYTES] = (&mut bytes[at..at + INT_BYTES])
        .try_into()
        .expect("a slice of INT_BYTES bytes");
    E::int_into(slot, value)
}
