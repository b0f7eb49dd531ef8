//! How values are spelled, and the open containers that count their items: the same
//! calls write a pickle ([`Pickle`](super::pickle::Pickle)) or JSON
//! ([`Json`](super::json::Json)).

use std::marker::PhantomData;

/// The most bytes [`Encoding::int_into`] writes.
pub(super) const INT_BYTES: usize = 10;

/// How values are spelled. Containers take the index of each item (or key) so that the
/// pickle can batch and JSON can place commas.
pub(super) trait Encoding {
    fn header(out: &mut Vec<u8>);
    fn footer(out: &mut Vec<u8>);
    fn dict_begin(out: &mut Vec<u8>);
    /// Before the `index`-th key of the current dict.
    fn dict_key(out: &mut Vec<u8>, index: usize, key: &str);
    fn dict_end(out: &mut Vec<u8>, len: usize);
    fn list_begin(out: &mut Vec<u8>);
    /// Before the `index`-th item of the current list.
    fn list_item(out: &mut Vec<u8>, index: usize);
    fn list_end(out: &mut Vec<u8>, len: usize);
    fn int(out: &mut Vec<u8>, value: i64);
    /// `value` as [`Encoding::int`] writes it, into the start of `out`; returns how many
    /// bytes of `out` it is (the rest of `out` may be overwritten). Only called when
    /// [`Encoding::HAS_MEMO`] (by [`MemoEntries`](super::memo_entries::MemoEntries)).
    fn int_into(_out: &mut [u8; INT_BYTES], _value: i64) -> usize {
        unreachable!("only memo entries write ints into arrays");
    }
    fn str(out: &mut Vec<u8>, value: &str);
    fn bool(out: &mut Vec<u8>, value: bool);
    /// A 2-tuple of ints.
    fn int_pair(out: &mut Vec<u8>, first: i64, second: i64);
    /// Whether [`Encoding::memoize`] works.
    const HAS_MEMO: bool = false;
    /// Remembers the value just written so [`Encoding::memo_get`] can repeat it; false
    /// when the encoding cannot.
    fn memoize(_out: &mut Vec<u8>) -> bool {
        false
    }
    /// Before the `index`-th key of the current dict, when the caller writes the key
    /// itself (from the memo). Only called when [`Encoding::HAS_MEMO`].
    fn dict_key_slot(_out: &mut Vec<u8>, _index: usize) {
        unreachable!("this encoding has no memo");
    }
    /// Repeats the `index`-th memoized value. Only called after `memoize` returned true.
    fn memo_get(_out: &mut Vec<u8>, _index: u32) {
        unreachable!("this encoding has no memo");
    }
}

/// Counts the items of one open dict, so keys get their index.
pub(super) struct Dict<E> {
    pub(super) len: usize,
    encoding: PhantomData<E>,
}

impl<E: Encoding> Dict<E> {
    pub(super) fn begin(out: &mut Vec<u8>) -> Self {
        E::dict_begin(out);
        Dict {
            len: 0,
            encoding: PhantomData,
        }
    }

    pub(super) fn key(&mut self, out: &mut Vec<u8>, key: &str) {
        E::dict_key(out, self.len, key);
        self.len += 1;
    }

    /// Before a key the caller writes itself (see [`Encoding::dict_key_slot`]).
    pub(super) fn key_slot(&mut self, out: &mut Vec<u8>) {
        E::dict_key_slot(out, self.len);
        self.len += 1;
    }

    pub(super) fn end(self, out: &mut Vec<u8>) {
        E::dict_end(out, self.len);
    }
}

/// Counts the items of one open list.
pub(super) struct List<E> {
    pub(super) len: usize,
    encoding: PhantomData<E>,
}

impl<E: Encoding> List<E> {
    pub(super) fn begin(out: &mut Vec<u8>) -> Self {
        E::list_begin(out);
        List {
            len: 0,
            encoding: PhantomData,
        }
    }

    /// Call before writing each item.
    pub(super) fn item(&mut self, out: &mut Vec<u8>) {
        E::list_item(out, self.len);
        self.len += 1;
    }

    pub(super) fn end(self, out: &mut Vec<u8>) {
        E::list_end(out, self.len);
    }
}
