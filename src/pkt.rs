//! Frame templates built once per stream and copied into each mbuf by the txonly engine, and
//! the header rewrites of the mac / macswap engines.

/// Ethernet + IPv4 + UDP headers: the smallest frame txonly can build.
pub const MIN_TXPKTS: u16 = 14 + 20 + 8;
/// testpmd's MAX_PKT_BURST.
pub const MAX_BURST: u16 = 512;

/// Addresses of the UDP/IPv4 frames txonly sends: testpmd's txonly defaults (198.18.0.1 ->
/// 198.18.0.2, RFC 2544 benchmarking range; UDP port 9 "discard" both ways).
pub const TX_IP_SRC: [u8; 4] = [198, 18, 0, 1];
pub const TX_IP_DST: [u8; 4] = [198, 18, 0, 2];
pub const TX_UDP_PORT: u16 = 9;

/// testpmd's default peer MAC for port `n`: 02:00:00:00:00:NN (locally administered).
pub fn default_peer_mac(port: u16) -> [u8; 6] {
    [0x02, 0, 0, 0, (port >> 8) as u8, port as u8]
}

/// One's-complement sum folded to 16 bits (RFC 1071).
fn csum16(bytes: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for ch in bytes.chunks(2) {
        let w = if ch.len() == 2 { u16::from_be_bytes([ch[0], ch[1]]) } else { u16::from_be_bytes([ch[0], 0]) };
        sum += u32::from(w);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet / IPv4 / UDP frame of exactly `size` bytes (`size` >= 42), zero payload, valid
/// IPv4 header checksum and UDP checksum 0 (allowed for IPv4), as testpmd's txonly builds it.
pub fn udp_ipv4_frame(size: u16, src_mac: [u8; 6], dst_mac: [u8; 6]) -> Vec<u8> {
    let size = usize::from(size.max(MIN_TXPKTS));
    let mut f = vec![0u8; size];
    f[0..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&src_mac);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (size - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64; // TTL
    ip[9] = 17; // UDP
    ip[12..16].copy_from_slice(&TX_IP_SRC);
    ip[16..20].copy_from_slice(&TX_IP_DST);
    let c = csum16(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let udp = &mut f[34..42];
    udp[0..2].copy_from_slice(&TX_UDP_PORT.to_be_bytes());
    udp[2..4].copy_from_slice(&TX_UDP_PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f
}

/// mac mode: destination = peer, source = own port MAC.
#[inline(always)]
pub fn set_macs(frame: &mut [u8], dst: &[u8; 6], src: &[u8; 6]) {
    if frame.len() >= 12 {
        frame[0..6].copy_from_slice(dst);
        frame[6..12].copy_from_slice(src);
    }
}

/// macswap mode: exchange source and destination MAC.
#[inline(always)]
pub fn swap_macs(frame: &mut [u8]) {
    if frame.len() >= 12 {
        let (d, s) = frame.split_at_mut(6);
        d.swap_with_slice(&mut s[..6]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_fields() {
        let f = udp_ipv4_frame(64, [1, 2, 3, 4, 5, 6], default_peer_mac(1));
        assert_eq!(f.len(), 64);
        assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&f[6..12], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 50);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 30);
        // A correct header checksums to zero.
        assert_eq!(csum16(&f[14..34]), 0);
        assert_eq!(udp_ipv4_frame(1500, [0; 6], [0; 6]).len(), 1500);
    }

    #[test]
    fn known_ip_checksum() {
        // Header of testpmd's 64-byte txonly frame: 45 00 00 32 00 00 00 00 40 11 ck 198.18.0.1 198.18.0.2
        let f = udp_ipv4_frame(64, [0; 6], [0; 6]);
        // 4500+0032+4011+c612+0001+c612+0002 = 0x2116a -> 0x116c -> !0x116c = 0xee93 (by hand).
        assert_eq!(u16::from_be_bytes([f[24], f[25]]), 0xee93);
    }

    #[test]
    fn mac_rewrites() {
        let mut f = udp_ipv4_frame(64, [1; 6], [2; 6]);
        swap_macs(&mut f);
        assert_eq!(&f[0..6], &[1; 6]);
        assert_eq!(&f[6..12], &[2; 6]);
        set_macs(&mut f, &[7; 6], &[8; 6]);
        assert_eq!(&f[0..12], &[7, 7, 7, 7, 7, 7, 8, 8, 8, 8, 8, 8]);
    }
}
