//! Native stacks on request: the return addresses between the Python code that called
//! into C and the allocation, unwound from inside the hook without allocating.
//!
//! - The unwinder (framehop, DWARF CFI from each module's `.eh_frame_hdr`/`.eh_frame`
//!   read in place, with a frame-pointer fallback) is built off the hot path, when native
//!   stacks start and after every `dlopen`, and published as an immutable snapshot
//!   behind an atomic pointer: hooks only read it. Replaced snapshots are never freed (a
//!   hook may still be reading one); they are a few kilobytes per `dlopen`.
//! - framehop's per-unwind state (its rule cache and the DWARF evaluation space, with
//!   `MustNotAllocateDuringUnwind`) lives in a pool of caches allocated at start: a hook
//!   borrows one with a compare-and-swap, and skips the native stack if all are busy.
//!   Each holds several framehop caches used as one set-associative cache ([`RuleWays`]):
//!   return addresses that share a slot of framehop's direct-mapped cache keep their rules.
//! - Stack reads are bounded by the thread's stack: `[sp, top)`, where `top` comes from
//!   `pthread_getattr_np` once per thread (for the thread that starts native stacks, at
//!   start; for others, at their first native stack, with the thread untraced).
//!
//! What is kept: frames other than memtape's own (the hook, the launcher) and the
//! interpreter's own functions at either end (its allocating functions, see
//! [`Snapshot::interpreter`], and its call machinery), up to the
//! innermost `_PyEval_EvalFrameDefault` (the interpreter running the innermost Python
//! frame), which the Python stack continues. A thread with no Python frame keeps everything up to
//! [`MAX_NATIVE_FRAMES`].
//!
//! When the thread's Python stack spans several interpreter activations (C code called
//! back into Python: a ctypes callback, `qsort` calling a comparator), the unwind goes on
//! to the outermost one ([`capture_segments`]) and also keeps the C frames between two
//! `_PyEval_EvalFrameDefault` frames, less the interpreter's own functions at either end
//! of each such run (its call machinery), so the stack reads Python, C, Python, C.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use framehop::{FrameAddress, UnwindRegsNative, Unwinder};
use framehop::{Module, MustNotAllocateDuringUnwind, UnwinderNative};

use super::loaded_modules::loaded_modules;
use super::module_sections::{section_info, Data};
use super::rule_ways::RuleWays;
use crate::arch::unwind_registers;
use crate::thread::hook_mode;

/// The most native frames kept per stack.
pub(crate) const MAX_NATIVE_FRAMES: usize = 64;
/// The most frames walked per unwind (memtape's own and the kept ones).
const MAX_WALK: usize = 128;
/// The most interpreter activations a native stack is split at.
pub(crate) const MAX_CUTS: usize = 16;
/// Caches in the pool: more threads than this unwinding at once go without.
const CACHE_SLOTS: usize = 16;

type NativeUnwinder = UnwinderNative<Data, MustNotAllocateDuringUnwind>;

/// True while native stacks are captured: checked first (relaxed) by every capture.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// How many recordings asked for native stacks.
static USERS: AtomicUsize = AtomicUsize::new(0);

/// What the hooks unwind with (immutable once published).
struct Snapshot {
    unwinder: NativeUnwinder,
    /// memtape's own object: the hook's frames, skipped.
    ours: (u64, u64),
    /// `_PyEval_EvalFrameDefault`: where the Python stack takes over.
    eval: (u64, u64),
    /// The part of it that a compiler split off under no exported name, once found
    /// (`eval_probe`); (0, 0) if none.
    eval_split: (u64, u64),
    /// The interpreter's own object (libpython, or the executable when it is linked in):
    /// its functions at the innermost end of a stack (`PyObject_Malloc`, `PyList_New`,
    /// ...) are how the interpreter allocates for whatever called it, and are skipped, so
    /// a stack starts at the compiled code that called the interpreter, or at the Python
    /// line.
    interpreter: (u64, u64),
}

static SNAPSHOT: AtomicPtr<Snapshot> = AtomicPtr::new(std::ptr::null_mut());

