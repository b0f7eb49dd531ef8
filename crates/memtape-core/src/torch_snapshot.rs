//! Writes a [`MemorySnapshot`] as the snapshot PyTorch's memory viewer (memory_viz) opens,
//! as a pickle or as the same structure in JSON.
//!
//! The layout follows `research/torch_snapshot.md`: a top-level dict with `segments`,
//! `device_traces` and `allocator_settings`; plain types only; pickle protocol 4 with no
//! memo (every trace entry is a distinct dict, because the viewer mutates them in place;
//! [`TorchSnapshotWriter::share_frames`] memoizes the read-only `frames` lists only);
//! lists and dicts in batches of at most 1000; every int below 2**53.
//!
//! Devices: framework events (`device >= 0`) go to `device_traces[device]`; Python-heap
//! events ([`HOST_DEVICE`]) go to one extra list after the last framework device, the
//! *host index* ([`DeviceLayout::host_index`]).
//!
//! Segments: a framework device's are its buffers where its trace ends
//! ([`framework_segments`]: replayed from the trace, the allocator's own state for
//! buffers the trace never touches); the host's are one per block ([`host_segments`]).
//! So every block lies in a segment at every point of the trace, as the viewer's
//! "Allocator State History" needs.
//!
//! Both encodings are streamed: the writer fills a reusable buffer and hands it to the
//! [`Write`] in 64 KiB pieces; a stack's encoded frames are built once and copied.

use std::io::{self, Write};
use std::marker::PhantomData;
use std::ops::Range;

use rustc_hash::FxHashMap;

mod framework_segments;
mod host_segments;

use framework_segments::FrameworkReplay;
use host_segments::{segment_size, HostReplay, HostStep};

use crate::event::{Action, Event, HOST_DEVICE};
use crate::memory_snapshot::{MemorySnapshot, ResolvedFrame, SegmentState};
use crate::stack_table::StackId;

/// The largest int written (2**53 - 1): above it the viewer's JavaScript numbers are
/// inexact. Larger addresses and streams keep their low 53 bits; larger sizes and times
/// saturate here.
pub const MAX_SAFE_INT: u64 = (1 << 53) - 1;

/// The largest framework device index accepted: every index up to the largest one used
/// gets a (possibly empty) trace list, so a wild index would write millions of lists.
pub const MAX_DEVICE_INDEX: i32 = 65_535;

/// Items per `MARK ... APPENDS` (and pairs per `MARK ... SETITEMS`), as Python's pickler
/// batches them; the viewer's `arr.push(...items)` overflows the stack on huge batches.
const BATCH: usize = 1000;

/// Bytes buffered before they are handed to the output.
const FLUSH_AT: usize = 64 * 1024;

/// The memory_viz trace actions one memtape [`Action`] becomes, in order.
///
/// A free is always `free_requested` then `free_completed` (only the second frees memory
/// in the viewer's timelines; it merges the adjacent pair into one `free`).
pub fn trace_actions(action: Action) -> &'static [&'static str] {
    match action {
        Action::Alloc | Action::AllocReuse => &["alloc"],
        Action::AllocNew | Action::AllocMakeBuffer => &["segment_alloc", "alloc"],
        Action::Free | Action::FreeActiveToCache => &["free_requested", "free_completed"],
        Action::FreeActiveToOs | Action::Release => {
            &["free_requested", "free_completed", "segment_free"]
        }
        Action::FreeCacheToOs => &["segment_free"],
    }
}

/// Which `device_traces` list each device's events go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLayout {
    /// Number of framework device lists: the largest framework device index used by an
    /// event or a segment, plus one (0 when there are none).
    pub framework_devices: usize,
    /// Index of the Python-heap list (`framework_devices`), or None without host events.
    pub host_index: Option<usize>,
    /// The largest framework device index seen (-1 when none).
    max_device: i32,
}

impl DeviceLayout {
    /// The layout of `snapshot`'s events and segments.
    pub fn of(snapshot: &MemorySnapshot) -> DeviceLayout {
        let mut max_device = -1;
        let mut host = false;
        for event in &snapshot.events {
            if event.device < 0 {
                host = true;
            } else {
                max_device = max_device.max(event.device);
            }
        }
        for segment in &snapshot.segments {
            max_device = max_device.max(segment.device);
        }
        let framework_devices = usize::try_from(max_device + 1).unwrap_or(0);
        DeviceLayout {
            framework_devices,
            host_index: host.then_some(framework_devices),
            max_device,
        }
    }

    /// Number of lists in `device_traces`.
    pub fn trace_count(&self) -> usize {
        self.framework_devices + usize::from(self.host_index.is_some())
    }

    /// The list an event on `device` goes to.
    fn slot(&self, device: i32) -> usize {
        match usize::try_from(device) {
            Ok(index) => index,
            // Every negative device is the host ([`HOST_DEVICE`]); the layout saw it.
            Err(_) => self.host_index.unwrap_or(self.framework_devices),
        }
    }

    fn check(&self) -> io::Result<()> {
        if self.max_device > MAX_DEVICE_INDEX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "device index {} is above {MAX_DEVICE_INDEX}; memory_viz needs one trace \
                     list per index up to it, so the snapshot was not written",
                    self.max_device
                ),
            ));
        }
        Ok(())
    }
}

/// The `device_traces` index of the Python-heap events in `snapshot`'s memory_viz
/// snapshot, or None when it has no Python-heap events.
pub fn host_trace_index(snapshot: &MemorySnapshot) -> Option<usize> {
    DeviceLayout::of(snapshot).host_index
}

/// What a write produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TorchSnapshotStats {
    /// Trace entries written, over all devices.
    pub trace_entries: u64,
    /// Lists in `device_traces`.
    pub device_traces: usize,
    /// Index of the Python-heap list, if any.
    pub host_index: Option<usize>,
    /// Segments written.
    pub segments: usize,
    /// Segments left out because their device was negative.
    pub skipped_segments: usize,
    /// Ints that were ≥ 2**53 and were masked (addresses, streams) or saturated.
    pub clamped_ints: u64,
    /// Whether entries carry `category`. It is left out when no entry would be
    /// `'unknown'`: MemoryViz.js throws on categories without an `'unknown'` one.
    pub categories: bool,
    /// Bytes handed to the output.
    pub bytes_written: u64,
}

/// Writes one [`MemorySnapshot`] as a memory_viz snapshot.
#[derive(Clone, Copy, Debug)]
pub struct TorchSnapshotWriter<'a> {
    snapshot: &'a MemorySnapshot,
    layout: DeviceLayout,
    share_frames: bool,
}

impl<'a> TorchSnapshotWriter<'a> {
    /// A writer for `snapshot`.
    pub fn new(snapshot: &'a MemorySnapshot) -> Self {
        TorchSnapshotWriter {
            snapshot,
            layout: DeviceLayout::of(snapshot),
            share_frames: false,
        }
    }

    /// Pickle only: write each stack's `frames` list once and refer to it through the
    /// pickle memo afterwards (`MEMOIZE`, then `BINGET`/`LONG_BINGET`), as torch's own
    /// snapshots do (it shares one list per traceback). Entries stay distinct dicts. This
    /// makes files with deep stacks many times smaller. Off by default.
    pub fn share_frames(mut self, share: bool) -> Self {
        self.share_frames = share;
        self
    }

    /// Which list each device's events go to.
    pub fn layout(&self) -> DeviceLayout {
        self.layout
    }

    /// The `device_traces` index of the Python-heap events, if there are any.
    pub fn host_index(&self) -> Option<usize> {
        self.layout.host_index
    }

    /// Writes the snapshot as a protocol-4 pickle (what `torch.cuda.memory._dump_snapshot`
    /// writes, and what both `_memory_viz.py` and the web viewer read).
    pub fn write_pickle<W: Write + ?Sized>(&self, out: &mut W) -> io::Result<TorchSnapshotStats> {
        Run::<W, Pickle>::new(self, out).write()
    }

