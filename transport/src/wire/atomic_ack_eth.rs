//! Atomic Acknowledge Extended Transport Header (IBA 9.5.3), 8 bytes: the original value.

use super::{Error, Field, Result};

mod field {
    use super::Field;
    pub const ORIG: Field = 0..8;
}

/// Length of the AtomicAckETH.
pub const HEADER_LEN: usize = field::ORIG.end;

/// A read/write view of an AtomicAckETH.
#[derive(Debug, Clone)]
pub struct AtomicAckEthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicAckEthPacket<T> {
    pub const fn new_unchecked(buffer: T) -> AtomicAckEthPacket<T> {
        AtomicAckEthPacket { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<AtomicAckEthPacket<T>> {
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
    pub fn orig(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.buffer.as_ref()[field::ORIG]);
        u64::from_be_bytes(b)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEthPacket<T> {
    pub fn set_orig(&mut self, v: u64) {
        self.buffer.as_mut()[field::ORIG].copy_from_slice(&v.to_be_bytes())
    }
}

/// The plain form of an AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    /// The value at the target address before the atomic operation.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &AtomicAckEthPacket<T>) -> Result<AtomicAckEthRepr> {
        p.check_len()?;
        Ok(AtomicAckEthRepr { orig: p.orig() })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Panics on a buffer shorter than 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut AtomicAckEthPacket<T>) {
        p.set_orig(self.orig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_emit() {
        let bytes = 0x0123_4567_89ab_cdefu64.to_be_bytes();
        let r =
            AtomicAckEthRepr::parse(&AtomicAckEthPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(r.orig, 0x0123_4567_89ab_cdef);
        let mut out = [0u8; 8];
        r.emit(&mut AtomicAckEthPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(AtomicAckEthPacket::new_checked(&bytes[..7]).is_err());
    }
}
