//! Bit positions of every field, record round trips, and refusal of bad input.
//! The golden test against Linux rxe's MADs is `tests/cm_golden.rs`.

use super::*;
use crate::types::{Gid, PKey, Psn, QKey, Qpn};

/// Sets one field to all-ones in a zero MAD and returns the non-zero bytes as (offset, byte).
fn ones(set: impl FnOnce(&mut [u8])) -> Vec<(usize, u8)> {
    let mut b = [0u8; MAD_SIZE];
    set(&mut b);
    b.iter()
        .enumerate()
        .filter(|(_, &x)| x != 0)
        .map(|(i, &x)| (i, x))
        .collect()
}

/// (MAD offset, mask) list for a field of `width` bits ending `shift` bits before the end of
/// the byte at `last`.
fn span(first: usize, bytes: &[u8]) -> Vec<(usize, u8)> {
    bytes
        .iter()
        .enumerate()
        .filter(|(_, &m)| m != 0)
        .map(|(i, &m)| (first + i, m))
        .collect()
}

#[test]
fn req_field_positions() {
    use req::Packet as P;
    fn pk(b: &mut [u8]) -> P<&mut [u8]> {
        P::new_unchecked(b)
    }
    // IBA table 106; MAD offset = 24 + CM offset.
    assert_eq!(ones(|b| pk(b).set_local_comm_id(!0)), span(24, &[0xff; 4]));
    assert_eq!(ones(|b| pk(b).set_service_id(!0)), span(32, &[0xff; 8]));
    assert_eq!(ones(|b| pk(b).set_local_ca_guid(!0)), span(40, &[0xff; 8]));
    assert_eq!(ones(|b| pk(b).set_local_qkey(!0)), span(52, &[0xff; 4]));
    assert_eq!(ones(|b| pk(b).set_local_qpn(!0)), span(56, &[0xff; 3]));
    assert_eq!(
        ones(|b| pk(b).set_responder_resources(!0)),
        span(59, &[0xff])
    );
    assert_eq!(ones(|b| pk(b).set_local_eecn(!0)), span(60, &[0xff; 3]));
    assert_eq!(ones(|b| pk(b).set_initiator_depth(!0)), span(63, &[0xff]));
    assert_eq!(ones(|b| pk(b).set_remote_eecn(!0)), span(64, &[0xff; 3]));
    assert_eq!(
        ones(|b| pk(b).set_remote_cm_response_timeout(!0)),
        span(67, &[0xf8])
    );
    assert_eq!(
        ones(|b| pk(b).set_transport_service_type(!0)),
        span(67, &[0x06])
    );
    assert_eq!(
        ones(|b| pk(b).set_end_to_end_flow_control(true)),
        span(67, &[0x01])
    );
    assert_eq!(ones(|b| pk(b).set_starting_psn(!0)), span(68, &[0xff; 3]));
    assert_eq!(
        ones(|b| pk(b).set_local_cm_response_timeout(!0)),
        span(71, &[0xf8])
    );
    assert_eq!(ones(|b| pk(b).set_retry_count(!0)), span(71, &[0x07]));
    assert_eq!(ones(|b| pk(b).set_pkey(!0)), span(72, &[0xff; 2]));
    assert_eq!(ones(|b| pk(b).set_path_mtu(!0)), span(74, &[0xf0]));
    assert_eq!(ones(|b| pk(b).set_rdc_exists(true)), span(74, &[0x08]));
    assert_eq!(ones(|b| pk(b).set_rnr_retry_count(!0)), span(74, &[0x07]));
    assert_eq!(ones(|b| pk(b).set_max_cm_retries(!0)), span(75, &[0xf0]));
    assert_eq!(ones(|b| pk(b).set_srq(true)), span(75, &[0x08]));
    assert_eq!(
        ones(|b| pk(b).set_extended_transport_type(!0)),
        span(75, &[0x07])
    );
    assert_eq!(ones(|b| pk(b).set_sap_supported(true)), span(163, &[0x04]));
    assert_eq!(
        ones(|b| pk(b).set_private_data([0xff; 92])),
        span(164, &[0xff; 92])
    );

    let full = PathRepr {
        local_lid: !0,
        remote_lid: !0,
        local_gid: Gid([0xff; 16]),
        remote_gid: Gid([0xff; 16]),
        flow_label: !0,
        packet_rate: !0,
        traffic_class: !0,
        hop_limit: !0,
        sl: !0,
        subnet_local: true,
        local_ack_timeout: !0,
    };
    let mut path_masks = vec![0xffu8; 36];
    path_masks.extend_from_slice(&[0xff, 0xff, 0xf0, 0x3f, 0xff, 0xff, 0xf8, 0xf8]);
    assert_eq!(
        ones(|b| pk(b).set_primary_path(&full)),
        span(76, &path_masks)
    );
    assert_eq!(
        ones(|b| pk(b).set_alternate_path(Some(&full))),
        span(120, &path_masks)
    );
}