    /// Writes the snapshot as compact JSON (UTF-8, one trailing newline). The web viewer
    /// accepts it; `_memory_viz.py` does not. Tuples become arrays.
    pub fn write_json<W: Write + ?Sized>(&self, out: &mut W) -> io::Result<TorchSnapshotStats> {
        Run::<W, Json>::new(self, out).write()
    }
}

/// Writes `snapshot` as a memory_viz pickle; see [`TorchSnapshotWriter::write_pickle`].
pub fn write_pickle<W: Write + ?Sized>(
    snapshot: &MemorySnapshot,
    out: &mut W,
) -> io::Result<TorchSnapshotStats> {
    TorchSnapshotWriter::new(snapshot).write_pickle(out)
}

/// Writes `snapshot` as memory_viz JSON; see [`TorchSnapshotWriter::write_json`].
pub fn write_json<W: Write + ?Sized>(
    snapshot: &MemorySnapshot,
    out: &mut W,
) -> io::Result<TorchSnapshotStats> {
    TorchSnapshotWriter::new(snapshot).write_json(out)
}

// ---------------------------------------------------------------------------------------
// Encodings: the same calls write a pickle or JSON.

/// How values are spelled. Containers take the index of each item (or key) so that the
/// pickle can batch and JSON can place commas.
trait Encoding {
    fn header(out: &mut Vec<u8>);
    fn footer(out: &mut Vec<u8>);
    fn dict_begin(out: &mut Vec<u8>);
    /// Before the `index`-th key of the current dict.
    fn dict_key(out: &mut Vec<u8>, index: usize, key: &str);
    fn dict_end(out: &mut Vec<u8>, len: usize);
    fn list_begin(out: &mut Vec<u8>);
    /// Before the `index`-th item of the current list.
    fn list_item(out: &mut Vec<u8>, index: usize);
    fn list_end(out: &mut Vec<u8>, len: usize);
    fn int(out: &mut Vec<u8>, value: i64);
    fn str(out: &mut Vec<u8>, value: &str);
    fn bool(out: &mut Vec<u8>, value: bool);
    /// A 2-tuple of ints.
    fn int_pair(out: &mut Vec<u8>, first: i64, second: i64);
    /// Whether [`Encoding::memoize`] works.
    const HAS_MEMO: bool = false;
    /// Remembers the value just written so [`Encoding::memo_get`] can repeat it; false
    /// when the encoding cannot.
    fn memoize(_out: &mut Vec<u8>) -> bool {
        false
    }
    /// Before the `index`-th key of the current dict, when the caller writes the key
    /// itself (from the memo). Only called when [`Encoding::HAS_MEMO`].
    fn dict_key_slot(_out: &mut Vec<u8>, _index: usize) {
        unreachable!("this encoding has no memo");
    }
    /// Repeats the `index`-th memoized value. Only called after `memoize` returned true.
    fn memo_get(_out: &mut Vec<u8>, _index: u32) {
        unreachable!("this encoding has no memo");
    }
}

/// Pickle opcodes used (all in the viewer's VM).
mod op {
    pub const PROTO: u8 = 0x80;
    pub const STOP: u8 = b'.';
    pub const MARK: u8 = b'(';
    pub const EMPTY_DICT: u8 = b'}';
    pub const SETITEMS: u8 = b'u';
    pub const EMPTY_LIST: u8 = b']';
    pub const APPENDS: u8 = b'e';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE: u8 = b'X';
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const BININT: u8 = b'J';
    pub const LONG1: u8 = 0x8a;
    pub const TUPLE2: u8 = 0x86;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const MEMOIZE: u8 = 0x94;
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
}

/// Pickle protocol 4, no FRAME; the memo only for shared frames lists.
struct Pickle;

impl Encoding for Pickle {
    fn header(out: &mut Vec<u8>) {
        out.extend_from_slice(&[op::PROTO, 4]);
    }

    fn footer(out: &mut Vec<u8>) {
        out.push(op::STOP);
    }

    fn dict_begin(out: &mut Vec<u8>) {
        out.push(op::EMPTY_DICT);
    }

    fn dict_key(out: &mut Vec<u8>, index: usize, key: &str) {
        batch_boundary(out, index, op::SETITEMS);
        Self::str(out, key);
    }

    fn dict_end(out: &mut Vec<u8>, len: usize) {
        if len > 0 {
            out.push(op::SETITEMS);
        }
    }

    fn list_begin(out: &mut Vec<u8>) {
        out.push(op::EMPTY_LIST);
    }

    fn list_item(out: &mut Vec<u8>, index: usize) {
        batch_boundary(out, index, op::APPENDS);
    }

    fn list_end(out: &mut Vec<u8>, len: usize) {
        if len > 0 {
            out.push(op::APPENDS);
        }
    }

    fn int(out: &mut Vec<u8>, value: i64) {
        if let Ok(small) = u8::try_from(value) {
            out.extend_from_slice(&[op::BININT1, small]);
        } else if let Ok(medium) = u16::try_from(value) {
            out.push(op::BININT2);
            out.extend_from_slice(&medium.to_le_bytes());
        } else if let Ok(word) = i32::try_from(value) {
            out.push(op::BININT);
            out.extend_from_slice(&word.to_le_bytes());
        } else {
            // Two's complement, little-endian, in the fewest bytes that keep the sign.
            let bytes = i128::from(value).to_le_bytes();
            let mut len = bytes.len();
            while len > 1 {
                let top = bytes[len - 1];
                let sign_of_next = bytes[len - 2] & 0x80;
                let redundant =
                    (top == 0 && sign_of_next == 0) || (top == 0xff && sign_of_next != 0);
                if !redundant {
                    break;
                }
                len -= 1;
            }
            // At most 9 bytes for an i64.
            out.extend_from_slice(&[op::LONG1, len as u8]);
            out.extend_from_slice(&bytes[..len]);
        }
    }

    fn str(out: &mut Vec<u8>, value: &str) {
        // BINUNICODE8 is not in the viewer's VM: cut a (pathological) ≥ 4 GiB string.
        let value = truncate_at_char_boundary(value, u32::MAX as usize);
        if let Ok(len) = u8::try_from(value.len()) {
            out.extend_from_slice(&[op::SHORT_BINUNICODE, len]);
        } else {
            out.push(op::BINUNICODE);
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(value.as_bytes());
    }

    fn bool(out: &mut Vec<u8>, value: bool) {
        out.push(if value { op::NEWTRUE } else { op::NEWFALSE });
    }

    fn int_pair(out: &mut Vec<u8>, first: i64, second: i64) {
        Self::int(out, first);
        Self::int(out, second);
        out.push(op::TUPLE2);
    }

    const HAS_MEMO: bool = true;

    fn memoize(out: &mut Vec<u8>) -> bool {
        out.push(op::MEMOIZE);
        true
    }

    fn dict_key_slot(out: &mut Vec<u8>, index: usize) {
        batch_boundary(out, index, op::SETITEMS);
    }

    fn memo_get(out: &mut Vec<u8>, index: u32) {
        if let Ok(short) = u8::try_from(index) {
            out.extend_from_slice(&[op::BINGET, short]);
        } else {
            out.push(op::LONG_BINGET);
            out.extend_from_slice(&index.to_le_bytes());
        }
    }
}

/// Opens a `MARK` at the start of every batch, closing the previous batch with `close`.
fn batch_boundary(out: &mut Vec<u8>, index: usize, close: u8) {
    if index % BATCH == 0 {
        if index > 0 {
            out.push(close);
        }
        out.push(op::MARK);
    }
}

fn truncate_at_char_boundary(value: &str, max_len: usize) -> &str {
    if value.len() <= max_len {
        return value;
    }
    let mut end = max_len;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

/// Compact JSON.
struct Json;

impl Encoding for Json {
    fn header(_out: &mut Vec<u8>) {}

    fn footer(out: &mut Vec<u8>) {
        out.push(b'\n');
    }

    fn dict_begin(out: &mut Vec<u8>) {
        out.push(b'{');
    }

    fn dict_key(out: &mut Vec<u8>, index: usize, key: &str) {
        if index > 0 {
            out.push(b',');
        }
        Self::str(out, key);
        out.push(b':');
    }

    fn dict_end(out: &mut Vec<u8>, _len: usize) {
        out.push(b'}');
    }

    fn list_begin(out: &mut Vec<u8>) {
        out.push(b'[');
    }

    fn list_item(out: &mut Vec<u8>, index: usize) {
        if index > 0 {
            out.push(b',');
        }
    }

    fn list_end(out: &mut Vec<u8>, _len: usize) {
        out.push(b']');
    }

    fn int(out: &mut Vec<u8>, value: i64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut rest = value.unsigned_abs();
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        if value < 0 {
            out.push(b'-');
        }
        out.extend_from_slice(&digits[at..]);
    }

    fn str(out: &mut Vec<u8>, value: &str) {
        push_json_string(out, value);
    }

    fn bool(out: &mut Vec<u8>, value: bool) {
        out.extend_from_slice(if value { b"true" } else { b"false" });
    }

    fn int_pair(out: &mut Vec<u8>, first: i64, second: i64) {
        out.push(b'[');
        Self::int(out, first);
        out.push(b',');
        Self::int(out, second);
        out.push(b']');
    }
}

/// Appends `value` as a JSON string: `"` and `\` escaped, control characters as `\n`,
/// `\t`, ... or `\u00XX`, everything else (non-ASCII included) as its UTF-8 bytes.
pub fn push_json_string(out: &mut Vec<u8>, value: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = value.as_bytes();
    let mut clean_from = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => &[],
            _ => continue,
        };
        out.extend_from_slice(&bytes[clean_from..at]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.extend_from_slice(&[HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]]);
        } else {
            out.extend_from_slice(escape);
        }
        clean_from = at + 1;
    }
    out.extend_from_slice(&bytes[clean_from..]);
    out.push(b'"');
}

