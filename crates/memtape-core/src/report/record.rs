//! The records a report reads: the capture reader's [`Record`], one per decoded record.

pub use crate::capture::Record;
