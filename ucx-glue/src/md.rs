//! The memory domain: droce MRs (a transport MR plus a `ProcessMemory` range) over host memory.
//!
//! A memory handle (`uct_mem_h`) is a boxed [`MemReg`]; the packed remote key is the MR's rkey
//! and a magic word, 8 bytes; the unpacked `uct_rkey_t` is the rkey itself (remote addresses
//! are virtual addresses, as in verbs).

use crate::status::*;
use droce_dpdk::runtime::Runtime;
use droce_transport::verbs::PdHandle;
use droce_transport::{Lkey, Rkey};
use std::sync::OnceLock;

/// "dRoC": marks a packed droce rkey, so a key from another transport is refused.
const RKEY_MAGIC: u32 = 0x436f_5264;

/// A registered range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemReg {
    pub lkey: Lkey,
    pub rkey: Rkey,
    pub addr: u64,
    pub len: u64,
}

static PD: OnceLock<PdHandle> = OnceLock::new();

/// The protection domain every droce MR and QP of this process uses (one per process, so any
/// interface can use any registration of any droce MD).
pub fn pd(host: &mut Runtime) -> PdHandle {
    *PD.get_or_init(|| host.alloc_pd())
}

pub fn pack_rkey(rkey: Rkey) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&rkey.0.to_le_bytes());
    b[4..].copy_from_slice(&RKEY_MAGIC.to_le_bytes());
    b
}

pub fn unpack_rkey(b: &[u8; 8]) -> Result<Rkey, Status> {
    let magic = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    if magic != RKEY_MAGIC {
        return Err(UCS_ERR_INVALID_PARAM);
    }
    Ok(Rkey(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rkey_round_trip_and_foreign_keys_refused() {
        let p = pack_rkey(Rkey(0xdead_beef));
        assert_eq!(unpack_rkey(&p), Ok(Rkey(0xdead_beef)));
        assert_eq!(unpack_rkey(&[0xef, 0xbe, 0xad, 0xde, 0, 0, 0, 0]), Err(UCS_ERR_INVALID_PARAM));
    }
}
