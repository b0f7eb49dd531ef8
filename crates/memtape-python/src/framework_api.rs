//! The framework API: capture a traceback now, attribute later (op contexts), and report
//! caching-allocator events. Shared by the Python functions and the C ABI.

use std::fmt;

use memtape_core::{Action, AllocatorReport, Event, StackId, EMPTY_STACK};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::op_context::{self, OpContext, TracebackHandle, NO_TRACEBACK};
use crate::own_work::own_work;
use crate::recorder::{with_recorder, Recorder};
use crate::{capture, thread_id, thread_state};

/// Why a framework call was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrameworkError {
    /// An argument is malformed (unknown action, ...).
    InvalidArgument(String),
    /// The report contradicts what the allocator reported before.
    Rejected(String),
    /// The traceback id belongs to an earlier recording.
    StaleTraceback(TracebackHandle),
}

impl fmt::Display for FrameworkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidArgument(m) | Self::Rejected(m) => f.write_str(m),
            Self::StaleTraceback(h) => write!(
                f,
                "stale traceback id {h}: it was captured before the recording was restarted \
                 or cleared; capture it again with capture_traceback()"
            ),
        }
    }
}

impl FrameworkError {
    /// The C ABI's error code.
    pub(crate) fn code(&self) -> i32 {
        match self {
            Self::InvalidArgument(_) => -1,
            Self::Rejected(_) => -2,
            Self::StaleTraceback(_) => -3,
        }
    }
}

impl From<FrameworkError> for PyErr {
    fn from(e: FrameworkError) -> PyErr {
        PyValueError::new_err(e.to_string())
    }
}

/// The calling thread's stack, interned; only while events are recorded (else
/// [`NO_TRACEBACK`]). Without the GIL the thread's last captured stack is used.
pub(crate) fn capture_traceback_now() -> TracebackHandle {
    let walked = capture::walk(
        crate::hook_mode::thread(),
        thread_state::attached_if_holding_gil(),
    );
    with_recorder(|rec| {
        if !rec.events.as_ref().is_some_and(|e| e.recording) {
            return NO_TRACEBACK;
        }
        let stack = walked.intern(rec);
        op_context::handle(rec.generation, stack)
    })
}

/// Enters an op context on the calling thread.
pub(crate) fn push_op(name: &str, traceback: TracebackHandle) -> Result<(), FrameworkError> {
    let op = with_recorder(|rec| {
        op_context::resolve(traceback, rec.generation)
            .ok_or(FrameworkError::StaleTraceback(traceback))?;
        Ok(rec.ops.intern(name))
    })?;
    op_context::push(OpContext { op, traceback });
    Ok(())
}

/// Leaves the innermost op context of the calling thread.
pub(crate) fn pop_op() -> Result<(), FrameworkError> {
    if op_context::pop() {
        Ok(())
    } else {
        Err(FrameworkError::InvalidArgument(
            "no op context to leave on this thread".into(),
        ))
    }
}

/// A caching-allocator report as callers give it.
pub(crate) struct Report {
    pub(crate) action: Action,
    pub(crate) addr: u64,
    pub(crate) size: u64,
    pub(crate) requested_size: Option<u64>,
    pub(crate) device: i32,
    pub(crate) stream: u64,
}

