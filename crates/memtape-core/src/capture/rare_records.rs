//! The records that are not allocations or frees (strings, frames, stacks, modules,
//! native frames, markers, dropped counts): a few thousand in a capture of millions of
//! events. None of them carries delta state, so their bytes are the same wherever in a
//! block they land: [`RareRecords`] writes them for both the
//! [`BlockEncoder`](super::BlockEncoder), which appends them to its block, and the
//! [`Journal`](super::Journal), which keeps them for the flusher to copy in.

use super::record::tag;
use super::varint::put_uv;

/// Writing the rare records into whatever holds them: implementors say where complete
/// records go ([`append_rare`](Self::append_rare)); the records' bytes are written here.
pub trait RareRecords {
    /// Appends the complete records `write` puts in the buffer it is given.
    fn append_rare<F: FnOnce(&mut Vec<u8>)>(&mut self, write: F);

    /// An interned string.
    fn string(&mut self, id: u32, value: &str) {
        self.append_rare(|out| {
            out.push(tag::STRING);
            put_uv(out, u64::from(id));
            put_str(out, value);
        });
    }

    /// A resolved frame: string ids of its filename and function name, and its line.
    fn frame(&mut self, id: u32, filename: u32, name: u32, line: u32) {
        self.append_rare(|out| {
            out.push(tag::FRAME);
            for value in [id, filename, name, line] {
                put_uv(out, u64::from(value));
            }
        });
    }

    /// A stack: `parent` plus the innermost `frame`.
    fn stack(&mut self, id: u32, parent: u32, frame: u32) {
        self.append_rare(|out| {
            out.push(tag::STACK);
            for value in [id, parent, frame] {
                put_uv(out, u64::from(value));
            }
        });
    }

    /// A loaded module native frames refer to: its path, load bias, GNU build id and
    /// `PT_LOAD` segments (file address, size).
    fn module(&mut self, id: u32, path: &str, base: u64, build_id: &[u8], segments: &[(u64, u64)]) {
        self.append_rare(|out| {
            out.push(tag::MODULE);
            put_uv(out, u64::from(id));
            put_str(out, path);
            put_uv(out, base);
            put_uv(out, build_id.len() as u64);
            out.extend_from_slice(build_id);
            super::record::Segments::encode(segments, out);
        });
    }

    /// A native frame (frame id `id`): a return address at file address `offset` of
    /// `module`.
    fn native_frame(&mut self, id: u32, module: u32, offset: u64) {
        self.append_rare(|out| {
            out.push(tag::NATIVE_FRAME);
            put_uv(out, u64::from(id));
            put_uv(out, u64::from(module));
            put_uv(out, offset);
        });
    }

    /// A user mark.
    fn marker(&mut self, label: &str) {
        self.append_rare(|out| {
            out.push(tag::MARKER);
            put_str(out, label);
        });
    }

    /// `count` events the recorder had to drop.
    fn dropped(&mut self, count: u64) {
        self.append_rare(|out| {
            out.push(tag::DROPPED);
            put_uv(out, count);
        });
    }
}

/// A Time record: the time of the records that follow, in ns since the start (kept out
/// of [`RareRecords`]: the encoder remembers the last one, the journal keeps it apart).
pub(super) fn time(out: &mut Vec<u8>, ns_since_start: u64) {
    out.push(tag::TIME);
    put_uv(out, ns_since_start);
}

/// A string: its length, then its UTF-8 bytes.
fn put_str(out: &mut Vec<u8>, value: &str) {
    put_uv(out, value.len() as u64);
    out.extend_from_slice(value.as_bytes());
}