struct CacheSlot {
    busy: AtomicBool,
    cache: UnsafeCell<Option<Box<RuleWays>>>,
}

// SAFETY: `cache` is written only by `fill_caches` (with every slot marked busy) and is
// otherwise used by the one thread that set `busy` (acquire) until it clears it (release).
unsafe impl Sync for CacheSlot {}

static CACHES: [CacheSlot; CACHE_SLOTS] = [const {
    CacheSlot {
        busy: AtomicBool::new(false),
        cache: UnsafeCell::new(None),
    }
}; CACHE_SLOTS];

thread_local! {
    // The top of this thread's stack (0: not known yet; 1: being looked up). No
    // destructor: touching it from a hook never registers anything.
    static STACK_TOP: Cell<u64> = const { Cell::new(0) };
}

/// Whether native stacks are being captured.
#[inline(always)]
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Held while native stacks start or stop: a recording that starts while another is
/// still building the unwinder waits for it, instead of finding itself counted and
/// capturing nothing until the unwinder is published (the GIL orders these calls on
/// CPython's default build; not on a free-threaded one, nor in this crate's tests).
static STARTING: Mutex<()> = Mutex::new(());

/// A recording starts capturing native stacks; the first builds the unwinder. Call from
/// ordinary code (it allocates).
pub(crate) fn enable() {
    let _one_at_a_time = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    if USERS.fetch_add(1, Ordering::AcqRel) == 0 {
        hook_mode::untraced(|| {
            fill_caches();
            refresh();
            learn_eval_split();
        });
        ENABLED.store(true, Ordering::Release);
    }
}

/// A recording stops capturing native stacks.
pub(crate) fn disable() {
    let _one_at_a_time = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    let left = USERS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    if left == Ok(1) {
        ENABLED.store(false, Ordering::Release);
    }
}

/// Finds the eval loop's split-off part, if any (`eval_probe`), with the thread's stack
/// top looked up first; publishes an unwinder that knows it.
fn learn_eval_split() {
    let top = stack_top();
    let snapshot = SNAPSHOT.load(Ordering::Acquire);
    if snapshot.is_null() {
        return;
    }
    // SAFETY: published snapshots are never freed.
    let snapshot = unsafe { &*snapshot };
    if top == 0 || EVAL_SPLIT[1].load(Ordering::Acquire) != 0 {
        return;
    }
    let Some(mut lease) = CacheLease::take(0) else {
        return;
    };
    let Some(cache) = lease.cache() else {
        return;
    };
    // One way is enough for this one unwind.
    let cache = cache.for_address(0);
    if let Some(range) = super::eval_probe::learn(&snapshot.unwinder, cache, snapshot.eval, top) {
        EVAL_SPLIT[0].store(range.0, Ordering::Release);
        EVAL_SPLIT[1].store(range.1, Ordering::Release);
        drop(lease);
        refresh();
    }
}

/// The eval loop's split-off part, once `eval_probe` found it; (0, 0) before.
static EVAL_SPLIT: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

fn eval_split() -> (u64, u64) {
    (
        EVAL_SPLIT[0].load(Ordering::Acquire),
        EVAL_SPLIT[1].load(Ordering::Acquire),
    )
}

/// Objects were loaded (or native stacks start): publishes an unwinder that knows every
/// loaded object.
pub(crate) fn refresh() {
    if USERS.load(Ordering::Acquire) == 0 {
        return;
    }
    let snapshot = hook_mode::untraced(build_snapshot);
    let old = SNAPSHOT.swap(Box::into_raw(Box::new(snapshot)), Ordering::AcqRel);
    // The old snapshot is leaked on purpose: a hook on another thread may be unwinding
    // with it right now, and the modules it names are never unloaded by us.
    let _ = old;
}

fn fill_caches() {
    for slot in &CACHES {
        if slot
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: this thread holds the slot (busy set above).
            let cache = unsafe { &mut *slot.cache.get() };
            if cache.is_none() {
                *cache = Some(RuleWays::new());
            }
            slot.busy.store(false, Ordering::Release);
        }
    }
}

