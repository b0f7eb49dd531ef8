//! Differences between two grouped tables, with tracemalloc's `Snapshot.compare_to`
//! semantics: sites only in the new table differ by their whole value, sites only in the
//! old one appear with size 0 and a negative difference, and rows sort biggest first by
//! `(|size_diff|, size, |count_diff|, count, frames)`.

use std::cmp::Ordering;

use rustc_hash::FxHashMap;

use super::sites::{compare_frames, Frame, Site};

/// One site in both tables (or either).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteDiff {
    /// The site's frames, innermost first.
    pub frames: Vec<Frame>,
    /// Bytes in the new table.
    pub bytes: u64,
    /// New bytes minus old bytes.
    pub bytes_diff: i64,
    /// Blocks in the new table.
    pub count: u64,
    /// New blocks minus old blocks.
    pub count_diff: i64,
}

fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn sub(new: u64, old: u64) -> i64 {
    let d = i128::from(new) - i128::from(old);
    d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// tracemalloc's sort key order, biggest first.
fn order(a: &SiteDiff, b: &SiteDiff) -> Ordering {
    let key = |d: &SiteDiff| {
        (
            d.bytes_diff.unsigned_abs(),
            d.bytes,
            d.count_diff.unsigned_abs(),
            d.count,
        )
    };
    key(b)
        .cmp(&key(a))
        .then_with(|| compare_frames(&b.frames, &a.frames))
}

/// `new` compared with `old` (both grouped the same way).
pub fn compare(new: &[Site], old: &[Site]) -> Vec<SiteDiff> {
    let mut previous: FxHashMap<&[Frame], &Site> =
        old.iter().map(|s| (s.frames.as_slice(), s)).collect();
    let mut rows: Vec<SiteDiff> = Vec::with_capacity(new.len() + old.len());
    for s in new {
        let (old_bytes, old_count) = previous
            .remove(s.frames.as_slice())
            .map_or((0, 0), |o| (o.bytes, o.count));
        rows.push(SiteDiff {
            frames: s.frames.clone(),
            bytes: s.bytes,
            bytes_diff: sub(s.bytes, old_bytes),
            count: s.count,
            count_diff: sub(s.count, old_count),
        });
    }
    for s in old {
        if previous.remove(s.frames.as_slice()).is_some() {
            rows.push(SiteDiff {
                frames: s.frames.clone(),
                bytes: 0,
                bytes_diff: -signed(s.bytes),
                count: 0,
                count_diff: -signed(s.count),
            });
        }
    }
    rows.sort_unstable_by(order);
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(file: &str, line: u32, bytes: u64, count: u64) -> Site {
        Site {
            frames: vec![Frame {
                filename: file.into(),
                function: "f".into(),
                line,
            }],
            bytes,
            count,
        }
    }

    fn brief(rows: &[SiteDiff]) -> Vec<(String, u32, u64, i64, u64, i64)> {
        rows.iter()
            .map(|r| {
                let f = &r.frames[0];
                (
                    f.filename.clone(),
                    f.line,
                    r.bytes,
                    r.bytes_diff,
                    r.count,
                    r.count_diff,
                )
            })
            .collect()
    }

    /// The example mirrors `Snapshot.compare_to(old, "lineno")` in CPython:
    ///
    /// ```python
    /// # old: a.py:1 -> 100 B in 2, a.py:2 -> 50 B in 1, c.py:9 -> 40 B in 4
    /// # new: a.py:1 -> 130 B in 3, a.py:2 -> 50 B in 1, b.py:3 -> 30 B in 1
    /// ```
    ///
    /// prints (size, size_diff, count, count_diff) on CPython 3.11: c.py:9 (0, -40, 0, -4),
    /// a.py:1 (130, +30, 3, +1), b.py:3 (30, +30, 1, +1), a.py:2 (50, 0, 1, 0): |diff| 40
    /// first; a.py:1 and b.py:3 tie on |diff| 30 and a.py:1 wins on size.
    #[test]
    fn compare_to_semantics() {
        let old = [
            site("a.py", 1, 100, 2),
            site("a.py", 2, 50, 1),
            site("c.py", 9, 40, 4),
        ];
        let new = [
            site("a.py", 1, 130, 3),
            site("a.py", 2, 50, 1),
            site("b.py", 3, 30, 1),
        ];
        let s = |f: &str| f.to_owned();
        assert_eq!(
            brief(&compare(&new, &old)),
            vec![
                (s("c.py"), 9, 0, -40, 0, -4),
                (s("a.py"), 1, 130, 30, 3, 1),
                (s("b.py"), 3, 30, 30, 1, 1),
                (s("a.py"), 2, 50, 0, 1, 0),
            ]
        );
    }

    #[test]
    fn ties_fall_back_to_frames_and_empty_inputs() {
        let rows = compare(&[site("a.py", 1, 5, 1), site("b.py", 1, 5, 1)], &[]);
        assert_eq!(rows[0].frames[0].filename, "b.py");
        assert!(compare(&[], &[]).is_empty());
        let gone = compare(&[], &[site("a.py", 1, 5, 1)]);
        assert_eq!((gone[0].bytes, gone[0].bytes_diff), (0, -5));
    }
}