/// Counts the items of one open dict, so keys get their index.
struct Dict<E> {
    len: usize,
    encoding: PhantomData<E>,
}

impl<E: Encoding> Dict<E> {
    fn begin(out: &mut Vec<u8>) -> Self {
        E::dict_begin(out);
        Dict {
            len: 0,
            encoding: PhantomData,
        }
    }

    fn key(&mut self, out: &mut Vec<u8>, key: &str) {
        E::dict_key(out, self.len, key);
        self.len += 1;
    }

    /// Before a key the caller writes itself (see [`Encoding::dict_key_slot`]).
    fn key_slot(&mut self, out: &mut Vec<u8>) {
        E::dict_key_slot(out, self.len);
        self.len += 1;
    }

    fn end(self, out: &mut Vec<u8>) {
        E::dict_end(out, self.len);
    }
}

/// Counts the items of one open list.
struct List<E> {
    len: usize,
    encoding: PhantomData<E>,
}

impl<E: Encoding> List<E> {
    fn begin(out: &mut Vec<u8>) -> Self {
        E::list_begin(out);
        List {
            len: 0,
            encoding: PhantomData,
        }
    }

    /// Call before writing each item.
    fn item(&mut self, out: &mut Vec<u8>) {
        E::list_item(out, self.len);
        self.len += 1;
    }

    fn end(self, out: &mut Vec<u8>) {
        E::list_end(out, self.len);
    }
}

fn write_frames<E: Encoding>(out: &mut Vec<u8>, frames: &[ResolvedFrame]) {
    let mut list = List::<E>::begin(out);
    for frame in frames {
        list.item(out);
        let mut dict = Dict::<E>::begin(out);
        dict.key(out, "filename");
        E::str(out, &frame.filename);
        dict.key(out, "line");
        E::int(out, i64::from(frame.line));
        dict.key(out, "name");
        E::str(out, &frame.name);
        dict.end(out);
    }
    list.end(out);
}

// ---------------------------------------------------------------------------------------
// One write.

/// Ints as written, with the 2**53 limit applied and counted.
#[derive(Default)]
struct SafeInts {
    clamped: u64,
}

impl SafeInts {
    /// An address or stream: keeps the low 53 bits (drops pointer tags), so distinct
    /// addresses stay distinct in practice.
    fn masked(&mut self, value: u64) -> i64 {
        if value > MAX_SAFE_INT {
            self.clamped += 1;
        }
        (value & MAX_SAFE_INT) as i64
    }

    /// A size or time: saturates at 2**53 - 1.
    fn saturated(&mut self, value: u64) -> i64 {
        if value > MAX_SAFE_INT {
            self.clamped += 1;
        }
        value.min(MAX_SAFE_INT) as i64
    }
}

/// One stack's encoded `frames` list.
struct CachedFrames {
    range: Range<usize>,
    /// Pickle memo index, once the list was written and memoized.
    memo: Option<u32>,
}

/// Each stack's encoded `frames` list, built on first use, copied (or, when shared,
/// referenced through the pickle memo) on every later use. When shared, the trace
/// entries' keys and actions are written once too and repeated from the memo (strings
/// are immutable, so sharing them is safe where sharing dicts is not).
struct FrameCache {
    arena: Vec<u8>,
    slots: FxHashMap<StackId, u32>,
    cached: Vec<CachedFrames>,
    share: bool,
    memoized: u32,
    strings: FxHashMap<&'static str, u32>,
}

impl FrameCache {
    fn new(share: bool) -> Self {
        FrameCache {
            arena: Vec::new(),
            slots: FxHashMap::default(),
            cached: Vec::new(),
            share,
            memoized: 0,
            strings: FxHashMap::default(),
        }
    }

    /// Writes `key` as the next key of `dict`, from the memo when shared.
    fn key<E: Encoding>(&mut self, dict: &mut Dict<E>, out: &mut Vec<u8>, key: &'static str) {
        if self.share && E::HAS_MEMO {
            dict.key_slot(out);
            self.string::<E>(out, key);
        } else {
            dict.key(out, key);
        }
    }

    /// Writes `value`, from the memo when shared.
    fn string<E: Encoding>(&mut self, out: &mut Vec<u8>, value: &'static str) {
        if !(self.share && E::HAS_MEMO) {
            E::str(out, value);
            return;
        }
        match self.strings.get(value) {
            Some(&index) => E::memo_get(out, index),
            None => {
                E::str(out, value);
                if E::memoize(out) {
                    self.strings.insert(value, self.memoized);
                    self.memoized += 1;
                }
            }
        }
    }

    /// The cache slot of `stack`'s frames, or None when it has none (an empty range).
    fn slot<E: Encoding>(&mut self, snapshot: &MemorySnapshot, stack: StackId) -> Option<usize> {
        let (arena, cached) = (&mut self.arena, &mut self.cached);
        let slot = *self.slots.entry(stack).or_insert_with(|| {
            let start = arena.len();
            let frames = snapshot.frames(stack);
            if !frames.is_empty() {
                write_frames::<E>(arena, frames);
            }
            cached.push(CachedFrames {
                range: start..arena.len(),
                memo: None,
            });
            (cached.len() - 1) as u32
        }) as usize;
        (!self.cached[slot].range.is_empty()).then_some(slot)
    }

    /// Writes the frames list of `slot`.
    fn write<E: Encoding>(&mut self, out: &mut Vec<u8>, slot: usize) {
        let cached = &mut self.cached[slot];
        match cached.memo {
            Some(index) => E::memo_get(out, index),
            None => {
                out.extend_from_slice(&self.arena[cached.range.clone()]);
                if self.share && E::memoize(out) {
                    cached.memo = Some(self.memoized);
                    self.memoized += 1;
                }
            }
        }
    }
}

struct Run<'s, 'w, W: Write + ?Sized, E> {
    snapshot: &'s MemorySnapshot,
    layout: DeviceLayout,
    out: &'w mut W,
    buf: Vec<u8>,
    frames: FrameCache,
    /// Encoded op names by op id (index 0 and unknown ids: no op).
    op_strings: Vec<Vec<u8>>,
    unknown: Vec<u8>,
    empty: Vec<u8>,
    ints: SafeInts,
    stats: TorchSnapshotStats,
    encoding: PhantomData<E>,
}

