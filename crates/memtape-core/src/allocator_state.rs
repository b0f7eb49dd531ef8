//! What each framework allocator holds: buffers handed out (active) or cached, per device.
//!
//! Every framework event is checked against this state before it is recorded, so a
//! mistaken report (a free of an unknown address, a reuse of a buffer that is not cached)
//! is refused with a precise error and changes nothing.

use rustc_hash::FxHashMap;

use crate::event::Action;
use crate::memory_snapshot::SegmentState;
use crate::stack_table::StackId;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Buffer {
    size: u64,
    requested_size: u64,
    stream: u64,
    active: bool,
    stack: StackId,
    op: u32,
}

/// A framework event that does not fit the allocator's state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocatorError {
    /// The Python-heap actions are recorded by memtape itself.
    #[error("{action} is recorded by memtape's own hooks; frameworks report AllocNew, AllocReuse, AllocMakeBuffer, FreeActiveToCache, FreeActiveToOS, Release or FreeCacheToOS")]
    NotAFrameworkAction {
        /// The action's name.
        action: &'static str,
    },
    /// Devices are numbered from 0.
    #[error("device must be >= 0, got {device}")]
    NegativeDevice {
        /// The device given.
        device: i32,
    },
    /// The address is already a live buffer.
    #[error("{action} at address {addr:#x} on device {device}: that address already holds a buffer of {size} bytes (free it first)")]
    AlreadyAllocated {
        /// The action's name.
        action: &'static str,
        /// The address.
        addr: u64,
        /// The device.
        device: i32,
        /// The live buffer's size.
        size: u64,
    },
    /// No buffer at that address.
    #[error("{action} of unknown address {addr:#x} on device {device}: no AllocNew or AllocMakeBuffer was recorded for it")]
    UnknownAddress {
        /// The action's name.
        action: &'static str,
        /// The address.
        addr: u64,
        /// The device.
        device: i32,
    },
    /// The buffer is in the wrong state for this action.
    #[error("{action} at address {addr:#x} on device {device}: the buffer is {state}, but {action} needs it {needed}")]
    WrongState {
        /// The action's name.
        action: &'static str,
        /// The address.
        addr: u64,
        /// The device.
        device: i32,
        /// "active" or "cached".
        state: &'static str,
        /// What the action needs.
        needed: &'static str,
    },
    /// A reuse asked for more than the cached buffer holds.
    #[error("AllocReuse at address {addr:#x} on device {device}: requested {requested} bytes from a cached buffer of {size}")]
    ReuseTooLarge {
        /// The address.
        addr: u64,
        /// The device.
        device: i32,
        /// Bytes requested.
        requested: u64,
        /// The buffer's size.
        size: u64,
    },
}

/// The outcome of an accepted framework event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The block size to record (the buffer's size).
    pub size: u64,
    /// The requested size to record.
    pub requested_size: u64,
}

/// Buffers of every framework allocator, keyed by `(device, address)`.
#[derive(Debug, Default, Clone)]
pub struct AllocatorState {
    buffers: FxHashMap<(i32, u64), Buffer>,
}

fn state_name(active: bool) -> &'static str {
    if active {
        "active"
    } else {
        "cached"
    }
}

/// One framework report, before it is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocatorReport {
    /// What happened.
    pub action: Action,
    /// Device index.
    pub device: i32,
    /// Buffer address.
    pub addr: u64,
    /// Buffer size (for frees: ignored, the recorded size is used).
    pub size: u64,
    /// Bytes asked for (None: same as `size`).
    pub requested_size: Option<u64>,
    /// Stream.
    pub stream: u64,
    /// Attribution.
    pub stack: StackId,
    /// Op name id.
    pub op: u32,
}