#[test]
fn rep_and_short_message_field_positions() {
    use rep::Packet as P;
    fn pk(b: &mut [u8]) -> P<&mut [u8]> {
        P::new_unchecked(b)
    }
    // IBA table 110.
    assert_eq!(ones(|b| pk(b).set_local_comm_id(!0)), span(24, &[0xff; 4]));
    assert_eq!(ones(|b| pk(b).set_remote_comm_id(!0)), span(28, &[0xff; 4]));
    assert_eq!(ones(|b| pk(b).set_local_qkey(!0)), span(32, &[0xff; 4]));
    assert_eq!(ones(|b| pk(b).set_local_qpn(!0)), span(36, &[0xff; 3]));
    assert_eq!(ones(|b| pk(b).set_local_eecn(!0)), span(40, &[0xff; 3]));
    assert_eq!(ones(|b| pk(b).set_starting_psn(!0)), span(44, &[0xff; 3]));
    assert_eq!(
        ones(|b| pk(b).set_responder_resources(!0)),
        span(48, &[0xff])
    );
    assert_eq!(ones(|b| pk(b).set_initiator_depth(!0)), span(49, &[0xff]));
    assert_eq!(ones(|b| pk(b).set_target_ack_delay(!0)), span(50, &[0xf8]));
    assert_eq!(ones(|b| pk(b).set_failover_accepted(!0)), span(50, &[0x06]));
    assert_eq!(
        ones(|b| pk(b).set_end_to_end_flow_control(true)),
        span(50, &[0x01])
    );
    assert_eq!(ones(|b| pk(b).set_rnr_retry_count(!0)), span(51, &[0xe0]));
    assert_eq!(ones(|b| pk(b).set_srq(true)), span(51, &[0x10]));
    assert_eq!(ones(|b| pk(b).set_local_ca_guid(!0)), span(52, &[0xff; 8]));
    assert_eq!(
        ones(|b| pk(b).set_private_data([0xff; 196])),
        span(60, &[0xff; 196])
    );

    // IBA tables 107, 108, 112, 115, 116, 119, 120.
    let mut b = [0u8; MAD_SIZE];
    let mut m = mra::Packet::new_unchecked(&mut b[..]);
    m.set_message_mraed(!0);
    m.set_service_timeout(!0);
    assert_eq!(&b[32..34], &[0xc0, 0xf8]);
    let mut b = [0u8; MAD_SIZE];
    let mut r = rej::Packet::new_unchecked(&mut b[..]);
    r.set_message_rejected(!0);
    r.set_reject_info_len(!0);
    r.set_reason(0x1234);
    r.set_ari([0xaa; rej::ARI_LEN]);
    r.set_private_data([0xbb; rej::PRIVATE_DATA_LEN]);
    assert_eq!(&b[32..37], &[0xc0, 0xfe, 0x12, 0x34, 0xaa]);
    assert_eq!((b[107], b[108], b[255]), (0xaa, 0xbb, 0xbb));
    assert_eq!(
        ones(|b| dreq::Packet::new_unchecked(b).set_remote_qpn(!0)),
        span(32, &[0xff; 3])
    );
    assert_eq!(
        ones(|b| dreq::Packet::new_unchecked(b).set_private_data([1; 220])),
        span(36, &[1; 220])
    );
    assert_eq!(
        ones(|b| rtu::Packet::new_unchecked(b).set_private_data([1; 224])),
        span(32, &[1; 224])
    );
    assert_eq!(
        ones(|b| drep::Packet::new_unchecked(b).set_private_data([1; 224])),
        span(32, &[1; 224])
    );
    assert_eq!(
        ones(|b| lap::Packet::new_unchecked(b).set_remote_qpn(!0)),
        span(36, &[0xff; 3])
    );
    assert_eq!(
        ones(|b| lap::Packet::new_unchecked(b).set_remote_cm_response_timeout(!0)),
        span(39, &[0xf8])
    );
    assert_eq!(
        ones(|b| lap::Packet::new_unchecked(b).set_alt_flow_label(!0)),
        span(80, &[0xff, 0xff, 0xf0])
    );
    assert_eq!(
        ones(|b| lap::Packet::new_unchecked(b).set_alt_traffic_class(!0)),
        span(83, &[0xff])
    );
    assert_eq!(
        ones(|b| lap::Packet::new_unchecked(b).set_alt_packet_rate(!0)),
        span(85, &[0x3f])
    );
    assert_eq!(
        ones(|b| lap::Packet::new_unchecked(b).set_alt_local_ack_timeout(!0)),
        span(87, &[0xf8])
    );
    assert_eq!(
        ones(|b| apr::Packet::new_unchecked(b).set_ap_status(!0)),
        span(33, &[0xff])
    );
    assert_eq!(
        ones(|b| sidr::req::Packet::new_unchecked(b).set_service_id(!0)),
        span(32, &[0xff; 8])
    );
    assert_eq!(
        ones(|b| sidr::rep::Packet::new_unchecked(b).set_qpn(!0)),
        span(32, &[0xff; 3])
    );
    assert_eq!(
        ones(|b| sidr::rep::Packet::new_unchecked(b).set_qkey(!0)),
        span(44, &[0xff; 4])
    );
    assert_eq!(
        ones(|b| sidr::rep::Packet::new_unchecked(b).set_private_data([1; 136])),
        span(120, &[1; 136])
    );
}

