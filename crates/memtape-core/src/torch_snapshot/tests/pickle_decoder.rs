//! A strict decoder for exactly the pickle opcodes the writer may emit.

use crate::torch_snapshot::pickle::BATCH;

/// A decoded pickle value (the subset this writer emits).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Value {
    Int(i64),
    Str(String),
    Bool(bool),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    Mark,
}

impl Value {
    pub(super) fn get(&self, key: &str) -> Option<&Value> {
        let Value::Dict(pairs) = self else {
            panic!("not a dict: {self:?}")
        };
        pairs
            .iter()
            .find(|(k, _)| *k == Value::Str(key.to_owned()))
            .map(|(_, v)| v)
    }

    pub(super) fn at(&self, key: &str) -> &Value {
        self.get(key).unwrap_or_else(|| panic!("no key {key:?}"))
    }

    pub(super) fn list(&self) -> &[Value] {
        match self {
            Value::List(items) => items,
            other => panic!("not a list: {other:?}"),
        }
    }

    pub(super) fn str(&self) -> &str {
        match self {
            Value::Str(s) => s,
            other => panic!("not a str: {other:?}"),
        }
    }

    pub(super) fn int(&self) -> i64 {
        match self {
            Value::Int(i) => *i,
            other => panic!("not an int: {other:?}"),
        }
    }

    pub(super) fn keys(&self) -> Vec<&str> {
        let Value::Dict(pairs) = self else {
            panic!("not a dict")
        };
        pairs.iter().map(|(k, _)| k.str()).collect()
    }
}

/// A strict decoder for exactly the opcodes the writer may emit; also checks that no
/// APPENDS/SETITEMS batch exceeds 1000 items.
pub(super) fn decode(bytes: &[u8]) -> Value {
    assert_eq!(&bytes[..2], &[0x80, 4], "protocol 4 header");
    let mut stack: Vec<Value> = Vec::new();
    let mut memo: Vec<Value> = Vec::new();
    let mut at = 2;
    let take = |at: &mut usize, n: usize| {
        let slice = &bytes[*at..*at + n];
        *at += n;
        slice
    };
    let pop_mark = |stack: &mut Vec<Value>| {
        let mark = stack.iter().rposition(|v| *v == Value::Mark).expect("MARK");
        let items = stack.split_off(mark + 1);
        stack.pop();
        assert!(items.len() <= BATCH * 2, "batch too large");
        items
    };
    loop {
        let code = take(&mut at, 1)[0];
        match code {
            b'.' => break,
            b'(' => stack.push(Value::Mark),
            b'}' => stack.push(Value::Dict(Vec::new())),
            b']' => stack.push(Value::List(Vec::new())),
            b'u' => {
                let items = pop_mark(&mut stack);
                assert!(items.len() <= BATCH * 2 && items.len() % 2 == 0);
                let Some(Value::Dict(pairs)) = stack.last_mut() else {
                    panic!("SETITEMS without a dict")
                };
                let mut items = items.into_iter();
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    pairs.push((k, v));
                }
            }
            b'e' => {
                let items = pop_mark(&mut stack);
                assert!(items.len() <= BATCH);
                let Some(Value::List(list)) = stack.last_mut() else {
                    panic!("APPENDS without a list")
                };
                list.extend(items);
            }
            0x8c => {
                let len = usize::from(take(&mut at, 1)[0]);
                let s = take(&mut at, len);
                stack.push(Value::Str(String::from_utf8(s.to_vec()).unwrap()));
            }
            b'X' => {
                let len = u32::from_le_bytes(take(&mut at, 4).try_into().unwrap()) as usize;
                assert!(len > 255, "short strings use SHORT_BINUNICODE");
                let s = take(&mut at, len);
                stack.push(Value::Str(String::from_utf8(s.to_vec()).unwrap()));
            }
            b'K' => stack.push(Value::Int(i64::from(take(&mut at, 1)[0]))),
            b'M' => stack.push(Value::Int(i64::from(u16::from_le_bytes(
                take(&mut at, 2).try_into().unwrap(),
            )))),
            b'J' => stack.push(Value::Int(i64::from(i32::from_le_bytes(
                take(&mut at, 4).try_into().unwrap(),
            )))),
            0x8a => {
                let len = usize::from(take(&mut at, 1)[0]);
                let raw = take(&mut at, len);
                let mut full = if raw[len - 1] & 0x80 != 0 {
                    [0xff; 16]
                } else {
                    [0; 16]
                };
                full[..len].copy_from_slice(raw);
                stack.push(Value::Int(
                    i64::try_from(i128::from_le_bytes(full)).unwrap(),
                ));
            }
            0x86 => {
                let second = stack.pop().unwrap();
                let first = stack.pop().unwrap();
                stack.push(Value::Tuple(vec![first, second]));
            }
            0x94 => memo.push(stack.last().expect("MEMOIZE on empty stack").clone()),
            b'h' => {
                let index = usize::from(take(&mut at, 1)[0]);
                stack.push(memo[index].clone());
            }
            b'j' => {
                let index = u32::from_le_bytes(take(&mut at, 4).try_into().unwrap());
                assert!(index > 255, "small memo indices use BINGET");
                stack.push(memo[index as usize].clone());
            }
            0x88 => stack.push(Value::Bool(true)),
            0x89 => stack.push(Value::Bool(false)),
            other => panic!("unexpected opcode {other:#x} at {}", at - 1),
        }
    }
    assert_eq!(at, bytes.len(), "bytes after STOP");
    assert_eq!(stack.len(), 1, "one value on the stack");
    stack.pop().unwrap()
}

pub(super) fn pickled(write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    write(&mut out);
    out
}
