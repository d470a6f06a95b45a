//! Invalidate Extended Transport Header (IBA 9.3.7), 4 bytes: the R_Key to invalidate.

use super::{Error, Result};
use crate::types::Rkey;

/// Length of the IETH.
pub const HEADER_LEN: usize = 4;

/// Reads the R_Key from the start of `buf`.
pub fn parse(buf: &[u8]) -> Result<Rkey> {
    match buf.get(..HEADER_LEN) {
        Some(b) => Ok(Rkey(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))),
        None => Err(Error),
    }
}

/// Writes the R_Key to the start of `buf`. Panics on a buffer shorter than 4 bytes.
pub fn emit(rkey: Rkey, buf: &mut [u8]) {
    buf[..HEADER_LEN].copy_from_slice(&rkey.0.to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_emit() {
        let mut b = [0u8; 4];
        emit(Rkey(0x0102_0304), &mut b);
        assert_eq!(b, [1, 2, 3, 4]);
        assert_eq!(parse(&b), Ok(Rkey(0x0102_0304)));
        assert!(parse(&b[..3]).is_err());
    }
}
