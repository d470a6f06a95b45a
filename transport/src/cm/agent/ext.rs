//! droce's transport extensions offered through IB CM private data, between two droce
//! consumers that both ask for them ([`ConnectParams::selective_repeat`]).
//!
//! The offer is a 4-byte trailer at the very end of the message's private data field: the
//! last 4 of the 56 consumer bytes a REQ carries after the rdma_cm header (its 92-byte field
//! either way), the last 4 of a REP's 196. Three marker bytes, then one bit per extension.
//! - The active side writes it into its REQ only when its consumer offers an extension and its
//!   own private data leaves the 4 bytes free.
//! - The passive side reads the REQ's trailer; at `accept` it sets the QP attribute when its
//!   consumer offers the same, and only then answers with a trailer in the REP naming what is
//!   on. A REQ without a trailer (rping, Linux rdma_cm, a droce from before) gets a REP without
//!   one: such a peer never sees the trailer.
//! - The active side sets the attribute when the REP's trailer says so.
//!
//! Both QPs are programmed before the REP (passive) and before the RTU (active) leave, so
//! neither runs with a setting the other has not agreed to. The consumer never sees the
//! trailer: it is zeroed in the private data of `ConnectRequest` and `Established`, where
//! zero padding stood before. A consumer's data that happens to end in the marker is read as
//! an offer only by a droce consumer that offers too, and a one-sided attribute is slow, never
//! wrong (docs/selective-repeat.md).
//!
//! [`ConnectParams::selective_repeat`]: super::ConnectParams::selective_repeat

/// Bytes of the trailer.
pub const LEN: usize = 4;
const MARK: [u8; 3] = *b"dRx";
/// Bit of the extensions byte: selective repeat on the RC QP (`QpAttr::selective_repeat`).
pub const SELECTIVE_REPEAT: u8 = 1 << 0;

/// `field` (a message's whole private data field) with the trailer carrying `bits` at its end,
/// if `used` (the bytes the consumer's data reaches, from the start of `field`) leaves room.
/// Returns whether it was written.
pub fn write(field: &mut [u8], used: usize, bits: u8) -> bool {
    let Some(at) = field.len().checked_sub(LEN) else { return false };
    if used > at || bits == 0 {
        return false;
    }
    field[at..at + 3].copy_from_slice(&MARK);
    field[at + 3] = bits;
    true
}

/// The extension bits the trailer at the end of `field` carries (0 without a trailer).
pub fn read(field: &[u8]) -> u8 {
    match field.len().checked_sub(LEN).map(|at| &field[at..]) {
        Some([a, b, c, bits]) if [*a, *b, *c] == MARK => *bits,
        _ => 0,
    }
}

/// Zeroes the trailer at the end of `field`, if there is one (what the consumer sees).
pub fn strip(field: &mut [u8]) {
    if read(field) != 0 {
        let at = field.len() - LEN;
        field[at..].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_round_trip_and_room() {
        let mut f = [0u8; 92];
        f[..36].fill(0xaa); // rdma_cm header
        f[36..86].fill(0x11); // 50 bytes of consumer data
        assert!(write(&mut f, 86, SELECTIVE_REPEAT));
        assert_eq!(&f[88..], &[b'd', b'R', b'x', SELECTIVE_REPEAT]);
        assert_eq!(read(&f), SELECTIVE_REPEAT);
        assert!(f[..86].iter().all(|&b| b == 0xaa || b == 0x11), "the consumer's bytes are untouched");
        strip(&mut f);
        assert_eq!(read(&f), 0);
        assert_eq!(&f[86..], &[0u8; 6]);
        // consumer data reaching into the last 4 bytes: no room, nothing written
        let mut f = [0u8; 92];
        assert!(!write(&mut f, 89, SELECTIVE_REPEAT));
        assert_eq!(f, [0u8; 92]);
        assert!(write(&mut f, 88, SELECTIVE_REPEAT), "exactly the room left");
        // no extension: no trailer
        let mut f = [0u8; 196];
        assert!(!write(&mut f, 0, 0));
        assert_eq!(read(&f), 0);
    }

    #[test]
    fn data_without_the_marker_offers_nothing() {
        assert_eq!(read(&[0u8; 92]), 0, "zero padding (rping, Linux rdma_cm, an older droce)");
        let mut f = [0xffu8; 196];
        assert_eq!(read(&f), 0);
        f[192..195].copy_from_slice(b"dRy");
        assert_eq!(read(&f), 0);
        let before = f;
        strip(&mut f);
        assert_eq!(f, before, "strip leaves data without a trailer alone");
        assert_eq!(read(&[1, 2]), 0, "shorter than a trailer");
    }
}