impl<'s, 'w, W: Write + ?Sized, E: Encoding> Run<'s, 'w, W, E> {
    fn new(writer: &TorchSnapshotWriter<'s>, out: &'w mut W) -> Self {
        let snapshot = writer.snapshot;
        let encoded = |value: &str| {
            let mut bytes = Vec::with_capacity(value.len() + 2);
            E::str(&mut bytes, value);
            bytes
        };
        Run {
            snapshot,
            layout: writer.layout,
            out,
            buf: Vec::with_capacity(FLUSH_AT + 4096),
            frames: FrameCache::new(writer.share_frames),
            op_strings: snapshot.op_names.iter().map(|name| encoded(name)).collect(),
            unknown: encoded("unknown"),
            empty: encoded(""),
            ints: SafeInts::default(),
            stats: TorchSnapshotStats::default(),
            encoding: PhantomData,
        }
    }

    fn write(mut self) -> io::Result<TorchSnapshotStats> {
        self.layout.check()?;
        self.stats.device_traces = self.layout.trace_count();
        self.stats.host_index = self.layout.host_index;
        self.stats.categories = self.snapshot.events.iter().any(
            |event| !matches!(self.snapshot.op_name(event.op), Some(name) if name != "unknown"),
        );

        E::header(&mut self.buf);
        let mut top = Dict::<E>::begin(&mut self.buf);
        top.key(&mut self.buf, "segments");
        self.write_segments()?;
        top.key(&mut self.buf, "device_traces");
        self.write_device_traces()?;
        top.key(&mut self.buf, "allocator_settings");
        self.write_allocator_settings();
        top.end(&mut self.buf);
        E::footer(&mut self.buf);

        self.flush()?;
        self.out.flush()?;
        self.stats.clamped_ints = self.ints.clamped;
        Ok(self.stats)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.stats.bytes_written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    fn flush_if_full(&mut self) -> io::Result<()> {
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    /// Every device's segments where its trace ends: a framework device's buffers as its
    /// trace leaves them ([`framework_segments`]), the host's blocks one segment each
    /// ([`host_segments`]).
    fn final_segments(&self) -> Vec<SegmentState> {
        let events = &self.snapshot.events;
        let mut host = HostReplay::default();
        let mut framework: Vec<FrameworkReplay> = (0..self.layout.framework_devices)
            .map(|device| FrameworkReplay::new(device as i32))
            .collect();
        for (index, event) in events.iter().enumerate() {
            match usize::try_from(event.device) {
                Ok(device) => framework[device].step(event),
                Err(_) => {
                    host.step(events, index);
                }
            }
        }
        let mut segments: Vec<SegmentState> = framework
            .into_iter()
            .flat_map(|replay| replay.segments_at_end(self.snapshot))
            .collect();
        if let Some(host_index) = self.layout.host_index {
            segments.extend(host.live_at_end(events).into_iter().map(|index| {
                let block = &events[index];
                SegmentState {
                    device: host_index as i32,
                    addr: block.addr,
                    size: segment_size(block.size),
                    requested_size: block.size,
                    stream: block.stream,
                    active: true,
                    stack: block.stack,
                    op: block.op,
                }
            }));
        }
        segments
    }

    fn write_segments(&mut self) -> io::Result<()> {
        self.stats.skipped_segments = self
            .snapshot
            .segments
            .iter()
            .filter(|segment| segment.device < 0)
            .count();
        let mut segments = self.final_segments();
        segments.sort_by_key(|segment| (segment.device, segment.addr));

        let mut list = List::<E>::begin(&mut self.buf);
        for segment in &segments {
            list.item(&mut self.buf);
            self.write_segment(segment);
            self.stats.segments += 1;
            self.flush_if_full()?;
        }
        list.end(&mut self.buf);
        Ok(())
    }

    fn write_segment(&mut self, segment: &SegmentState) {
        let address = self.ints.masked(segment.addr);
        let size = self.ints.saturated(segment.size);
        let requested = self.ints.saturated(segment.requested_size);
        let stream = self.ints.masked(segment.stream);
        let (active_size, requested_size, state) = if segment.active {
            (size, requested, "active_allocated")
        } else {
            (0, 0, "inactive")
        };

        let out = &mut self.buf;
        let mut dict = Dict::<E>::begin(out);
        dict.key(out, "device");
        E::int(out, i64::from(segment.device));
        dict.key(out, "address");
        E::int(out, address);
        dict.key(out, "total_size");
        E::int(out, size);
        dict.key(out, "allocated_size");
        E::int(out, active_size);
        dict.key(out, "active_size");
        E::int(out, active_size);
        dict.key(out, "requested_size");
        E::int(out, requested_size);
        dict.key(out, "stream");
        E::int(out, stream);
        dict.key(out, "segment_type");
        E::str(out, "large");
        dict.key(out, "segment_pool_id");
        E::int_pair(out, 0, 0);
        dict.key(out, "is_expandable");
        E::bool(out, false);
        dict.key(out, "frames");
        List::<E>::begin(out).end(out);
        dict.key(out, "blocks");
        let mut blocks = List::<E>::begin(out);
        blocks.item(out);
        let mut block = Dict::<E>::begin(out);
        block.key(out, "address");
        E::int(out, address);
        block.key(out, "size");
        E::int(out, size);
        block.key(out, "requested_size");
        E::int(out, requested_size);
        block.key(out, "state");
        E::str(out, state);
        block.key(out, "frames");
        let frames = if segment.active {
            self.frames.slot::<E>(self.snapshot, segment.stack)
        } else {
            None
        };
        match frames {
            Some(slot) => self.frames.write::<E>(out, slot),
            None => List::<E>::begin(out).end(out),
        }
        block.end(out);
        blocks.end(out);
        dict.end(out);
    }

    fn write_device_traces(&mut self) -> io::Result<()> {
        let snapshot = self.snapshot;
        let slots = self.layout.trace_count();
        // Event indices grouped by list, each group in event order (a counting sort).
        let mut starts = vec![0usize; slots + 1];
        for event in &snapshot.events {
            starts[self.layout.slot(event.device) + 1] += 1;
        }
        for slot in 0..slots {
            starts[slot + 1] += starts[slot];
        }
        let mut order = vec![0usize; snapshot.events.len()];
        let mut next = starts.clone();
        for (index, event) in snapshot.events.iter().enumerate() {
            let slot = self.layout.slot(event.device);
            order[next[slot]] = index;
            next[slot] += 1;
        }

        let mut traces = List::<E>::begin(&mut self.buf);
        for slot in 0..slots {
            traces.item(&mut self.buf);
            let mut trace = List::<E>::begin(&mut self.buf);
            let mut host = (Some(slot) == self.layout.host_index).then(HostReplay::default);
            for &index in &order[starts[slot]..starts[slot + 1]] {
                let event = &snapshot.events[index];
                match host.as_mut() {
                    Some(replay) => {
                        let step = replay.step(&snapshot.events, index);
                        self.write_host_entries(&mut trace, step, index);
                    }
                    None => {
                        for &action in trace_actions(event.action) {
                            trace.item(&mut self.buf);
                            self.write_entry(action, event, event.size);
                        }
                    }
                }
                self.flush_if_full()?;
            }
            self.stats.trace_entries += trace.len as u64;
            trace.end(&mut self.buf);
        }
        traces.end(&mut self.buf);
        Ok(())
    }

    /// The entries of one host event (see [`host_segments`]).
    fn write_host_entries(&mut self, trace: &mut List<E>, step: HostStep, index: usize) {
        let events = &self.snapshot.events;
        let event = &events[index];
        let mut write = |run: &mut Self, action: &'static str, event: &Event, size: u64| {
            trace.item(&mut run.buf);
            run.write_entry(action, event, size);
        };
        match step {
            HostStep::Alloc { replaces } => {
                if let Some(stale) = replaces {
                    // Its free was never recorded: it ends where the address is reused.
                    let ended = Event {
                        time_ns: event.time_ns,
                        ..events[stale]
                    };
                    write(self, "free_requested", &ended, ended.size);
                    write(self, "free_completed", &ended, ended.size);
                    write(self, "segment_free", &ended, segment_size(ended.size));
                }
                write(self, "segment_alloc", event, segment_size(event.size));
                write(self, "alloc", event, event.size);
            }
            HostStep::Free { size } => {
                write(self, "free_requested", event, size);
                write(self, "free_completed", event, size);
                write(self, "segment_free", event, segment_size(size));
            }
            HostStep::Skip => {}
        }
    }

    fn write_entry(&mut self, action: &'static str, event: &Event, size: u64) {
        let addr = self.ints.masked(event.addr);
        let size = self.ints.saturated(size);
        let stream = self.ints.masked(event.stream);
        let time_us = self.ints.saturated(event.time_ns / 1000);
        let op = event.op as usize;
        let op_string = if op == 0 {
            None
        } else {
            self.op_strings.get(op)
        };

        let out = &mut self.buf;
        let memo = &mut self.frames;
        let mut dict = Dict::<E>::begin(out);
        memo.key(&mut dict, out, "action");
        memo.string::<E>(out, action);
        memo.key(&mut dict, out, "addr");
        E::int(out, addr);
        memo.key(&mut dict, out, "size");
        E::int(out, size);
        memo.key(&mut dict, out, "stream");
        E::int(out, stream);
        memo.key(&mut dict, out, "time_us");
        E::int(out, time_us);
        memo.key(&mut dict, out, "compile_context");
        out.extend_from_slice(&self.empty);
        memo.key(&mut dict, out, "user_metadata");
        out.extend_from_slice(op_string.unwrap_or(&self.empty));
        if self.stats.categories {
            memo.key(&mut dict, out, "category");
            out.extend_from_slice(op_string.unwrap_or(&self.unknown));
        }
        if let Some(slot) = memo.slot::<E>(self.snapshot, event.stack) {
            memo.key(&mut dict, out, "frames");
            memo.write::<E>(out, slot);
        }
        dict.end(out);
    }

    fn write_allocator_settings(&mut self) {
        let out = &mut self.buf;
        let mut dict = Dict::<E>::begin(out);
        dict.key(out, "producer");
        E::str(out, concat!("memtape ", env!("CARGO_PKG_VERSION")));
        if let Some(host) = self.layout.host_index {
            dict.key(out, "python_heap_device_index");
            E::int(out, host as i64);
        }
        dict.end(out);
    }
}

const _: () = assert!(
    HOST_DEVICE < 0,
    "host events are told apart by a negative device"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory_snapshot::ResolvedFrame;

    /// A decoded pickle value (the subset this writer emits).
    #[derive(Clone, Debug, PartialEq)]
    enum Value {
        Int(i64),
        Str(String),
        Bool(bool),
        List(Vec<Value>),
        Tuple(Vec<Value>),
        Dict(Vec<(Value, Value)>),
        Mark,
    }

    impl Value {
        fn get(&self, key: &str) -> Option<&Value> {
            let Value::Dict(pairs) = self else {
                panic!("not a dict: {self:?}")
            };
            pairs
                .iter()
                .find(|(k, _)| *k == Value::Str(key.to_owned()))
                .map(|(_, v)| v)
        }

        fn at(&self, key: &str) -> &Value {
            self.get(key).unwrap_or_else(|| panic!("no key {key:?}"))
        }

        fn list(&self) -> &[Value] {
            match self {
                Value::List(items) => items,
                other => panic!("not a list: {other:?}"),
            }
        }

        fn str(&self) -> &str {
            match self {
                Value::Str(s) => s,
                other => panic!("not a str: {other:?}"),
            }
        }

        fn int(&self) -> i64 {
            match self {
                Value::Int(i) => *i,
                other => panic!("not an int: {other:?}"),
            }
        }

        fn keys(&self) -> Vec<&str> {
            let Value::Dict(pairs) = self else {
                panic!("not a dict")
            };
            pairs.iter().map(|(k, _)| k.str()).collect()
        }
    }

    /// A strict decoder for exactly the opcodes the writer may emit; also checks that no
    /// APPENDS/SETITEMS batch exceeds 1000 items.
    fn decode(bytes: &[u8]) -> Value {
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

    fn pickled(write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        write(&mut out);
        out
    }

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

    fn frame(name: &str, line: u32) -> ResolvedFrame {
        ResolvedFrame {
            filename: "/app/train.py".into(),
            name: name.into(),
            line,
        }
    }

    fn event(action: Action, addr: u64, size: u64, device: i32, stack: StackId, op: u32) -> Event {
        Event {
            action,
            addr,
            size,
            requested_size: size,
            device,
            stream: 0,
            thread: 1,
            time_ns: 1_700_000_000_000_000_123,
            stack,
            op,
        }
    }

    /// Host events, devices 0 and 1, all seven framework actions, ops and no ops.
    fn tiny() -> MemorySnapshot {
        let mut snapshot = MemorySnapshot {
            op_names: vec![String::new(), "matmul".into(), "add".into()],
            ..MemorySnapshot::default()
        };
        snapshot
            .stacks
            .insert(1, vec![frame("f", 10), frame("main", 3)]);
        snapshot.stacks.insert(2, vec![frame("g", 20)]);
        snapshot.events = vec![
            event(Action::Alloc, 0x1000, 64, HOST_DEVICE, 1, 0),
            event(Action::AllocNew, 0xA000, 4096, 0, 1, 1),
            event(Action::AllocReuse, 0xB000, 512, 1, 2, 2),
            event(Action::FreeActiveToCache, 0xB000, 512, 1, 0, 0),
            event(Action::AllocMakeBuffer, 0xC000, 256, 1, 0, 2),
            event(Action::Release, 0xC000, 256, 1, 0, 0),
            event(Action::FreeCacheToOs, 0xB000, 512, 1, 0, 0),
            event(Action::FreeActiveToOs, 0xA000, 4096, 0, 0, 0),
            event(Action::Free, 0x1000, 64, HOST_DEVICE, 0, 0),
        ];
        snapshot.segments = vec![
            SegmentState {
                device: 1,
                addr: 0xD000,
                size: 1024,
                requested_size: 1000,
                stream: 7,
                active: true,
                stack: 2,
                op: 2,
            },
            SegmentState {
                device: 0,
                addr: 0xE000,
                size: 2048,
                requested_size: 2000,
                stream: 0,
                active: false,
                stack: 1,
                op: 0,
            },
            SegmentState {
                device: 1,
                addr: 0x9000,
                size: 128,
                requested_size: 100,
                stream: 0,
                active: true,
                stack: 0,
                op: 0,
            },
        ];
        snapshot
    }

    fn actions(trace: &Value) -> Vec<&str> {
        trace.list().iter().map(|e| e.at("action").str()).collect()
    }

    #[test]
    fn layout_puts_the_host_after_the_framework_devices() {
        let snapshot = tiny();
        let layout = DeviceLayout::of(&snapshot);
        assert_eq!(layout.framework_devices, 2);
        assert_eq!(layout.host_index, Some(2));
        assert_eq!(layout.trace_count(), 3);
        assert_eq!(host_trace_index(&snapshot), Some(2));

        let host_only = MemorySnapshot {
            events: vec![event(Action::Alloc, 1, 1, HOST_DEVICE, 0, 0)],
            ..MemorySnapshot::default()
        };
        assert_eq!(host_trace_index(&host_only), Some(0));
        assert_eq!(DeviceLayout::of(&host_only).trace_count(), 1);

        let mut framework_only = tiny();
        framework_only.events.retain(|e| e.device >= 0);
        assert_eq!(host_trace_index(&framework_only), None);

        // A segment on a device with no events still gets its list.
        let mut segment_device = framework_only;
        segment_device.segments[0].device = 3;
        assert_eq!(DeviceLayout::of(&segment_device).trace_count(), 4);
    }

    #[test]
    fn tiny_snapshot_maps_actions_devices_and_ops() {
        let snapshot = tiny();
        let mut bytes = Vec::new();
        let stats = write_pickle(&snapshot, &mut bytes).unwrap();
        assert_eq!(stats.bytes_written, bytes.len() as u64);
        assert_eq!(stats.device_traces, 3);
        assert_eq!(stats.host_index, Some(2));
        assert_eq!(stats.segments, 3);
        assert_eq!(stats.clamped_ints, 0);
        assert!(stats.categories);

        let root = decode(&bytes);
        assert_eq!(
            root.keys(),
            ["segments", "device_traces", "allocator_settings"]
        );
        let traces = root.at("device_traces").list();
        assert_eq!(traces.len(), 3);
        assert_eq!(
            actions(&traces[0]),
            [
                "segment_alloc",
                "alloc",
                "free_requested",
                "free_completed",
                "segment_free"
            ]
        );
        assert_eq!(
            actions(&traces[1]),
            [
                "alloc",
                "free_requested",
                "free_completed",
                "segment_alloc",
                "alloc",
                "free_requested",
                "free_completed",
                "segment_free",
                "segment_free"
            ]
        );
        // The host heap: a segment per block, with the block.
        assert_eq!(
            actions(&traces[2]),
            [
                "segment_alloc",
                "alloc",
                "free_requested",
                "free_completed",
                "segment_free"
            ]
        );
        let entries: usize = traces.iter().map(|t| t.list().len()).sum();
        assert_eq!(stats.trace_entries, entries as u64);

        let first = &traces[0].list()[0];
        assert_eq!(
            first.keys(),
            [
                "action",
                "addr",
                "size",
                "stream",
                "time_us",
                "compile_context",
                "user_metadata",
                "category",
                "frames"
            ]
        );
        assert_eq!(first.at("addr").int(), 0xA000);
        assert_eq!(first.at("size").int(), 4096);
        assert_eq!(first.at("time_us").int(), 1_700_000_000_000_000);
        assert_eq!(first.at("compile_context").str(), "");
        assert_eq!(first.at("user_metadata").str(), "matmul");
        assert_eq!(first.at("category").str(), "matmul");
        let frames = first.at("frames").list();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].keys(), ["filename", "line", "name"]);
        assert_eq!(frames[0].at("name").str(), "f");
        assert_eq!(frames[0].at("line").int(), 10);
        assert_eq!(frames[1].at("name").str(), "main");

        // A free without op or stack: 'unknown', '' and no frames.
        let free = &traces[0].list()[2];
        assert_eq!(free.at("category").str(), "unknown");
        assert_eq!(free.at("user_metadata").str(), "");
        assert!(free.get("frames").is_none());

        let mut categories: Vec<&str> = traces
            .iter()
            .flat_map(|t| t.list())
            .map(|e| e.at("category").str())
            .collect();
        categories.sort_unstable();
        categories.dedup();
        assert_eq!(categories, ["add", "matmul", "unknown"]);

        let settings = root.at("allocator_settings");
        assert!(settings.at("producer").str().starts_with("memtape "));
        assert_eq!(settings.at("python_heap_device_index").int(), 2);
    }

