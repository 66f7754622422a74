//! Call frame information built by hand for the unwinding tests: hostile rows, with or without `.eh_frame_hdr`.

use super::cfi::{CfiSection, ModuleCfi};
use std::sync::Arc;

/// `DW_CFA_def_cfa rsp, 8; DW_CFA_offset r16, 1`: a function that just returns.
pub const PLAIN: &[u8] = &[0x0c, 7, 8, 0x90, 1];

/// `.eh_frame` with one CIE (`zR`, absolute udata4 addresses, data alignment -8, return address in r16) whose
/// initial instructions are `cie_ops`, and one FDE over the first 0x1000 bytes of the module with `fde_ops`
/// (DWARF 5 §6.4.1, LSB Core `.eh_frame`).
pub fn eh_frame(cie_ops: &[u8], fde_ops: &[u8]) -> Vec<u8> {
    fn entry(out: &mut Vec<u8>, body: &[u8]) {
        let mut body = body.to_vec();
        while (body.len() + 4) % 8 != 0 {
            body.push(0); // DW_CFA_nop
        }
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
    }
    let mut out = Vec::new();
    let mut cie = vec![0, 0, 0, 0, 1, b'z', b'R', 0, 1, 0x78, 16, 1, 0x03];
    cie.extend_from_slice(cie_ops);
    entry(&mut out, &cie);
    let fde_start = out.len();
    let mut fde = ((fde_start + 4) as u32).to_le_bytes().to_vec();
    fde.extend_from_slice(&0u32.to_le_bytes()); // link-time address 0
    fde.extend_from_slice(&0x1000u32.to_le_bytes());
    fde.push(0);
    fde.extend_from_slice(fde_ops);
    entry(&mut out, &fde);
    out.extend_from_slice(&[0; 4]);
    out
}

/// A file's unwind info: `eh_frame` (as [`eh_frame`] builds it: a CIE, then one FDE from link-time 0) at 0x10_0000,
/// and an `.eh_frame_hdr` at 0x20_0000 whose one table entry points at that FDE; text 0..0x1000.
pub fn with_header(eh_frame: &[u8]) -> ModuleCfi {
    let (hdr_svma, eh_frame_svma) = (0x20_0000u64, 0x10_0000u64);
    let fde_at = 4 + u32::from_le_bytes(eh_frame[..4].try_into().unwrap()) as u64;
    // version 1; eh_frame_ptr pcrel|sdata4; fde_count udata4; table datarel|sdata4.
    let mut hdr = vec![1, 0x1b, 0x03, 0x3b];
    hdr.extend_from_slice(&((eh_frame_svma as i64 - (hdr_svma as i64 + 4)) as i32).to_le_bytes());
    hdr.extend_from_slice(&1u32.to_le_bytes());
    hdr.extend_from_slice(&(-(hdr_svma as i64) as i32).to_le_bytes());
    hdr.extend_from_slice(&((eh_frame_svma + fde_at) as i64 - hdr_svma as i64).to_le_bytes()[..4]);
    ModuleCfi {
        eh_frame: Some(CfiSection { svma: eh_frame_svma, data: Arc::from(eh_frame) }),
        eh_frame_hdr: Some(CfiSection { svma: hdr_svma, data: Arc::from(hdr) }),
        text: Some(0..0x1000),
        ..Default::default()
    }
}
