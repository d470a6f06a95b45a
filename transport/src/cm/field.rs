//! Big-endian field access for CM MADs.
//!
//! IBA tables 106-120 give every field as "byte offset, bit offset, length" with bit 0 the
//! most significant bit of the byte. The helpers here take a byte offset `at`, the number of
//! bits to the *right* of the field (`shift`) and its `width`, so a field "byte 43, bits 5..7"
//! is `(43, 1, 2)`. Every setter masks the value to its width and keeps the neighbouring bits.
//!
//! Callers check the buffer length once (`check_len`); after that no accessor can index out of
//! bounds, because every offset used by the message views lies below [`super::MAD_SIZE`].

pub(crate) type Field = core::ops::Range<usize>;

#[inline]
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn set_u16_at(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn set_u32_at(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

#[inline]
pub(crate) fn set_u64_at(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

#[inline]
const fn mask32(width: u32) -> u32 {
    if width >= 32 {
        u32::MAX
    } else {
        (1u32 << width) - 1
    }
}

/// `width` bits of the byte at `at`, with `shift` bits of other fields to their right.
#[inline]
pub(crate) fn bits8(b: &[u8], at: usize, shift: u32, width: u32) -> u8 {
    ((u32::from(b[at]) >> shift) & mask32(width)) as u8
}

#[inline]
pub(crate) fn set_bits8(b: &mut [u8], at: usize, shift: u32, width: u32, v: u8) {
    let m = (mask32(width) << shift) as u8;
    b[at] = (b[at] & !m) | (((u32::from(v)) << shift) as u8 & m);
}

/// `width` bits of the big-endian 32-bit word at `at`, `shift` bits from its right end.
#[inline]
pub(crate) fn bits32(b: &[u8], at: usize, shift: u32, width: u32) -> u32 {
    (u32_at(b, at) >> shift) & mask32(width)
}

#[inline]
pub(crate) fn set_bits32(b: &mut [u8], at: usize, shift: u32, width: u32, v: u32) {
    let m = mask32(width) << shift;
    let w = (u32_at(b, at) & !m) | ((v << shift) & m);
    set_u32_at(b, at, w);
}

#[inline]
pub(crate) fn gid_at(b: &[u8], at: usize) -> crate::types::Gid {
    crate::types::Gid(array_at::<16>(b, at))
}

#[inline]
pub(crate) fn set_gid_at(b: &mut [u8], at: usize, gid: crate::types::Gid) {
    b[at..at + 16].copy_from_slice(&gid.0);
}

#[inline]
pub(crate) fn array_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut x = [0u8; N];
    x.copy_from_slice(&b[at..at + N]);
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_fields_keep_neighbours() {
        let mut b = [0xffu8; 4];
        set_bits8(&mut b, 0, 1, 2, 0);
        assert_eq!(b[0], 0b1111_1001);
        assert_eq!(bits8(&b, 0, 3, 5), 0x1f);
        set_bits8(&mut b, 0, 3, 5, 0x3f); // masked to 5 bits
        assert_eq!(b[0], 0b1111_1001);
        set_bits32(&mut b, 0, 8, 24, 0x0123_4567);
        assert_eq!(b, [0x23, 0x45, 0x67, 0xff]);
        assert_eq!(bits32(&b, 0, 8, 24), 0x23_4567);
        set_bits32(&mut b, 0, 0, 32, 0xdead_beef);
        assert_eq!(u32_at(&b, 0), 0xdead_beef);
    }
}
