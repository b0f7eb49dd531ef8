//! Where a loaded object's unwind tables are, as the unwinder reads them in place: its
//! text, `.eh_frame_hdr` and `.eh_frame` (on a target whose code signs return addresses, a
//! copy of `.eh_frame` where its CFI says where, `pointer_auth_cfi`).

use framehop::ExplicitModuleSectionInfo;

use super::loaded_modules::LoadedModule;
use super::pointer_auth_cfi::readable_eh_frame;
use crate::arch::SIGNED_RETURN_ADDRESSES;

/// Memory of the process itself, read in place.
pub(super) type Data = &'static [u8];

/// A slice of the process' own memory at file address `svma` of `m`.
///
/// # Safety
/// `[svma, svma + len)` must lie inside one of `m`'s loaded segments.
unsafe fn mapped(m: &LoadedModule, svma: u64, len: u64) -> Data {
    // SAFETY: guaranteed by the caller; loaded segments stay mapped while the object is
    // loaded, and memtape never unloads objects (see the module documentation).
    unsafe { std::slice::from_raw_parts((m.base + svma) as *const u8, len as usize) }
}

pub(super) fn section_info(m: &LoadedModule) -> ExplicitModuleSectionInfo<Data> {
    let mut info = ExplicitModuleSectionInfo {
        base_svma: 0,
        ..Default::default()
    };
    if let Some((lo, hi)) = m.text() {
        info.text_svma = Some(lo..hi);
        if m.segment_of(lo).is_some_and(|s| s.1 >= hi) {
            // SAFETY: one executable segment spans `[lo, hi)`.
            info.text = Some(unsafe { mapped(m, lo, hi - lo) });
        }
    }
    let Some((hdr, hdr_len)) = m.eh_frame_hdr else {
        return info;
    };
    let Some(segment) = m.segment_of(hdr).filter(|s| s.1 >= hdr + hdr_len) else {
        return info;
    };
    // SAFETY: the header lies inside `segment`, a loaded segment.
    let hdr_bytes = unsafe { mapped(m, hdr, hdr_len) };
    let Some(eh_frame) = eh_frame_address(hdr, hdr_bytes) else {
        return info;
    };
    let Some(eh_segment) = m.segment_of(eh_frame) else {
        return info;
    };
    let _ = segment;
    info.eh_frame_hdr_svma = Some(hdr..hdr + hdr_len);
    info.eh_frame_hdr = Some(hdr_bytes);
    info.eh_frame_svma = Some(eh_frame..eh_segment.1);
    // SAFETY: `.eh_frame` runs at most to the end of the segment holding it.
    let eh_frame_bytes = unsafe { mapped(m, eh_frame, eh_segment.1 - eh_frame) };
    info.eh_frame = Some(if SIGNED_RETURN_ADDRESSES {
        readable_eh_frame(eh_frame_bytes)
    } else {
        eh_frame_bytes
    });
    info
}

/// `.eh_frame`'s file address, from `.eh_frame_hdr` (at file address `hdr`).
fn eh_frame_address(hdr: u64, bytes: &[u8]) -> Option<u64> {
    const PCREL_SDATA4: u8 = 0x1b;
    const UDATA4: u8 = 0x03;
    const SDATA4: u8 = 0x0b;
    const ABSPTR: u8 = 0x00;
    if bytes.first() != Some(&1) {
        return None;
    }
    let word = |n: usize| bytes.get(4..4 + n);
    match *bytes.get(1)? {
        PCREL_SDATA4 => {
            let delta = i32::from_le_bytes(word(4)?.try_into().ok()?);
            Some((hdr + 4).wrapping_add_signed(i64::from(delta)))
        }
        UDATA4 => Some(u64::from(u32::from_le_bytes(word(4)?.try_into().ok()?))),
        SDATA4 => Some(i32::from_le_bytes(word(4)?.try_into().ok()?) as u64),
        ABSPTR => Some(u64::from_le_bytes(word(8)?.try_into().ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eh_frame_pointer_encodings() {
        // version 1, pcrel|sdata4, then -0x10 from hdr + 4.
        let bytes = [1, 0x1b, 3, 0x3b, 0xf0, 0xff, 0xff, 0xff];
        assert_eq!(eh_frame_address(0x1000, &bytes), Some(0x1000 + 4 - 0x10));
        assert_eq!(eh_frame_address(0x1000, &[2, 0x1b, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(eh_frame_address(0x1000, &[1, 0x1b]), None);
    }
}
