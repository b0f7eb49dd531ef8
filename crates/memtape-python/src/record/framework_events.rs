//! Events that frameworks report: capture a traceback now, attribute later (op
//! contexts), and record caching-allocator events. Shared by the Python functions
//! ([`crate::api::framework_api`]), the C ABI and the MLX allocator.

use std::fmt;
use std::sync::atomic::Ordering;

use memtape_core::{Action, AllocatorReport, Event, StackId, EMPTY_STACK};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::record::capture;
use crate::record::op_context::{self, OpContext, TracebackHandle, NO_TRACEBACK};
use crate::record::recorder::{with_recorder, Recorder, EVENTS_RECORDING};
use crate::record::repeat_alloc::repeat_traceback;
use crate::thread::{hook_mode, thread_id};

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

/// Whether events are being recorded, read without the lock: while they are not,
/// [`capture_traceback_now`] has nothing to do.
#[inline(always)]
pub(crate) fn recording_events() -> bool {
    EVENTS_RECORDING.load(Ordering::Acquire)
}

/// The calling thread's stack, interned; only while events are recorded (else
/// [`NO_TRACEBACK`], at once: the stack is not read). Without the GIL the thread's last
/// captured stack is used.
pub(crate) fn capture_traceback_now() -> TracebackHandle {
    // Frameworks call this at every array they create, recording or not: off, it costs
    // one load. A recording stopped after this check is seen under the lock below.
    if !recording_events() {
        return NO_TRACEBACK;
    }
    let thread = hook_mode::thread();
    if let Some(t) = thread {
        t.count_traceback_read();
    }
    let tstate = hook_mode::tstate_if_holding_gil(thread);
    if let Some(handle) = thread.and_then(|t| repeat_traceback(t, tstate)) {
        return handle;
    }
    let walked = capture::walk(thread, tstate);
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
    let walked = (op_context::current().is_none() && crate::record::recorder::events_recording())
        .then(|| {
            let thread = hook_mode::thread();
            let walked = capture::walk(thread, hook_mode::tstate_if_holding_gil(thread));
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
    let thread = thread_id::current();
    with_recorder(|rec| {
        // Under the lock: a recording that exists has decided what a tick is.
        let time_ns = crate::record::event_clock::ticks();
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
