//! Ints as the viewer reads them: JavaScript numbers, exact below 2**53.

/// The largest int written (2**53 - 1): above it the viewer's JavaScript numbers are
/// inexact. Larger addresses and streams keep their low 53 bits; larger sizes and times
/// saturate here.
pub const MAX_SAFE_INT: u64 = (1 << 53) - 1;

/// Ints as written, with the 2**53 limit applied and counted.
#[derive(Default)]
pub(super) struct SafeInts {
    pub(super) clamped: u64,
}

impl SafeInts {
    /// An address or stream: keeps the low 53 bits (drops pointer tags), so distinct
    /// addresses stay distinct in practice.
    pub(super) fn masked(&mut self, value: u64) -> i64 {
        if value > MAX_SAFE_INT {
            self.clamped += 1;
        }
        (value & MAX_SAFE_INT) as i64
    }

    /// A size or time: saturates at 2**53 - 1.
    pub(super) fn saturated(&mut self, value: u64) -> i64 {
        if value > MAX_SAFE_INT {
            self.clamped += 1;
        }
        value.min(MAX_SAFE_INT) as i64
    }
}
