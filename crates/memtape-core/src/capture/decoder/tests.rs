//! Tests of [`decoder`](super).

use super::*;

fn decode_all(raw: &[u8]) -> Result<Vec<String>, (usize, String)> {
    let mut out = Vec::new();
    decode_block(raw, &mut |record| out.push(format!("{record:?}")))
        .map(|_| out)
        .map_err(|(offset, error)| (offset, error.to_string()))
}

#[test]
fn empty_block_has_no_records() {
    assert_eq!(decode_all(&[]), Ok(vec![]));
}

#[test]
fn errors_name_the_record_offset_and_the_problem() {
    // Time 5, then an unknown tag at offset 2.
    assert_eq!(
        decode_all(&[tag::TIME, 5, 0x5f]),
        Err((2, "unknown tag 0x5f".to_owned()))
    );
    assert_eq!(
        decode_all(&[tag::ALLOC, 2, 16]),
        Err((0, "the block ends inside the stack of an Alloc".to_owned()))
    );
    // Stack delta -1 from 0.
    assert_eq!(
        decode_all(&[tag::ALLOC, 2, 16, 1]),
        Err((
            0,
            "the stack of an Alloc is -1, outside 0..=4294967295".to_owned()
        ))
    );
    // Domain 2**32.
    assert_eq!(
        decode_all(&[tag::ALLOC_IN_DOMAIN, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0]),
        Err((
            0,
            "the domain of an Alloc is 4294967296, outside 0..=4294967295".to_owned()
        ))
    );
    assert_eq!(
        decode_all(&[tag::MARKER, 2, 0xff, 0xfe]),
        Err((0, "the label of a Marker is not UTF-8".to_owned()))
    );
    assert_eq!(
        decode_all(&[tag::STRING, 1, 200, 1, b'a']),
        Err((0, "the block ends inside the value of a String".to_owned()))
    );
    let mut overlong = vec![tag::DROPPED];
    overlong.extend([0xff; 10]);
    overlong.push(0);
    assert_eq!(
        decode_all(&overlong),
        Err((
            0,
            "the count of a Dropped is a varint longer than 64 bits".to_owned()
        ))
    );
}
