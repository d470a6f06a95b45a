//! RDMA Extended Transport Header (IBA 9.3.3), 16 bytes: VA, R_Key, DMA length.

use super::{Error, Field, Result};
use crate::types::Rkey;

mod field {
    use super::Field;
    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const LEN: Field = 12..16;
}

/// Length of the RETH.
pub const HEADER_LEN: usize = field::LEN.end;

/// A read/write view of a RETH.
#[derive(Debug, Clone)]
pub struct RethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RethPacket<T> {
    pub const fn new_unchecked(buffer: T) -> RethPacket<T> {
        RethPacket { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<RethPacket<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }
    pub fn va(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.buffer.as_ref()[field::VA]);
        u64::from_be_bytes(b)
    }
    pub fn rkey(&self) -> Rkey {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.buffer.as_ref()[field::RKEY]);
        Rkey(u32::from_be_bytes(b))
    }
    #[allow(clippy::len_without_is_empty)] // a header field, not a container
    pub fn len(&self) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.buffer.as_ref()[field::LEN]);
        u32::from_be_bytes(b)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RethPacket<T> {
    pub fn set_va(&mut self, v: u64) {
        self.buffer.as_mut()[field::VA].copy_from_slice(&v.to_be_bytes())
    }
    pub fn set_rkey(&mut self, v: Rkey) {
        self.buffer.as_mut()[field::RKEY].copy_from_slice(&v.0.to_be_bytes())
    }
    pub fn set_len(&mut self, v: u32) {
        self.buffer.as_mut()[field::LEN].copy_from_slice(&v.to_be_bytes())
    }
}

/// The plain form of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RethRepr {
    pub va: u64,
    pub rkey: Rkey,
    /// DMA length of the whole message.
    pub len: u32,
}

impl RethRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &RethPacket<T>) -> Result<RethRepr> {
        p.check_len()?;
        Ok(RethRepr {
            va: p.va(),
            rkey: p.rkey(),
            len: p.len(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Panics on a buffer shorter than 16 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut RethPacket<T>) {
        p.set_va(self.va);
        p.set_rkey(self.rkey);
        p.set_len(self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_emit() {
        let bytes = [
            0, 0, 0x55, 0x5d, 0x41, 0x3c, 0x80, 0x00, 0x00, 0x00, 0x12, 0x34, 0, 1, 0, 0,
        ];
        let r = RethRepr::parse(&RethPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            RethRepr {
                va: 0x555d_413c_8000,
                rkey: Rkey(0x1234),
                len: 65536
            }
        );
        let mut out = [0u8; 16];
        r.emit(&mut RethPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(RethPacket::new_checked(&bytes[..15]).is_err());
    }
}
