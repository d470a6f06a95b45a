//! Base Transport Header (IBA 9.2), 12 bytes.
//!
//! ```text
//!  0       OpCode
//!  1       SE(7) M(6) PadCnt(5:4) TVer(3:0)
//!  2..4    P_Key
//!  4       FECN(7) BECN(6) resv6 (the whole byte is "resv8a" for the ICRC and masked)
//!  5..8    DestQP (24 bits)
//!  8       AckReq(7) resv7
//!  9..12   PSN (24 bits)
//! ```

use super::opcode::Opcode;
use super::{Error, Field, Result};
use crate::types::{PKey, Psn, Qpn};

mod field {
    use super::Field;
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: Field = 2..4;
    pub const RESV8A: usize = 4;
    pub const DEST_QP: Field = 5..8;
    pub const ACK_REQ: usize = 8;
    pub const PSN: Field = 9..12;
}

/// Length of the BTH.
pub const HEADER_LEN: usize = field::PSN.end;
/// Offset of the byte the ICRC masks (FECN, BECN and 6 reserved bits).
pub const ICRC_MASKED_BYTE: usize = field::RESV8A;

/// A read/write view of a BTH (and what follows it).
#[derive(Debug, Clone)]
pub struct BthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

fn be24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

impl<T: AsRef<[u8]>> BthPacket<T> {
    pub const fn new_unchecked(buffer: T) -> BthPacket<T> {
        BthPacket { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<BthPacket<T>> {
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
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The raw opcode byte.
    pub fn opcode_raw(&self) -> u8 {
        self.buffer.as_ref()[field::OPCODE]
    }
    pub fn opcode(&self) -> Result<Opcode> {
        Opcode::try_from(self.opcode_raw())
    }
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) & 0x03
    }
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0x0f
    }
    pub fn pkey(&self) -> PKey {
        let b = &self.buffer.as_ref()[field::PKEY];
        PKey(u16::from_be_bytes([b[0], b[1]]))
    }
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::RESV8A] & 0x80 != 0
    }
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::RESV8A] & 0x40 != 0
    }
    /// The 6 reserved bits of byte 4.
    pub fn resv6(&self) -> u8 {
        self.buffer.as_ref()[field::RESV8A] & 0x3f
    }
    pub fn dest_qp(&self) -> Qpn {
        Qpn::new(be24(&self.buffer.as_ref()[field::DEST_QP]))
    }
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK_REQ] & 0x80 != 0
    }
    /// The 7 reserved bits of byte 8.
    pub fn resv7(&self) -> u8 {
        self.buffer.as_ref()[field::ACK_REQ] & 0x7f
    }
    pub fn psn(&self) -> Psn {
        Psn::new(be24(&self.buffer.as_ref()[field::PSN]))
    }
    /// Everything after the BTH.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthPacket<T> {
    fn set_bit(&mut self, byte: usize, mask: u8, on: bool) {
        let b = &mut self.buffer.as_mut()[byte];
        *b = if on { *b | mask } else { *b & !mask };
    }
    pub fn set_opcode(&mut self, o: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = o as u8
    }
    pub fn set_solicited(&mut self, v: bool) {
        self.set_bit(field::FLAGS, 0x80, v)
    }
    pub fn set_mig_req(&mut self, v: bool) {
        self.set_bit(field::FLAGS, 0x40, v)
    }
    pub fn set_pad_count(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !0x30) | ((v & 0x03) << 4);
    }
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !0x0f) | (v & 0x0f);
    }
    pub fn set_pkey(&mut self, v: PKey) {
        self.buffer.as_mut()[field::PKEY].copy_from_slice(&v.0.to_be_bytes())
    }
    /// Sets FECN; the reserved bits of the byte are preserved.
    pub fn set_fecn(&mut self, v: bool) {
        self.set_bit(field::RESV8A, 0x80, v)
    }
    /// Sets BECN; the reserved bits of the byte are preserved.
    pub fn set_becn(&mut self, v: bool) {
        self.set_bit(field::RESV8A, 0x40, v)
    }
    pub fn set_dest_qp(&mut self, q: Qpn) {
        let b = q.value().to_be_bytes();
        self.buffer.as_mut()[field::DEST_QP].copy_from_slice(&b[1..]);
    }
    /// Sets AckReq; the 7 reserved bits are preserved.
    pub fn set_ack_req(&mut self, v: bool) {
        self.set_bit(field::ACK_REQ, 0x80, v)
    }
    pub fn set_psn(&mut self, p: Psn) {
        let b = p.value().to_be_bytes();
        self.buffer.as_mut()[field::PSN].copy_from_slice(&b[1..]);
    }
}

