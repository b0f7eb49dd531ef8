//! Where a recorded event leaves for a file: the capture sink the recorder appends
//! `.mtape` records to under its lock.

pub(crate) mod capture_sink;
pub(crate) mod flusher_wake;
pub(crate) mod journal_backlog;
