//! Tests of [`symbols`](super).

use super::*;
use crate::capture::{BlockEncoder, RareRecords, Record as Rec};

#[test]
fn native_frames_of_a_missing_module_read_as_module_and_offset() {
    let mut enc = BlockEncoder::new();
    enc.string(1, "app.py");
    enc.string(2, "<module>");
    enc.frame(1, 1, 2, 5);
    enc.module(
        1,
        "/gone/libx.so",
        0x7f00_0000_0000,
        &[1, 2],
        &[(0, 0x2000)],
    );
    enc.native_frame(2, 1, 0x1139);
    enc.native_frame(3, 1, 0x1139);
    enc.stack(1, 0, 1);
    enc.stack(2, 1, 2);
    enc.stack(3, 1, 3);
    let mut s = Symbols::new();
    crate::capture::tests_support::decode(enc.as_bytes(), |r: Rec<'_>| s.feed(&r));
    s.symbolize_native();
    let frames = s.frames_of(2);
    assert_eq!(
        (frames[0].filename, frames[0].function, frames[0].line),
        ("/gone/libx.so", "libx.so+0x1139", 0)
    );
    assert_eq!((frames[1].filename, frames[1].line), ("app.py", 5));
    // The same name is one frame key (one row when grouping by line).
    assert_eq!(s.frame_keys(2)[0], s.frame_keys(3)[0]);
    assert_eq!(s.native_notes().len(), 1);
    assert!(s.native_notes()[0].contains("/gone/libx.so"));
}