fn build_snapshot() -> Snapshot {
    let mut modules = loaded_modules();
    modules.sort_by_key(|m| m.range().0);
    let mut unwinder = NativeUnwinder::new();
    let here = build_snapshot as *const () as u64;
    let eval = function_range(c"_PyEval_EvalFrameDefault");
    let mut ours = (0, 0);
    let mut interpreter = (0, 0);
    let mut last_end = 0;
    for m in &modules {
        let range = m.range();
        if m.contains(here) {
            ours = range;
        }
        if eval.0 != 0 && m.contains(eval.0) {
            interpreter = range;
        }
        // framehop wants disjoint ranges in address order.
        if range.0 < last_end || range.0 >= range.1 {
            continue;
        }
        last_end = range.1;
        unwinder.add_module(Module::new(
            m.path.clone(),
            range.0..range.1,
            m.base,
            section_info(m),
        ));
    }
    Snapshot {
        unwinder,
        ours,
        eval,
        eval_split: eval_split(),
        interpreter,
    }
}

/// glibc's `dladdr1` flag asking for the symbol's `ElfW(Sym)` (dlfcn.h).
const RTLD_DL_SYMENT: libc::c_int = 1;

/// Where the global function `name` is, `(0, 0)` if not found.
fn function_range(name: &std::ffi::CStr) -> (u64, u64) {
    // SAFETY: dlsym and dladdr1 read the loader's tables; `info` and `sym` are written by
    // dladdr1 and only read when it succeeds.
    unsafe {
        let addr = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
        if addr.is_null() {
            return (0, 0);
        }
        let mut info: libc::Dl_info = std::mem::zeroed();
        let mut sym: *mut libc::Elf64_Sym = std::ptr::null_mut();
        let found = libc::dladdr1(addr, &mut info, (&raw mut sym).cast(), RTLD_DL_SYMENT);
        let size = if found != 0 && !sym.is_null() {
            (*sym).st_size
        } else {
            0
        };
        let start = addr as u64;
        // Without a size, only its first instruction is known.
        (start, start + size.max(1))
    }
}

/// The top of the calling thread's stack, looked up once (0 while unknown).
fn stack_top() -> u64 {
    let known = STACK_TOP.try_with(Cell::get).unwrap_or(1);
    if known > 1 {
        return known;
    }
    if known == 1 {
        return 0; // being looked up further out on this thread, or torn down
    }
    STACK_TOP.set(1);
    let top = super::stack_top::find();
    STACK_TOP.set(if top > 1 { top } else { 1 });
    top
}