    #[test]
    fn segments_are_sorted_and_tiled_by_one_block() {
        let root = decode(&pickled(|o| {
            write_pickle(&tiny(), o).unwrap();
        }));
        let segments = root.at("segments").list();
        let order: Vec<(i64, i64)> = segments
            .iter()
            .map(|s| (s.at("device").int(), s.at("address").int()))
            .collect();
        assert_eq!(order, [(0, 0xE000), (1, 0x9000), (1, 0xD000)]);

        let cached = &segments[0];
        assert_eq!(cached.at("total_size").int(), 2048);
        assert_eq!(cached.at("allocated_size").int(), 0);
        assert_eq!(cached.at("active_size").int(), 0);
        assert_eq!(cached.at("requested_size").int(), 0);
        assert_eq!(cached.at("segment_type").str(), "large");
        assert_eq!(
            cached.at("segment_pool_id"),
            &Value::Tuple(vec![Value::Int(0), Value::Int(0)])
        );
        assert_eq!(cached.at("is_expandable"), &Value::Bool(false));
        assert_eq!(cached.at("frames").list(), []);
        let blocks = cached.at("blocks").list();
        assert_eq!(blocks.len(), 1);
        assert_eq!(
            blocks[0].keys(),
            ["address", "size", "requested_size", "state", "frames"]
        );
        assert_eq!(blocks[0].at("state").str(), "inactive");
        assert_eq!(blocks[0].at("requested_size").int(), 0);
        assert_eq!(blocks[0].at("frames").list(), []);

        let active = &segments[2];
        assert_eq!(active.at("stream").int(), 7);
        assert_eq!(active.at("allocated_size").int(), 1024);
        assert_eq!(active.at("active_size").int(), 1024);
        assert_eq!(active.at("requested_size").int(), 1000);
        let block = &active.at("blocks").list()[0];
        assert_eq!(block.at("address").int(), 0xD000);
        assert_eq!(block.at("size").int(), 1024);
        assert_eq!(block.at("requested_size").int(), 1000);
        assert_eq!(block.at("state").str(), "active_allocated");
        assert_eq!(block.at("frames").list()[0].at("name").str(), "g");

        // Active without a stack: still `frames: []`.
        assert_eq!(segments[1].at("blocks").list()[0].at("frames").list(), []);
    }

