//! Invariant CRC of RoCEv2 (IBA annex A17.3.3 and 7.8.1).
//!
//! ICRC = CRC-32 (the Ethernet/zlib one: reflected polynomial 0x04C11DB7, initial value
//! 0xffffffff, final inversion) over
//! 1. 8 bytes of 0xff standing for the LRH that RoCEv2 does not carry,
//! 2. the IP header with the fields a router may change set to all ones (IPv4: TOS, TTL, header
//!    checksum; IPv6: traffic class, flow label, hop limit),
//! 3. the UDP header with its checksum set to all ones,
//! 4. the BTH with byte 4 (FECN, BECN and reserved bits) set to all ones,
//! 5. everything after the BTH up to the ICRC (extension headers, payload, pad).
//!
//! It travels least significant byte first. The datapath uses [`compute_in_place`] /
//! [`verify_in_place`]: the variant fields are set to ones in the frame for the one CRC pass
//! and put back. [`compute`] / [`verify`], for read-only bytes, copy only the masked prefix
//! (at most 80 bytes) to the stack and continue over the rest in place. Neither copies the
//! payload.

use super::{bth, ipv4, ipv6, udp, Error, Result};

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Bitwise CRC-32 update on the finalised ("xor-out applied") state, for compile-time use.
const fn crc32_bitwise(state: u32, data: &[u8]) -> u32 {
    let mut crc = !state;
    let mut i = 0;
    while i < data.len() {
        crc ^= data[i] as u32;
        let mut k = 0;
        while k < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
            k += 1;
        }
        i += 1;
    }
    !crc
}

/// CRC-32 of the 8 bytes of 0xff that stand for the absent LRH.
pub const LRH_SEED: u32 = crc32_bitwise(0, &[0xff; 8]);

/// Continues a CRC-32: `crc32_update(crc32(a), b) == crc32(a ++ b)`, `crc32_update(0, a) == crc32(a)`.
///
/// Carry-less multiply through `crc32fast` (PCLMULQDQ folding; since 1.5 it picks its AVX2 or
/// AVX-512 VPCLMULQDQ loops at run time where the CPU has them); chosen over the table-driven
/// `crc` crate and `crc-fast` by `benches/icrc.rs` (see BENCHMARKS.md).
///
/// Nothing to add returns `state` as it is: the hasher's constructor (a CPU feature check and
/// setup) would cost the zero-copy transmit path ~55-60 instructions per frame for the empty
/// pad of every payload that is a multiple of 4 bytes.
#[inline]
pub fn crc32_update(state: u32, data: &[u8]) -> u32 {
    if data.is_empty() {
        return state;
    }
    let mut h = crc32fast::Hasher::new_with_initial(state);
    h.update(data);
    h.finalize()
}

/// Length of the IP header and of the invariant-masked prefix (IP + UDP + BTH) of `ip_packet`.
fn prefix_len(ip_packet: &[u8]) -> Result<(usize, usize)> {
    let first = *ip_packet.first().ok_or(Error)?;
    let ip_len = match first >> 4 {
        4 => {
            let hl = (first & 0x0f) as usize * 4;
            if hl < ipv4::HEADER_LEN {
                return Err(Error);
            }
            hl
        }
        6 => ipv6::HEADER_LEN,
        _ => return Err(Error),
    };
    let n = ip_len + udp::HEADER_LEN + bth::HEADER_LEN;
    if ip_packet.len() < n {
        return Err(Error);
    }
    Ok((ip_len, n))
}

/// The variant fields of a prefix with an IP header of `ip_len` bytes: (offset from the IP
/// header, bits the ICRC sees as ones). At most 8 entries; the rest of the array is unused.
fn variant_fields(version: u8, ip_len: usize) -> ([(usize, u8); 8], usize) {
    let udp_ck = ip_len + 6;
    let resv8a = ip_len + udp::HEADER_LEN + bth::ICRC_MASKED_BYTE;
    if version == 6 && ip_len == ipv6::HEADER_LEN {
        // traffic class (4 + 4 bits), flow label (20 bits), hop limit
        let f = [(0, 0x0f), (1, 0xff), (2, 0xff), (3, 0xff), (7, 0xff), (udp_ck, 0xff), (udp_ck + 1, 0xff), (resv8a, 0xff)];
        (f, 8)
    } else {
        // TOS (DSCP + ECN), TTL, header checksum
        let f = [(1, 0xff), (8, 0xff), (10, 0xff), (11, 0xff), (udp_ck, 0xff), (udp_ck + 1, 0xff), (resv8a, 0xff), (0, 0)];
        (f, 7)
    }
}

