//! The common MAD header (IBA vol 1, 13.4.2, figure 146): the first 24 bytes of every
//! Management Datagram, CM MADs included.
//!
//! ```text
//!  0: BaseVersion(8) MgmtClass(8) ClassVersion(8) R(1)+Method(7)
//!  4: Status(16) ClassSpecific(16)
//!  8: TransactionID(64)
//! 16: AttributeID(16) Reserved(16)
//! 20: AttributeModifier(32)
//! ```

use super::field::{self, Field};
use super::{Error, MAD_SIZE};

mod fld {
    use super::Field;
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: usize = 4;
    pub const CLASS_SPECIFIC: usize = 6;
    pub const TRANSACTION_ID: usize = 8;
    pub const ATTRIBUTE_ID: usize = 16;
    pub const RESERVED: Field = 18..20;
    pub const ATTRIBUTE_MODIFIER: usize = 20;
}

/// Length of the common MAD header.
pub const HEADER_LEN: usize = 24;
/// MAD base version of every IBA 1.x MAD.
pub const BASE_VERSION: u8 = 1;
/// Management class of Communication Management (IBA 13.4.4, table 145).
pub const MGMT_CLASS_CM: u8 = 0x07;
/// CM class version of IBA 1.2 and later (Linux `IB_CM_CLASS_VERSION`).
pub const CM_CLASS_VERSION: u8 = 2;

/// MAD methods (IBA 13.4.5, table 146). Bit 7 is the response bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Method(pub u8);

impl Method {
    pub const GET: Method = Method(0x01);
    pub const SET: Method = Method(0x02);
    /// The only method CM uses for its messages (REQ, REP, RTU, ...).
    pub const SEND: Method = Method(0x03);
    pub const TRAP: Method = Method(0x05);
    pub const REPORT: Method = Method(0x06);
    pub const TRAP_REPRESS: Method = Method(0x07);
    pub const GET_RESP: Method = Method(0x81);
    pub const REPORT_RESP: Method = Method(0x86);

    /// The R bit: set on responses.
    pub const fn is_response(self) -> bool {
        self.0 & 0x80 != 0
    }
}

/// CM attribute IDs (IBA 12.6, table 104; Linux `CM_*_ATTR_ID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttributeId(pub u16);

impl AttributeId {
    pub const CLASS_PORT_INFO: AttributeId = AttributeId(0x0001);
    pub const REQ: AttributeId = AttributeId(0x0010);
    pub const MRA: AttributeId = AttributeId(0x0011);
    pub const REJ: AttributeId = AttributeId(0x0012);
    pub const REP: AttributeId = AttributeId(0x0013);
    pub const RTU: AttributeId = AttributeId(0x0014);
    pub const DREQ: AttributeId = AttributeId(0x0015);
    pub const DREP: AttributeId = AttributeId(0x0016);
    pub const SIDR_REQ: AttributeId = AttributeId(0x0017);
    pub const SIDR_REP: AttributeId = AttributeId(0x0018);
    pub const LAP: AttributeId = AttributeId(0x0019);
    pub const APR: AttributeId = AttributeId(0x001a);
}

