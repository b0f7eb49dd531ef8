//! The encoder's Alloc and Free records against a plain model of the format: random
//! events (addresses reused and not, every domain form, deltas small and huge, sizes and
//! stacks at the varint length edges), with rare records and block cuts between them,
//! must encode to the model's bytes, byte for byte, and decode to the events.

use std::collections::HashMap;

use super::super::encoder::REUSE_LIMIT;
use super::super::recent_addresses::SLOTS;
use super::super::record::tag;
use super::super::tests_support::decode;
use super::super::varint::{put_sv, put_uv};
use super::super::*;
use super::fuzz::XorShift;
use super::owned::Owned;

/// The format written the simple way: a byte at a time, the back references looked up
/// in maps standing for the encoder's direct-mapped tables (a slot per 16 bytes of
/// address, the last record at that slot; `(address, ordinal)`).
#[derive(Default)]
struct Model {
    out: Vec<u8>,
    prev_addr: u64,
    prev_stack: u32,
    prev_freed: u32,
    allocs: HashMap<usize, (u64, u32)>,
    frees: HashMap<usize, (u64, u32)>,
    alloc_count: u32,
    free_count: u32,
}

fn slot(addr: u64) -> usize {
    ((addr >> 4) as usize) % SLOTS
}

impl Model {
    fn addr(&mut self, addr: u64) {
        put_sv(&mut self.out, addr.wrapping_sub(self.prev_addr) as i64);
        self.prev_addr = addr;
    }

    fn encode(&mut self, record: &Owned) {
        match *record {
            Owned::Alloc {
                domain,
                addr,
                size,
                stack,
            } => {
                let back = match self.frees.get(&slot(addr)) {
                    Some(&(at, ordinal)) if at == addr => self.free_count - 1 - ordinal,
                    _ => u32::MAX,
                };
                if domain == 0 && back < REUSE_LIMIT {
                    self.out.push(tag::ALLOC_REUSE);
                    put_uv(&mut self.out, u64::from(back));
                } else if domain == 0 {
                    self.out.push(tag::ALLOC);
                    self.addr(addr);
                } else {
                    self.out.push(tag::ALLOC_IN_DOMAIN);
                    put_uv(&mut self.out, u64::from(domain));
                    self.addr(addr);
                }
                put_uv(&mut self.out, size);
                put_sv(&mut self.out, i64::from(stack) - i64::from(self.prev_stack));
                self.prev_stack = stack;
                self.allocs.insert(slot(addr), (addr, self.alloc_count));
                self.alloc_count += 1;
            }
            Owned::Free { domain, addr } => {
                let allocated = self
                    .allocs
                    .get(&slot(addr))
                    .filter(|&&(at, _)| at == addr)
                    .map(|&(_, ordinal)| ordinal);
                let tags = match allocated {
                    Some(_) => (tag::FREE_STEP, tag::FREE_STEP_IN_DOMAIN),
                    None => (tag::FREE, tag::FREE_IN_DOMAIN),
                };
                match domain {
                    None => self.out.push(tags.0),
                    Some(domain) => {
                        self.out.push(tags.1);
                        put_uv(&mut self.out, u64::from(domain));
                    }
                }
                match allocated {
                    Some(ordinal) => {
                        put_sv(
                            &mut self.out,
                            i64::from(ordinal) - i64::from(self.prev_freed),
                        );
                        self.prev_freed = ordinal;
                    }
                    None => self.addr(addr),
                }
                self.frees.insert(slot(addr), (addr, self.free_count));
                self.free_count += 1;
            }
            Owned::Time(ns) => {
                self.out.push(tag::TIME);
                put_uv(&mut self.out, ns);
            }
            Owned::Stack(id, parent, frame) => {
                self.out.push(tag::STACK);
                for value in [id, parent, frame] {
                    put_uv(&mut self.out, u64::from(value));
                }
            }
            Owned::Marker(ref label) => {
                self.out.push(tag::MARKER);
                put_uv(&mut self.out, label.len() as u64);
                self.out.extend_from_slice(label.as_bytes());
            }
            _ => unreachable!("the test writes no other record"),
        }
    }

    /// The block so far; the next starts afresh.
    fn take(&mut self) -> Vec<u8> {
        std::mem::take(self).out
    }
}

/// A value of a random bit length: each varint length comes up.
fn any_bits(rng: &mut XorShift) -> u64 {
    let bits = rng.below(65);
    match bits {
        0 => 0,
        64 => rng.next(),
        _ => rng.next() & ((1 << bits) - 1),
    }
}

/// Random events and a few rare records, in blocks cut at random.
fn random_blocks(rng: &mut XorShift, events: usize) -> Vec<Vec<Owned>> {
    let mut live: Vec<(u32, u64)> = Vec::new();
    let mut freed: Vec<u64> = Vec::new();
    let mut blocks = vec![Vec::new()];
    let mut stack = 1u32;
    let mut near = 0x7f00_0000_0000u64;
    for _ in 0..events {
        let block = blocks.last_mut().unwrap();
        match rng.below(100) {
            0 => block.push(Owned::Time(any_bits(rng))),
            1 => block.push(Owned::Stack(rng.next() as u32, rng.next() as u32, 7)),
            2 => block.push(Owned::Marker("m".repeat(rng.below(300) as usize))),
            3 => blocks.push(Vec::new()),
            4..=54 => {
                let addr = match rng.below(6) {
                    0 | 1 if !freed.is_empty() => {
                        let back = rng.below(freed.len().min(3000) as u64) as usize;
                        freed.remove(freed.len() - 1 - back)
                    }
                    2 => rng.next(),
                    3 => any_bits(rng) & !15,
                    _ => {
                        near = near.wrapping_add(rng.below(4096) * 16).wrapping_sub(8192);
                        near
                    }
                };
                let domain = match rng.below(8) {
                    0 => 389_047,
                    1 => u32::MAX,
                    2 => rng.next() as u32,
                    _ => 0,
                };
                stack = match rng.below(4) {
                    0 => rng.next() as u32,
                    1 => stack,
                    _ => stack.wrapping_add(rng.below(300) as u32),
                };
                live.push((domain, addr));
                block.push(Owned::Alloc {
                    domain,
                    addr,
                    size: any_bits(rng),
                    stack,
                });
            }
            _ => {
                let (domain, addr) = if live.is_empty() || rng.below(10) == 0 {
                    (rng.next() as u32, any_bits(rng))
                } else {
                    let at = live.len() - 1 - rng.below(live.len().min(50) as u64) as usize;
                    live.remove(at)
                };
                freed.push(addr);
                let domain = match rng.below(3) {
                    0 => Some(domain),
                    _ => None,
                };
                block.push(Owned::Free { domain, addr });
            }
        }
    }
    blocks
}

#[test]
fn random_events_encode_to_the_models_bytes_and_decode_back() {
    for seed in 1..=40 {
        let mut rng = XorShift::new(seed);
        let mut encoder = BlockEncoder::with_capacity(rng.below(200) as usize);
        let mut model = Model::default();
        for (i, block) in random_blocks(&mut rng, 5_000).iter().enumerate() {
            for record in block {
                record.encode(&mut encoder);
                model.encode(record);
            }
            let raw = if i % 2 == 0 {
                encoder.take()
            } else {
                let raw = encoder.as_bytes().to_vec();
                encoder.clear();
                raw
            };
            assert_eq!(raw, model.take(), "seed {seed}, block {i}");
            let mut read = Vec::new();
            decode(&raw, |record| read.push(Owned::from(record)));
            assert_eq!(&read, block, "seed {seed}, block {i}");
        }
    }
}
