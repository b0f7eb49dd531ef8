//! Reading on two threads: one reads, decompresses and decodes the blocks, the calling
//! thread hands the records to the visitor (a report's replay, the larger half of the
//! work).
//!
//! The reading thread packs the records into chunks of at most [`CHUNK_OPS`] (allocations
//! and frees as [`HeapEvent`]s, handed over in runs by [`RecordVisitor::events`]; any
//! other record, with its strings copied into the chunk, and each block's end as a break
//! between runs), at most [`CHUNKS_IN_FLIGHT`] ahead of the visitor, and chunks are sent
//! back to be filled again: memory stays bounded whatever the size of a block.

use std::ops::Range;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};

use super::decoder::{HeapEvent, RecordVisitor};
use super::error::CaptureError;
use super::reader::{CaptureReader, ReadSummary};
use super::record::{Record, Segments};

/// Records per chunk (allocations and frees: 32 bytes each).
const CHUNK_OPS: usize = 8192;
/// Chunks decoded ahead of the visitor.
const CHUNKS_IN_FLIGHT: usize = 4;

/// What comes between two runs of events.
#[derive(Clone, Copy, Debug)]
enum Break {
    /// `Chunk::others[i]`.
    Other(u32),
    BlockEnd,
    Damage,
    Trailer,
}

/// A record that is not an allocation or a free, its borrowed parts copied into the
/// chunk's `text` and `bytes`.
#[derive(Debug)]
enum Kept {
    /// A record that borrows nothing.
    Plain(Record<'static>),
    String {
        id: u32,
        value: Range<usize>,
    },
    Marker {
        label: Range<usize>,
    },
    Module {
        id: u32,
        path: Range<usize>,
        base: u64,
        build_id: Range<usize>,
        count: u64,
        segments: Range<usize>,
    },
}

#[derive(Debug, Default)]
struct Chunk {
    events: Vec<HeapEvent>,
    /// `(i, what)`: `what` comes before `events[i]`.
    breaks: Vec<(usize, Break)>,
    others: Vec<Kept>,
    text: String,
    bytes: Vec<u8>,
}

impl Chunk {
    fn new() -> Self {
        Self {
            events: Vec::with_capacity(CHUNK_OPS),
            ..Self::default()
        }
    }

    fn len(&self) -> usize {
        self.events.len() + self.breaks.len()
    }

    fn clear(&mut self) {
        self.events.clear();
        self.breaks.clear();
        self.others.clear();
        self.text.clear();
        self.bytes.clear();
    }

    fn keep_text(&mut self, s: &str) -> Range<usize> {
        let start = self.text.len();
        self.text.push_str(s);
        start..self.text.len()
    }

    fn keep_bytes(&mut self, b: &[u8]) -> Range<usize> {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(b);
        start..self.bytes.len()
    }

    fn keep(&mut self, record: Record<'_>) -> Kept {
        match record {
            Record::String { id, value } => Kept::String {
                id,
                value: self.keep_text(value),
            },
            Record::Marker { label } => Kept::Marker {
                label: self.keep_text(label),
            },
            Record::Module {
                id,
                path,
                base,
                build_id,
                segments,
            } => Kept::Module {
                id,
                path: self.keep_text(path),
                base,
                build_id: self.keep_bytes(build_id),
                count: segments.count,
                segments: self.keep_bytes(segments.raw),
            },
            Record::Time { ns } => Kept::Plain(Record::Time { ns }),
            Record::Dropped { count } => Kept::Plain(Record::Dropped { count }),
            Record::Frame {
                id,
                filename,
                name,
                line,
            } => Kept::Plain(Record::Frame {
                id,
                filename,
                name,
                line,
            }),
            Record::Stack { id, parent, frame } => Kept::Plain(Record::Stack { id, parent, frame }),
            Record::NativeFrame { id, module, offset } => {
                Kept::Plain(Record::NativeFrame { id, module, offset })
            }
            Record::Alloc { .. } | Record::Free { .. } => {
                unreachable!("allocations and frees come as events")
            }
        }
    }

    /// The record `kept` stands for, borrowing from this chunk.
    fn record(&self, kept: &Kept) -> Record<'_> {
        match *kept {
            Kept::Plain(record) => record,
            Kept::String { id, ref value } => Record::String {
                id,
                value: &self.text[value.clone()],
            },
            Kept::Marker { ref label } => Record::Marker {
                label: &self.text[label.clone()],
            },
            Kept::Module {
                id,
                ref path,
                base,
                ref build_id,
                count,
                ref segments,
            } => Record::Module {
                id,
                path: &self.text[path.clone()],
                base,
                build_id: &self.bytes[build_id.clone()],
                segments: Segments {
                    count,
                    raw: &self.bytes[segments.clone()],
                },
            },
        }
    }

