//! A forwarding `mlx::core::allocator::Allocator`: every call goes to MLX's own allocator
//! unchanged, and what it did is reported as a caching-allocator event
//! ([`mlx_buffer_events`](super::mlx_buffer_events)).
//!
//! The object is laid out as the Itanium C++ ABI lays out a class with one vtable
//! pointer: the vtable holds `malloc(size)`, `free(Buffer)`, `size(Buffer) const`,
//! `make_buffer(void*, size)`, `release(Buffer)` and the two destructors, in that order
//! (`mlx/allocator.h`, checked for 0.32.4). `Buffer` wraps one pointer and is trivially
//! copyable, so it travels in a register like a plain pointer.
//!
//! MLX's `std::malloc` beneath a cache miss is one block in one domain: the real call
//! runs under [`beneath_wrapper`], so native tracing does not record it again.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use super::beneath_wrapper;
use super::mlx_buffer_events::{self as events, reporting};

type MallocFn = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
type BufferFn = unsafe extern "C" fn(*mut c_void, *mut c_void);
type SizeFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> usize;
type MakeBufferFn = unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void;

/// Vtable slots of `mlx::core::allocator::Allocator`.
mod slot {
    pub(super) const MALLOC: usize = 0;
    pub(super) const FREE: usize = 1;
    pub(super) const SIZE: usize = 2;
    pub(super) const MAKE_BUFFER: usize = 3;
    pub(super) const RELEASE: usize = 4;
    pub(super) const COUNT: usize = 7;
}

/// An Itanium vtable: offset to top, type info, then the virtual functions.
#[repr(C)]
struct VTable {
    offset_to_top: isize,
    type_info: usize,
    functions: [usize; slot::COUNT],
}

/// The forwarding object: only a vtable pointer, as MLX's callers expect.
#[repr(C)]
pub(crate) struct Forwarder {
    vptr: usize,
}

static VTABLE: OnceLock<VTable> = OnceLock::new();
static FORWARDER: OnceLock<Forwarder> = OnceLock::new();

/// MLX's own allocator object (set once; the same object for the life of the process).
static REAL: AtomicUsize = AtomicUsize::new(0);

/// The real object's virtual function `index`, as a function of type `F`.
///
/// # Safety
/// `REAL` must hold MLX's allocator object and `F` be the type of slot `index`.
unsafe fn real_fn<F: Copy>(index: usize) -> (*mut c_void, F) {
    let object = REAL.load(Ordering::Acquire) as *mut c_void;
    // SAFETY: the object starts with its vtable pointer; the vtable has the slots above.
    unsafe {
        let vtable = *(object as *const *const usize);
        let f = *vtable.add(index);
        (object, std::mem::transmute_copy::<usize, F>(&f))
    }
}

/// `size(Buffer)`: MLX's size of a buffer (0 for a null one).
pub(crate) fn real_size(buffer: *mut c_void) -> u64 {
    // SAFETY: slot SIZE has this type; the buffer came from (or goes to) the allocator.
    unsafe {
        let (object, size) = real_fn::<SizeFn>(slot::SIZE);
        size(object, buffer) as u64
    }
}

unsafe extern "C" fn forward_malloc(_this: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: slot MALLOC has this type; arguments are passed unchanged.
    let (object, malloc) = unsafe { real_fn::<MallocFn>(slot::MALLOC) };
    if !reporting() {
        return unsafe { malloc(object, size) };
    }
    events::malloc_reported(
        size,
        || beneath_wrapper(|| unsafe { malloc(object, size) }),
        real_size,
    )
}

unsafe extern "C" fn forward_free(_this: *mut c_void, buffer: *mut c_void) {
    // SAFETY: slot FREE has this type; arguments are passed unchanged.
    let (object, free) = unsafe { real_fn::<BufferFn>(slot::FREE) };
    if !reporting() || buffer.is_null() {
        return unsafe { free(object, buffer) };
    }
    events::free_reported(
        buffer,
        || beneath_wrapper(|| unsafe { free(object, buffer) }),
        real_size,
    );
}

unsafe extern "C" fn forward_size(_this: *mut c_void, buffer: *mut c_void) -> usize {
    real_size(buffer) as usize
}

unsafe extern "C" fn forward_make_buffer(
    _this: *mut c_void,
    ptr: *mut c_void,
    size: usize,
) -> *mut c_void {
    // SAFETY: slot MAKE_BUFFER has this type; arguments are passed unchanged.
    let (object, make_buffer) = unsafe { real_fn::<MakeBufferFn>(slot::MAKE_BUFFER) };
    let buffer = unsafe { make_buffer(object, ptr, size) };
    // MLX's CPU allocator keeps the base class's `make_buffer`, which wraps nothing
    // (null: the caller copies into a `malloc`ed buffer instead).
    if reporting() && !buffer.is_null() && size > 0 {
        events::made_buffer(buffer, size);
    }
    buffer
}

unsafe extern "C" fn forward_release(_this: *mut c_void, buffer: *mut c_void) {
    // SAFETY: slot RELEASE has this type; arguments are passed unchanged.
    let (object, release) = unsafe { real_fn::<BufferFn>(slot::RELEASE) };
    if reporting() && !buffer.is_null() {
        events::released(buffer);
    }
    unsafe { release(object, buffer) }
}

/// The destructors: the object is a static that is never destroyed.
unsafe extern "C" fn forward_destroy(_this: *mut c_void) {}

/// Builds the forwarder around MLX's allocator `real` (whose vtable's type info it
/// borrows); returns its address.
///
/// # Safety
/// `real` must be MLX's allocator object, laid out as the module documentation says.
pub(crate) unsafe fn forwarder(real: usize) -> usize {
    REAL.store(real, Ordering::Release);
    let vtable = VTABLE.get_or_init(|| {
        // SAFETY: guaranteed by the caller: the vtable pointer is the object's first word,
        // and the type info sits just before the first virtual function.
        let type_info = unsafe { *(*(real as *const *const usize)).sub(1) };
        let mut functions = [forward_destroy as *const () as usize; slot::COUNT];
        functions[slot::MALLOC] = forward_malloc as *const () as usize;
        functions[slot::FREE] = forward_free as *const () as usize;
        functions[slot::SIZE] = forward_size as *const () as usize;
        functions[slot::MAKE_BUFFER] = forward_make_buffer as *const () as usize;
        functions[slot::RELEASE] = forward_release as *const () as usize;
        VTable {
            offset_to_top: 0,
            type_info,
            functions,
        }
    });
    let object = FORWARDER.get_or_init(|| Forwarder {
        vptr: vtable.functions.as_ptr() as usize,
    });
    object as *const Forwarder as usize
}
