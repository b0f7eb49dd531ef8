//! Arbitrary bytes as the raw records of blocks, written through the real writer (so the
//! CRCs and zstd frames are valid) and read back: this reaches the record decoder, which
//! random files rarely do past the checksums. The first byte picks how the input is cut
//! into blocks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memtape_core::capture::{CaptureFileWriter, CaptureReader};

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let mut writer = CaptureFileWriter::new(Vec::new(), "{}").expect("writing to a Vec");
    let block_len = usize::from(cut).max(1) * 4;
    let mut blocks = 0u64;
    for raw in rest.chunks(block_len) {
        writer.write_block(raw).expect("writing to a Vec");
        blocks += 1;
    }
    let bytes = writer.finish("{\"events\": 0}").expect("writing to a Vec");
    let mut reader = CaptureReader::new(&bytes[..]).expect("a valid header");
    let mut records = 0u64;
    if let Ok(summary) = reader.for_each_record(|_| records += 1) {
        assert!(summary.complete);
        assert_eq!(summary.blocks, blocks);
        assert_eq!(summary.records, records);
    }
});
