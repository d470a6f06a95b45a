//! Every header view and record parser, and `RoceRepr::parse`, on arbitrary bytes: no panic,
//! and after `new_checked` succeeds no getter may panic.
#![no_main]

use droce_transport::wire::*;
use libfuzzer_sys::fuzz_target;

fn views(data: &[u8]) {
    if let Ok(p) = EthernetFrame::new_checked(data) {
        let _ = (p.src_addr(), p.dst_addr(), p.ethertype(), p.payload().len());
        let _ = EthernetRepr::parse(&p);
    }
    if let Ok(p) = ArpPacket::new_checked(data) {
        let _ = (
            p.operation(),
            p.source_hardware_addr(),
            p.target_protocol_addr(),
        );
        let _ = ArpRepr::parse(&p);
    }
    if let Ok(p) = Ipv4Packet::new_checked(data) {
        let _ = (
            p.version(),
            p.dscp(),
            p.ecn(),
            p.ident(),
            p.dont_frag(),
            p.frag_offset(),
        );
        let _ = (
            p.hop_limit(),
            p.next_header(),
            p.src_addr(),
            p.dst_addr(),
            p.payload().len(),
        );
        let _ = p.verify_checksum();
        let _ = Ipv4Repr::parse(&p);
    }
    if let Ok(p) = Ipv6Packet::new_checked(data) {
        let _ = (
            p.traffic_class(),
            p.flow_label(),
            p.hop_limit(),
            p.src_addr(),
            p.payload().len(),
        );
        let _ = Ipv6Repr::parse(&p);
    }
    if let Ok(p) = UdpPacket::new_checked(data) {
        let _ = (p.src_port(), p.dst_port(), p.checksum(), p.payload().len());
        let _ = UdpRepr::parse(&p);
    }
    if let Ok(p) = BthPacket::new_checked(data) {
        let _ = (
            p.opcode(),
            p.pad_count(),
            p.pkey(),
            p.dest_qp(),
            p.psn(),
            p.resv6(),
            p.resv7(),
        );
        if let Ok(b) = BthRepr::parse(&p) {
            let i = b.opcode.info();
            let _ = (i.header_len(), i.offset(ExtHeader::Reth));
        }
    }
    if let Ok(p) = RethPacket::new_checked(data) {
        let _ = RethRepr::parse(&p);
    }
    if let Ok(p) = AethPacket::new_checked(data) {
        let _ = AethRepr::parse(&p);
    }
    if let Ok(p) = DethPacket::new_checked(data) {
        let _ = DethRepr::parse(&p);
    }
    if let Ok(p) = AtomicEthPacket::new_checked(data) {
        let _ = AtomicEthRepr::parse(&p);
    }
    if let Ok(p) = AtomicAckEthPacket::new_checked(data) {
        let _ = AtomicAckEthRepr::parse(&p);
    }
    let _ = immdt::parse(data);
    let _ = ieth::parse(data);
    // the in-place variants agree with the copying ones and leave the bytes as they were
    let mut scratch = data.to_vec();
    assert_eq!(icrc::compute_in_place(&mut scratch).ok(), icrc::compute(data).ok());
    assert_eq!(icrc::verify_in_place(&mut scratch), icrc::verify(data));
    assert_eq!(scratch, data);
}

/// Rewrites the ICRC of a would-be RoCEv2 frame so that mutated inputs get past the CRC and
/// exercise the parser behind it. Returns `None` when there is no IP length to go by.
fn with_fixed_icrc(data: &[u8]) -> Option<Vec<u8>> {
    let l3 = data.get(14..)?;
    let ip_len = match data.get(12..14)? {
        [0x08, 0x00] => Ipv4Packet::new_checked(l3).ok()?.total_len() as usize,
        [0x86, 0xdd] => 40 + Ipv6Packet::new_checked(l3).ok()?.payload_len() as usize,
        _ => return None,
    };
    let end = 14 + ip_len;
    let body_end = end.checked_sub(4)?;
    let crc = icrc::compute(data.get(14..body_end)?).ok()?;
    let mut v = data.to_vec();
    v[body_end..end].copy_from_slice(&crc.to_le_bytes());
    Some(v)
}

fn roce(data: &[u8]) {
    if let Ok((r, pl)) = RoceRepr::parse(data) {
        assert!(pl.start <= pl.end && pl.end <= data.len());
        assert!(r.check().is_ok());
        assert!(r.frame_len(pl.len()) <= data.len());
    }
    let _ = RoceRepr::parse_without_icrc(data);
    // the receive path's parser: same verdict and payload range, bytes unchanged
    let mut scratch = data.to_vec();
    let in_place = RoceRepr::parse_in_place(&mut scratch).map(|(_, pl)| pl).ok();
    assert_eq!(in_place, RoceRepr::parse(data).map(|(_, pl)| pl).ok());
    assert_eq!(scratch, data);
}

fuzz_target!(|data: &[u8]| {
    views(data);
    roce(data);
    if let Some(v) = with_fixed_icrc(data) {
        roce(&v);
    }
});
