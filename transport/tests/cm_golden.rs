//! Golden test: the IB CM MADs Linux 6.1 rxe sent for `rping -C 3` (shared/vectors/G_rping.pcap,
//! fields from the tshark decode in G_rping.txt). Every MAD must parse to the decoded values,
//! re-emit byte for byte, and the REQ's rdma_cm private-data header must give the rping
//! addresses and ports.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use droce_transport::cm::rdma_cm::{self, CmaAddrs, CmaHeaderRepr, PortSpace};
use droce_transport::cm::{AttributeId, CmMad, CmMessage, Method, GSI_QKEY, GSI_QPN, MAD_SIZE};

/// `$DROCE_VECTORS`, else `../shared/vectors` next to the repository (the project layout).
fn vectors_dir() -> PathBuf {
    match std::env::var_os("DROCE_VECTORS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors"),
    }
}

/// Frames of a classic little-endian microsecond pcap (what the vectors are).
fn read_pcap(name: &str) -> Vec<Vec<u8>> {
    let path = vectors_dir().join(name);
    let d = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (set DROCE_VECTORS)", path.display()));
    assert!(d.len() >= 24, "pcap global header");
    assert_eq!(&d[..4], &[0xd4, 0xc3, 0xb2, 0xa1], "little-endian µs pcap");
    assert_eq!(
        u32::from_le_bytes(d[20..24].try_into().unwrap()),
        1,
        "Ethernet link type"
    );
    let mut frames = Vec::new();
    let mut off = 24;
    while off + 16 <= d.len() {
        let incl = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        let orig = u32::from_le_bytes(d[off + 12..off + 16].try_into().unwrap()) as usize;
        assert_eq!(incl, orig, "full frames");
        off += 16;
        frames.push(d[off..off + incl].to_vec());
        off += incl;
    }
    assert_eq!(off, d.len(), "no trailing bytes");
    frames
}

/// The MAD in a RoCEv2 UD SEND_ONLY to QP1, located by fixed offsets because these frames
/// have no VLAN, no IP options and no GRH: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + DETH 8 = 62,
/// then 256 MAD bytes and the 4-byte ICRC. The wire module's parser can replace this once
/// `droce_transport::wire` is in the crate; here the headers are checked just enough to be sure
/// the bytes are what the offsets claim.
fn gsi_mad(frame: &[u8]) -> &[u8] {
    assert_eq!(frame.len(), 62 + MAD_SIZE + 4, "one MAD per frame");
    assert_eq!(&frame[12..14], &[0x08, 0x00], "IPv4");
    assert_eq!(frame[14], 0x45, "IPv4 without options");
    assert_eq!(frame[23], 17, "UDP");
    assert_eq!(
        u16::from_be_bytes([frame[36], frame[37]]),
        4791,
        "RoCEv2 port"
    );
    assert_eq!(frame[42], 0x64, "BTH opcode UD SEND_ONLY");
    let dqpn = u32::from_be_bytes([0, frame[47], frame[48], frame[49]]);
    assert_eq!(dqpn, GSI_QPN, "destination QP1");
    let qkey = u32::from_be_bytes(frame[54..58].try_into().unwrap());
    assert_eq!(qkey, GSI_QKEY, "DETH Q_Key");
    let sqpn = u32::from_be_bytes([0, frame[59], frame[60], frame[61]]);
    assert_eq!(sqpn, GSI_QPN, "DETH source QP1");
    &frame[62..62 + MAD_SIZE]
}

fn ip(a: &str) -> Ipv6Addr {
    a.parse().unwrap()
}