fn sample_path(seed: u8) -> PathRepr {
    PathRepr {
        local_lid: 0xffff,
        remote_lid: 0x1234,
        local_gid: Gid([seed; 16]),
        remote_gid: Gid([seed ^ 0x5a; 16]),
        flow_label: 0xabcde,
        packet_rate: 0x2a,
        traffic_class: 0x88,
        hop_limit: 64,
        sl: 5,
        subnet_local: true,
        local_ack_timeout: 19,
    }
}

fn all_messages() -> Vec<CmMessage> {
    let mut pd92 = [0u8; 92];
    pd92.iter_mut().enumerate().for_each(|(i, x)| *x = i as u8);
    vec![
        CmMessage::Req(req::ReqRepr {
            local_comm_id: 0x4c07_e89f,
            service_id: rdma_cm::service_id(rdma_cm::PortSpace::TCP, 7174),
            local_ca_guid: 0x5054_00ff_fe77_0011,
            local_qkey: QKey(0x1111_1111),
            local_qpn: Qpn::new(0xab_cdef),
            responder_resources: 16,
            local_eecn: 0x12_3456,
            initiator_depth: 15,
            remote_eecn: 0x65_4321,
            remote_cm_response_timeout: 20,
            transport_service_type: req::transport_service_type::UC,
            end_to_end_flow_control: true,
            starting_psn: Psn::new(0xf9_e08a),
            local_cm_response_timeout: 21,
            retry_count: 6,
            pkey: PKey(0xffff),
            path_mtu: 5,
            rdc_exists: true,
            rnr_retry_count: 4,
            max_cm_retries: 15,
            srq: true,
            extended_transport_type: 1,
            primary_path: sample_path(1),
            alternate_path: Some(sample_path(2)),
            sap_supported: true,
            private_data: pd92,
        }),
        CmMessage::Mra(mra::MraRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_mraed: mra::MessageKind::REP,
            service_timeout: 31,
            private_data: [7; mra::PRIVATE_DATA_LEN],
        }),
        CmMessage::Rej(rej::RejRepr {
            local_comm_id: 3,
            remote_comm_id: 4,
            message_rejected: mra::MessageKind::REQ,
            reject_info_len: 16,
            reason: rej::RejectReason::INVALID_SERVICE_ID,
            ari: [9; rej::ARI_LEN],
            private_data: [8; rej::PRIVATE_DATA_LEN],
        }),
        CmMessage::Rep(rep::RepRepr {
            local_comm_id: 0xb3ac_fdef,
            remote_comm_id: 0x4c07_e89f,
            local_qkey: QKey(0),
            local_qpn: Qpn::new(0x21),
            local_eecn: 0xfe_dcba,
            starting_psn: Psn::new(0x26_67d6),
            responder_resources: 1,
            initiator_depth: 2,
            target_ack_delay: 15,
            failover_accepted: 2,
            end_to_end_flow_control: true,
            rnr_retry_count: 7,
            srq: true,
            local_ca_guid: 0x5054_00ff_fe77_0010,
            private_data: [3; rep::PRIVATE_DATA_LEN],
        }),
        CmMessage::Rtu(rtu::RtuRepr {
            local_comm_id: 5,
            remote_comm_id: 6,
            private_data: [1; 224],
        }),
        CmMessage::Dreq(dreq::DreqRepr {
            local_comm_id: 7,
            remote_comm_id: 8,
            remote_qpn: Qpn::new(0xff_ffff),
            private_data: [2; 220],
        }),
        CmMessage::Drep(drep::DrepRepr {
            local_comm_id: 9,
            remote_comm_id: 10,
            private_data: [4; 224],
        }),
        CmMessage::SidrReq(sidr::SidrReqRepr {
            request_id: 11,
            pkey: PKey(0x8001),
            service_id: rdma_cm::service_id(rdma_cm::PortSpace::UDP, 4791),
            private_data: [5; 216],
        }),
        CmMessage::SidrRep(sidr::SidrRepRepr {
            request_id: 11,
            status: sidr::rep::SidrStatus::NO_QP,
            info_len: 3,
            qpn: Qpn::new(0x12),
            service_id: 0x0111_12b7,
            qkey: QKey(rdma_cm::RDMA_UDP_QKEY),
            info: [6; 72],
            private_data: [7; 136],
        }),
        CmMessage::Lap(lap::LapRepr {
            local_comm_id: 12,
            remote_comm_id: 13,
            remote_qpn: Qpn::new(0x33),
            remote_cm_response_timeout: 17,
            alternate_path: sample_path(3),
            private_data: [8; 168],
        }),
        CmMessage::Apr(apr::AprRepr {
            local_comm_id: 13,
            remote_comm_id: 12,
            info_len: 0,
            ap_status: apr::ApStatus::UNSUPPORTED,
            info: [0; 72],
            private_data: [9; 148],
        }),
    ]
}

