//! Arbitrary bytes as a capture file: the reader must answer Ok or Err, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memtape_core::capture::CaptureReader;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut reader) = CaptureReader::new(data) {
        let mut records = 0u64;
        if let Ok(summary) = reader.for_each_record(|_| records += 1) {
            assert_eq!(summary.records, records);
        }
    }
});
