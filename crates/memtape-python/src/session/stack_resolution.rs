//! Resolving the stacks a capture interned into Stack records: on the main thread,
//! through `Py_AddPendingCall` (Python runs it between bytecodes, with the GIL), so that no
//! thread ever waits for the GIL on our behalf.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use pyo3::ffi;
use pyo3::prelude::*;

use crate::cpython::frame_resolve::{FrameResolver, HeldCodes};
use crate::cpython::frames::RawFrame;
use crate::native::unwind::loaded_modules::{loaded_modules, LoadedModule};
use crate::record::recorder::{with_recorder, RECORDER};
use crate::sinks::capture_sink::Resolved;
use crate::thread::hook_mode;

static RESOLVE_QUEUED: AtomicBool = AtomicBool::new(false);

extern "C" fn resolve_pending(_arg: *mut c_void) -> c_int {
    RESOLVE_QUEUED.store(false, Ordering::Release);
    // SAFETY: Python runs pending calls on the main thread with the GIL held.
    let py = unsafe { Python::assume_attached() };
    resolve_new_stacks(py);
    0
}

/// Asks the main thread to resolve the stacks interned since the last resolution.
pub(crate) fn queue_resolution() {
    if RESOLVE_QUEUED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: Py_AddPendingCall may be called from any thread without the GIL; the
    // callback is a plain function that never raises.
    if unsafe { ffi::Py_AddPendingCall(Some(resolve_pending), std::ptr::null_mut()) } != 0 {
        RESOLVE_QUEUED.store(false, Ordering::Release);
    }
}

/// In a forked child: a resolution the parent had queued is not the child's to wait for.
pub(crate) fn forget_queued() {
    RESOLVE_QUEUED.store(false, Ordering::Release);
}

/// The objects loaded, as last listed (by stack resolution, with the GIL).
static MODULES: Mutex<Vec<LoadedModule>> = Mutex::new(Vec::new());

/// The loaded object holding `ip` (listing them again when none does). Never called
/// with the recorder locked: listing takes the loader's lock.
fn module_of(ip: u64) -> Option<LoadedModule> {
    let mut modules = MODULES.lock().unwrap_or_else(|e| e.into_inner());
    let probe = ip.saturating_sub(1);
    if let Some(m) = modules.iter().find(|m| m.contains(probe)) {
        return Some(m.clone());
    }
    *modules = loaded_modules();
    modules.iter().find(|m| m.contains(probe)).cloned()
}

/// Writes Stack (and String/Frame) records for every stack interned since the last call.
/// Runs with the GIL (a pending call, or `stop_capture`).
pub(crate) fn resolve_new_stacks(py: Python<'_>) {
    hook_mode::untraced(|| {
        let (from, nodes, _held) = {
            let guard = RECORDER.lock();
            let Some(rec) = guard.as_ref() else { return };
            let Some(sink) = rec.capture.as_ref() else {
                return;
            };
            let from = sink.resolved_upto();
            let to = rec.stacks.len();
            if from >= to {
                return;
            }
            let nodes: Vec<(u32, u32, RawFrame)> = ((from + 1)..=to)
                .filter_map(|id| {
                    let n = rec.stacks.node(id as u32)?;
                    Some((
                        id as u32,
                        n.parent,
                        RawFrame {
                            code: n.code,
                            lasti: n.lasti,
                        },
                    ))
                })
                .collect();
            let ids: Vec<u32> = nodes.iter().map(|n| n.0).collect();
            let held = HeldCodes::hold(py, &rec.stacks, ids.iter(), 1);
            (from, nodes, held)
        };
        let mut resolver = FrameResolver::new(py);
        let resolved: Vec<(u32, u32, Resolved)> = nodes
            .iter()
            .map(|&(id, parent, f)| {
                let frame = match memtape_core::native_frame_ip(f.code) {
                    Some(ip) => Resolved::Native(ip, module_of(ip)),
                    None => {
                        let (file, name) = resolver.names(f.code).clone();
                        Resolved::Python(file, name, resolver.line(f))
                    }
                };
                (id, parent, frame)
            })
            .collect();
        with_recorder(|rec| {
            let Some(sink) = rec.capture.as_mut() else {
                return;
            };
            sink.write_stacks(from, &resolved);
        });
    });
}
