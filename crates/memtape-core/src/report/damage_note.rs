//! [`damage_note`]: the one-line warning every reading command prints for a capture read
//! around damaged blocks.

use std::fmt::Write as _;

use super::replay::Totals;
use super::units::grouped;
use super::LOST_IN_DAMAGE;
use crate::capture::{Damage, ReadSummary};

/// Damaged parts named one by one; more are summed up.
const PARTS_NAMED: usize = 3;

/// What was lost and what was read, when `summary` lists damage: the parts skipped (block
/// offset, why, bytes), the events lost (by the trailer's count, when the trailer is
/// there), what was read instead, and what that means for the figures.
/// `events_written`: the trailer's count of allocations and frees; `events_read`: those
/// replayed; `after_damage`: the replay's counts after the first damage (frees of blocks
/// never seen allocated, allocations at an address still live).
pub fn damage_note(
    summary: &ReadSummary,
    events_written: Option<u64>,
    events_read: u64,
    after_damage: &Totals,
) -> Option<String> {
    let (first, rest) = summary.damage.split_first()?;
    let mut note = String::from("skipped ");
    note.push_str(&part(first));
    for damage in rest.iter().take(PARTS_NAMED - 1) {
        let _ = write!(note, "; {}", part(damage));
    }
    if let Some(more) = rest.get(PARTS_NAMED - 1..).filter(|more| !more.is_empty()) {
        let bytes: u64 = more.iter().map(|d| d.skipped_bytes).sum();
        let _ = write!(
            note,
            "; and {} more damaged part{} ({} bytes)",
            grouped(more.len() as u64),
            plural(more.len() as u64),
            grouped(bytes)
        );
    }
    match events_written {
        Some(written) if written >= events_read => {
            let _ = write!(
                note,
                "; {} of {} events lost",
                grouped(written - events_read),
                grouped(written)
            );
        }
        _ => note.push_str("; an unknown number of events lost"),
    }
    let _ = write!(
        note,
        "; read the rest ({} block{}, {} events): the figures are incomplete, without what \
         the lost part allocated and freed (stacks defined there show as {LOST_IN_DAMAGE}",
        grouped(summary.blocks),
        plural(summary.blocks),
        grouped(events_read),
    );
    let frees = after_damage.unknown_frees_after_damage;
    if frees > 0 {
        let _ = write!(
            note,
            "; {} free{} after it of blocks not seen allocated, ignored",
            grouped(frees),
            plural(frees)
        );
    }
    let replaced = after_damage.replaced_after_damage;
    if replaced > 0 {
        let _ = write!(
            note,
            "; {} allocation{} after it at an address whose free was lost, the old block \
             counted as freed",
            grouped(replaced),
            plural(replaced)
        );
    }
    note.push(')');
    Some(note)
}

/// `the block at offset 5077 (checksum mismatch; 3,112 bytes, to offset 8189)`.
fn part(damage: &Damage) -> String {
    let mut text = format!("the block at offset {} ({}", damage.offset, damage.reason);
    if damage.records_read > 0 {
        let _ = write!(
            text,
            "; its first {} record{} read",
            grouped(damage.records_read),
            plural(damage.records_read)
        );
    }
    let _ = write!(text, "; {} bytes, ", grouped(damage.skipped_bytes));
    match damage.resumed_at {
        Some(at) => {
            let _ = write!(text, "to offset {at})");
        }
        None => text.push_str("to the end of the file)"),
    }
    text
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(unknown_frees_after_damage: u64, replaced_after_damage: u64) -> Totals {
        Totals {
            unknown_frees_after_damage,
            replaced_after_damage,
            ..Totals::default()
        }
    }

    fn damage(offset: u64, resumed_at: Option<u64>, records_read: u64) -> Damage {
        Damage {
            offset,
            resumed_at,
            skipped_bytes: resumed_at.unwrap_or(9000) - offset,
            records_read,
            reason: "checksum mismatch".to_owned(),
        }
    }

    #[test]
    fn names_the_parts_the_events_lost_and_what_was_read() {
        let mut summary = ReadSummary {
            blocks: 7,
            damage: vec![damage(100, Some(2100), 0)],
            ..ReadSummary::default()
        };
        assert_eq!(
            damage_note(&ReadSummary::default(), None, 0, &Totals::default()),
            None
        );
        assert_eq!(
            damage_note(&summary, Some(12345), 11000, &after(3, 0)).unwrap(),
            "skipped the block at offset 100 (checksum mismatch; 2,000 bytes, to offset 2100); \
             1,345 of 12,345 events lost; read the rest (7 blocks, 11,000 events): the figures \
             are incomplete, without what the lost part allocated and freed (stacks defined \
             there show as <lost in damaged block>; 3 frees after it of blocks not seen \
             allocated, ignored)"
        );
        summary.blocks = 1;
        summary.damage = (0..6)
            .map(|i| damage(1000 * i, Some(1000 * i + 10), u64::from(i == 1)))
            .chain([damage(8000, None, 0)])
            .collect();
        assert_eq!(
            damage_note(&summary, None, 5, &after(0, 2)).unwrap(),
            "skipped the block at offset 0 (checksum mismatch; 10 bytes, to offset 10); the \
             block at offset 1000 (checksum mismatch; its first 1 record read; 10 bytes, to \
             offset 1010); the block at offset 2000 (checksum mismatch; 10 bytes, to offset \
             2010); and 4 more damaged parts (1,030 bytes); an unknown number of events lost; \
             read the rest (1 block, 5 events): the figures are incomplete, without what the \
             lost part allocated and freed (stacks defined there show as <lost in damaged \
             block>; 2 allocations after it at an address whose free was lost, the old block \
             counted as freed)"
        );
    }
}
