//! Atomic Extended Transport Header (IBA 9.3.4), 28 bytes: VA, R_Key, Swap/Add, Compare.

use super::{Error, Field, Result};
use crate::types::Rkey;

mod field {
    use super::Field;
    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const SWAP_ADD: Field = 12..20;
    pub const COMPARE: Field = 20..28;
}

/// Length of the AtomicETH.
pub const HEADER_LEN: usize = field::COMPARE.end;

/// A read/write view of an AtomicETH.
#[derive(Debug, Clone)]
pub struct AtomicEthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicEthPacket<T> {
    pub const fn new_unchecked(buffer: T) -> AtomicEthPacket<T> {
        AtomicEthPacket { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<AtomicEthPacket<T>> {
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
    fn be64(&self, f: Field) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.buffer.as_ref()[f]);
        u64::from_be_bytes(b)
    }
    pub fn va(&self) -> u64 {
        self.be64(field::VA)
    }
    pub fn rkey(&self) -> Rkey {
        let b = &self.buffer.as_ref()[field::RKEY];
        Rkey(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn swap_add(&self) -> u64 {
        self.be64(field::SWAP_ADD)
    }
    pub fn compare(&self) -> u64 {
        self.be64(field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEthPacket<T> {
    pub fn set_va(&mut self, v: u64) {
        self.buffer.as_mut()[field::VA].copy_from_slice(&v.to_be_bytes())
    }
    pub fn set_rkey(&mut self, v: Rkey) {
        self.buffer.as_mut()[field::RKEY].copy_from_slice(&v.0.to_be_bytes())
    }
    pub fn set_swap_add(&mut self, v: u64) {
        self.buffer.as_mut()[field::SWAP_ADD].copy_from_slice(&v.to_be_bytes())
    }
    pub fn set_compare(&mut self, v: u64) {
        self.buffer.as_mut()[field::COMPARE].copy_from_slice(&v.to_be_bytes())
    }
}

/// The plain form of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    pub va: u64,
    pub rkey: Rkey,
    /// Swap value (CMP_SWAP) or addend (FETCH_ADD).
    pub swap_add: u64,
    /// Compare value (CMP_SWAP only).
    pub compare: u64,
}

impl AtomicEthRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &AtomicEthPacket<T>) -> Result<AtomicEthRepr> {
        p.check_len()?;
        Ok(AtomicEthRepr {
            va: p.va(),
            rkey: p.rkey(),
            swap_add: p.swap_add(),
            compare: p.compare(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Panics on a buffer shorter than 28 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut AtomicEthPacket<T>) {
        p.set_va(self.va);
        p.set_rkey(self.rkey);
        p.set_swap_add(self.swap_add);
        p.set_compare(self.compare);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_emit() {
        let mut bytes = [0u8; 28];
        bytes[..8].copy_from_slice(&0x5634_1200_0040u64.to_be_bytes());
        bytes[8..12].copy_from_slice(&0x1d9au32.to_be_bytes());
        bytes[12..20].copy_from_slice(&1u64.to_be_bytes());
        bytes[20..].copy_from_slice(&u64::MAX.to_be_bytes());
        let r = AtomicEthRepr::parse(&AtomicEthPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            AtomicEthRepr {
                va: 0x5634_1200_0040,
                rkey: Rkey(0x1d9a),
                swap_add: 1,
                compare: u64::MAX
            }
        );
        let mut out = [0u8; 28];
        r.emit(&mut AtomicEthPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(AtomicEthPacket::new_checked(&bytes[..27]).is_err());
    }
}
