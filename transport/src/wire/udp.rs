//! UDP header (RFC 768).

use super::{Error, Field, Result};

/// The IANA port of RoCEv2.
pub const ROCE_V2_PORT: u16 = 4791;

mod field {
    use super::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// A read/write view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    pub const fn new_unchecked(buffer: T) -> UdpPacket<T> {
        UdpPacket { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<UdpPacket<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks that the buffer holds the header and the `len` field's bytes, and that the
    /// `len` field covers at least the header.
    pub fn check_len(&self) -> Result<()> {
        let blen = self.buffer.as_ref().len();
        if blen < HEADER_LEN {
            return Err(Error);
        }
        let l = self.len() as usize;
        if l < HEADER_LEN || blen < l {
            return Err(Error);
        }
        Ok(())
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn be16(&self, f: Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn src_port(&self) -> u16 {
        self.be16(field::SRC_PORT)
    }
    pub fn dst_port(&self) -> u16 {
        self.be16(field::DST_PORT)
    }
    /// Length of header plus payload.
    #[allow(clippy::len_without_is_empty)] // a header field, not a container
    pub fn len(&self) -> u16 {
        self.be16(field::LENGTH)
    }
    pub fn checksum(&self) -> u16 {
        self.be16(field::CHECKSUM)
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    pub fn set_src_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&v.to_be_bytes())
    }
    pub fn set_dst_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&v.to_be_bytes())
    }
    pub fn set_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes())
    }
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes())
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let l = self.len() as usize;
        &mut self.buffer.as_mut()[HEADER_LEN..l]
    }
}

/// The plain form of a UDP header. The length is computed on emit; the checksum is written as
/// zero ("no checksum"), as Linux rxe does for RoCEv2 over IPv4 and IPv6 (the ICRC protects the
/// datagram and masks this field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parses the header; the checksum is not verified (see the type's doc).
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> Result<UdpRepr> {
        p.check_len()?;
        Ok(UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
        })
    }
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        HEADER_LEN + payload_len
    }
    /// Writes the header for `payload_len` bytes of payload, checksum zero.
    /// Panics on a buffer shorter than 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut UdpPacket<T>, payload_len: usize) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len((HEADER_LEN + payload_len) as u16);
        p.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A1 frame 1: sport 49817 -> 4791, length 88, checksum 0.
    const BYTES: [u8; 8] = [0xc2, 0x99, 0x12, 0xb7, 0x00, 0x58, 0x00, 0x00];

    #[test]
    fn parse_emit() {
        let mut buf = [0u8; 0x58];
        buf[..8].copy_from_slice(&BYTES);
        let p = UdpPacket::new_checked(&buf[..]).unwrap();
        let r = UdpRepr::parse(&p).unwrap();
        assert_eq!(
            r,
            UdpRepr {
                src_port: 49817,
                dst_port: ROCE_V2_PORT
            }
        );
        assert_eq!(p.payload().len(), 0x50);
        let mut out = [0u8; 8];
        r.emit(&mut UdpPacket::new_unchecked(&mut out[..]), 0x50);
        assert_eq!(out, BYTES);
        assert!(UdpPacket::new_checked(&buf[..0x57]).is_err());
        let mut bad = buf;
        bad[5] = 7;
        assert!(UdpPacket::new_checked(&bad[..]).is_err());
    }
}
