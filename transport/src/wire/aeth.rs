//! ACK Extended Transport Header (IBA 9.3.5), 4 bytes: syndrome and MSN.
//!
//! Syndrome (IBA table 44): bit 7 reserved (0); bits 6:5 = 00 ACK, 01 RNR NAK, 11 NAK
//! (10 reserved); bits 4:0 = credit count, RNR timer or NAK code.

use super::{Error, Field, Result};
use crate::types::Msn;

mod field {
    use super::Field;
    pub const SYNDROME: usize = 0;
    pub const MSN: Field = 1..4;
}

/// Length of the AETH.
pub const HEADER_LEN: usize = field::MSN.end;

/// NAK codes (IBA table 45).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NakCode {
    PsnSequenceError = 0,
    InvalidRequest = 1,
    RemoteAccessError = 2,
    RemoteOperationalError = 3,
    InvalidRdRequest = 4,
}

impl NakCode {
    pub const fn from_u8(v: u8) -> Option<NakCode> {
        Some(match v {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            _ => return None,
        })
    }
}

/// Credit code 31: no end-to-end flow control credits ("unlimited"), as rxe always sends.
pub const CREDITS_UNLIMITED: u8 = 31;

/// The decoded AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AethSyndrome {
    /// ACK with the 5-bit credit code (IBA 9.7.7.2.2).
    Ack {
        credits: u8,
    },
    /// RNR NAK with the 5-bit IBA RNR timer code (IBA table 46).
    RnrNak {
        timer: u8,
    },
    Nak(NakCode),
}

impl AethSyndrome {
    pub const fn from_u8(v: u8) -> Option<AethSyndrome> {
        let low = v & 0x1f;
        match v >> 5 {
            0b000 => Some(AethSyndrome::Ack { credits: low }),
            0b001 => Some(AethSyndrome::RnrNak { timer: low }),
            0b011 => match NakCode::from_u8(low) {
                Some(c) => Some(AethSyndrome::Nak(c)),
                None => None,
            },
            _ => None,
        }
    }
    pub const fn to_u8(self) -> u8 {
        match self {
            AethSyndrome::Ack { credits } => credits & 0x1f,
            AethSyndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            AethSyndrome::Nak(c) => 0x60 | c as u8,
        }
    }
}

/// A read/write view of an AETH.
#[derive(Debug, Clone)]
pub struct AethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AethPacket<T> {
    pub const fn new_unchecked(buffer: T) -> AethPacket<T> {
        AethPacket { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<AethPacket<T>> {
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
    pub fn syndrome_raw(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME]
    }
    pub fn syndrome(&self) -> Result<AethSyndrome> {
        AethSyndrome::from_u8(self.syndrome_raw()).ok_or(Error)
    }
    pub fn msn(&self) -> Msn {
        let b = &self.buffer.as_ref()[field::MSN];
        Msn::new(u32::from_be_bytes([0, b[0], b[1], b[2]]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AethPacket<T> {
    pub fn set_syndrome(&mut self, s: AethSyndrome) {
        self.buffer.as_mut()[field::SYNDROME] = s.to_u8()
    }
    pub fn set_msn(&mut self, m: Msn) {
        self.buffer.as_mut()[field::MSN].copy_from_slice(&m.value().to_be_bytes()[1..])
    }
}

/// The plain form of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    pub syndrome: AethSyndrome,
    pub msn: Msn,
}

impl AethRepr {
    /// Fails on a reserved syndrome.
    pub fn parse<T: AsRef<[u8]>>(p: &AethPacket<T>) -> Result<AethRepr> {
        p.check_len()?;
        Ok(AethRepr {
            syndrome: p.syndrome()?,
            msn: p.msn(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Panics on a buffer shorter than 4 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut AethPacket<T>) {
        p.set_syndrome(self.syndrome);
        p.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_emit() {
        // A1 frame 2: ACK, credit code 31, MSN 1.
        let bytes = [0x1f, 0, 0, 1];
        let r = AethRepr::parse(&AethPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            AethRepr {
                syndrome: AethSyndrome::Ack {
                    credits: CREDITS_UNLIMITED
                },
                msn: Msn::new(1)
            }
        );
        let mut out = [0u8; 4];
        r.emit(&mut AethPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(AethPacket::new_checked(&bytes[..3]).is_err());
    }

    #[test]
    fn syndromes() {
        for v in 0..=255u8 {
            match AethSyndrome::from_u8(v) {
                Some(s) => assert_eq!(s.to_u8(), v),
                None => assert!(
                    v >= 0x80 || (0x40..0x60).contains(&v) || (0x65..0x80).contains(&v),
                    "{v:#x}"
                ),
            }
        }
        assert_eq!(
            AethSyndrome::from_u8(0x2e),
            Some(AethSyndrome::RnrNak { timer: 14 })
        );
        assert_eq!(
            AethSyndrome::from_u8(0x60),
            Some(AethSyndrome::Nak(NakCode::PsnSequenceError))
        );
        assert_eq!(
            AethSyndrome::from_u8(0x62),
            Some(AethSyndrome::Nak(NakCode::RemoteAccessError))
        );
        assert_eq!(AethSyndrome::Nak(NakCode::InvalidRdRequest).to_u8(), 0x64);
    }
}
