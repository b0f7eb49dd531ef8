//! Why a record could not be decoded, and the helpers that name the field that failed.

use std::fmt;

use super::varint::{ByteCursor, VarintError};

/// Why a record could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordError {
    /// A tag byte this version does not know.
    UnknownTag(u8),
    /// A field could not be read.
    Field {
        field: &'static str,
        error: VarintError,
    },
    /// A field's value does not fit its type (a 32-bit id, a stack after its delta).
    OutOfRange { field: &'static str, value: i128 },
    /// A string that is not UTF-8.
    InvalidUtf8 { field: &'static str },
    /// A back reference to before the block's start.
    BadBackReference { field: &'static str, back: u64 },
    /// A step reference to an allocation the block does not have (yet).
    BadStepReference {
        field: &'static str,
        at: i128,
        allocs: usize,
    },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RecordError::UnknownTag(tag) => write!(f, "unknown tag {tag:#04x}"),
            RecordError::Field {
                field,
                error: VarintError::Truncated,
            } => write!(f, "the block ends inside the {field}"),
            RecordError::Field {
                field,
                error: VarintError::Overlong,
            } => write!(f, "the {field} is a varint longer than 64 bits"),
            RecordError::OutOfRange { field, value } => {
                write!(f, "the {field} is {value}, outside 0..=4294967295")
            }
            RecordError::InvalidUtf8 { field } => write!(f, "the {field} is not UTF-8"),
            RecordError::BadBackReference { field, back } => {
                write!(
                    f,
                    "the {field} refers {back} back, before the block's start"
                )
            }
            RecordError::BadStepReference { field, at, allocs } => {
                write!(
                    f,
                    "the {field} names allocation {at} of the block, which has {allocs} so far"
                )
            }
        }
    }
}

/// A field's result, its error naming the field.
#[inline(always)]
pub(super) fn field<T>(
    result: Result<T, VarintError>,
    field: &'static str,
) -> Result<T, RecordError> {
    result.map_err(|error| RecordError::Field { field, error })
}

/// A `uv` that must fit 32 bits.
#[inline(always)]
pub(super) fn uv32(cursor: &mut ByteCursor<'_>, name: &'static str) -> Result<u32, RecordError> {
    let value = field(cursor.uv(), name)?;
    u32::try_from(value).map_err(|_| RecordError::OutOfRange {
        field: name,
        value: i128::from(value),
    })
}

/// A length-prefixed UTF-8 string.
#[inline(always)]
pub(super) fn string<'a>(
    cursor: &mut ByteCursor<'a>,
    name: &'static str,
) -> Result<&'a str, RecordError> {
    let len = field(cursor.uv(), name)?;
    let bytes = field(cursor.bytes(len), name)?;
    std::str::from_utf8(bytes).map_err(|_| RecordError::InvalidUtf8 { field: name })
}
