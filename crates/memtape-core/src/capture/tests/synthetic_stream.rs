//! Synthetic event streams for the size and speed measurement: Python-like and random.

use super::fuzz::XorShift;

/// One generated event.
#[derive(Clone, Copy)]
pub(super) struct Event {
    pub(super) addr: u64,
    /// 0 for a free.
    pub(super) size: u32,
    pub(super) stack: u32,
}

/// Where blocks land: pymalloc-like 16 KiB pools carved into one 16-byte size class
/// each with LIFO reuse of freed blocks; larger requests from a malloc region, also
/// reusing freed chunks of the same rounded size last-in first-out.
pub(super) struct Heap {
    free_lists: Vec<Vec<u64>>,
    bump: Vec<(u64, u64)>,
    next_pool: u64,
    malloc_free: rustc_hash::FxHashMap<u64, Vec<u64>>,
    malloc_next: u64,
}

impl Heap {
    const POOL: u64 = 16 << 10;

    fn new() -> Self {
        Self {
            free_lists: vec![Vec::new(); 33],
            bump: vec![(0, 0); 33],
            next_pool: 0x7f3a_1200_0000,
            malloc_free: Default::default(),
            malloc_next: 0x5600_0a00_0000,
        }
    }

    /// Size class of a request: 1..=32 for pymalloc, the rounded size above.
    fn class(size: u64) -> u64 {
        if size <= 512 {
            size.div_ceil(16).max(1)
        } else {
            (size + 15) & !15
        }
    }

    fn alloc(&mut self, size: u64) -> u64 {
        let class = Self::class(size);
        if class <= 32 {
            if let Some(addr) = self.free_lists[class as usize].pop() {
                return addr;
            }
            let (next, end) = &mut self.bump[class as usize];
            if *next + class * 16 > *end {
                *next = self.next_pool;
                *end = self.next_pool + Self::POOL;
                self.next_pool += Self::POOL;
            }
            let addr = *next;
            *next += class * 16;
            addr
        } else {
            if let Some(addr) = self.malloc_free.get_mut(&class).and_then(Vec::pop) {
                return addr;
            }
            let addr = self.malloc_next;
            self.malloc_next += class + 16;
            addr
        }
    }

    fn free(&mut self, addr: u64, size: u64) {
        let class = Self::class(size);
        if class <= 32 {
            self.free_lists[class as usize].push(addr);
        } else {
            self.malloc_free.entry(class).or_default().push(addr);
        }
    }
}

/// One step of a function body.
#[derive(Clone, Copy)]
pub(super) enum Op {
    /// Allocate object `slot` at call site `stack`, of `size` bytes plus up to `vary`.
    Alloc {
        slot: usize,
        stack: u32,
        size: u64,
        vary: u64,
    },
    /// Free object `slot` of this call.
    Free { slot: usize },
}