/// Borrows a cache from the pool; returned by [`CacheLease`]'s drop.
struct CacheLease(&'static CacheSlot);

impl CacheLease {
    fn take(start: usize) -> Option<CacheLease> {
        (0..CACHE_SLOTS).find_map(|i| {
            let slot = &CACHES[(start + i) % CACHE_SLOTS];
            // `then`, not `then_some`: a lease built for a slot that another thread holds
            // would be dropped on the spot, and its drop frees that thread's slot.
            slot.busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
                .then(|| CacheLease(slot))
        })
    }

    fn cache(&mut self) -> Option<&mut RuleWays> {
        // SAFETY: this lease holds the slot (busy) until it is dropped.
        unsafe { &mut *self.0.cache.get() }.as_deref_mut()
    }
}

impl Drop for CacheLease {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}

/// Unwinds the calling thread's native stack into `out` (innermost first) and returns
/// how many frames were kept: return addresses after memtape's own frames, up to the
/// interpreter's eval loop. Never allocates; 0 when native stacks are off, or no cache
/// is free, or the thread's stack bounds are unknown.
#[cfg(test)]
pub(crate) fn capture(out: &mut [u64; MAX_NATIVE_FRAMES]) -> usize {
    capture_segments(out, 1, &mut [0; MAX_CUTS]).0
}

/// Like [`capture`], but past up to `evals` eval-loop frames: returns `(kept, cuts)`,
/// where `cut[i]` (for `i < cuts`) is how many kept frames lie inside the `i`-th
/// `_PyEval_EvalFrameDefault` from the innermost. Each run of frames inside an eval
/// loop is trimmed of the interpreter's own functions at both ends (how it allocates for
/// its caller, and its call machinery); a run the unwind did not finish is dropped.
#[inline(never)]
pub(crate) fn capture_segments(
    out: &mut [u64; MAX_NATIVE_FRAMES],
    evals: usize,
    cut: &mut [u8; MAX_CUTS],
) -> (usize, usize) {
    if !enabled() {
        return (0, 0);
    }
    let snapshot = SNAPSHOT.load(Ordering::Acquire);
    if snapshot.is_null() {
        return (0, 0);
    }
    // SAFETY: published snapshots are never freed.
    let snapshot = unsafe { &*snapshot };
    let top = stack_top();
    if top == 0 {
        return (0, 0);
    }
    let (pc, mut regs) = unwind_registers();
    let sp = regs.sp();
    let Some(mut lease) = CacheLease::take(sp as usize >> 16) else {
        return (0, 0);
    };
    let Some(cache) = lease.cache() else {
        return (0, 0);
    };
    let mut read_stack = |addr: u64| -> Result<u64, ()> {
        if addr < sp || addr.saturating_add(8) > top || addr % 8 != 0 {
            return Err(());
        }
        // SAFETY: `[sp, top)` is this thread's own mapped stack, above the live frame.
        Ok(unsafe { std::ptr::read_volatile(addr as *const u64) })
    };
    // framehop's `iter_frames`, with each frame's rule cached in the way its address picks
    // (`rule_ways`): the frame the walk is at, and the caller it unwinds to once asked.
    let mut frame = FrameAddress::InstructionPointer(pc);
    let mut caller = |frame: FrameAddress, regs: &mut UnwindRegsNative| {
        let cache = cache.for_address(frame.address_for_lookup());
        let ra = snapshot
            .unwinder
            .unwind_frame(frame, regs, cache, &mut read_stack);
        ra.ok()
            .flatten()
            .and_then(FrameAddress::from_return_address)
    };
    let in_range = |r: (u64, u64), a: u64| r.0 <= a && a < r.1;
    let evals = evals.clamp(1, MAX_CUTS);
    let (mut kept, mut cuts) = (0, 0);
    // Where the current run of C frames starts, and where it ends once the
    // interpreter's functions at its outer end are trimmed.
    let (mut run_start, mut run_end) = (0, 0);
    let mut finished = false;
    for step in 0..MAX_WALK {
        if step > 0 {
            let Some(next) = caller(frame, &mut regs) else {
                break;
            };
            frame = next;
        }
        let lookup = frame.address_for_lookup();
        // memtape's own frames: the hook, and memtape code that calls into Python (the
        // launcher running the program) are never part of the program's stack.
        if in_range(snapshot.ours, lookup) {
            continue;
        }
        if in_range(snapshot.eval, lookup) || in_range(snapshot.eval_split, lookup) {
            // The interpreter's call machinery between the C code and its eval loop.
            kept = run_end;
            cut[cuts] = kept as u8;
            cuts += 1;
            if cuts == evals {
                finished = true;
                break;
            }
            (run_start, run_end) = (kept, kept);
            continue;
        }
        let interpreter = in_range(snapshot.interpreter, lookup);
        if kept == run_start && interpreter {
            continue;
        }
        out[kept] = frame.address();
        kept += 1;
        if !interpreter {
            run_end = kept;
        }
        if kept == MAX_NATIVE_FRAMES {
            break;
        }
    }
    if !finished && cuts > 0 {
        // The run past the last eval frame found was not unwound to its end.
        kept = usize::from(cut[cuts - 1]);
    }
    (kept, cuts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_slot_stays_busy_when_another_lease_is_taken() {
        // Each take starts at the slot the first lease holds: it must skip the held slots
        // and leave them held (other tests may hold slots meanwhile; they are skipped too).
        let index = |l: &CacheLease| CACHES.iter().position(|s| std::ptr::eq(s, l.0));
        let first = CacheLease::take(3).expect("a free slot");
        let start = index(&first).expect("a slot of the pool");
        let second = CacheLease::take(start).expect("a free slot");
        let third = CacheLease::take(start).expect("a free slot");
        let held = [index(&first), index(&second), index(&third)].map(Option::unwrap);
        assert!(
            held[0] != held[1] && held[1] != held[2] && held[0] != held[2],
            "{held:?}"
        );
        for i in held {
            assert!(CACHES[i].busy.load(Ordering::Acquire), "slot {i} was freed");
        }
        drop((first, second, third));
    }
}

#[cfg(test)]
mod no_allocation {
    //! The unwinder never allocates: a counting global allocator (this test binary's)
    //! counts what the unwinding thread allocates while it unwinds.

    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    struct Counting;

    static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

    thread_local! {
        static COUNTING: Cell<bool> = const { Cell::new(false) };
    }

    // SAFETY: forwards every call to the system allocator unchanged.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if COUNTING.with(Cell::get) {
                ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            }
            // SAFETY: the caller's layout, passed on.
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: `ptr` came from `System.alloc` with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static GLOBAL: Counting = Counting;

    #[test]
    fn unwinding_allocates_nothing_and_finds_the_callers() {
        enable();
        let modules = loaded_modules();
        let mut out = [0; MAX_NATIVE_FRAMES];
        let mut kept = [0; 200];
        COUNTING.set(true);
        for n in &mut kept {
            *n = capture(&mut out);
        }
        COUNTING.set(false);
        disable();
        assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 0);
        // Past this test binary's own frames, the thread's start in libc.
        assert!(kept.iter().all(|&n| n == kept[0] && n >= 1), "{kept:?}");
        for &ip in &out[..kept[0]] {
            assert!(
                modules.iter().any(|m| m.contains(ip - 1)),
                "{ip:#x} in no module"
            );
        }
    }
}

