//! MLX's lazy graph, watched: the line that created each array and its primitive, and
//! the array each buffer is put into, so that a buffer allocated inside `eval` is
//! attributed to the line that created its array.
//!
//! `libmlx.so` calls the constructors and destructor of `array::ArrayDesc` (one per graph
//! node) and `array::set_data` through its PLT, so the native patcher routes them here:
//!
//! - `ArrayDesc(Shape, Dtype, shared_ptr<Primitive>, vector<array>)` builds a lazy node.
//!   It runs on the thread that called the op, with the GIL held when the op was called
//!   from Python: the Python stack is captured then (an op called without the GIL keeps
//!   only its primitive). The primitive's name is its C++ class name, read from the
//!   type info its vtable points to (the Itanium ABI: vtable[-1] is the type info,
//!   whose second word is the mangled name), so nothing of MLX is called.
//! - `ArrayDesc(Shape, Dtype)` (arrays made from data) and `~ArrayDesc()` forget what
//!   was kept for the address.
//! - `array::set_data(Data, ...)`, called by a primitive's `eval_cpu` with a buffer just
//!   allocated, joins the buffer to the node (see [`mlx_buffer_events::joined`]).
//!
//! Every argument is passed on unchanged: on x86-64 and aarch64 the non-trivial C++
//! arguments (`Shape`, `shared_ptr`, `vector`, `Data`, `Strides`) travel as pointers and
//! the small trivial ones (`Dtype`, `Flags`, sizes) in one integer register each, so each
//! hook forwards its registers as words.

use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rustc_hash::FxHashMap;

use super::mlx_buffer_events;
use crate::cpython::thread_state;
use crate::record::capture;
use crate::record::framework_events::{self, OpName};
use crate::record::op_context::OpContext;
use crate::record::spin_lock::{SpinGuard, SpinLock};
use crate::thread::hook_mode;

/// The functions hooked, in [`hook_addresses`]' order.
pub(crate) const NAMES: [&CStr; 5] = [
    c"_ZN3mlx4core5array9ArrayDescC1ENS0_11SmallVectorIiLm10ESaIiEEENS0_5DtypeESt10shared_ptrINS0_9PrimitiveEESt6vectorIS1_SaIS1_EE",
    c"_ZN3mlx4core5array9ArrayDescC1ENS0_11SmallVectorIiLm10ESaIiEEENS0_5DtypeE",
    c"_ZN3mlx4core5array9ArrayDescD1Ev",
    c"_ZN3mlx4core5array8set_dataENS0_9allocator4DataE",
    c"_ZN3mlx4core5array8set_dataENS0_9allocator4DataEmNS0_11SmallVectorIlLm10ESaIlEEENS1_5FlagsEl",
];
const NODE: usize = 0;
const LEAF: usize = 1;
const DROP: usize = 2;
const SET_DATA: usize = 3;
const SET_DATA_VIEW: usize = 4;

/// MLX's own functions, set before any slot points here.
static REAL: [AtomicUsize; 5] = [const { AtomicUsize::new(0) }; 5];
/// True while arrays are followed.
static WATCHING: AtomicBool = AtomicBool::new(false);

/// What is kept about the graph.
#[derive(Default)]
struct Graph {
    /// Each live node's op context (creation stack and primitive), by `ArrayDesc` address.
    created: FxHashMap<usize, OpContext>,
    /// Primitive op ids (their class names, interned) by vtable address.
    ops: FxHashMap<usize, u32>,
}

static GRAPH: SpinLock<Option<Graph>> = SpinLock::new(None);

fn graph() -> SpinGuard<'static, Option<Graph>> {
    GRAPH.lock()
}

/// Before `fork()` (after the allocator's lock, before the recorder's).
pub(crate) fn prepare_fork() {
    GRAPH.acquire_for_fork();
}

/// After `fork()`, in both processes.
pub(crate) fn after_fork() {
    GRAPH.release_after_fork();
}