/// Computes the ICRC of `ip_packet`, which runs from the first byte of the IP header to the
/// last pad byte (the ICRC trailer excluded). Fails when it is too short to hold IP, UDP and
/// BTH headers or is not IPv4/IPv6.
///
/// Copies the masked prefix (at most 80 bytes) to the stack and runs the CRC in two parts;
/// where the buffer may be written, [`compute_in_place`] does one pass.
pub fn compute(ip_packet: &[u8]) -> Result<u32> {
    let (ip_len, n) = prefix_len(ip_packet)?;
    // IPv4 options (up to 40 bytes) would make the prefix up to 80 bytes.
    let mut masked = [0u8; 60 + 20];
    let m = &mut masked[..n];
    m.copy_from_slice(&ip_packet[..n]);
    let (fields, k) = variant_fields(m[0] >> 4, ip_len);
    for &(at, ones) in &fields[..k] {
        m[at] |= ones;
    }
    // One hasher for both parts: its constructor runs the CPU feature check and setup,
    // which on a 64-byte payload costs about as much as the CRC itself.
    let mut h = crc32fast::Hasher::new_with_initial(LRH_SEED);
    h.update(m);
    h.update(&ip_packet[n..]);
    Ok(h.finalize())
}

/// [`compute`] with the buffer as scratch: sets the variant fields to ones in place, runs
/// the CRC in one pass over the whole packet, and puts the fields back, so `ip_packet` is
/// unchanged on return. One pass instead of a copied prefix plus the rest saves the second
/// CRC kernel's setup and reduction (`cargo bench --bench icrc`, GB/s in place vs copied
/// prefix: 3.49 vs 2.73 on a 64-byte SEND, 20.7 vs 18.3 with 1 KiB of payload; 2-3 % of the
/// CPU per frame in `roce_bw`).
pub fn compute_in_place(ip_packet: &mut [u8]) -> Result<u32> {
    let (ip_len, _) = prefix_len(ip_packet)?;
    let (fields, k) = variant_fields(ip_packet[0] >> 4, ip_len);
    let mut saved = [0u8; 8];
    for (i, &(at, ones)) in fields[..k].iter().enumerate() {
        saved[i] = ip_packet[at];
        ip_packet[at] |= ones;
    }
    let crc = crc32_update(LRH_SEED, ip_packet);
    for (i, &(at, _)) in fields[..k].iter().enumerate() {
        ip_packet[at] = saved[i];
    }
    Ok(crc)
}

/// Checks the ICRC of `ip_packet_with_icrc` (IP header to the end of the ICRC trailer).
pub fn verify(ip_packet_with_icrc: &[u8]) -> bool {
    let Some(end) = ip_packet_with_icrc.len().checked_sub(ICRC_LEN) else {
        return false;
    };
    let (body, trailer) = ip_packet_with_icrc.split_at(end);
    match compute(body) {
        Ok(c) => c.to_le_bytes() == trailer,
        Err(_) => false,
    }
}