impl AllocatorState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of buffers held (active or cached).
    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    /// True when no buffer is held.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// Checks a report against the state and applies it; on error nothing changes.
    pub fn apply(&mut self, r: &AllocatorReport) -> Result<Applied, AllocatorError> {
        let action = r.action.name();
        if r.action.is_python_heap() {
            return Err(AllocatorError::NotAFrameworkAction { action });
        }
        if r.device < 0 {
            return Err(AllocatorError::NegativeDevice { device: r.device });
        }
        let key = (r.device, r.addr);
        let (addr, device) = (r.addr, r.device);
        let existing = self.buffers.get(&key).copied();
        // The buffer at the address, which the action needs active (true) or cached.
        let in_state = |active: bool| -> Result<Buffer, AllocatorError> {
            let b = existing.ok_or(AllocatorError::UnknownAddress {
                action,
                addr,
                device,
            })?;
            if b.active != active {
                return Err(AllocatorError::WrongState {
                    action,
                    addr,
                    device,
                    state: state_name(b.active),
                    needed: state_name(active),
                });
            }
            Ok(b)
        };
        match r.action {
            Action::AllocNew | Action::AllocMakeBuffer => {
                if let Some(b) = existing {
                    return Err(AllocatorError::AlreadyAllocated {
                        action,
                        addr,
                        device,
                        size: b.size,
                    });
                }
                let requested_size = r.requested_size.unwrap_or(r.size).min(r.size);
                self.buffers.insert(
                    key,
                    Buffer {
                        size: r.size,
                        requested_size,
                        stream: r.stream,
                        active: true,
                        stack: r.stack,
                        op: r.op,
                    },
                );
                Ok(Applied {
                    size: r.size,
                    requested_size,
                })
            }
            Action::AllocReuse => {
                let b = in_state(false)?;
                let requested_size =
                    r.requested_size
                        .unwrap_or(if r.size == 0 { b.size } else { r.size });
                if requested_size > b.size {
                    return Err(AllocatorError::ReuseTooLarge {
                        addr,
                        device,
                        requested: requested_size,
                        size: b.size,
                    });
                }
                self.buffers.insert(
                    key,
                    Buffer {
                        requested_size,
                        stream: r.stream,
                        active: true,
                        stack: r.stack,
                        op: r.op,
                        ..b
                    },
                );
                Ok(Applied {
                    size: b.size,
                    requested_size,
                })
            }
            Action::FreeActiveToCache | Action::FreeActiveToOs | Action::Release => {
                let b = in_state(true)?;
                if r.action == Action::FreeActiveToCache {
                    self.buffers.insert(key, Buffer { active: false, ..b });
                } else {
                    self.buffers.remove(&key);
                }
                Ok(Applied {
                    size: b.size,
                    requested_size: b.requested_size,
                })
            }
            Action::FreeCacheToOs => {
                let b = in_state(false)?;
                self.buffers.remove(&key);
                Ok(Applied {
                    size: b.size,
                    requested_size: 0,
                })
            }
            Action::Alloc | Action::Free => unreachable!("rejected above"),
        }
    }

    /// Every buffer held, as segments ordered by (device, address).
    pub fn segments(&self) -> Vec<SegmentState> {
        let mut out: Vec<SegmentState> = self
            .buffers
            .iter()
            .map(|(&(device, addr), b)| SegmentState {
                device,
                addr,
                size: b.size,
                requested_size: b.requested_size,
                stream: b.stream,
                active: b.active,
                stack: b.stack,
                op: b.op,
            })
            .collect();
        out.sort_by_key(|s| (s.device, s.addr));
        out
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.buffers.clear();
    }

    /// Drops every buffer's attribution (their stack ids became stale), keeping the
    /// buffers themselves.
    pub fn forget_stacks(&mut self) {
        for b in self.buffers.values_mut() {
            b.stack = crate::stack_table::EMPTY_STACK;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(action: Action, addr: u64, size: u64) -> AllocatorReport {
        AllocatorReport {
            action,
            device: 0,
            addr,
            size,
            requested_size: None,
            stream: 0,
            stack: 1,
            op: 0,
        }
    }

    #[test]
    fn a_buffer_goes_through_its_life() {
        let mut s = AllocatorState::new();
        let a = s.apply(&AllocatorReport {
            requested_size: Some(1000),
            ..report(Action::AllocNew, 0x100, 1024)
        });
        assert_eq!(
            a,
            Ok(Applied {
                size: 1024,
                requested_size: 1000
            })
        );
        assert_eq!(
            s.apply(&report(Action::FreeActiveToCache, 0x100, 0))
                .unwrap()
                .size,
            1024
        );
        assert!(!s.segments()[0].active);
        let reuse = s.apply(&AllocatorReport {
            requested_size: Some(512),
            ..report(Action::AllocReuse, 0x100, 0)
        });
        assert_eq!(
            reuse,
            Ok(Applied {
                size: 1024,
                requested_size: 512
            })
        );
        assert!(s.segments()[0].active);
        s.apply(&report(Action::FreeActiveToCache, 0x100, 0))
            .unwrap();
        assert_eq!(
            s.apply(&report(Action::FreeCacheToOs, 0x100, 0))
                .unwrap()
                .size,
            1024
        );
        assert!(s.is_empty());
    }

    #[test]
    fn mistakes_are_refused_and_change_nothing() {
        let mut s = AllocatorState::new();
        assert!(matches!(
            s.apply(&report(Action::FreeActiveToOs, 0x10, 0)),
            Err(AllocatorError::UnknownAddress { .. })
        ));
        s.apply(&report(Action::AllocMakeBuffer, 0x10, 64)).unwrap();
        let before = s.segments();
        assert!(matches!(
            s.apply(&report(Action::AllocNew, 0x10, 64)),
            Err(AllocatorError::AlreadyAllocated { .. })
        ));
        assert!(matches!(
            s.apply(&report(Action::AllocReuse, 0x10, 64)),
            Err(AllocatorError::WrongState { .. })
        ));
        assert!(matches!(
            s.apply(&report(Action::FreeCacheToOs, 0x10, 0)),
            Err(AllocatorError::WrongState { .. })
        ));
        assert!(matches!(
            s.apply(&report(Action::Alloc, 0x20, 1)),
            Err(AllocatorError::NotAFrameworkAction { .. })
        ));
        assert!(matches!(
            s.apply(&AllocatorReport {
                device: -2,
                ..report(Action::AllocNew, 0x30, 1)
            }),
            Err(AllocatorError::NegativeDevice { .. })
        ));
        assert_eq!(s.segments(), before);
        assert_eq!(s.apply(&report(Action::Release, 0x10, 0)).unwrap().size, 64);
        let msg = s
            .apply(&report(Action::Release, 0x10, 0))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("unknown address 0x10"), "{msg}");
    }

    #[test]
    fn devices_are_separate() {
        let mut s = AllocatorState::new();
        s.apply(&report(Action::AllocNew, 0x10, 8)).unwrap();
        s.apply(&AllocatorReport {
            device: 1,
            ..report(Action::AllocNew, 0x10, 16)
        })
        .unwrap();
        let segs = s.segments();
        assert_eq!(
            segs.iter().map(|g| (g.device, g.size)).collect::<Vec<_>>(),
            vec![(0, 8), (1, 16)]
        );
    }
}