#[test]
fn rping_cm_mads() {
    let frames = read_pcap("G_rping.pcap");
    assert_eq!(frames.len(), 41);
    // Frames 1, 2, 3, 40, 41 of G_rping.txt (1-based) carry the MADs; every other frame is RC.
    let mad_frames: Vec<usize> = (0..frames.len())
        .filter(|&i| frames[i][42] == 0x64)
        .map(|i| i + 1)
        .collect();
    assert_eq!(mad_frames, [1, 2, 3, 40, 41]);

    const TID: u64 = 0x0000_0002_9fe8_074c;
    const CLIENT_COMM_ID: u32 = 0x4c07_e89f;
    const SERVER_COMM_ID: u32 = 0xb3ac_fdef;
    let mut parsed = Vec::new();
    for n in mad_frames {
        let bytes = gsi_mad(&frames[n - 1]);
        let mad = CmMad::parse(bytes).unwrap_or_else(|e| panic!("frame {n}: {e}"));
        assert_eq!(mad.header.base_version, 1);
        assert_eq!(mad.header.mgmt_class, 0x07);
        assert_eq!(mad.header.class_version, 2);
        assert_eq!(mad.header.method, Method::SEND);
        assert_eq!((mad.header.status, mad.header.class_specific), (0, 0));
        assert_eq!(mad.header.transaction_id, TID, "frame {n}");
        assert_eq!(mad.header.attribute_modifier, 0);
        // Linux forms the TID as hi_tid << 32 | local comm ID in host (little-endian) order.
        assert_eq!(TID as u32, CLIENT_COMM_ID.swap_bytes());

        let mut out = [0xa5u8; MAD_SIZE];
        mad.emit(&mut out);
        assert_eq!(&out[..], bytes, "frame {n}: re-emit is byte-identical");
        assert_eq!(
            CmMad::new(TID, mad.message.clone()),
            mad,
            "frame {n}: ib_cm's default header"
        );
        parsed.push((n, mad));
    }

    // Frame 1: REQ from the client (vm1, 192.168.77.11).
    let (_, req_mad) = &parsed[0];
    assert_eq!(req_mad.header.attribute_id, AttributeId::REQ);
    let CmMessage::Req(req) = &req_mad.message else {
        panic!("frame 1 is not a REQ")
    };
    assert_eq!(req.local_comm_id, CLIENT_COMM_ID);
    assert_eq!(req.service_id, 0x0000_0000_0106_1c06);
    assert_eq!(
        rdma_cm::parse_service_id(req.service_id),
        Some((PortSpace::TCP, 0x1c06))
    );
    assert_eq!(req.local_ca_guid, 0x5054_00ff_fe77_0011);
    assert_eq!(req.local_qkey, 0);
    assert_eq!(req.local_qpn, 0x31);
    assert_eq!(req.responder_resources, 1);
    assert_eq!(req.initiator_depth, 1);
    assert_eq!((req.local_eecn, req.remote_eecn), (0, 0));
    assert_eq!(req.transport_service_type, 0, "RC");
    assert!(!req.end_to_end_flow_control);
    assert_eq!(req.starting_psn, 0xf9_e08a);
    assert_eq!(req.retry_count, 7);
    assert_eq!(req.rnr_retry_count, 7);
    assert_eq!(req.path_mtu, 3, "IB MTU 1024");
    assert_eq!(req.pkey, 0xffff);
    // CMA_CM_RESPONSE_TIMEOUT 20 and CMA_MAX_CM_RETRIES 15 in Linux cma.c.
    assert_eq!(
        (
            req.remote_cm_response_timeout,
            req.local_cm_response_timeout
        ),
        (20, 20)
    );
    assert_eq!(req.max_cm_retries, 15);
    assert!(!req.srq && !req.rdc_exists && !req.sap_supported);
    assert_eq!(req.extended_transport_type, 0);
    let p = &req.primary_path;
    assert_eq!(
        (p.local_lid, p.remote_lid),
        (0xffff, 0xffff),
        "permissive LIDs on RoCE"
    );
    assert_eq!(p.local_gid, ip("::ffff:192.168.77.11"));
    assert_eq!(p.remote_gid, ip("::ffff:192.168.77.10"));
    assert_eq!(p.hop_limit, 0x40);
    assert_eq!(p.local_ack_timeout, 0x13);
    assert_eq!(
        (p.traffic_class, p.sl, p.subnet_local, p.packet_rate),
        (0, 0, false, 0)
    );
    // Not in the txt, read from the bytes: rdma_cm's RoCEv2 flow label (from the ports).
    assert_eq!(p.flow_label, 0x63bb3);
    assert_eq!(req.alternate_path, None);

    // rdma_cm private-data header: rping client 192.168.77.11:0xb6b3 -> 192.168.77.10:7174.
    let h = CmaHeaderRepr::parse(&req.private_data).unwrap();
    assert_eq!(h.src_port, 0xb6b3);
    assert_eq!(
        h.addrs,
        CmaAddrs::V4 {
            src: Ipv4Addr::new(192, 168, 77, 11),
            dst: Ipv4Addr::new(192, 168, 77, 10)
        }
    );
    assert_eq!(h.addrs.src(), IpAddr::V4(Ipv4Addr::new(192, 168, 77, 11)));
    let mut pd = [0u8; 92];
    h.emit(&mut pd);
    assert_eq!(
        pd, req.private_data,
        "rping sends no user private data after the header"
    );

    // Frame 2: REP from the server (vm0, 192.168.77.10).
    let CmMessage::Rep(rep) = &parsed[1].1.message else {
        panic!("frame 2 is not a REP")
    };
    assert_eq!(parsed[1].1.header.attribute_id, AttributeId::REP);
    assert_eq!(rep.local_comm_id, SERVER_COMM_ID);
    assert_eq!(rep.remote_comm_id, CLIENT_COMM_ID);
    assert_eq!(rep.local_qpn, 0x21);
    assert_eq!(rep.starting_psn, 0x26_67d6);
    assert_eq!(rep.responder_resources, 1);
    assert_eq!(rep.initiator_depth, 1);
    assert_eq!(rep.rnr_retry_count, 7);
    assert_eq!(rep.local_ca_guid, 0x5054_00ff_fe77_0010);
    // Not in the txt, read from the bytes: rxe's target ACK delay, no flow control, no SRQ.
    assert_eq!(rep.target_ack_delay, 15);
    assert_eq!(
        (rep.failover_accepted, rep.end_to_end_flow_control, rep.srq),
        (0, false, false)
    );
    assert_eq!((rep.local_qkey, rep.local_eecn), (0, 0));
    assert_eq!(rep.private_data, [0; 196]);

    // Frame 3: RTU, client -> server.
    let CmMessage::Rtu(rtu) = &parsed[2].1.message else {
        panic!("frame 3 is not an RTU")
    };
    assert_eq!(
        (rtu.local_comm_id, rtu.remote_comm_id),
        (CLIENT_COMM_ID, SERVER_COMM_ID)
    );

    // Frame 40: DREQ, client -> server, naming the server's QPN.
    let CmMessage::Dreq(dreq) = &parsed[3].1.message else {
        panic!("frame 40 is not a DREQ")
    };
    assert_eq!(
        (dreq.local_comm_id, dreq.remote_comm_id),
        (CLIENT_COMM_ID, SERVER_COMM_ID)
    );
    assert_eq!(dreq.remote_qpn, rep.local_qpn);

    // Frame 41: DREP, server -> client.
    let CmMessage::Drep(drep) = &parsed[4].1.message else {
        panic!("frame 41 is not a DREP")
    };
    assert_eq!(
        (drep.local_comm_id, drep.remote_comm_id),
        (SERVER_COMM_ID, CLIENT_COMM_ID)
    );

    // The RC traffic that follows uses what the REQ and REP carried. Linux ib_cm takes the
    // REQ's starting PSN as the passive side's send PSN (active rq_psn, passive sq_psn) and the
    // REP's as the active side's send PSN.
    let bth = |f: &[u8]| {
        (
            f[42],
            u32::from_be_bytes([0, f[47], f[48], f[49]]),
            u32::from_be_bytes([0, f[51], f[52], f[53]]),
        )
    };
    assert_eq!(
        bth(&frames[3]),
        (0x04, rep.local_qpn, rep.starting_psn),
        "frame 4: client SEND"
    );
    assert_eq!(
        bth(&frames[5]),
        (0x0c, req.local_qpn, req.starting_psn),
        "frame 6: server READ"
    );
}