/// Zero-copy view of a MAD header.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// A view that can read every header field without panicking.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), Error> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[fld::BASE_VERSION]
    }
    pub fn mgmt_class(&self) -> u8 {
        self.buffer.as_ref()[fld::MGMT_CLASS]
    }
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[fld::CLASS_VERSION]
    }
    pub fn method(&self) -> Method {
        Method(self.buffer.as_ref()[fld::METHOD])
    }
    pub fn status(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), fld::STATUS)
    }
    pub fn class_specific(&self) -> u16 {
        field::u16_at(self.buffer.as_ref(), fld::CLASS_SPECIFIC)
    }
    pub fn transaction_id(&self) -> u64 {
        field::u64_at(self.buffer.as_ref(), fld::TRANSACTION_ID)
    }
    pub fn attribute_id(&self) -> AttributeId {
        AttributeId(field::u16_at(self.buffer.as_ref(), fld::ATTRIBUTE_ID))
    }
    pub fn attribute_modifier(&self) -> u32 {
        field::u32_at(self.buffer.as_ref(), fld::ATTRIBUTE_MODIFIER)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_base_version(&mut self, v: u8) {
        self.buffer.as_mut()[fld::BASE_VERSION] = v;
    }
    pub fn set_mgmt_class(&mut self, v: u8) {
        self.buffer.as_mut()[fld::MGMT_CLASS] = v;
    }
    pub fn set_class_version(&mut self, v: u8) {
        self.buffer.as_mut()[fld::CLASS_VERSION] = v;
    }
    pub fn set_method(&mut self, v: Method) {
        self.buffer.as_mut()[fld::METHOD] = v.0;
    }
    pub fn set_status(&mut self, v: u16) {
        field::set_u16_at(self.buffer.as_mut(), fld::STATUS, v);
    }
    pub fn set_class_specific(&mut self, v: u16) {
        field::set_u16_at(self.buffer.as_mut(), fld::CLASS_SPECIFIC, v);
    }
    pub fn set_transaction_id(&mut self, v: u64) {
        field::set_u64_at(self.buffer.as_mut(), fld::TRANSACTION_ID, v);
    }
    pub fn set_attribute_id(&mut self, v: AttributeId) {
        field::set_u16_at(self.buffer.as_mut(), fld::ATTRIBUTE_ID, v.0);
    }
    pub fn set_attribute_modifier(&mut self, v: u32) {
        field::set_u32_at(self.buffer.as_mut(), fld::ATTRIBUTE_MODIFIER, v);
    }
    /// Zero the reserved half-word after the attribute ID (senders must send zero).
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[fld::RESERVED].fill(0);
    }
}

/// The MAD header as plain data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHeaderRepr {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    pub method: Method,
    pub status: u16,
    pub class_specific: u16,
    pub transaction_id: u64,
    pub attribute_id: AttributeId,
    pub attribute_modifier: u32,
}

impl MadHeaderRepr {
    /// The header of a CM message as Linux `ib_cm` sends it: base version 1, class 0x07,
    /// class version 2, method Send, status 0, attribute modifier 0.
    pub const fn cm_send(transaction_id: u64, attribute_id: AttributeId) -> Self {
        MadHeaderRepr {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: Method::SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            attribute_modifier: 0,
        }
    }

    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, Error> {
        p.check_len()?;
        Ok(MadHeaderRepr {
            base_version: p.base_version(),
            mgmt_class: p.mgmt_class(),
            class_version: p.class_version(),
            method: p.method(),
            status: p.status(),
            class_specific: p.class_specific(),
            transaction_id: p.transaction_id(),
            attribute_id: p.attribute_id(),
            attribute_modifier: p.attribute_modifier(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 24 header bytes; the caller's buffer must hold at least [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_base_version(self.base_version);
        p.set_mgmt_class(self.mgmt_class);
        p.set_class_version(self.class_version);
        p.set_method(self.method);
        p.set_status(self.status);
        p.set_class_specific(self.class_specific);
        p.set_transaction_id(self.transaction_id);
        p.set_attribute_id(self.attribute_id);
        p.clear_reserved();
        p.set_attribute_modifier(self.attribute_modifier);
    }
}

/// Every CM MAD is a full MAD block: header and a fixed-size, zero-padded body.
pub(crate) fn check_mad_len(buf: &[u8]) -> Result<(), Error> {
    if buf.len() < MAD_SIZE {
        Err(Error::Truncated)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Header of the REQ in G_rping.pcap (frame 1).
    const REQ_HDR: [u8; 24] = [
        0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x9f, 0xe8, 0x07,
        0x4c, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn parse_golden() {
        let r = MadHeaderRepr::parse(&Packet::new_checked(&REQ_HDR[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            MadHeaderRepr::cm_send(0x0000_0002_9fe8_074c, AttributeId::REQ)
        );
        assert!(!r.method.is_response());
    }

    #[test]
    fn emit_golden() {
        let mut b = [0xaau8; 24];
        MadHeaderRepr::cm_send(0x0000_0002_9fe8_074c, AttributeId::REQ)
            .emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(b, REQ_HDR);
    }

    #[test]
    fn short_rejected() {
        assert_eq!(
            Packet::new_checked(&REQ_HDR[..23]).unwrap_err(),
            Error::Truncated
        );
    }
}
