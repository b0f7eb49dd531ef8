//! The symbol tables and the replay fed together: what most reports need from one pass.

use super::live_by_stack::StackTotal;
use super::record::Record;
use super::replay::{Replay, ReplayNow, ReplayOptions, ReplayResult};
use super::series::SeriesPoint;
use super::symbols::Symbols;
use crate::capture::{HeapEvent, RecordVisitor};

/// Feeds every record to both [`Symbols`] and [`Replay`].
#[derive(Debug, Default)]
pub struct Analysis {
    symbols: Symbols,
    replay: Replay,
}

/// The result of an [`Analysis`].
#[derive(Debug)]
pub struct Analyzed {
    /// Strings, frames and stacks.
    pub symbols: Symbols,
    /// What the replay found.
    pub result: ReplayResult,
}

impl Analysis {
    /// A pass computing `options` besides the defaults.
    pub fn new(options: ReplayOptions) -> Self {
        Self {
            symbols: Symbols::new(),
            replay: Replay::new(options),
        }
    }

    /// Takes in one record.
    #[inline]
    pub fn feed(&mut self, record: &Record<'_>) {
        match record {
            Record::String { .. }
            | Record::Frame { .. }
            | Record::Stack { .. }
            | Record::Module { .. }
            | Record::NativeFrame { .. } => self.symbols.feed(record),
            _ => self.replay.feed(record),
        }
    }

    /// Live bytes after the records taken in so far.
    #[inline]
    pub fn current_bytes(&self) -> u64 {
        self.replay.current_bytes()
    }

    /// Where the replay stands after the records taken in so far.
    pub fn now(&self) -> ReplayNow {
        self.replay.now()
    }

    /// The live set after the records taken in so far, by stack id.
    pub fn live_table_now(&self) -> Vec<StackTotal> {
        self.replay.live_table_now()
    }

    /// Memory over time up to the last time stamp taken in.
    pub fn series_now(&self) -> Vec<SeriesPoint> {
        self.replay.series_now()
    }

    /// The symbols taken in so far.
    pub fn symbols(&self) -> &Symbols {
        &self.symbols
    }

    /// The symbols taken in so far, to set how they show (launcher frames, import
    /// machinery) or to symbolize the native frames seen so far.
    pub fn symbols_mut(&mut self) -> &mut Symbols {
        &mut self.symbols
    }

    /// Ends the pass.
    pub fn finish(mut self) -> Analyzed {
        self.symbols.symbolize_native();
        Analyzed {
            symbols: self.symbols,
            result: self.replay.finish(),
        }
    }
}

