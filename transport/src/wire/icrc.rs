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
//! It travels least significant byte first. The CRC kernel is `droce-crc32`'s. With its
//! AVX-512 kernel every variant here makes one pass that only reads the frame: the variant
//! fields' ones are OR-ed into the bytes as the kernel loads them. With the fallback
//! (crc32fast), [`compute_in_place`] / [`verify_in_place`], which the datapath uses, set the
//! variant fields to ones in the frame for the one CRC pass and put them back, and
//! [`compute`] / [`verify`], for read-only bytes, copy only the masked prefix (at most 80
//! bytes) to the stack and continue over the rest in place. None copies the payload.

use super::{bth, ipv4, ipv6, udp, Error, Result};
use droce_crc32::Ones;

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
/// Carry-less multiply through `droce-crc32`: its AVX-512 VPCLMULQDQ kernel where the CPU
/// has it (1 KiB in ~27 ns against crc32fast's ~43), crc32fast elsewhere (and under
/// valgrind); chosen over crc32fast, the table-driven `crc` crate and `crc-fast` by
/// `cargo bench -p droce-crc32` and `benches/icrc.rs` (see BENCHMARKS.md).
///
/// Nothing to add returns `state` as it is (the empty pad of every payload that is a
/// multiple of 4 bytes costs no call into a kernel).
#[inline]
pub fn crc32_update(state: u32, data: &[u8]) -> u32 {
    if data.is_empty() {
        return state;
    }
    droce_crc32::update(state, data)
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
const fn variant_fields(version: u8, ip_len: usize) -> ([(usize, u8); 8], usize) {
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

/// The variant fields as bits the CRC sees as ones (`ip_len` at most 60: the offsets stay
/// below 80, inside [`droce_crc32::ONES_LEN`]).
const fn ones_for(version: u8, ip_len: usize) -> Ones {
    let (fields, k) = variant_fields(version, ip_len);
    let mut o = Ones::ZERO;
    let mut i = 0;
    while i < k {
        o.bytes[fields[i].0] |= fields[i].1;
        i += 1;
    }
    o
}

/// The masks of the two headers every frame has: IPv4 without options, IPv6.
static ONES_V4: Ones = ones_for(4, ipv4::HEADER_LEN);
static ONES_V6: Ones = ones_for(6, ipv6::HEADER_LEN);

/// The CRC of the masked prefix and the rest of `ip_packet`, in one pass that reads the
/// packet and never writes it: the kernel ORs the variant fields' ones into the bytes as it
/// loads them.
fn masked_crc(ip_packet: &[u8]) -> Result<u32> {
    let (ip_len, _) = prefix_len(ip_packet)?;
    let version = ip_packet[0] >> 4;
    let crc = if version == 6 {
        droce_crc32::update_with_ones(LRH_SEED, ip_packet, &ONES_V6)
    } else if ip_len == ipv4::HEADER_LEN {
        droce_crc32::update_with_ones(LRH_SEED, ip_packet, &ONES_V4)
    } else {
        // IPv4 with options: a mask for this header length
        droce_crc32::update_with_ones(LRH_SEED, ip_packet, &ones_for(4, ip_len))
    };
    Ok(crc)
}

/// Computes the ICRC of `ip_packet`, which runs from the first byte of the IP header to the
/// last pad byte (the ICRC trailer excluded). Fails when it is too short to hold IP, UDP and
/// BTH headers or is not IPv4/IPv6.
///
/// With the AVX-512 kernel, one pass that reads the packet only (the variant fields' ones
/// OR-ed in as the bytes are loaded); with the fallback, the masked prefix (at most 80
/// bytes) copied to the stack and the CRC run in two parts, where [`compute_in_place`]
/// does one pass.
pub fn compute(ip_packet: &[u8]) -> Result<u32> {
    masked_crc(ip_packet)
}

/// [`compute`] where the buffer may be written; `ip_packet` is unchanged on return.
///
/// With the AVX-512 kernel this is [`compute`]: no byte of the packet is written. With the
/// fallback (crc32fast) it sets the variant fields to ones in place, runs one CRC pass over
/// the whole packet and puts the fields back: one pass instead of a copied prefix plus the
/// rest saves the second kernel's setup and reduction (`cargo bench --bench icrc`, GB/s in
/// place vs copied prefix: 3.49 vs 2.73 on a 64-byte SEND, 20.7 vs 18.3 with 1 KiB of
/// payload). The AVX-512 kernel needs no stores: OR-ing at load also spares the wait of its
/// wide loads for the byte stores just before them (BENCHMARKS.md, 2026-11-24: a 108-byte
/// body ~10 ns masked beforehand, ~26 ns masked in place).
pub fn compute_in_place(ip_packet: &mut [u8]) -> Result<u32> {
    if droce_crc32::kernel() == droce_crc32::Kernel::Avx512 {
        return masked_crc(ip_packet);
    }
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

    /// The ICRC by the book with the reference CRC (crc32fast): the prefix copied, the
    /// variant fields set to ones, the CRC over the copy.
    fn icrc_reference(p: &[u8]) -> u32 {
        let (ip_len, _) = prefix_len(p).unwrap();
        let (fields, k) = variant_fields(p[0] >> 4, ip_len);
        let mut m = p.to_vec();
        for &(at, ones) in &fields[..k] {
            m[at] |= ones;
        }
        let mut h = crc32fast::Hasher::new_with_initial(LRH_SEED);
        h.update(&m);
        h.finalize()
    }

    /// Whichever kernel runs (run with DROCE_CRC32_FALLBACK=1 for the fallback), `compute`,
    /// `compute_in_place` and `verify_in_place` agree with the reference on IPv4 without
    /// and with options (every header length) and IPv6, for bodies from the bare headers
    /// to 8 KiB of random bytes, and leave the packet as it was.
    #[test]
    fn every_header_and_length_matches_reference() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        };
        let headers: Vec<(u8, usize)> = (5..=15u8).map(|ihl| (0x40 | ihl, ihl as usize * 4)).chain([(0x6a, 40)]).collect();
        let tails = (0..=300).chain([1000, 1024, 1028, 4096, 4100, 8192]);
        for tail in tails {
            for &(first, ip_len) in &headers {
                let n = ip_len + udp::HEADER_LEN + bth::HEADER_LEN + tail;
                let mut p: Vec<u8> = (0..n).map(|_| rnd()).collect();
                p[0] = first;
                let want = icrc_reference(&p);
                let before = p.clone();
                assert_eq!(compute(&p).unwrap(), want, "compute ip_len {ip_len} tail {tail}");
                assert_eq!(compute_in_place(&mut p).unwrap(), want, "in place ip_len {ip_len} tail {tail}");
                assert_eq!(p, before);
                p.extend_from_slice(&want.to_le_bytes());
                assert!(verify_in_place(&mut p), "verify ip_len {ip_len} tail {tail}");
                let last = p.len() - 1;
                p[last] ^= 0x80;
                assert!(!verify_in_place(&mut p) && !verify(&p), "bad icrc ip_len {ip_len} tail {tail}");
            }
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
