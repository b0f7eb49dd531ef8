//! Tests of [`replay`](super): the split by memory source.

use super::*;
use crate::memory_source::{MemorySource, NATIVE_DOMAIN, NUMPY_DOMAIN};

#[test]
fn peak_and_end_are_split_by_source() {
    let alloc = |domain, addr, size| Record::Alloc {
        domain,
        addr,
        size,
        stack: 1,
    };
    let mut replay = Replay::default();
    for r in [
        alloc(0, 0x10, 100),
        alloc(NATIVE_DOMAIN, 0x1000, 1000),
        alloc(NUMPY_DOMAIN, 0x2000, 50),
        Record::Free {
            domain: Some(NATIVE_DOMAIN),
            addr: 0x1000,
        },
        // A free naming no domain finds the block in whichever domain holds it.
        Record::Free {
            domain: None,
            addr: 0x2000,
        },
    ] {
        replay.feed(&r);
    }
    let r = replay.finish();
    let peak: Vec<_> = r.peak_by_source.iter().collect();
    assert_eq!(
        peak,
        vec![
            (MemorySource::Python, 100),
            (MemorySource::Native, 1000),
            (MemorySource::Framework, 50),
            (MemorySource::Mlx, 0)
        ]
    );
    assert_eq!(r.end_by_source.get(MemorySource::Python), 100);
    assert_eq!(r.end_by_source.get(MemorySource::Native), 0);
    assert_eq!(r.end_by_source.get(MemorySource::Framework), 0);
}