#[test]
fn every_message_roundtrips() {
    for (i, m) in all_messages().into_iter().enumerate() {
        let mad = CmMad::new(0x0000_0002_0000_0000 | i as u64, m);
        let mut b = [0x5au8; MAD_SIZE + 4];
        mad.emit(&mut b);
        assert_eq!(&b[MAD_SIZE..], &[0x5a; 4], "emit stays inside the MAD");
        let back = CmMad::parse(&b[..MAD_SIZE]).unwrap();
        assert_eq!(back, mad);
        assert_eq!(back.header.attribute_id, mad.message.attribute_id());
        let mut again = [0u8; MAD_SIZE];
        back.emit(&mut again);
        assert_eq!(again[..], b[..MAD_SIZE]);
    }
}

#[test]
fn emit_zeroes_reserved_bits() {
    let mut b = [0xffu8; MAD_SIZE];
    CmMad::new(
        1,
        CmMessage::Drep(drep::DrepRepr {
            local_comm_id: 0,
            remote_comm_id: 0,
            private_data: [0; 224],
        }),
    )
    .emit(&mut b);
    assert!(b[24..].iter().all(|&x| x == 0));
    assert_eq!(&b[18..20], &[0, 0], "MAD header reserved field");
    let mut b = [0xffu8; MAD_SIZE];
    let CmMessage::Req(mut r) = all_messages().remove(0) else {
        unreachable!()
    };
    r.alternate_path = None;
    r.sap_supported = false;
    CmMessage::Req(r).emit(&mut b);
    assert_eq!(&b[24 + 4..24 + 8], &[0; 4]);
    assert!(b[24 + 96..24 + 140].iter().all(|&x| x == 0));
    assert_eq!(
        b[24 + 91] & 0b1111_1100 & !0x3f,
        0,
        "reserved bits between flow label and rate"
    );
}

