//! The encodings alone: opcodes, batching, JSON escapes.

use super::pickle_decoder::{decode, pickled, Value};
use crate::torch_snapshot::encoding::{Dict, Encoding, List};
use crate::torch_snapshot::json::Json;
use crate::torch_snapshot::pickle::{truncate_at_char_boundary, Pickle};
use crate::torch_snapshot::push_json_string;

fn int_bytes(value: i64) -> Vec<u8> {
    pickled(|out| Pickle::int(out, value))
}

#[test]
fn ints_use_the_smallest_opcode_like_python() {
    // Expected bytes are what CPython's pickle writes for each value.
    let cases: &[(i64, &[u8])] = &[
        (0, b"K\x00"),
        (255, b"K\xff"),
        (256, b"M\x00\x01"),
        (65535, b"M\xff\xff"),
        (65536, b"J\x00\x00\x01\x00"),
        (-1, b"J\xff\xff\xff\xff"),
        (i64::from(i32::MAX), b"J\xff\xff\xff\x7f"),
        (i64::from(i32::MIN), b"J\x00\x00\x00\x80"),
        (1 << 31, b"\x8a\x05\x00\x00\x00\x80\x00"),
        (-(1 << 31) - 1, b"\x8a\x05\xff\xff\xff\x7f\xff"),
        (1 << 40, b"\x8a\x06\x00\x00\x00\x00\x00\x01"),
        (-(1 << 39), b"\x8a\x05\x00\x00\x00\x00\x80"),
        ((1 << 53) - 1, b"\x8a\x07\xff\xff\xff\xff\xff\xff\x1f"),
        (i64::MIN, b"\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80"),
        (i64::MAX, b"\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f"),
    ];
    for &(value, expected) in cases {
        assert_eq!(int_bytes(value), expected, "{value}");
    }
}

#[test]
fn strings_are_short_or_long_utf8() {
    assert_eq!(pickled(|o| Pickle::str(o, "")), b"\x8c\x00");
    assert_eq!(pickled(|o| Pickle::str(o, "abc")), b"\x8c\x03abc");
    assert_eq!(pickled(|o| Pickle::str(o, "é")), b"\x8c\x02\xc3\xa9");
    let short = "a".repeat(255);
    let mut expected = vec![0x8c, 255];
    expected.extend_from_slice(short.as_bytes());
    assert_eq!(pickled(|o| Pickle::str(o, &short)), expected);
    let long = "ü".repeat(128); // 256 bytes
    let mut expected = b"X\x00\x01\x00\x00".to_vec();
    expected.extend_from_slice(long.as_bytes());
    assert_eq!(pickled(|o| Pickle::str(o, &long)), expected);
}

#[test]
fn truncation_keeps_char_boundaries() {
    assert_eq!(truncate_at_char_boundary("aé", 2), "a");
    assert_eq!(truncate_at_char_boundary("aé", 3), "aé");
}

/// `{"a": [1, True], "b": (0, 0), "c": {}, "d": []}`
fn nested<E: Encoding>(out: &mut Vec<u8>) {
    let mut dict = Dict::<E>::begin(out);
    dict.key(out, "a");
    let mut list = List::<E>::begin(out);
    list.item(out);
    E::int(out, 1);
    list.item(out);
    E::bool(out, true);
    list.end(out);
    dict.key(out, "b");
    E::int_pair(out, 0, 0);
    dict.key(out, "c");
    Dict::<E>::begin(out).end(out);
    dict.key(out, "d");
    List::<E>::begin(out).end(out);
    dict.end(out);
}

#[test]
fn nested_containers() {
    assert_eq!(
        pickled(nested::<Pickle>),
        b"}(\x8c\x01a](K\x01\x88e\x8c\x01bK\x00K\x00\x86\x8c\x01c}\x8c\x01d]u"
    );
    assert_eq!(
        pickled(nested::<Json>),
        br#"{"a":[1,true],"b":[0,0],"c":{},"d":[]}"#
    );
}

#[test]
fn long_lists_are_batched_by_1000() {
    let bytes = pickled(|out| {
        let mut list = List::<Pickle>::begin(out);
        for _ in 0..2500 {
            list.item(out);
            Pickle::int(out, 7);
        }
        list.end(out);
    });
    let mut expected = vec![b']'];
    for batch in [1000, 1000, 500] {
        expected.push(b'(');
        for _ in 0..batch {
            expected.extend_from_slice(b"K\x07");
        }
        expected.push(b'e');
    }
    assert_eq!(bytes, expected);

    let mut full = vec![0x80, 4];
    full.extend_from_slice(&bytes);
    full.push(b'.');
    assert_eq!(decode(&full), Value::List(vec![Value::Int(7); 2500]));
}

#[test]
fn large_dicts_are_batched_by_1000() {
    let mut bytes = vec![0x80, 4];
    let mut dict = Dict::<Pickle>::begin(&mut bytes);
    for i in 0..1001 {
        dict.key(&mut bytes, &format!("k{i}"));
        Pickle::int(&mut bytes, i);
    }
    dict.end(&mut bytes);
    bytes.push(b'.');
    // The decoder rejects a SETITEMS batch of more than 1000 pairs.
    let Value::Dict(pairs) = decode(&bytes) else {
        panic!()
    };
    assert_eq!(pairs.len(), 1001);
    assert_eq!(pairs[1000], (Value::Str("k1000".into()), Value::Int(1000)));
}

#[test]
fn json_strings_are_escaped() {
    let json = |s: &str| {
        let mut out = Vec::new();
        push_json_string(&mut out, s);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(json(""), r#""""#);
    assert_eq!(json("plain"), r#""plain""#);
    assert_eq!(json(r#"say "hi""#), r#""say \"hi\"""#);
    assert_eq!(json(r"C:\dir\file.py"), r#""C:\\dir\\file.py""#);
    assert_eq!(json("a\nb\r\tc"), r#""a\nb\r\tc""#);
    assert_eq!(json("\u{8}\u{c}"), r#""\b\f""#);
    assert_eq!(
        json("\u{0}\u{1}\u{1f}\u{7f}"),
        "\"\\u0000\\u0001\\u001f\u{7f}\""
    );
    assert_eq!(json("héllo → 日本 🦀"), "\"héllo → 日本 🦀\"");
    assert_eq!(json("</script>"), r#""</script>""#);
}

#[test]
fn json_ints() {
    for value in [0, 7, -1, 10, 1 << 40, i64::MIN, i64::MAX] {
        assert_eq!(
            pickled(|o| Json::int(o, value)),
            value.to_string().as_bytes()
        );
    }
}
