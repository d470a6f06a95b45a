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
//! It travels least significant byte first. Only the masked prefix (at most 60 bytes) is
//! copied, to the stack; the CRC then continues over the rest in place, so the payload is
//! never copied.

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
#[inline]
pub fn crc32_update(state: u32, data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(state);
    h.update(data);
    h.finalize()
}

/// Length of the invariant-masked prefix (IP + UDP + BTH) of `ip_packet`.
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

/// Computes the ICRC of `ip_packet`, which runs from the first byte of the IP header to the
/// last pad byte (the ICRC trailer excluded). Fails when it is too short to hold IP, UDP and
/// BTH headers or is not IPv4/IPv6.
pub fn compute(ip_packet: &[u8]) -> Result<u32> {
    let (ip_len, n) = prefix_len(ip_packet)?;
    // IPv4 options (up to 40 bytes) would make the prefix up to 80 bytes.
    let mut masked = [0u8; 60 + 20];
    let m = &mut masked[..n];
    m.copy_from_slice(&ip_packet[..n]);
    if ip_len == ipv6::HEADER_LEN && m[0] >> 4 == 6 {
        m[0] |= 0x0f; // traffic class (high nibble)
        m[1] = 0xff; // traffic class (low nibble), flow label
        m[2] = 0xff;
        m[3] = 0xff;
        m[7] = 0xff; // hop limit
    } else {
        m[1] = 0xff; // TOS (DSCP + ECN)
        m[8] = 0xff; // TTL
        m[10] = 0xff; // header checksum
        m[11] = 0xff;
    }
    m[ip_len + 6] = 0xff; // UDP checksum
    m[ip_len + 7] = 0xff;
    m[ip_len + udp::HEADER_LEN + bth::ICRC_MASKED_BYTE] = 0xff; // BTH resv8a (FECN, BECN)
    // One hasher for both parts: its constructor runs the CPU feature check and setup,
    // which on a 64-byte payload costs about as much as the CRC itself.
    let mut h = crc32fast::Hasher::new_with_initial(LRH_SEED);
    h.update(m);
    h.update(&ip_packet[n..]);
    Ok(h.finalize())
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
}