    /// Hands this chunk's records to `visitor`.
    fn replay<V: for<'r> RecordVisitor<'r>>(&self, visitor: &mut V) {
        let mut from = 0;
        for &(at, what) in &self.breaks {
            if at > from {
                visitor.events(&self.events[from..at]);
                from = at;
            }
            match what {
                Break::Other(i) => visitor.record(self.record(&self.others[i as usize])),
                Break::BlockEnd => visitor.block_end(),
                Break::Damage => visitor.damage(),
                Break::Trailer => visitor.trailer(),
            }
        }
        if from < self.events.len() {
            visitor.events(&self.events[from..]);
        }
    }
}

enum Message {
    Chunk(Chunk),
    End(Result<ReadSummary, CaptureError>),
}

/// The reading thread's visitor: fills chunks and sends them on.
struct ChunkSender {
    chunk: Chunk,
    to_visitor: SyncSender<Message>,
    empty: Receiver<Chunk>,
    /// The visitor's thread stopped listening.
    gone: bool,
}

impl ChunkSender {
    #[inline]
    fn push(&mut self, event: HeapEvent) {
        self.chunk.events.push(event);
        if self.chunk.len() >= CHUNK_OPS {
            self.send();
        }
    }

    fn push_break(&mut self, what: Break) {
        self.chunk.breaks.push((self.chunk.events.len(), what));
        if self.chunk.len() >= CHUNK_OPS {
            self.send();
        }
    }

    #[cold]
    fn send(&mut self) {
        let next = self.empty.try_recv().unwrap_or_else(|_| Chunk::new());
        let full = std::mem::replace(&mut self.chunk, next);
        if !self.gone && self.to_visitor.send(Message::Chunk(full)).is_err() {
            self.gone = true;
        }
    }
}

impl<'a> RecordVisitor<'a> for ChunkSender {
    #[inline]
    fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32) {
        self.push(HeapEvent::Alloc {
            domain,
            stack,
            addr,
            size,
        });
    }

    #[inline]
    fn free(&mut self, domain: Option<u32>, addr: u64) {
        self.push(HeapEvent::Free { domain, addr });
    }

    fn record(&mut self, record: Record<'a>) {
        let kept = self.chunk.keep(record);
        let i = self.chunk.others.len() as u32;
        self.chunk.others.push(kept);
        self.push_break(Break::Other(i));
    }

    fn block_end(&mut self) {
        self.push_break(Break::BlockEnd);
    }

    fn damage(&mut self) {
        self.push_break(Break::Damage);
    }

    fn trailer(&mut self) {
        self.push_break(Break::Trailer);
    }
}

impl<R: std::io::Read + Send> CaptureReader<R> {
    /// [`visit_records`](Self::visit_records) on two threads: this one runs the
    /// visitor, a second reads, decompresses and decodes ahead of it. The visitor sees
    /// the same calls in the same order, and the result is the same.
    pub fn visit_records_pipelined<V>(
        &mut self,
        visitor: &mut V,
    ) -> Result<ReadSummary, CaptureError>
    where
        V: for<'r> RecordVisitor<'r>,
    {
        std::thread::scope(|scope| {
            let (to_visitor, from_reader) = sync_channel::<Message>(CHUNKS_IN_FLIGHT);
            let (to_reader, empty) = channel::<Chunk>();
            scope.spawn(move || {
                let mut sender = ChunkSender {
                    chunk: Chunk::new(),
                    to_visitor,
                    empty,
                    gone: false,
                };
                let result = self.visit_records(&mut sender);
                if sender.chunk.len() > 0 {
                    sender.send();
                }
                // An error here means the visitor's thread has stopped: nobody to tell.
                let _ = sender.to_visitor.send(Message::End(result));
            });
            // The receiving ends move into `consume`: should the visitor panic, they
            // are dropped as it unwinds, and the reading thread stops sending.
            consume(from_reader, to_reader, visitor)
        })
    }
}

/// Replays chunks into `visitor` until the reading thread's end.
fn consume<V: for<'r> RecordVisitor<'r>>(
    from_reader: Receiver<Message>,
    to_reader: Sender<Chunk>,
    visitor: &mut V,
) -> Result<ReadSummary, CaptureError> {
    loop {
        match from_reader.recv() {
            Ok(Message::Chunk(mut chunk)) => {
                chunk.replay(visitor);
                chunk.clear();
                // The reading thread may have finished: then the chunk is dropped.
                let _ = to_reader.send(chunk);
            }
            Ok(Message::End(result)) => return result,
            // The reading thread panicked before its end: the scope raises its panic.
            Err(_) => return Ok(ReadSummary::default()),
        }
    }
}