#[test]
fn absent_alternate_path_keeps_sap_bit() {
    let CmMessage::Req(mut r) = all_messages().remove(0) else {
        unreachable!()
    };
    r.alternate_path = None;
    let mut b = [0u8; MAD_SIZE];
    CmMessage::Req(r.clone()).emit(&mut b);
    assert_eq!(b[163], 0x04);
    let p = req::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(p.alternate_path(), None);
    assert_eq!(req::ReqRepr::parse(&p), r);
}

#[test]
fn bad_mads_are_refused() {
    let mut b = [0u8; MAD_SIZE];
    CmMad::new(1, all_messages().remove(4)).emit(&mut b);
    assert!(CmMad::parse(&b).is_ok());
    for len in [0, 23, 24, 100, MAD_SIZE - 1] {
        assert_eq!(CmMad::parse(&b[..len]), Err(Error::Truncated), "len {len}");
    }
    for (at, v) in [(0usize, 2u8), (1, 0x81), (2, 1)] {
        let mut c = b;
        c[at] = v;
        assert_eq!(CmMad::parse(&c), Err(Error::NotCm));
    }
    let mut c = b;
    c[16..18].copy_from_slice(&[0x00, 0x01]);
    assert_eq!(CmMad::parse(&c), Err(Error::UnknownAttribute(0x0001)));
    c[16..18].copy_from_slice(&[0xff, 0x10]);
    assert_eq!(CmMad::parse(&c), Err(Error::UnknownAttribute(0xff10)));
}

#[test]
fn every_byte_string_parses_or_errs_without_panic() {
    // A small deterministic sweep standing in for the fuzzer: flip header bytes and lengths.
    let mut x: u32 = 0x1234_5678;
    for _ in 0..2000 {
        let mut b = [0u8; MAD_SIZE];
        for byte in b.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *byte = x as u8;
        }
        b[0] = 1;
        b[1] = 7;
        b[2] = 2;
        b[16] = 0;
        b[17] = 0x10 + (x % 12) as u8;
        let len = (x >> 8) as usize % (MAD_SIZE + 8);
        let mut padded = [0u8; MAD_SIZE + 8];
        padded[..MAD_SIZE].copy_from_slice(&b);
        if let Ok(m) = CmMad::parse(&padded[..len]) {
            let mut out = [0u8; MAD_SIZE];
            m.emit(&mut out);
            assert_eq!(CmMad::parse(&out).unwrap(), m);
        }
    }
}

#[test]
fn rdma_cm_req_builder() {
    use core::net::SocketAddr;
    let mut c = rdma_cm::RcConnect {
        local_comm_id: 1,
        local_ca_guid: 2,
        local_qpn: Qpn::new(3),
        starting_psn: Psn::new(4),
        src: SocketAddr::from(([10, 0, 0, 1], 5000)),
        dst: SocketAddr::from(([10, 0, 0, 2], 18515)),
        local_gid: Gid::from_ipv4([10, 0, 0, 1].into()),
        remote_gid: Gid::from_ipv4([10, 0, 0, 2].into()),
        path_mtu: 5,
        responder_resources: 16,
        initiator_depth: 16,
        retry_count: 9,
        rnr_retry_count: 9,
        private_data: &[0xab; 60],
    };
    let r = c.to_req().unwrap();
    assert_eq!(r.service_id, 0x0106_4853);
    assert_eq!(
        (r.retry_count, r.rnr_retry_count),
        (7, 7),
        "3-bit fields capped"
    );
    assert_eq!(r.primary_path.flow_label, (5000 * 31 + 18515) & 0xfffff);
    let h = rdma_cm::CmaHeaderRepr::parse(&r.private_data).unwrap();
    assert_eq!((h.src_port, h.addrs.dst()), (5000, c.dst.ip()));
    assert_eq!(
        &r.private_data[36..],
        &[0xab; 56][..],
        "user data cut at 56 bytes"
    );
    c.dst = SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 1], 1));
    assert_eq!(c.to_req(), None, "mixed address families");
}