    /// `(action, addr, size)` of every entry of a trace.
    fn entries(trace: &Value) -> Vec<(&str, i64, i64)> {
        trace
            .list()
            .iter()
            .map(|e| (e.at("action").str(), e.at("addr").int(), e.at("size").int()))
            .collect()
    }

    #[test]
    fn host_blocks_get_one_segment_each_consistent_with_the_trace() {
        let mut snapshot = MemorySnapshot::default();
        snapshot.stacks.insert(1, vec![frame("f", 10)]);
        snapshot.events = vec![
            // Allocated before the trace (the ring lost it): live from the start.
            event(Action::Free, 0x100, 48, HOST_DEVICE, 1, 0),
            event(Action::Alloc, 0x200, 32, HOST_DEVICE, 1, 0),
            event(Action::Alloc, 0x300, 0, HOST_DEVICE, 1, 0),
            // Reused without a recorded free: the stale block ends first.
            event(Action::Alloc, 0x200, 64, HOST_DEVICE, 1, 0),
            // A free's size is the live block's.
            event(Action::Free, 0x300, 999, HOST_DEVICE, 0, 0),
        ];
        let root = decode(&pickled(|o| {
            write_pickle(&snapshot, o).unwrap();
        }));
        let trace = &root.at("device_traces").list()[0];
        assert_eq!(
            entries(trace),
            [
                ("free_requested", 0x100, 48),
                ("free_completed", 0x100, 48),
                ("segment_free", 0x100, 48),
                ("segment_alloc", 0x200, 32),
                ("alloc", 0x200, 32),
                ("segment_alloc", 0x300, 1),
                ("alloc", 0x300, 0),
                ("free_requested", 0x200, 32),
                ("free_completed", 0x200, 32),
                ("segment_free", 0x200, 32),
                ("segment_alloc", 0x200, 64),
                ("alloc", 0x200, 64),
                ("free_requested", 0x300, 0),
                ("free_completed", 0x300, 0),
                ("segment_free", 0x300, 1),
            ]
        );
        // The blocks live at the end, each in its own segment on the host's device.
        let segments = root.at("segments").list();
        assert_eq!(segments.len(), 1);
        let segment = &segments[0];
        assert_eq!(segment.at("device").int(), 0);
        assert_eq!(segment.at("address").int(), 0x200);
        assert_eq!(segment.at("total_size").int(), 64);
        let block = &segment.at("blocks").list()[0];
        assert_eq!(block.at("state").str(), "active_allocated");
        assert_eq!(block.at("size").int(), 64);
        assert_eq!(block.at("requested_size").int(), 64);
        assert_eq!(block.at("frames").list()[0].at("name").str(), "f");
    }