/// A Python-like program: ~40 functions with fixed bodies (sites with their usual
/// sizes, temporaries freed in a fixed order, a few objects kept), run in loops within
/// phases over a handful of functions; some sizes vary per call, some calls take
/// another branch, and kept objects die in batches. About 400 stacks.
pub(super) fn python_like_events(count: usize, seed: u64) -> Vec<Event> {
    const COMMON: [u64; 12] = [24, 28, 32, 40, 48, 56, 64, 72, 80, 104, 136, 232];
    let mut rng = XorShift::new(seed);
    let mut next_stack = 1u32;
    let functions: Vec<Vec<Op>> = (0..40)
        .map(|_| {
            let allocs = 2 + rng.below(20) as usize;
            let mut free_at: Vec<Option<usize>> = Vec::new();
            let mut ops = Vec::new();
            for slot in 0..allocs {
                // Each site is a stack; sites of one function have nearby ids.
                let stack = next_stack;
                next_stack += 1;
                let (size, vary) = match rng.below(10) {
                    0..=6 => (COMMON[rng.below(12) as usize], 0),
                    7..=8 => (33 + rng.below(200), 8 + rng.below(120)),
                    _ => (600 + rng.below(8000), rng.below(4096)),
                };
                ops.push(Op::Alloc {
                    slot,
                    stack,
                    size,
                    vary,
                });
                // Temporaries die soon; one in twelve outlives the call.
                free_at.push(if rng.below(12) == 0 {
                    None
                } else {
                    Some(slot + rng.below(4) as usize)
                });
                for (dead, at) in free_at.iter().enumerate().rev() {
                    if *at == Some(slot) {
                        ops.push(Op::Free { slot: dead });
                    }
                }
            }
            for (dead, at) in free_at.iter().enumerate().rev() {
                if matches!(at, Some(at) if *at >= allocs) {
                    ops.push(Op::Free { slot: dead });
                }
            }
            ops
        })
        .collect();

    let mut heap = Heap::new();
    let mut events = Vec::with_capacity(count + 64);
    let mut kept: Vec<(u64, u64)> = Vec::new();
    let mut slots: Vec<Option<(u64, u64)>> = Vec::new();
    let mut phase: Vec<usize> = Vec::new();
    let mut phase_left = 0usize;
    while events.len() < count {
        if phase_left == 0 {
            phase = (0..3 + rng.below(6))
                .map(|_| rng.below(functions.len() as u64) as usize)
                .collect();
            phase_left = 20_000 + rng.below(80_000) as usize;
            // Objects kept across calls die in batches, newest first.
            let keep = kept.len() / 4;
            while kept.len() > keep {
                let Some((addr, size)) = kept.pop() else {
                    break;
                };
                heap.free(addr, size);
                events.push(Event {
                    addr,
                    size: 0,
                    stack: 0,
                });
            }
        }
        // A loop: one function of the phase, many times.
        let function = &functions[phase[rng.below(phase.len() as u64) as usize]];
        for _ in 0..1 + rng.below(40) {
            slots.clear();
            slots.resize(function.len(), None);
            // Another branch now and then: one site is skipped.
            let skip = if rng.below(8) == 0 {
                rng.below(function.len() as u64) as usize
            } else {
                usize::MAX
            };
            let before = events.len();
            for op in function {
                match *op {
                    Op::Alloc {
                        slot,
                        stack,
                        size,
                        vary,
                    } => {
                        if slot == skip {
                            continue;
                        }
                        let size = size + rng.below(vary + 1);
                        let addr = heap.alloc(size);
                        slots[slot] = Some((addr, size));
                        events.push(Event {
                            addr,
                            size: size as u32,
                            stack,
                        });
                    }
                    Op::Free { slot } => {
                        if let Some((addr, size)) = slots[slot].take() {
                            heap.free(addr, size);
                            events.push(Event {
                                addr,
                                size: 0,
                                stack: 0,
                            });
                        }
                    }
                }
            }
            // What the body did not free is kept.
            kept.extend(slots.iter().flatten());
            phase_left = phase_left.saturating_sub(events.len() - before);
        }
    }
    events.truncate(count);
    events
}

/// A harder, high-entropy stream: each event drawn at random (stack among a phase's
/// working set, size jittered, which object dies), nothing repeats exactly.
pub(super) fn random_events(count: usize, seed: u64) -> Vec<Event> {
    const STACKS: u64 = 400;
    let mut rng = XorShift::new(seed);
    let sites: Vec<(u64, u64)> = (0..STACKS)
        .map(|_| {
            let class = match rng.below(10) {
                0..=5 => 2 + rng.below(3),
                6..=8 => 4 + rng.below(12),
                _ => 16 + rng.below(16),
            };
            (class, rng.below(3))
        })
        .collect();
    let mut heap = Heap::new();
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut phase: Vec<u32> = Vec::new();
    let mut events = Vec::with_capacity(count);
    while events.len() < count {
        if events.len() % 20_000 == 0 || phase.is_empty() {
            let base = rng.below(STACKS);
            phase = (0..2 + rng.below(10))
                .map(|i| ((base + i * (1 + rng.below(3))) % STACKS) as u32 + 1)
                .collect();
        }
        let threshold = if live.len() > 200_000 { 60 } else { 49 };
        if !live.is_empty() && rng.below(100) < threshold {
            let pick = match rng.below(10) {
                0..=6 => live.len() - 1,
                7..=8 => live.len() - 1 - rng.below(live.len().min(64) as u64) as usize,
                _ => rng.below(live.len() as u64) as usize,
            };
            let (addr, size) = live.swap_remove(pick);
            heap.free(addr, size);
            events.push(Event {
                addr,
                size: 0,
                stack: 0,
            });
            continue;
        }
        let stack = phase[rng.below(phase.len() as u64) as usize];
        let (class, spread) = sites[stack as usize - 1];
        let size = if rng.below(500) == 0 {
            513 + rng.below(64 << 10)
        } else {
            (class + rng.below(spread + 1)).clamp(1, 32) * 16 - rng.below(16)
        };
        let addr = heap.alloc(size);
        live.push((addr, size));
        events.push(Event {
            addr,
            size: size as u32,
            stack,
        });
    }
    events
}