#[cfg(test)]
mod colliding_addresses {
    //! Two addresses of one framehop slot, looked up in turn with the unwinder's real
    //! rules: one framehop cache forgets each rule before it is asked again, the ways keep
    //! both.

    use framehop::{FrameAddress, UnwindRegsNative};

    use super::super::rule_ways::NativeCache;
    use super::*;

    /// Looks `a` and `b` up 10 times each, in turn, with the cache `pick` gives.
    fn alternate(a: u64, b: u64, mut pick: impl FnMut(u64) -> *mut NativeCache) {
        let snapshot = SNAPSHOT.load(Ordering::Acquire);
        assert!(!snapshot.is_null());
        // SAFETY: published snapshots are never freed.
        let unwinder = unsafe { &(*snapshot).unwinder };
        for _ in 0..10 {
            for address in [a, b] {
                let mut regs = UnwindRegsNative::new(address, 0x10_0000, 0x10_0100);
                // A made-up stack: whatever the rule reads, it gets a small number back.
                let mut read_stack = |_: u64| -> Result<u64, ()> { Ok(0x20_0000) };
                // SAFETY: `pick` returns a cache that outlives this call, used by no one else.
                let cache = unsafe { &mut *pick(address) };
                let frame = FrameAddress::InstructionPointer(address);
                let _ = unwinder.unwind_frame(frame, &mut regs, cache, &mut read_stack);
            }
        }
    }

    #[test]
    fn colliding_addresses_keep_their_rules_in_the_ways() {
        enable();
        // Two places in this test binary's text, 509 * 8 bytes apart: one framehop slot.
        let a = capture_segments as *const () as u64;
        let b = a + 509 * 8;
        let mut one = NativeCache::new_in();
        alternate(a, b, |_| &raw mut one);
        let mut ways = RuleWays::new();
        alternate(a, b, |address| ways.for_address(address));
        disable();
        // One cache: every lookup missed (each evicted the other), yet each rule was
        // cacheable, since the ways hit on all but the first two.
        assert_eq!(one.stats().hit_count, 0, "{:?}", one.stats());
        assert_eq!(ways.hit_count(), 18);
    }
}
