//! Immediate Data Extended Transport Header (IBA 9.3.6), 4 bytes, kept as a `u32` in network
//! byte order semantics (the value verbs hands to the receiver as `imm_data`, converted with
//! `u32::from_be_bytes`).

use super::{Error, Result};

/// Length of the ImmDt header.
pub const HEADER_LEN: usize = 4;

/// Reads the immediate data from the start of `buf`.
pub fn parse(buf: &[u8]) -> Result<u32> {
    match buf.get(..HEADER_LEN) {
        Some(b) => Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(Error),
    }
}

/// Writes the immediate data to the start of `buf`. Panics on a buffer shorter than 4 bytes.
pub fn emit(imm: u32, buf: &mut [u8]) {
    buf[..HEADER_LEN].copy_from_slice(&imm.to_be_bytes())
}

#[cfg(test)]
mod tests {
    #[test]
    fn parse_emit() {
        let mut b = [0u8; 4];
        super::emit(0xdeadbeef, &mut b);
        assert_eq!(b, [0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(super::parse(&b), Ok(0xdeadbeef));
        assert!(super::parse(&b[..3]).is_err());
    }
}