/// [`verify`] through [`compute_in_place`]: `ip_packet_with_icrc` is unchanged on return.
pub fn verify_in_place(ip_packet_with_icrc: &mut [u8]) -> bool {
    let Some(end) = ip_packet_with_icrc.len().checked_sub(ICRC_LEN) else {
        return false;
    };
    let (body, trailer) = ip_packet_with_icrc.split_at_mut(end);
    match compute_in_place(body) {
        Ok(c) => c.to_le_bytes() == *trailer,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_reference_values() {
        // The CRC-32 check value.
        assert_eq!(crc32_update(0, b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32_bitwise(0, b"123456789"), 0xcbf4_3926);
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + (i >> 5)) as u8).collect();
        for split in [0, 1, 63, 64, 100, 4096, 5000] {
            let (a, b) = data.split_at(split);
            assert_eq!(crc32_update(crc32_update(0, a), b), crc32_bitwise(0, &data));
        }
        assert_eq!(LRH_SEED, crc32_bitwise(0, &[0xff; 8]));
        // nothing to add (the empty pad): the state as it is, as the hasher would return it
        for s in [0u32, 1, LRH_SEED, 0xcbf4_3926, u32::MAX] {
            let mut h = crc32fast::Hasher::new_with_initial(s);
            h.update(&[]);
            assert_eq!(crc32_update(s, &[]), h.finalize());
            assert_eq!(crc32_update(s, &[]), crc32_bitwise(s, &[]));
        }
    }

    /// A1_rc_pingpong_64.pcap frame 2 (RC Acknowledge), IP header to the end.
    const A1_F2: &str = "45000030d204400040114d52c0a84d0ac0a84d0bc29912b7001c00001100ffff0000002300735b2c1f000001974c20b8";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn golden_ack_and_masks() {
        let f = hex(A1_F2);
        assert!(verify(&f), "icrc of A1 frame 2");
        // Masked fields do not change the ICRC.
        for i in [1usize, 8, 10, 11, 26, 27, 32] {
            let mut g = f.clone();
            g[i] ^= 0x5a;
            assert!(verify(&g), "byte {i} is masked");
        }
        // Every other byte does.
        for i in (0..f.len()).filter(|i| ![1, 8, 10, 11, 26, 27, 32].contains(i)) {
            let mut g = f.clone();
            g[i] ^= 0x01;
            assert!(!verify(&g), "byte {i} is covered");
        }
        assert!(!verify(&f[..3]));
        assert!(compute(&f[..39]).is_err());
    }

    /// The in-place variants agree with the copying ones on every single-byte change of the
    /// golden ACK (masked or not, IPv4) and leave the buffer as they found it.
    #[test]
    fn in_place_matches_copying_and_restores() {
        let f = hex(A1_F2);
        let mut g = f.clone();
        assert!(verify_in_place(&mut g));
        assert_eq!(g, f);
        for i in 0..f.len() {
            let mut g = f.clone();
            g[i] ^= 0x5a;
            let before = g.clone();
            assert_eq!(verify_in_place(&mut g), verify(&before), "byte {i}");
            assert_eq!(g, before, "byte {i} restored");
            let body = &mut g[..f.len() - ICRC_LEN];
            let want = compute(&before[..f.len() - ICRC_LEN]).ok();
            assert_eq!(compute_in_place(body).ok(), want, "byte {i}");
        }
        let mut short = f[..39].to_vec();
        assert!(compute_in_place(&mut short).is_err());
        assert!(!verify_in_place(&mut short[..3]));
    }

    /// IPv6: the partly masked first byte (version stays covered, traffic class does not).
    #[test]
    fn in_place_ipv6_masks() {
        // IPv6 + UDP + BTH + 16 bytes of payload, checksum fields arbitrary.
        let mut p = vec![0u8; 40 + 8 + 12 + 16];
        p[0] = 0x6a; // version 6, traffic class high nibble a
        p[1] = 0xbc;
        p[6] = 17;
        p[7] = 64;
        for (i, b) in p.iter_mut().enumerate().skip(8) {
            *b ^= (i * 31) as u8;
        }
        p[0] = 0x6a;
        let want = compute(&p).unwrap();
        let before = p.clone();
        assert_eq!(compute_in_place(&mut p).unwrap(), want);
        assert_eq!(p, before);
        let mut q = p.clone();
        q[0] = 0x65; // traffic class only: same ICRC
        q[7] = 1; // hop limit
        assert_eq!(compute_in_place(&mut q).unwrap(), want);
        q[0] = 0x4a; // the version is covered (and makes it IPv4: another prefix)
        assert_ne!(compute(&q).ok(), Some(want));
    }
}