    #[test]
    fn framework_segments_are_where_the_trace_ends() {
        let events = vec![
            // Allocated before the trace: first seen going back to the cache.
            event(Action::FreeActiveToCache, 0x1000, 256, 0, 0, 0),
            event(Action::AllocNew, 0x2000, 512, 0, 0, 0),
            event(Action::AllocNew, 0x3000, 128, 0, 0, 0),
            event(Action::FreeActiveToOs, 0x3000, 128, 0, 0, 0),
        ];
        let untouched = SegmentState {
            device: 0,
            addr: 0x4000,
            size: 64,
            requested_size: 64,
            stream: 0,
            active: false,
            stack: 0,
            op: 0,
        };
        // The allocator's state read later: 0x2000 freed since and 0x3000 reused; only
        // the buffer the trace never touched is taken from it.
        let snapshot = MemorySnapshot {
            events,
            segments: vec![
                SegmentState {
                    addr: 0x3000,
                    active: true,
                    ..untouched.clone()
                },
                untouched.clone(),
            ],
            ..MemorySnapshot::default()
        };
        let root = decode(&pickled(|o| {
            write_pickle(&snapshot, o).unwrap();
        }));
        let segments: Vec<(i64, i64, &str)> = root
            .at("segments")
            .list()
            .iter()
            .map(|s| {
                let block = &s.at("blocks").list()[0];
                (
                    s.at("address").int(),
                    s.at("total_size").int(),
                    block.at("state").str(),
                )
            })
            .collect();
        assert_eq!(
            segments,
            [
                (0x1000, 256, "inactive"),
                (0x2000, 512, "active_allocated"),
                (0x4000, 64, "inactive"),
            ]
        );
    }

    #[test]
    fn categories_are_left_out_without_an_unknown_one() {
        let mut snapshot = tiny();
        for event in &mut snapshot.events {
            event.op = 1;
        }
        let mut bytes = Vec::new();
        let stats = write_pickle(&snapshot, &mut bytes).unwrap();
        assert!(!stats.categories);
        let root = decode(&bytes);
        for trace in root.at("device_traces").list() {
            for entry in trace.list() {
                assert!(entry.get("category").is_none());
                assert_eq!(entry.at("user_metadata").str(), "matmul");
            }
        }

        // An op literally named 'unknown' satisfies the viewer.
        snapshot.op_names[1] = "unknown".into();
        assert!(write_pickle(&snapshot, &mut Vec::new()).unwrap().categories);
    }

    #[test]
    fn an_unknown_op_id_counts_as_no_op() {
        let mut snapshot = tiny();
        snapshot.events.truncate(1);
        snapshot.events[0].op = 99;
        snapshot.segments.clear();
        let root = decode(&pickled(|o| {
            write_pickle(&snapshot, o).unwrap();
        }));
        let entry = &root.at("device_traces").list()[0].list()[0];
        assert_eq!(entry.at("category").str(), "unknown");
        assert_eq!(entry.at("user_metadata").str(), "");
    }

    #[test]
    fn big_ints_are_masked_or_saturated() {
        let mut snapshot = MemorySnapshot::default();
        let mut e = event(Action::AllocNew, 0xAB00_0000_0000_1000, u64::MAX, 0, 0, 0);
        e.stream = 1 << 60 | 5;
        e.time_ns = u64::MAX;
        snapshot.events.push(e);
        let mut bytes = Vec::new();
        let stats = write_pickle(&snapshot, &mut bytes).unwrap();
        // Two entries, four big ints each, and the segment it leaves (address, size,
        // requested size and stream).
        assert_eq!(stats.clamped_ints, 12);
        let root = decode(&bytes);
        let entry = &root.at("device_traces").list()[0].list()[1];
        assert_eq!(entry.at("addr").int(), 0x1000);
        assert_eq!(entry.at("size").int(), MAX_SAFE_INT as i64);
        assert_eq!(entry.at("stream").int(), 5);
        assert_eq!(entry.at("time_us").int(), MAX_SAFE_INT as i64);
    }