/// The plain form of a BTH. Reserved bits are not kept: `emit` writes them as zero (IBA:
/// "reserved fields shall be set to zero by the sender and ignored by the receiver").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    pub opcode: Opcode,
    pub solicited: bool,
    pub mig_req: bool,
    pub pad_count: u8,
    pub tver: u8,
    pub pkey: PKey,
    pub fecn: bool,
    pub becn: bool,
    pub dest_qp: Qpn,
    pub ack_req: bool,
    pub psn: Psn,
}

impl BthRepr {
    /// Parses the BTH; fails on an opcode droce does not support.
    pub fn parse<T: AsRef<[u8]>>(p: &BthPacket<T>) -> Result<BthRepr> {
        p.check_len()?;
        Ok(BthRepr {
            opcode: p.opcode()?,
            solicited: p.solicited(),
            mig_req: p.mig_req(),
            pad_count: p.pad_count(),
            tver: p.tver(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes all 12 bytes (reserved bits zero). Panics on a buffer shorter than 12 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut BthPacket<T>) {
        let b = p.buffer.as_mut();
        b[field::OPCODE] = self.opcode as u8;
        b[field::FLAGS] = (self.solicited as u8) << 7
            | (self.mig_req as u8) << 6
            | (self.pad_count & 0x03) << 4
            | (self.tver & 0x0f);
        b[field::PKEY].copy_from_slice(&self.pkey.0.to_be_bytes());
        b[field::RESV8A] = (self.fecn as u8) << 7 | (self.becn as u8) << 6;
        b[field::DEST_QP].copy_from_slice(&self.dest_qp.value().to_be_bytes()[1..]);
        b[field::ACK_REQ] = (self.ack_req as u8) << 7;
        b[field::PSN].copy_from_slice(&self.psn.value().to_be_bytes()[1..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A1 frame 1: RC SEND Only, dqp 0x000013, psn 0x735b2c, AckReq.
    const SEND_ONLY: [u8; 12] = [
        0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x13, 0x80, 0x73, 0x5b, 0x2c,
    ];

    #[test]
    fn parse_emit() {
        let p = BthPacket::new_checked(&SEND_ONLY[..]).unwrap();
        let r = BthRepr::parse(&p).unwrap();
        assert_eq!(r.opcode, Opcode::RcSendOnly);
        assert_eq!(r.dest_qp, Qpn::new(0x13));
        assert_eq!(r.psn, Psn::new(0x735b2c));
        assert!(r.ack_req && !r.solicited && !r.mig_req && !r.fecn && !r.becn);
        assert_eq!((r.pad_count, r.tver, r.pkey), (0, 0, PKey::DEFAULT));
        let mut out = [0u8; 12];
        r.emit(&mut BthPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, SEND_ONLY);
        assert!(BthPacket::new_checked(&SEND_ONLY[..11]).is_err());
        let mut bad = SEND_ONLY;
        bad[0] = 0x15;
        assert!(BthRepr::parse(&BthPacket::new_unchecked(&bad[..])).is_err());
    }

    #[test]
    fn setters_mask_and_preserve_reserved() {
        let mut b = [0u8; 12];
        b[4] = 0x3f;
        b[8] = 0x7f;
        let mut p = BthPacket::new_unchecked(&mut b[..]);
        p.set_dest_qp(Qpn::new(0xffff_ffff));
        p.set_psn(Psn::new(0x0123_4567));
        p.set_fecn(true);
        p.set_ack_req(true);
        p.set_pad_count(7);
        assert_eq!(p.dest_qp(), Qpn::new(0xffffff));
        assert_eq!(p.psn(), Psn::new(0x234567));
        assert_eq!((p.resv6(), p.resv7(), p.pad_count()), (0x3f, 0x7f, 3));
        assert!(p.fecn() && !p.becn() && p.ack_req());
        assert_eq!(b[4], 0xbf);
        assert_eq!(b[8], 0xff);
    }
}
