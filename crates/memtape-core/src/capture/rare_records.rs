//! The bytes of the records that are not allocations or frees (times, strings, frames,
//! stacks, modules, native frames, markers, dropped counts): a few thousand in a capture
//! of millions of events. None of them carries delta state, so their bytes are the same
//! wherever in a block they land: [`BlockEncoder`](super::BlockEncoder) appends them to
//! its block, and a [`Journal`](super::Journal) keeps them as they are for the flusher to
//! copy in.

use super::record::tag;
use super::varint::put_uv;

/// A Time record: the time of the records that follow, in ns since the start.
pub(super) fn time(out: &mut Vec<u8>, ns_since_start: u64) {
    out.push(tag::TIME);
    put_uv(out, ns_since_start);
}

/// A String record: an interned string and its id.
pub(super) fn string(out: &mut Vec<u8>, id: u32, value: &str) {
    out.push(tag::STRING);
    put_uv(out, u64::from(id));
    put_str(out, value);
}

/// A Frame record: string ids of its filename and function name, and its line.
pub(super) fn frame(out: &mut Vec<u8>, id: u32, filename: u32, name: u32, line: u32) {
    out.push(tag::FRAME);
    for value in [id, filename, name, line] {
        put_uv(out, u64::from(value));
    }
}

/// A Stack record: `parent` plus the innermost `frame`.
pub(super) fn stack(out: &mut Vec<u8>, id: u32, parent: u32, frame: u32) {
    out.push(tag::STACK);
    for value in [id, parent, frame] {
        put_uv(out, u64::from(value));
    }
}

/// A Module record: path, load bias, GNU build id and `PT_LOAD` segments.
pub(super) fn module(
    out: &mut Vec<u8>,
    id: u32,
    path: &str,
    base: u64,
    build_id: &[u8],
    segments: &[(u64, u64)],
) {
    out.push(tag::MODULE);
    put_uv(out, u64::from(id));
    put_str(out, path);
    put_uv(out, base);
    put_uv(out, build_id.len() as u64);
    out.extend_from_slice(build_id);
    super::record::Segments::encode(segments, out);
}

/// A NativeFrame record: a return address at file address `offset` of `module`.
pub(super) fn native_frame(out: &mut Vec<u8>, id: u32, module: u32, offset: u64) {
    out.push(tag::NATIVE_FRAME);
    put_uv(out, u64::from(id));
    put_uv(out, u64::from(module));
    put_uv(out, offset);
}

/// A Marker record: a user mark.
pub(super) fn marker(out: &mut Vec<u8>, label: &str) {
    out.push(tag::MARKER);
    put_str(out, label);
}

/// A Dropped record: `count` events the recorder had to drop.
pub(super) fn dropped(out: &mut Vec<u8>, count: u64) {
    out.push(tag::DROPPED);
    put_uv(out, count);
}

/// A string: its length, then its UTF-8 bytes.
fn put_str(out: &mut Vec<u8>, value: &str) {
    put_uv(out, value.len() as u64);
    out.extend_from_slice(value.as_bytes());
}