    #[test]
    fn empty_and_odd_inputs() {
        let root = decode(&pickled(|o| {
            write_pickle(&MemorySnapshot::default(), o).unwrap();
        }));
        assert_eq!(root.at("segments").list(), []);
        assert_eq!(root.at("device_traces").list(), []);
        assert!(root
            .at("allocator_settings")
            .get("python_heap_device_index")
            .is_none());

        let mut json = Vec::new();
        write_json(&MemorySnapshot::default(), &mut json).unwrap();
        assert_eq!(
            String::from_utf8(json).unwrap(),
            concat!(
                r#"{"segments":[],"device_traces":[],"allocator_settings":{"producer":"memtape "#,
                env!("CARGO_PKG_VERSION"),
                "\"}}\n"
            )
        );

        let mut negative_segment = tiny();
        negative_segment.segments[0].device = -1;
        let stats = write_pickle(&negative_segment, &mut Vec::new()).unwrap();
        assert_eq!((stats.segments, stats.skipped_segments), (2, 1));

        let mut wild = tiny();
        wild.events[1].device = MAX_DEVICE_INDEX + 1;
        let mut out = Vec::new();
        let error = write_pickle(&wild, &mut out).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("65536"));
        assert!(out.is_empty(), "nothing written on bad input");
    }

    #[test]
    fn json_matches_the_pickle_structure() {
        let snapshot = tiny();
        let mut json = Vec::new();
        let stats = write_json(&snapshot, &mut json).unwrap();
        let text = String::from_utf8(json).unwrap();
        assert!(text.starts_with(r#"{"segments":[{"device":0,"address":57344,"#));
        assert!(text.contains(
            r#"{"action":"segment_alloc","addr":40960,"size":4096,"stream":0,"time_us":1700000000000000,"compile_context":"","user_metadata":"matmul","category":"matmul","frames":[{"filename":"/app/train.py","line":10,"name":"f"},{"filename":"/app/train.py","line":3,"name":"main"}]}"#
        ));
        assert!(text.contains(r#""segment_pool_id":[0,0],"is_expandable":false"#));
        assert_eq!(
            text.matches(r#""action":"#).count() as u64,
            stats.trace_entries
        );
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn output_is_streamed_in_pieces() {
        /// Accepts writes of at most 64 KiB + some and counts them.
        struct Pieces {
            data: Vec<u8>,
            writes: usize,
        }
        impl Write for Pieces {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.writes += 1;
                self.data.extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let snapshot = synthetic(20_000, 50);
        let mut pieces = Pieces {
            data: Vec::new(),
            writes: 0,
        };
        let stats = write_pickle(&snapshot, &mut pieces).unwrap();
        assert!(pieces.writes > 1);
        assert_eq!(stats.bytes_written, pieces.data.len() as u64);
        let root = decode(&pieces.data);
        let entries: usize = root
            .at("device_traces")
            .list()
            .iter()
            .map(|t| t.list().len())
            .sum();
        assert_eq!(entries as u64, stats.trace_entries);
        let mut whole = Vec::new();
        write_pickle(&snapshot, &mut whole).unwrap();
        assert_eq!(whole, pieces.data);
    }

    #[test]
    fn shared_frames_decode_to_the_same_snapshot() {
        let snapshot = synthetic(5_000, 300); // more than 256 stacks: LONG_BINGET too
        let mut plain = Vec::new();
        write_pickle(&snapshot, &mut plain).unwrap();
        let mut shared = Vec::new();
        let writer = TorchSnapshotWriter::new(&snapshot).share_frames(true);
        let stats = writer.write_pickle(&mut shared).unwrap();
        assert_eq!(stats.bytes_written, shared.len() as u64);
        assert!(
            shared.len() * 4 < plain.len(),
            "{} vs {}",
            shared.len(),
            plain.len()
        );
        assert!(shared.contains(&b'j'));
        assert_eq!(decode(&shared), decode(&plain));
        // Entry keys and actions are written once and repeated from the memo.
        let count =
            |bytes: &[u8], word: &[u8]| bytes.windows(word.len()).filter(|w| *w == word).count();
        assert_eq!(count(&shared, b"compile_context"), 1);
        assert_eq!(count(&shared, b"free_requested"), 1);
        assert!(count(&plain, b"compile_context") > 1000);

        // JSON has no memo: sharing changes nothing there.
        let mut json = Vec::new();
        write_json(&snapshot, &mut json).unwrap();
        let mut json_shared = Vec::new();
        writer.write_json(&mut json_shared).unwrap();
        assert_eq!(json, json_shared);

        let mut tiny_shared = Vec::new();
        TorchSnapshotWriter::new(&tiny())
            .share_frames(true)
            .write_pickle(&mut tiny_shared)
            .unwrap();
        assert_eq!(
            decode(&tiny_shared),
            decode(&pickled(|o| {
                write_pickle(&tiny(), o).unwrap();
            }))
        );
    }

    /// `events` events on the host and devices 0 and 1, `stacks` stacks of 16 frames.
    fn synthetic(events: usize, stacks: u32) -> MemorySnapshot {
        let mut snapshot = MemorySnapshot {
            op_names: vec![
                String::new(),
                "matmul".into(),
                "conv2d".into(),
                "add".into(),
            ],
            ..MemorySnapshot::default()
        };
        for stack in 1..=stacks {
            let frames = (0..16)
                .map(|depth| ResolvedFrame {
                    filename: format!("/home/user/project/pkg/module_{}.py", depth % 5),
                    name: format!("function_{stack}_{depth}"),
                    line: 10 + depth,
                })
                .collect();
            snapshot.stacks.insert(stack, frames);
        }
        let framework = [
            Action::AllocNew,
            Action::AllocReuse,
            Action::FreeActiveToCache,
            Action::FreeActiveToOs,
        ];
        for i in 0..events {
            let n = i as u64;
            let (action, device) = match i % 4 {
                0 => (Action::Alloc, HOST_DEVICE),
                1 => (Action::Free, HOST_DEVICE),
                _ => (framework[(i / 4) % 4], (i % 2) as i32),
            };
            let mut e = event(
                action,
                0x7f00_0000_0000 + (n % 4096) * 256,
                64 + n % 8192,
                device,
                (n % u64::from(stacks)) as u32 + 1,
                (n % 4) as u32,
            );
            e.time_ns = 1_700_000_000_000_000_000 + n * 1000;
            snapshot.events.push(e);
        }
        snapshot
    }

    #[test]
    fn loads_in_python() {
        use std::process::{Command, Stdio};

        let snapshot = tiny();
        let mut pickle = Vec::new();
        write_pickle(&snapshot, &mut pickle).unwrap();
        let mut shared = Vec::new();
        TorchSnapshotWriter::new(&snapshot)
            .share_frames(true)
            .write_pickle(&mut shared)
            .unwrap();
        let mut json = Vec::new();
        write_json(&snapshot, &mut json).unwrap();
        let path = std::env::temp_dir().join(format!("memtape-torch-{}.json", std::process::id()));
        std::fs::write(&path, &json).unwrap();
        let shared_path = path.with_extension("pickle");
        std::fs::write(&shared_path, &shared).unwrap();

        // Loads the pickle from stdin, checks its opcodes are ones the viewer's VM knows,
        // compares it with the expected structure and with the JSON (tuples as lists).
        let script = r#"
import json, pickle, pickletools, sys
data = sys.stdin.buffer.read()
allowed = {"PROTO", "EMPTY_DICT", "EMPTY_LIST", "MARK", "SETITEMS", "APPENDS",
           "SHORT_BINUNICODE", "BINUNICODE", "BININT1", "BININT2", "BININT", "LONG1",
           "TUPLE2", "NEWTRUE", "NEWFALSE", "STOP"}
used = {op.name for op, _, _ in pickletools.genops(data)}
assert used <= allowed, used - allowed
snap = pickle.loads(data)
F = lambda n, l: {"filename": "/app/train.py", "line": l, "name": n}
T = 1700000000000000
def E(action, addr, size, op, frames):
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": T,
         "compile_context": "", "user_metadata": op, "category": op or "unknown"}
    if frames:
        e["frames"] = frames
    return e
s1, s2 = [F("f", 10), F("main", 3)], [F("g", 20)]
def seg(device, addr, size, req, stream, active, frames):
    return {"device": device, "address": addr, "total_size": size,
            "allocated_size": size if active else 0, "active_size": size if active else 0,
            "requested_size": req if active else 0, "stream": stream,
            "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
            "frames": [], "blocks": [{"address": addr, "size": size,
            "requested_size": req if active else 0,
            "state": "active_allocated" if active else "inactive",
            "frames": frames if active else []}]}
expected = {
 "segments": [seg(0, 0xE000, 2048, 2000, 0, False, s1), seg(1, 0x9000, 128, 100, 0, True, []),
              seg(1, 0xD000, 1024, 1000, 7, True, s2)],
 "device_traces": [
  [E("segment_alloc", 0xA000, 4096, "matmul", s1), E("alloc", 0xA000, 4096, "matmul", s1),
   E("free_requested", 0xA000, 4096, "", None), E("free_completed", 0xA000, 4096, "", None),
   E("segment_free", 0xA000, 4096, "", None)],
  [E("alloc", 0xB000, 512, "add", s2),
   E("free_requested", 0xB000, 512, "", None), E("free_completed", 0xB000, 512, "", None),
   E("segment_alloc", 0xC000, 256, "add", None), E("alloc", 0xC000, 256, "add", None),
   E("free_requested", 0xC000, 256, "", None), E("free_completed", 0xC000, 256, "", None),
   E("segment_free", 0xC000, 256, "", None), E("segment_free", 0xB000, 512, "", None)],
  [E("segment_alloc", 0x1000, 64, "", s1), E("alloc", 0x1000, 64, "", s1),
   E("free_requested", 0x1000, 64, "", None), E("free_completed", 0x1000, 64, "", None),
   E("segment_free", 0x1000, 64, "", None)]],
 "allocator_settings": {"producer": snap["allocator_settings"]["producer"],
                        "python_heap_device_index": 2},
}
assert snap == expected, snap
listify = lambda v: json.loads(json.dumps(v))
with open(sys.argv[1], encoding="utf-8") as f:
    assert json.load(f) == listify(snap)
with open(sys.argv[2], "rb") as f:
    shared = f.read()
used = {op.name for op, _, _ in pickletools.genops(shared)}
assert used <= allowed | {"MEMOIZE", "BINGET", "LONG_BINGET"}, used
shared = pickle.loads(shared)
assert shared == snap
# One frames list per stack, shared by the entries that use it; entries stay distinct.
t = shared["device_traces"]
assert t[0][0]["frames"] is t[0][1]["frames"] is t[2][0]["frames"]
assert t[0][0] is not t[0][1]
print("ok")
"#;
        let child = Command::new("python3")
            .args(["-c", script])
            .arg(&path)
            .arg(&shared_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                println!("skipped: python3 is not on PATH");
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_file(&shared_path);
                return;
            }
            Err(error) => panic!("could not start python3: {error}"),
        };
        child.stdin.take().unwrap().write_all(&pickle).unwrap();
        let output = child.wait_with_output().unwrap();
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&shared_path);
        assert!(
            output.status.success(),
            "python3 rejected the snapshot:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "ok");
    }

    #[test]
    #[cfg(feature = "slow-tests")]
    fn one_million_events() {
        let snapshot = synthetic(1_000_000, 1000);
        let plain = TorchSnapshotWriter::new(&snapshot);
        let shared = plain.share_frames(true);
        type WriteFn<'a> = Box<dyn Fn(&mut dyn Write) -> io::Result<TorchSnapshotStats> + 'a>;
        let cases: [(&str, WriteFn); 3] = [
            ("pickle", Box::new(|out| plain.write_pickle(out))),
            (
                "pickle, shared frames",
                Box::new(|out| shared.write_pickle(out)),
            ),
            ("json", Box::new(|out| plain.write_json(out))),
        ];
        for (name, write) in cases {
            let mut best = f64::MAX;
            let mut stats = TorchSnapshotStats::default();
            for _ in 0..3 {
                let start = std::time::Instant::now();
                stats = write(&mut io::sink()).unwrap();
                best = best.min(start.elapsed().as_secs_f64());
            }
            println!(
                "{name}: 1,000,000 events -> {} entries, {:.1} MB in {:.0} ms",
                stats.trace_entries,
                stats.bytes_written as f64 / 1e6,
                best * 1e3
            );
        }
    }
}
