//! ARP for IPv4 over Ethernet (RFC 826), for neighbour resolution in the engine.

use super::eth::EthernetAddress;
use super::{Error, Field, Result};
use std::net::Ipv4Addr;

mod field {
    use super::Field;
    pub const HTYPE: Field = 0..2;
    pub const PTYPE: Field = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Field = 6..8;
    pub const SHA: Field = 8..14;
    pub const SPA: Field = 14..18;
    pub const THA: Field = 18..24;
    pub const TPA: Field = 24..28;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = field::TPA.end;

/// ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpOperation {
    Request,
    Reply,
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    fn from(v: u16) -> Self {
        match v {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            v => ArpOperation::Unknown(v),
        }
    }
}
impl From<ArpOperation> for u16 {
    fn from(o: ArpOperation) -> u16 {
        match o {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Unknown(v) => v,
        }
    }
}

/// A read/write view of an ARP packet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    pub const fn new_unchecked(buffer: T) -> ArpPacket<T> {
        ArpPacket { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<ArpPacket<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Only the Ethernet/IPv4 form (28 bytes) is understood.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < PACKET_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }
    fn be16(&self, f: Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn hardware_type(&self) -> u16 {
        self.be16(field::HTYPE)
    }
    pub fn protocol_type(&self) -> u16 {
        self.be16(field::PTYPE)
    }
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }
    pub fn operation(&self) -> ArpOperation {
        ArpOperation::from(self.be16(field::OPER))
    }
    pub fn source_hardware_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::SHA])
    }
    pub fn source_protocol_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SPA];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    pub fn target_hardware_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::THA])
    }
    pub fn target_protocol_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::TPA];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    fn set_be16(&mut self, f: Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes())
    }
    pub fn set_hardware_type(&mut self, v: u16) {
        self.set_be16(field::HTYPE, v)
    }
    pub fn set_protocol_type(&mut self, v: u16) {
        self.set_be16(field::PTYPE, v)
    }
    pub fn set_hardware_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::HLEN] = v
    }
    pub fn set_protocol_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::PLEN] = v
    }
    pub fn set_operation(&mut self, o: ArpOperation) {
        self.set_be16(field::OPER, o.into())
    }
    pub fn set_source_hardware_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&a.0)
    }
    pub fn set_source_protocol_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&a.octets())
    }
    pub fn set_target_hardware_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&a.0)
    }
    pub fn set_target_protocol_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&a.octets())
    }
}

/// An Ethernet/IPv4 ARP request or reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    pub operation: ArpOperation,
    pub source_hardware_addr: EthernetAddress,
    pub source_protocol_addr: Ipv4Addr,
    pub target_hardware_addr: EthernetAddress,
    pub target_protocol_addr: Ipv4Addr,
}

impl ArpRepr {
    /// Parses an Ethernet (htype 1) / IPv4 (ptype 0x0800) ARP packet; anything else is an error.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<ArpRepr> {
        p.check_len()?;
        if p.hardware_type() != 1
            || p.protocol_type() != 0x0800
            || p.hardware_len() != 6
            || p.protocol_len() != 4
        {
            return Err(Error);
        }
        Ok(ArpRepr {
            operation: p.operation(),
            source_hardware_addr: p.source_hardware_addr(),
            source_protocol_addr: p.source_protocol_addr(),
            target_hardware_addr: p.target_hardware_addr(),
            target_protocol_addr: p.target_protocol_addr(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }
    /// Panics on a buffer shorter than 28 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ArpPacket<T>) {
        p.set_hardware_type(1);
        p.set_protocol_type(0x0800);
        p.set_hardware_len(6);
        p.set_protocol_len(4);
        p.set_operation(self.operation);
        p.set_source_hardware_addr(self.source_hardware_addr);
        p.set_source_protocol_addr(self.source_protocol_addr);
        p.set_target_hardware_addr(self.target_hardware_addr);
        p.set_target_protocol_addr(self.target_protocol_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // G_rping_arp.pcap frame 1 (ARP part): who-has 192.168.77.10 tell 192.168.77.11.
    #[rustfmt::skip]
    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01,
        0x52, 0x54, 0x00, 0x77, 0x00, 0x11, 192, 168, 77, 11,
        0, 0, 0, 0, 0, 0, 192, 168, 77, 10,
    ];

    #[test]
    fn parse_emit() {
        let r = ArpRepr::parse(&ArpPacket::new_checked(&REQUEST[..]).unwrap()).unwrap();
        assert_eq!(r.operation, ArpOperation::Request);
        assert_eq!(r.source_protocol_addr, Ipv4Addr::new(192, 168, 77, 11));
        assert_eq!(r.target_protocol_addr, Ipv4Addr::new(192, 168, 77, 10));
        assert_eq!(r.source_hardware_addr.to_string(), "52:54:00:77:00:11");
        let mut out = [0u8; 28];
        r.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, REQUEST);
        assert!(ArpPacket::new_checked(&REQUEST[..27]).is_err());
        let mut bad = REQUEST;
        bad[1] = 6;
        assert!(ArpRepr::parse(&ArpPacket::new_unchecked(&bad[..])).is_err());
    }
}
