//! Datagram Extended Transport Header (IBA 9.3.2), 8 bytes: Q_Key, reserved byte, SrcQP.

use super::{Error, Field, Result};
use crate::types::{QKey, Qpn};

mod field {
    use super::Field;
    pub const QKEY: Field = 0..4;
    pub const SRC_QP: Field = 5..8;
}

/// Length of the DETH.
pub const HEADER_LEN: usize = field::SRC_QP.end;

/// A read/write view of a DETH.
#[derive(Debug, Clone)]
pub struct DethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DethPacket<T> {
    pub const fn new_unchecked(buffer: T) -> DethPacket<T> {
        DethPacket { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<DethPacket<T>> {
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
    pub fn qkey(&self) -> QKey {
        let b = &self.buffer.as_ref()[field::QKEY];
        QKey(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn src_qp(&self) -> Qpn {
        let b = &self.buffer.as_ref()[field::SRC_QP];
        Qpn::new(u32::from_be_bytes([0, b[0], b[1], b[2]]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DethPacket<T> {
    pub fn set_qkey(&mut self, q: QKey) {
        self.buffer.as_mut()[field::QKEY].copy_from_slice(&q.0.to_be_bytes())
    }
    /// Sets the source QP; the reserved byte before it is preserved.
    pub fn set_src_qp(&mut self, q: Qpn) {
        self.buffer.as_mut()[field::SRC_QP].copy_from_slice(&q.value().to_be_bytes()[1..])
    }
}

/// The plain form of a DETH (the reserved byte is emitted as zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DethRepr {
    pub qkey: QKey,
    pub src_qp: Qpn,
}

impl DethRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &DethPacket<T>) -> Result<DethRepr> {
        p.check_len()?;
        Ok(DethRepr {
            qkey: p.qkey(),
            src_qp: p.src_qp(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Panics on a buffer shorter than 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut DethPacket<T>) {
        p.set_qkey(self.qkey);
        p.buffer.as_mut()[4] = 0;
        p.set_src_qp(self.src_qp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_emit() {
        // E1 frame 1: qkey 0x11111111, srcqp 0x00002f.
        let bytes = [0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0x2f];
        let r = DethRepr::parse(&DethPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            DethRepr {
                qkey: QKey(0x11111111),
                src_qp: Qpn::new(0x2f)
            }
        );
        let mut out = [0xaau8; 8];
        r.emit(&mut DethPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(DethPacket::new_checked(&bytes[..7]).is_err());
    }
}