type Words3 = unsafe extern "C" fn(usize, usize, usize);
type Words5 = unsafe extern "C" fn(usize, usize, usize, usize, usize);
type Words6 = unsafe extern "C" fn(usize, usize, usize, usize, usize, usize);
type Word = unsafe extern "C" fn(usize);
type Words2 = unsafe extern "C" fn(usize, usize);

/// MLX's function `i` as `F`.
///
/// # Safety
/// `F` must be a signature that passes function `i`'s arguments in the same registers.
unsafe fn real<F: Copy>(i: usize) -> F {
    let f = REAL[i].load(Ordering::Acquire);
    // SAFETY: guaranteed by the caller; `f` was resolved before the slot was patched.
    unsafe { std::mem::transmute_copy::<usize, F>(&f) }
}

/// The last name in an Itanium mangled class name (`N3mlx4core3ExpE` -> `Exp`).
fn class_name(mangled: &str) -> &str {
    let s = mangled.trim_start_matches('*');
    let mut rest = s.strip_prefix('N').unwrap_or(s);
    let mut last = s;
    while let Some(digits) = rest.find(|c: char| !c.is_ascii_digit()).filter(|&n| n > 0) {
        let Ok(len) = rest[..digits].parse::<usize>() else {
            break;
        };
        let Some(name) = rest.get(digits..digits + len) else {
            break;
        };
        last = name;
        rest = &rest[digits + len..];
    }
    last
}

/// The class name of the C++ object whose vtable is at `vtable`.
///
/// # Safety
/// `vtable` must be the vtable of a polymorphic class compiled with RTTI.
unsafe fn class_of(vtable: usize) -> String {
    // SAFETY: guaranteed by the caller: the word before the vtable's first function is
    // the type info, whose second word is the mangled name (a NUL-terminated string in
    // the object's read-only data).
    unsafe {
        let type_info = *((vtable - 8) as *const usize);
        if type_info == 0 {
            return String::new();
        }
        let mangled = *((type_info + 8) as *const *const c_char);
        CStr::from_ptr(mangled)
            .to_str()
            .map(|m| class_name(m).to_owned())
            .unwrap_or_default()
    }
}

/// A node was built at `desc` with the primitive object at `primitive`.
fn node_created(desc: usize, primitive: usize) {
    let mut guard = graph();
    let Some(g) = guard.as_mut() else {
        return;
    };
    // Watching means something records (events or a capture): no need to ask.
    if primitive == 0 {
        g.created.remove(&desc);
        return;
    }
    // SAFETY: a node's primitive is a live `mlx::core::Primitive` (polymorphic, RTTI):
    // its first word is its vtable pointer.
    let vtable = unsafe { *(primitive as *const usize) };
    let held = thread_state::attached_if_holding_gil();
    let walked = if held.is_null() {
        None
    } else {
        hook_mode::thread().map(|t| capture::walk(Some(t), held))
    };
    let ctx = match g.ops.get(&vtable) {
        Some(&id) => framework_events::op_context_now(OpName::Id(id), walked),
        None => {
            // SAFETY: as above.
            let name = unsafe { class_of(vtable) };
            let ctx = framework_events::op_context_now(OpName::Name(&name), walked);
            g.ops.insert(vtable, ctx.op);
            ctx
        }
    };
    g.created.insert(desc, ctx);
}

fn forget(desc: usize) {
    if let Some(g) = graph().as_mut() {
        g.created.remove(&desc);
    }
}

/// `array::set_data` on the array at `array` with the `Data` at `data`.
///
/// # Safety
/// `array` points to an `mlx::core::array` (its first word the `ArrayDesc` pointer of its
/// `shared_ptr`), `data` to an `allocator::Data` (its first word the buffer pointer).
unsafe fn set_data_seen(array: usize, data: usize) {
    // SAFETY: guaranteed by the caller.
    let (desc, buffer) = unsafe { (*(array as *const usize), *(data as *const usize)) };
    if buffer == 0 {
        return;
    }
    mlx_buffer_events::joined(buffer as u64, || {
        graph().as_mut().and_then(|g| g.created.remove(&desc))
    });
}

