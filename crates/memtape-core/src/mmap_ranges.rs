//! Anonymous memory mappings as address ranges: `mmap` adds a range, `munmap` may cut a
//! hole in one or several of them, `mremap` moves or resizes one.
//!
//! Each change is returned as the pieces that ended and the pieces that began, so that a
//! recorder that keeps pieces as blocks (address -> size) can apply it: a partial munmap
//! ends the mapping's block and begins the one or two pieces that remain.

use std::collections::BTreeMap;

use crate::stack_table::StackId;

/// One mapped piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MappedPiece {
    /// First byte (page-aligned).
    pub start: u64,
    /// Length in bytes (whole pages).
    pub len: u64,
    /// The stack that mapped it.
    pub stack: StackId,
}

/// What one call changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RangeChange {
    /// Pieces that are no longer mapped as they were.
    pub ended: Vec<MappedPiece>,
    /// Pieces that are now mapped.
    pub began: Vec<MappedPiece>,
}

impl RangeChange {
    /// True when nothing changed (the range was not ours).
    pub fn is_empty(&self) -> bool {
        self.ended.is_empty() && self.began.is_empty()
    }
}

/// The mapping granule.
pub const PAGE: u64 = 4096;

/// `len` rounded up to whole pages, as the kernel does.
pub fn page_round(len: u64) -> u64 {
    len.saturating_add(PAGE - 1) & !(PAGE - 1)
}

/// Live anonymous mappings, by start address; pieces never overlap.
#[derive(Debug, Default)]
pub struct MmapRanges {
    pieces: BTreeMap<u64, (u64, StackId)>,
}

impl MmapRanges {
    /// No mappings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of pieces.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// True when nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Forgets every mapping.
    pub fn clear(&mut self) {
        self.pieces.clear();
    }

    /// A new mapping of `len` bytes at `start` (a fixed mapping replaces what it covers).
    pub fn map(&mut self, start: u64, len: u64, stack: StackId) -> RangeChange {
        let len = page_round(len);
        let mut change = self.unmap(start, len);
        if len > 0 {
            self.pieces.insert(start, (len, stack));
            change.began.push(MappedPiece { start, len, stack });
        }
        change
    }

    /// `munmap(start, len)`: every piece it covers ends; what remains of a piece it cuts
    /// begins again as a new piece with the same stack. Empty when nothing was ours.
    pub fn unmap(&mut self, start: u64, len: u64) -> RangeChange {
        let len = page_round(len);
        let end = start.saturating_add(len);
        let mut change = RangeChange::default();
        if len == 0 {
            return change;
        }
        // The piece starting before `start` may reach into the range.
        let first = self
            .pieces
            .range(..start)
            .next_back()
            .filter(|(s, (l, _))| **s + *l > start)
            .map(|(s, _)| *s)
            .unwrap_or(start);
        let hit: Vec<u64> = self.pieces.range(first..end).map(|(s, _)| *s).collect();
        for s in hit {
            let Some((l, stack)) = self.pieces.remove(&s) else {
                continue;
            };
            change.ended.push(MappedPiece {
                start: s,
                len: l,
                stack,
            });
            if s < start {
                self.pieces.insert(s, (start - s, stack));
                change.began.push(MappedPiece {
                    start: s,
                    len: start - s,
                    stack,
                });
            }
            if s + l > end {
                self.pieces.insert(end, (s + l - end, stack));
                change.began.push(MappedPiece {
                    start: end,
                    len: s + l - end,
                    stack,
                });
            }
        }
        change
    }

    /// `mremap`: the mapping at `old` (`old_len` bytes) now lives at `new` with
    /// `new_len` bytes, still attributed to the stack that mapped it. Empty when the old
    /// range was not ours (the new one is not followed either).
    pub fn remap(&mut self, old: u64, old_len: u64, new: u64, new_len: u64) -> RangeChange {
        let mut change = self.unmap(old, old_len.max(PAGE));
        let Some(stack) = change.ended.first().map(|p| p.stack) else {
            return change;
        };
        let moved = self.map(new, new_len, stack);
        change.ended.extend(moved.ended);
        change.began.extend(moved.began);
        change
    }

    /// The piece containing `addr`, if any.
    pub fn piece_at(&self, addr: u64) -> Option<MappedPiece> {
        self.pieces
            .range(..=addr)
            .next_back()
            .filter(|(s, (l, _))| **s + *l > addr)
            .map(|(s, (l, stack))| MappedPiece {
                start: *s,
                len: *l,
                stack: *stack,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(start: u64, len: u64, stack: StackId) -> MappedPiece {
        MappedPiece { start, len, stack }
    }

    #[test]
    fn map_then_unmap_whole() {
        let mut r = MmapRanges::new();
        let c = r.map(0x10000, 100, 3);
        assert_eq!(c.began, vec![piece(0x10000, PAGE, 3)]);
        let c = r.unmap(0x10000, PAGE);
        assert_eq!(c.ended, vec![piece(0x10000, PAGE, 3)]);
        assert!(c.began.is_empty());
        assert!(r.is_empty());
    }

    #[test]
    fn unmap_middle_splits() {
        let mut r = MmapRanges::new();
        r.map(0x10000, 4 * PAGE, 7);
        let c = r.unmap(0x10000 + PAGE, PAGE);
        assert_eq!(c.ended, vec![piece(0x10000, 4 * PAGE, 7)]);
        assert_eq!(
            c.began,
            vec![
                piece(0x10000, PAGE, 7),
                piece(0x10000 + 2 * PAGE, 2 * PAGE, 7)
            ]
        );
        assert_eq!(r.len(), 2);
        assert_eq!(
            r.piece_at(0x10000 + 3 * PAGE),
            Some(piece(0x12000, 2 * PAGE, 7))
        );
        assert_eq!(r.piece_at(0x10000 + PAGE), None);
    }

    #[test]
    fn unmap_spanning_two_mappings_and_unknown() {
        let mut r = MmapRanges::new();
        r.map(0x10000, 2 * PAGE, 1);
        r.map(0x20000, 2 * PAGE, 2);
        let c = r.unmap(0x10000 + PAGE, 0x20000 - 0x10000);
        assert_eq!(c.ended.len(), 2);
        assert_eq!(
            c.began,
            vec![piece(0x10000, PAGE, 1), piece(0x20000 + PAGE, PAGE, 2)]
        );
        assert!(r.unmap(0x90000, PAGE).is_empty());
    }

    #[test]
    fn remap_moves_and_keeps_stack() {
        let mut r = MmapRanges::new();
        r.map(0x10000, PAGE, 5);
        let c = r.remap(0x10000, PAGE, 0x40000, 3 * PAGE);
        assert_eq!(c.ended, vec![piece(0x10000, PAGE, 5)]);
        assert_eq!(c.began, vec![piece(0x40000, 3 * PAGE, 5)]);
        assert!(r.remap(0x70000, PAGE, 0x80000, PAGE).is_empty());
    }

    #[test]
    fn fixed_map_replaces() {
        let mut r = MmapRanges::new();
        r.map(0x10000, 3 * PAGE, 1);
        let c = r.map(0x10000 + PAGE, PAGE, 2);
        assert_eq!(c.ended, vec![piece(0x10000, 3 * PAGE, 1)]);
        assert_eq!(c.began.len(), 3);
        assert_eq!(r.len(), 3);
    }
}
