//! Which `device_traces` list each device's events go to: the framework devices by index,
//! then one list for the Python heap (the *host index*).

use std::io;

use crate::memory_snapshot::MemorySnapshot;

/// The largest framework device index accepted: every index up to the largest one used
/// gets a (possibly empty) trace list, so a wild index would write millions of lists.
pub const MAX_DEVICE_INDEX: i32 = 65_535;

/// Which `device_traces` list each device's events go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLayout {
    /// Number of framework device lists: the largest framework device index used by an
    /// event or a segment, plus one (0 when there are none).
    pub framework_devices: usize,
    /// Index of the Python-heap list (`framework_devices`), or None without host events.
    pub host_index: Option<usize>,
    /// The largest framework device index seen (-1 when none).
    max_device: i32,
}

impl DeviceLayout {
    /// The layout of `snapshot`'s events and segments.
    pub fn of(snapshot: &MemorySnapshot) -> DeviceLayout {
        let mut max_device = -1;
        let mut host = false;
        for event in &snapshot.events {
            if event.device < 0 {
                host = true;
            } else {
                max_device = max_device.max(event.device);
            }
        }
        for segment in &snapshot.segments {
            max_device = max_device.max(segment.device);
        }
        let framework_devices = usize::try_from(max_device + 1).unwrap_or(0);
        DeviceLayout {
            framework_devices,
            host_index: host.then_some(framework_devices),
            max_device,
        }
    }

    /// Number of lists in `device_traces`.
    pub fn trace_count(&self) -> usize {
        self.framework_devices + usize::from(self.host_index.is_some())
    }

    /// The list an event on `device` goes to.
    pub(super) fn slot(&self, device: i32) -> usize {
        match usize::try_from(device) {
            Ok(index) => index,
            // Every negative device is the host ([`HOST_DEVICE`]); the layout saw it.
            Err(_) => self.host_index.unwrap_or(self.framework_devices),
        }
    }

    pub(super) fn check(&self) -> io::Result<()> {
        if self.max_device > MAX_DEVICE_INDEX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "device index {} is above {MAX_DEVICE_INDEX}; memory_viz needs one trace \
                     list per index up to it, so the snapshot was not written",
                    self.max_device
                ),
            ));
        }
        Ok(())
    }
}

/// The `device_traces` index of the Python-heap events in `snapshot`'s memory_viz
/// snapshot, or None when it has no Python-heap events.
pub fn host_trace_index(snapshot: &MemorySnapshot) -> Option<usize> {
    DeviceLayout::of(snapshot).host_index
}