/// The fast way in: allocations and frees go straight from the decoder to the replay.
impl RecordVisitor<'_> for Analysis {
    #[inline]
    fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32) {
        self.replay.alloc(domain, addr, size, stack);
    }

    #[inline]
    fn free(&mut self, domain: Option<u32>, addr: u64) {
        self.replay.free(domain, addr);
    }

    #[inline]
    fn record(&mut self, record: Record<'_>) {
        self.feed(&record);
    }

    fn events(&mut self, events: &[HeapEvent]) {
        self.replay.events(events);
    }

    fn damage(&mut self) {
        self.replay.damage();
        self.symbols.mark_damaged();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::capture::{BlockEncoder, CaptureFileWriter, CaptureReader};
    use crate::report::{group_sites, GroupBy, StackTotal};

    /// Writes `blocks` as a capture file (with a trailer when `complete`).
    fn capture_file(blocks: &[&[Record<'_>]], complete: bool) -> Vec<u8> {
        let mut w = CaptureFileWriter::new(Vec::new(), r#"{"tool":"memtape"}"#).unwrap();
        let mut enc = BlockEncoder::new();
        for block in blocks {
            for r in *block {
                enc.record(r);
            }
            w.write_block(&enc.take()).unwrap();
        }
        if complete {
            w.finish(r#"{"exit":"normal"}"#).unwrap()
        } else {
            w.get_ref().clone()
        }
    }

    /// Analyzes `file` record by record, and checks that the visitor ways in, on one
    /// thread and on two, find the same.
    fn analyze(file: &[u8]) -> (Analyzed, bool) {
        let mut reader = CaptureReader::new(file).unwrap();
        let mut analysis = Analysis::new(ReplayOptions::default());
        let summary = reader.for_each_record(|r| analysis.feed(&r)).unwrap();
        let analyzed = analysis.finish();
        for pipelined in [false, true] {
            let mut reader = CaptureReader::new(file).unwrap();
            let mut analysis = Analysis::new(ReplayOptions::default());
            let again = if pipelined {
                reader.visit_records_pipelined(&mut analysis)
            } else {
                reader.visit_records(&mut analysis)
            };
            assert_eq!(again.unwrap(), summary);
            assert_eq!(analysis.finish().result, analyzed.result);
        }
        (analyzed, summary.complete)
    }

    #[test]
    fn reads_a_capture_through_the_reader_with_stacks_defined_late() {
        let first: &[Record<'_>] = &[
            Record::Time { ns: 100 },
            Record::Alloc {
                domain: 0,
                addr: 0x7f00_0000_1000,
                size: 64,
                stack: 2,
            },
            Record::Alloc {
                domain: 389047,
                addr: 0x7f00_0000_2000,
                size: 4096,
                stack: 2,
            },
            Record::Marker { label: "loaded" },
        ];
        let second: &[Record<'_>] = &[
            Record::Time { ns: 200 },
            Record::Free {
                domain: None,
                addr: 0x7f00_0000_2000,
            },
            Record::String {
                id: 1,
                value: "app.py",
            },
            Record::String {
                id: 2,
                value: "load",
            },
            Record::Frame {
                id: 1,
                filename: 1,
                name: 2,
                line: 12,
            },
            Record::Stack {
                id: 2,
                parent: 0,
                frame: 1,
            },
        ];
        for complete in [true, false] {
            let (Analyzed { symbols, result }, was_complete) =
                analyze(&capture_file(&[first, second], complete));
            assert_eq!(was_complete, complete);
            assert_eq!((result.peak.bytes, result.peak.time_ns), (4160, 100));
            assert_eq!(
                result.live_at_end,
                vec![StackTotal {
                    stack: 2,
                    bytes: 64,
                    count: 1
                }]
            );
            assert_eq!(result.markers.len(), 1);
            let sites = group_sites(&result.live_at_peak, &symbols, GroupBy::Lineno, 0);
            assert_eq!(sites.len(), 1);
            assert_eq!(
                (
                    sites[0].frames[0].filename.as_str(),
                    sites[0].frames[0].line
                ),
                ("app.py", 12)
            );
            assert_eq!(sites[0].frames[0].function, "load");
        }
    }

    #[test]
    fn a_damaged_block_leaves_lost_stacks_named_and_frees_of_lost_blocks_counted() {
        let alloc = |addr, stack| Record::Alloc {
            domain: 0,
            addr,
            size: 100,
            stack,
        };
        let free = |addr| Record::Free { domain: None, addr };
        let first: &[Record<'_>] = &[
            Record::Time { ns: 1 },
            Record::String {
                id: 1,
                value: "app.py",
            },
            Record::String {
                id: 2,
                value: "main",
            },
            Record::Frame {
                id: 1,
                filename: 1,
                name: 2,
                line: 3,
            },
            Record::Stack {
                id: 1,
                parent: 0,
                frame: 1,
            },
            alloc(0xa0, 1),
            alloc(0xb0, 2),
            free(0x10), // a block from before the capture began
        ];
        // Lost: stack 2's definition, an allocation and a free.
        let lost: &[Record<'_>] = &[
            Record::Time { ns: 2 },
            Record::Stack {
                id: 2,
                parent: 1,
                frame: 1,
            },
            alloc(0xc0, 2),
            free(0xa0),
        ];
        let last: &[Record<'_>] = &[
            Record::Time { ns: 3 },
            free(0xc0),
            alloc(0xd0, 2),
            alloc(0xa0, 1), // the address whose free was lost
        ];
        let mut file = capture_file(&[first, lost, last], true);
        // The second block's checksum fails.
        let blocks: Vec<usize> = (0..file.len() - 4)
            .filter(|&at| &file[at..at + 4] == b"MTBK")
            .collect();
        assert_eq!(blocks.len(), 4, "three records blocks and the trailer");
        file[blocks[1] + 21] ^= 0xff;
        for pipelined in [false, true] {
            let mut reader = CaptureReader::new(&file[..]).unwrap();
            let mut analysis = Analysis::new(ReplayOptions::default());
            let summary = if pipelined {
                reader.visit_records_pipelined(&mut analysis)
            } else {
                reader.visit_records(&mut analysis)
            }
            .unwrap();
            assert_eq!(summary.damage.len(), 1, "{summary:?}");
            let Analyzed { symbols, result } = analysis.finish();
            // 0xc0's allocation was lost (its free is an unknown one, counted apart from
            // the one before the damage); 0xa0's free was lost (allocated again, the old
            // block counts as freed).
            let t = result.totals;
            assert_eq!((t.unknown_frees, t.unknown_frees_after_damage), (2, 1));
            assert_eq!((t.replaced, t.replaced_after_damage), (1, 1));
            assert_eq!((result.end_bytes, result.end_blocks), (300, 3));
            let lost_stack: Vec<_> = symbols
                .frames_of(2)
                .iter()
                .map(|f| (f.filename, f.function, f.line))
                .collect();
            assert_eq!(
                lost_stack,
                [("<lost in damaged block>", "<lost in damaged block>", 0)]
            );
            assert_eq!(symbols.frames_of(1)[0].function, "main");
        }
    }
}
