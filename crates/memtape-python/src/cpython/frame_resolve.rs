//! Turning `(code object, instruction offset)` into `(filename, function, line)`, off the
//! hot path, with the GIL held.

use memtape_core::{native_frame_ip, StackId, StackTable};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::cpython::frames::RawFrame;

/// Strong references on code objects, taken under the recorder lock and dropped when this
/// goes out of scope (with the GIL held), so resolving never reads a freed code object.
#[derive(Default)]
pub(crate) struct HeldCodes(Vec<usize>);

impl HeldCodes {
    /// Takes a reference on every code object used by the first `limit` frames of
    /// `stacks`. Call with the recorder locked (its stack table keeps them alive) and the
    /// GIL held (proved by `_py`).
    pub(crate) fn hold<'a>(
        _py: Python<'_>,
        table: &StackTable,
        stacks: impl IntoIterator<Item = &'a StackId>,
        limit: usize,
    ) -> Self {
        let mut codes = FxHashSet::default();
        for &id in stacks {
            codes.extend(
                table
                    .frames(id, limit)
                    .map(|n| n.code)
                    .filter(|&c| native_frame_ip(c).is_none()),
            );
        }
        let codes: Vec<usize> = codes.into_iter().collect();
        for &code in &codes {
            // SAFETY: the stack table holds a reference on each of its code objects and
            // the GIL is held, so the object is alive; INCREF neither allocates nor runs code.
            unsafe { ffi::Py_INCREF(code as *mut ffi::PyObject) };
        }
        Self(codes)
    }
}

impl Drop for HeldCodes {
    fn drop(&mut self) {
        for code in self.0.drain(..) {
            // SAFETY: one reference was taken in `hold`; `HeldCodes` never leaves the
            // GIL-holding call that created it.
            unsafe { ffi::Py_DECREF(code as *mut ffi::PyObject) };
        }
    }
}

/// Resolves frames of held code objects, caching per code object and per frame.
pub(crate) struct FrameResolver<'py> {
    py: Python<'py>,
    codes: FxHashMap<usize, (String, String)>,
    lines: FxHashMap<RawFrame, u32>,
}

fn string_attr(obj: &Bound<'_, PyAny>, name: &str) -> Option<String> {
    let value = obj.getattr(name).ok()?;
    let s = value.cast_into::<PyString>().ok()?;
    Some(s.to_string_lossy().into_owned())
}

impl<'py> FrameResolver<'py> {
    pub(crate) fn new(py: Python<'py>) -> Self {
        Self {
            py,
            codes: FxHashMap::default(),
            lines: FxHashMap::default(),
        }
    }

    /// `(co_filename, co_qualname)`; `<unknown>` where they are not strings. A native
    /// frame reads as `(module path, function)` (see [`native_names`]).
    pub(crate) fn names(&mut self, code: usize) -> &(String, String) {
        let py = self.py;
        self.codes.entry(code).or_insert_with(|| {
            if let Some(ip) = native_frame_ip(code) {
                return native_names(ip);
            }
            // SAFETY: `code` is held by a live `HeldCodes` and the GIL is held.
            let obj = unsafe { Bound::from_borrowed_ptr(py, code as *mut ffi::PyObject) };
            let file = string_attr(&obj, "co_filename").unwrap_or_else(|| "<unknown>".into());
            let name = string_attr(&obj, "co_qualname")
                .or_else(|| string_attr(&obj, "co_name"))
                .unwrap_or_else(|| "<unknown>".into());
            (file, name)
        })
    }

    /// The line of a frame (0 when unknown, and for native frames).
    pub(crate) fn line(&mut self, f: RawFrame) -> u32 {
        if native_frame_ip(f.code).is_some() {
            return 0;
        }
        *self.lines.entry(f).or_insert_with(|| {
            // SAFETY: `f.code` is held by a live `HeldCodes` and the GIL is held;
            // PyCode_Addr2Line only reads the line table.
            let line = unsafe {
                ffi::PyCode_Addr2Line(f.code as *mut ffi::PyCodeObject, f.lasti.saturating_mul(2))
            };
            u32::try_from(line).unwrap_or(0)
        })
    }
}

/// The first `limit` frames of a stack, innermost first.
pub(crate) fn raw_frames(table: &StackTable, stack: StackId, limit: usize) -> Vec<RawFrame> {
    table
        .frames(stack, limit)
        .map(|n| RawFrame {
            code: n.code,
            lasti: n.lasti,
        })
        .collect()
}

/// A native frame of this process as the loader names it: `(module path, symbol)`, the
/// symbol being `module+0xoffset` where the module exports none near `ip` (live views
/// only; captures are symbolized at report time, with debug information).
pub(crate) fn native_names(ip: u64) -> (String, String) {
    // SAFETY: dladdr only reads the loader's tables; `info` is read only on success, and
    // its strings are owned by the loader (copied out right away).
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let probe = ip.saturating_sub(1) as *const libc::c_void;
        if libc::dladdr(probe, &mut info) == 0 || info.dli_fname.is_null() {
            return ("<native>".to_owned(), format!("{ip:#x}"));
        }
        let path = std::ffi::CStr::from_ptr(info.dli_fname)
            .to_string_lossy()
            .into_owned();
        let name = if info.dli_sname.is_null() {
            let short = path.rsplit('/').next().unwrap_or(&path);
            format!("{short}+{:#x}", ip - info.dli_fbase as u64)
        } else {
            std::ffi::CStr::from_ptr(info.dli_sname)
                .to_string_lossy()
                .into_owned()
        };
        (path, name)
    }
}
