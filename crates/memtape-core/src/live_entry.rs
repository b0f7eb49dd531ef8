//! What the live tables store: one traced block, and the error when a table cannot grow.
//! The tables ([`LiveTable`](crate::LiveTable) and the two address tables beneath it)
//! all import these; nothing here imports a table.

use crate::stack_table::StackId;

/// One traced block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LiveEntry {
    /// Block address (never 0).
    pub addr: u64,
    /// Requested size in bytes.
    pub size: u64,
    /// The stack that allocated it.
    pub stack: StackId,
    /// tracemalloc's domain: 0 for the Python allocators.
    pub domain: u32,
}

/// The table could not grow: the block was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the live table could not grow: out of memory")]
pub struct TableFull;