unsafe extern "C" fn node_hook(
    this: usize,
    shape: usize,
    dtype: usize,
    primitive: usize,
    inputs: usize,
) {
    // Read before the constructor moves the shared_ptr out of its argument.
    // SAFETY: `primitive` points to the caller's `shared_ptr<Primitive>` (first word: the
    // object pointer).
    let object = if primitive == 0 {
        0
    } else {
        unsafe { *(primitive as *const usize) }
    };
    // SAFETY: MLX's constructor with the caller's arguments.
    unsafe { real::<Words5>(NODE)(this, shape, dtype, primitive, inputs) };
    if WATCHING.load(Ordering::Relaxed) {
        node_created(this, object);
    }
}

unsafe extern "C" fn leaf_hook(this: usize, shape: usize, dtype: usize) {
    // SAFETY: MLX's constructor with the caller's arguments.
    unsafe { real::<Words3>(LEAF)(this, shape, dtype) };
    if WATCHING.load(Ordering::Relaxed) {
        forget(this);
    }
}

unsafe extern "C" fn drop_hook(this: usize) {
    if WATCHING.load(Ordering::Relaxed) {
        forget(this);
    }
    // SAFETY: MLX's destructor with the caller's argument.
    unsafe { real::<Word>(DROP)(this) }
}

unsafe extern "C" fn set_data_hook(this: usize, data: usize) {
    if WATCHING.load(Ordering::Relaxed) {
        // SAFETY: `this` is the array, `data` the `Data` passed by reference.
        unsafe { set_data_seen(this, data) };
    }
    // SAFETY: MLX's function with the caller's arguments.
    unsafe { real::<Words2>(SET_DATA)(this, data) }
}

unsafe extern "C" fn set_data_view_hook(
    this: usize,
    data: usize,
    data_size: usize,
    strides: usize,
    flags: usize,
    offset: usize,
) {
    if WATCHING.load(Ordering::Relaxed) {
        // SAFETY: as in `set_data_hook`.
        unsafe { set_data_seen(this, data) };
    }
    // SAFETY: MLX's function with the caller's arguments.
    unsafe { real::<Words6>(SET_DATA_VIEW)(this, data, data_size, strides, flags, offset) }
}

/// Our hook for each of [`NAMES`].
pub(crate) fn hook_addresses() -> [usize; 5] {
    [
        node_hook as *const () as usize,
        leaf_hook as *const () as usize,
        drop_hook as *const () as usize,
        set_data_hook as *const () as usize,
        set_data_view_hook as *const () as usize,
    ]
}

/// Starts following arrays with MLX's functions `reals` (in [`NAMES`]' order).
pub(crate) fn watch(reals: &[usize; 5]) {
    for (slot, &f) in REAL.iter().zip(reals) {
        slot.store(f, Ordering::Release);
    }
    *graph() = Some(Graph::default());
    WATCHING.store(true, Ordering::Release);
}

/// Stops following arrays (the hooks keep forwarding for calls still reaching them).
pub(crate) fn unwatch() {
    WATCHING.store(false, Ordering::Release);
    *graph() = None;
}

#[cfg(test)]
mod tests {
    use super::class_name;

    #[test]
    fn class_names_from_mangled_names() {
        assert_eq!(class_name("N3mlx4core3ExpE"), "Exp");
        assert_eq!(class_name("N3mlx4core6MatmulE"), "Matmul");
        assert_eq!(class_name("*N3mlx4core12_GLOBAL__N_15ThingE"), "Thing");
        assert_eq!(class_name("5Plain"), "Plain");
        assert_eq!(class_name("weird"), "weird");
    }
}
