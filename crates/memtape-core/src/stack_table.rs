//! Call-stack interning: a trie of `(parent id, code, instruction offset)` nodes.
//!
//! A stack is named by the id of its innermost node; walking `parent` links gives the
//! frames innermost first. Id 0 is the empty stack. Nodes live in one `Vec` and the
//! index is an open-addressing table of ids, so interning never allocates per lookup.

use crate::key_hash::{mix2, slot_of};

/// Id of an interned stack; 0 is the empty stack.
pub type StackId = u32;

/// The empty stack (no Python frame, e.g. an allocation made while no code ran).
pub const EMPTY_STACK: StackId = 0;

/// Set in [`StackNode::code`] for a native frame, whose other bits are a return address
/// (user-space addresses never have it; a code object's address never does either).
pub const NATIVE_FRAME_BIT: usize = 1 << (usize::BITS - 1);

/// The `code` of a native frame at return address `ip`.
#[inline]
pub fn native_frame_code(ip: u64) -> usize {
    ip as usize | NATIVE_FRAME_BIT
}

/// The return address of a native frame's `code`, or `None` for a Python frame.
#[inline]
pub fn native_frame_ip(code: usize) -> Option<u64> {
    (code & NATIVE_FRAME_BIT != 0).then_some((code & !NATIVE_FRAME_BIT) as u64)
}

/// One frame of an interned stack, linked to its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackNode {
    /// The caller's stack (the stack without this frame).
    pub parent: StackId,
    /// Opaque code identity (the binding uses the code object's address; a native frame
    /// is its return address with [`NATIVE_FRAME_BIT`] set).
    pub code: usize,
    /// Instruction offset in code units (CPython's `lasti`).
    pub lasti: i32,
    /// Number of frames in the stack ending here (1 for an outermost frame).
    pub depth: u32,
}

/// The trie of interned stacks.
#[derive(Debug)]
pub struct StackTable {
    nodes: Vec<StackNode>,
    slots: Vec<StackId>,
    mask: usize,
}

const INITIAL_SLOTS: usize = 1 << 12;

impl Default for StackTable {
    fn default() -> Self {
        Self::new()
    }
}

impl StackTable {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            nodes: Vec::new(),
            slots: vec![EMPTY_STACK; INITIAL_SLOTS],
            mask: INITIAL_SLOTS - 1,
        }
    }

    /// Number of interned nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when no stack has been interned.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Bytes held by the table.
    pub fn memory_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<StackNode>()
            + self.slots.capacity() * std::mem::size_of::<StackId>()
    }

    /// Forgets every stack. Ids handed out before are invalid afterwards.
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// The node behind `id`, or `None` for the empty stack or an unknown id.
    #[inline]
    pub fn node(&self, id: StackId) -> Option<&StackNode> {
        (id as usize).checked_sub(1).and_then(|i| self.nodes.get(i))
    }

    /// Number of frames in the stack `id` (0 for the empty or an unknown stack).
    #[inline]
    pub fn depth(&self, id: StackId) -> u32 {
        self.node(id).map_or(0, |n| n.depth)
    }

    /// The frames of `id`, innermost first, at most `limit` of them.
    pub fn frames(&self, id: StackId, limit: usize) -> impl Iterator<Item = &StackNode> + '_ {
        let mut next = id;
        std::iter::from_fn(move || {
            let node = self.node(next)?;
            next = node.parent;
            Some(node)
        })
        .take(limit)
    }

    /// Interns the frame `(code, lasti)` called from stack `parent`; returns the new
    /// stack's id and whether the node was created by this call. Returns `None` only when
    /// the table cannot grow (memory exhausted or 2^32 - 1 nodes).
    #[inline]
    pub fn intern(&mut self, parent: StackId, code: usize, lasti: i32) -> Option<(StackId, bool)> {
        let hash = mix2(
            code as u64,
            (u64::from(parent) << 32) | u64::from(lasti as u32),
        );
        let mut slot = slot_of(hash, self.mask);
        loop {
            let id = self.slots[slot];
            if id == EMPTY_STACK {
                break;
            }
            let n = &self.nodes[id as usize - 1];
            if n.code == code && n.parent == parent && n.lasti == lasti {
                return Some((id, false));
            }
            slot = (slot + 1) & self.mask;
        }
        let id = StackId::try_from(self.nodes.len() + 1).ok()?;
        if id == StackId::MAX {
            return None;
        }
        self.nodes.try_reserve(1).ok()?;
        let depth = self.depth(parent).saturating_add(1);
        self.nodes.push(StackNode {
            parent,
            code,
            lasti,
            depth,
        });
        self.slots[slot] = id;
        if self.nodes.len() * 2 > self.slots.len() {
            // A failed grow leaves the table valid, only fuller.
            let _ = self.grow();
        }
        Some((id, true))
    }

    fn grow(&mut self) -> Result<(), std::collections::TryReserveError> {
        let new_len = self.slots.len() * 2;
        let mut slots = Vec::new();
        slots.try_reserve_exact(new_len)?;
        slots.resize(new_len, EMPTY_STACK);
        let mask = new_len - 1;
        for (i, n) in self.nodes.iter().enumerate() {
            let hash = mix2(
                n.code as u64,
                (u64::from(n.parent) << 32) | u64::from(n.lasti as u32),
            );
            let mut slot = slot_of(hash, mask);
            while slots[slot] != EMPTY_STACK {
                slot = (slot + 1) & mask;
            }
            slots[slot] = (i + 1) as StackId;
        }
        self.slots = slots;
        self.mask = mask;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_idempotent_and_links_parents() {
        let mut t = StackTable::new();
        let (a, new_a) = t.intern(EMPTY_STACK, 100, 4).unwrap();
        let (b, new_b) = t.intern(a, 200, 8).unwrap();
        assert!(new_a && new_b);
        assert_eq!(t.intern(EMPTY_STACK, 100, 4), Some((a, false)));
        assert_eq!(t.intern(a, 200, 8), Some((b, false)));
        assert_ne!(t.intern(a, 200, 10).unwrap().0, b);
        assert_eq!(t.depth(b), 2);
        let frames: Vec<_> = t.frames(b, 10).map(|n| (n.code, n.lasti)).collect();
        assert_eq!(frames, vec![(200, 8), (100, 4)]);
        assert_eq!(t.frames(b, 1).count(), 1);
    }

    #[test]
    fn survives_growth_and_deep_chains() {
        let mut t = StackTable::new();
        let mut id = EMPTY_STACK;
        let mut ids = Vec::new();
        for depth in 0..100_000 {
            id = t.intern(id, 7 + depth % 3, depth as i32).unwrap().0;
            ids.push(id);
        }
        assert_eq!(t.depth(id), 100_000);
        let mut again = EMPTY_STACK;
        for (depth, expected) in ids.iter().enumerate() {
            again = t.intern(again, 7 + depth % 3, depth as i32).unwrap().0;
            assert_eq!(again, *expected);
        }
        assert_eq!(t.len(), 100_000);
    }

    #[test]
    fn unknown_ids_are_empty() {
        let t = StackTable::new();
        assert_eq!(t.depth(12345), 0);
        assert_eq!(t.frames(12345, 5).count(), 0);
        assert!(t.node(EMPTY_STACK).is_none());
    }
}