fn attribute(
    rec: &mut Recorder,
    ctx: Option<OpContext>,
    walked: Option<(capture::Walked<'_>, bool)>,
) -> (StackId, u32) {
    let own = match walked {
        Some((w, true)) => w.intern(rec),
        Some((w, false)) => {
            // A thread's own frames walked while it runs C code without the GIL.
            rec.without_gil = true;
            let id = w.intern(rec);
            rec.without_gil = false;
            id
        }
        None => EMPTY_STACK,
    };
    rec.attributed_stack(ctx, own)
}

/// An op context for the op named `op` (interned when it is a name, else an id from an
/// earlier call) with the stack the caller walked (with the GIL held), under one lock:
/// what a lazy framework keeps with an array it creates.
pub(crate) fn op_context_now(op: OpName<'_>, walked: Option<capture::Walked<'_>>) -> OpContext {
    with_recorder(|rec| {
        let traceback = match walked {
            Some(w) => op_context::handle(rec.generation, w.intern(rec)),
            None => NO_TRACEBACK,
        };
        let op = match op {
            OpName::Name(name) => rec.ops.intern(name),
            OpName::Id(id) => id,
        };
        OpContext { op, traceback }
    })
}

/// An op's name, or its id once interned (ids last as long as the process).
pub(crate) enum OpName<'a> {
    Name(&'a str),
    Id(u32),
}

/// Checks a report against the allocator's state, applies it and records the event.
pub(crate) fn record_allocator_event_checked(r: &Report) -> Result<(), FrameworkError> {
    // With no op context, attribute to where we are: walk now (before the lock) when
    // this thread holds the GIL; otherwise the thread's last captured stack.
    let walked =
        (op_context::current().is_none() && crate::recorder::events_recording()).then(|| {
            let walked = capture::walk(
                crate::hook_mode::thread(),
                thread_state::attached_if_holding_gil(),
            );
            (walked, true)
        });
    record_allocator_event_walked(r, op_context::current(), walked, None)
}

/// Records a report whose stack (when there is no op context) was walked by the caller:
/// `(walked, true)` with the GIL held, `(walked, false)` from the thread's own frames
/// without it. With `capture_domain`, active buffers also go to the capture file (for
/// `memtape run`) as blocks of that domain.
pub(crate) fn record_allocator_event_walked(
    r: &Report,
    ctx: Option<OpContext>,
    walked: Option<(capture::Walked<'_>, bool)>,
    capture_domain: Option<u32>,
) -> Result<(), FrameworkError> {
    if r.action.is_python_heap() {
        return Err(FrameworkError::InvalidArgument(format!(
            "{} is recorded by memtape's own hooks; frameworks report {}",
            r.action.name(),
            FRAMEWORK_ACTIONS
        )));
    }
    let time_ns = thread_id::now_ns();
    let thread = thread_id::current();
    with_recorder(|rec| {
        if let Some(ctx) = ctx {
            if op_context::resolve(ctx.traceback, rec.generation).is_none() {
                return Err(FrameworkError::StaleTraceback(ctx.traceback));
            }
        }
        let (stack, op) = attribute(rec, ctx, walked);
        let applied = rec
            .allocators
            .apply(&AllocatorReport {
                action: r.action,
                device: r.device,
                addr: r.addr,
                size: r.size,
                requested_size: r.requested_size,
                stream: r.stream,
                stack,
                op,
            })
            .map_err(|e| FrameworkError::Rejected(e.to_string()))?;
        if let (Some(domain), Some(sink)) = (capture_domain, rec.capture.as_mut()) {
            match r.action {
                Action::AllocNew | Action::AllocReuse | Action::AllocMakeBuffer => {
                    sink.alloc(domain, r.addr, applied.size, stack)
                }
                Action::FreeActiveToCache | Action::FreeActiveToOs | Action::Release => {
                    sink.free(domain, r.addr, applied.size)
                }
                _ => {}
            }
        }
        rec.push_framework_event(Event {
            action: r.action,
            addr: r.addr,
            size: applied.size,
            requested_size: applied.requested_size,
            device: r.device,
            stream: r.stream,
            thread,
            time_ns,
            stack,
            op,
        });
        Ok(())
    })
}

/// The actions frameworks report, for messages.
pub(crate) const FRAMEWORK_ACTIONS: &str =
    "AllocNew, AllocReuse, AllocMakeBuffer, FreeActiveToCache, FreeActiveToOS, Release or FreeCacheToOS";

/// capture_traceback() -> int
///
/// The current Python stack as an id to hand to `op_context` later (0 while events are
/// not being recorded). Ids go stale when a new recording starts.
#[pyfunction]
pub(crate) fn capture_traceback(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    own_work(py, || Ok(capture_traceback_now()))
}

/// Enters an op context (use `memtape.op_context`).
#[pyfunction]
pub(crate) fn _push_op<'py>(
    py: Python<'py>,
    name: &str,
    traceback: TracebackHandle,
) -> PyResult<Bound<'py, PyAny>> {
    own_work(py, || Ok(push_op(name, traceback)?))
}

/// Leaves the innermost op context (use `memtape.op_context`).
#[pyfunction]
pub(crate) fn _pop_op(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    own_work(py, || Ok(pop_op()?))
}

fn whole(value: &Bound<'_, PyAny>, name: &str, max: u128) -> PyResult<u64> {
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an integer, not bool"
        )));
    }
    let index = value.call_method0("__index__").map_err(|_| {
        let ty = value
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        PyTypeError::new_err(format!("{name} must be an integer, not {ty}"))
    })?;
    let n: i128 = index.extract().map_err(|_| {
        PyValueError::new_err(format!("{name} is out of range: expected 0 to {max}"))
    })?;
    if n < 0 {
        return Err(PyValueError::new_err(format!(
            "{name} must be >= 0, got {n}"
        )));
    }
    if n as u128 > max {
        return Err(PyValueError::new_err(format!(
            "{name} is out of range: expected 0 to {max}"
        )));
    }
    Ok(n as u64)
}

/// record_allocator_event(action, address, size, *, device=0, stream=0, requested_size=None)
///
/// Reports one caching-allocator event: AllocNew, AllocReuse, AllocMakeBuffer,
/// FreeActiveToCache, FreeActiveToOS, Release or FreeCacheToOS. A report that contradicts
/// earlier ones raises ValueError and changes nothing.
#[pyfunction]
#[pyo3(signature = (action, address, size, *, device=None, stream=None, requested_size=None))]
pub(crate) fn record_allocator_event<'py>(
    py: Python<'py>,
    action: &Bound<'py, PyAny>,
    address: &Bound<'py, PyAny>,
    size: &Bound<'py, PyAny>,
    device: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
    requested_size: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    own_work(py, || {
        report_from_python(action, address, size, device, stream, requested_size)
    })
}

fn report_from_python(
    action: &Bound<'_, PyAny>,
    address: &Bound<'_, PyAny>,
    size: &Bound<'_, PyAny>,
    device: Option<&Bound<'_, PyAny>>,
    stream: Option<&Bound<'_, PyAny>>,
    requested_size: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let name: String = action.extract().map_err(|_| {
        let ty = action
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        PyTypeError::new_err(format!("action must be a str, not {ty}"))
    })?;
    let action = Action::from_name(&name)
        .filter(|a| !a.is_python_heap())
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown allocator action '{name}': expected one of {FRAMEWORK_ACTIONS}"
            ))
        })?;
    let addr = whole(address, "address", u128::from(u64::MAX))?;
    let size = whole(size, "size", (1u128 << 53) - 1)?;
    let device = match device {
        Some(d) => whole(d, "device", i32::MAX as u128)? as i32,
        None => 0,
    };
    let stream = match stream {
        Some(s) => whole(s, "stream", (1u128 << 53) - 1)?,
        None => 0,
    };
    let requested_size = match requested_size {
        Some(r) if !r.is_none() => Some(whole(r, "requested_size", (1u128 << 53) - 1)?),
        _ => None,
    };
    Ok(record_allocator_event_checked(&Report {
        action,
        addr,
        size,
        requested_size,
        device,
        stream,
    })?)
}
