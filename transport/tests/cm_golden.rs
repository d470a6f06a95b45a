//! Golden test: the IB CM MADs Linux 6.1 rxe sent for `rping -C 3` (tests/vectors/G_rping.pcap,
//! fields from the tshark decode in G_rping.txt). Every MAD must parse to the decoded values,
//! re-emit byte for byte, and the REQ's rdma_cm private-data header must give the rping
//! addresses and ports. Frames are located with the crate's pcap reader and wire parser.

use std::net::{IpAddr, Ipv4Addr};

use droce_transport::cm::rdma_cm::{self, CmaAddrs, CmaHeaderRepr, PortSpace};
use droce_transport::cm::{AttributeId, CmMad, CmMessage, Method, GSI_QKEY, GSI_QPN, MAD_SIZE};
use droce_transport::pcap;
use droce_transport::wire::{Opcode, RoceRepr};
use droce_transport::{Gid, PKey, Psn, QKey, Qpn};

mod common;

fn read_capture(name: &str) -> Vec<u8> {
    let path = common::vectors_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (set DROCE_VECTORS)", path.display()))
}

/// Headers and payload of one RoCEv2 frame, by the wire module's parser.
fn roce(frame: &[u8]) -> (RoceRepr, &[u8]) {
    let (r, payload) = RoceRepr::parse(frame).expect("a RoCEv2 frame");
    (r, &frame[payload])
}

/// The MAD in a UD SEND_ONLY to QP1 with DETH Q_Key 0x80010000 and source QP 1.
fn gsi_mad(frame: &[u8]) -> &[u8] {
    let (r, payload) = roce(frame);
    assert_eq!(r.bth.opcode, Opcode::UdSendOnly);
    assert_eq!(r.bth.dest_qp, Qpn::new(GSI_QPN));
    let deth = r.ext.deth.expect("DETH");
    assert_eq!(deth.qkey, QKey(GSI_QKEY));
    assert_eq!(deth.src_qp, Qpn::GSI);
    assert_eq!(
        r.udp.src_port,
        0xc000 + 0x1872,
        "rxe QP1 source port 0xC000 + hash_32(1, 14)"
    );
    assert_eq!(payload.len(), MAD_SIZE, "one MAD per frame");
    payload
}

fn gid4(a: [u8; 4]) -> Gid {
    Gid::from_ipv4(Ipv4Addr::from(a))
}

#[test]
fn rping_cm_mads() {
    let file = read_capture("G_rping.pcap");
    let frames: Vec<&[u8]> = pcap::read(&file)
        .expect("pcap")
        .iter()
        .map(|f| f.data)
        .collect();
    assert_eq!(frames.len(), 41);
    // Frames 1, 2, 3, 40, 41 of G_rping.txt (1-based) carry the MADs; every other frame is RC.
    let mad_frames: Vec<usize> = (0..frames.len())
        .filter(|&i| roce(frames[i]).0.bth.opcode == Opcode::UdSendOnly)
        .map(|i| i + 1)
        .collect();
    assert_eq!(mad_frames, [1, 2, 3, 40, 41]);

    const TID: u64 = 0x0000_0002_9fe8_074c;
    const CLIENT_COMM_ID: u32 = 0x4c07_e89f;
    const SERVER_COMM_ID: u32 = 0xb3ac_fdef;
    let mut parsed = Vec::new();
    for n in mad_frames {
        let bytes = gsi_mad(frames[n - 1]);
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
            "frame {n}: ib_cm's header"
        );
        parsed.push(mad);
    }

    // Frame 1: REQ from the client (vm1, 192.168.77.11).
    assert_eq!(parsed[0].header.attribute_id, AttributeId::REQ);
    let CmMessage::Req(req) = &parsed[0].message else {
        panic!("frame 1 is not a REQ")
    };
    assert_eq!(req.local_comm_id, CLIENT_COMM_ID);
    assert_eq!(req.service_id, 0x0000_0000_0106_1c06);
    assert_eq!(
        rdma_cm::parse_service_id(req.service_id),
        Some((PortSpace::TCP, 0x1c06))
    );
    assert_eq!(req.local_ca_guid, 0x5054_00ff_fe77_0011);
    assert_eq!(req.local_qkey, QKey(0));
    assert_eq!(req.local_qpn, Qpn::new(0x31));
    assert_eq!(req.responder_resources, 1);
    assert_eq!(req.initiator_depth, 1);
    assert_eq!((req.local_eecn, req.remote_eecn), (0, 0));
    assert_eq!(req.transport_service_type, 0, "RC");
    assert!(!req.end_to_end_flow_control);
    assert_eq!(req.starting_psn, Psn::new(0xf9_e08a));
    assert_eq!(req.retry_count, 7);
    assert_eq!(req.rnr_retry_count, 7);
    assert_eq!(req.path_mtu, 3, "IB MTU 1024");
    assert_eq!(req.pkey, PKey(0xffff));
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
    assert_eq!(p.local_gid, gid4([192, 168, 77, 11]));
    assert_eq!(p.remote_gid, gid4([192, 168, 77, 10]));
    assert_eq!(p.hop_limit, 0x40);
    assert_eq!(p.local_ack_timeout, 0x13);
    assert_eq!(
        (p.traffic_class, p.sl, p.subnet_local, p.packet_rate),
        (0, 0, false, 0)
    );
    // Not in the txt, read from the bytes: rdma_cm's RoCEv2 flow label.
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
    // rdma_cm derived the flow label from the ports: (src_port * 31 + dst_port) & 0xfffff.
    assert_eq!(rdma_cm::roce_flow_label(h.src_port, 7174), p.flow_label);

    // Frame 2: REP from the server (vm0, 192.168.77.10).
    assert_eq!(parsed[1].header.attribute_id, AttributeId::REP);
    let CmMessage::Rep(rep) = &parsed[1].message else {
        panic!("frame 2 is not a REP")
    };
    assert_eq!(rep.local_comm_id, SERVER_COMM_ID);
    assert_eq!(rep.remote_comm_id, CLIENT_COMM_ID);
    assert_eq!(rep.local_qpn, Qpn::new(0x21));
    assert_eq!(rep.starting_psn, Psn::new(0x26_67d6));
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
    assert_eq!((rep.local_qkey, rep.local_eecn), (QKey(0), 0));
    assert_eq!(rep.private_data, [0; 196]);

    // Frame 3: RTU, client -> server.
    let CmMessage::Rtu(rtu) = &parsed[2].message else {
        panic!("frame 3 is not an RTU")
    };
    assert_eq!(
        (rtu.local_comm_id, rtu.remote_comm_id),
        (CLIENT_COMM_ID, SERVER_COMM_ID)
    );

    // Frame 40: DREQ, client -> server, naming the server's QPN.
    let CmMessage::Dreq(dreq) = &parsed[3].message else {
        panic!("frame 40 is not a DREQ")
    };
    assert_eq!(
        (dreq.local_comm_id, dreq.remote_comm_id),
        (CLIENT_COMM_ID, SERVER_COMM_ID)
    );
    assert_eq!(dreq.remote_qpn, rep.local_qpn);

    // Frame 41: DREP, server -> client.
    let CmMessage::Drep(drep) = &parsed[4].message else {
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
        let (r, _) = roce(f);
        (r.bth.opcode, r.bth.dest_qp, r.bth.psn, r.udp.src_port)
    };
    assert_eq!(
        bth(frames[3]),
        (Opcode::RcSendOnly, rep.local_qpn, rep.starting_psn, 64427),
        "frame 4: client SEND"
    );
    assert_eq!(
        bth(frames[5]),
        (
            Opcode::RcReadRequest,
            req.local_qpn,
            req.starting_psn,
            64427
        ),
        "frame 6: server READ"
    );
    // rxe's RC source port comes from that flow label: 0xC000 | ((fl & 0x3fff) ^ (fl >> 14)).
    let fl = p.flow_label;
    assert_eq!(0xc000 | ((fl & 0x3fff) ^ (fl >> 14)), 64427);
}

/// The five MADs of G_rping, as (bytes, record).
fn rping_mads(file: &[u8]) -> Vec<(Vec<u8>, CmMad)> {
    let frames = pcap::read(file).expect("pcap");
    [1usize, 2, 3, 40, 41]
        .iter()
        .map(|&n| {
            let bytes = gsi_mad(frames[n - 1].data).to_vec();
            let mad = CmMad::parse(&bytes).unwrap();
            (bytes, mad)
        })
        .collect()
}

fn emitted(m: &CmMad) -> Vec<u8> {
    let mut b = vec![0u8; MAD_SIZE];
    m.emit(&mut b);
    b
}

/// Both ends of droce's CM state machine, fed Linux's messages, answer with Linux's bytes.
#[test]
fn rping_state_machines_answer_like_linux() {
    use droce_transport::cm::conn::{CmEvent, CmState, Connection};
    use droce_transport::cm::rep::RepRepr;
    use droce_transport::cm::CmConfig;
    use droce_transport::time::Instant;

    let file = read_capture("G_rping.pcap");
    let frames = pcap::read(&file).expect("pcap");
    let mads = rping_mads(&file);
    let [(req_b, req_m), (rep_b, rep_m), (rtu_b, rtu_m), (dreq_b, dreq_m), (drep_b, _)] = &mads[..]
    else {
        panic!("five MADs")
    };
    let CmMessage::Req(req) = &req_m.message else {
        panic!()
    };
    let CmMessage::Rep(rep) = &rep_m.message else {
        panic!()
    };
    let tid = req_m.header.transaction_id;
    let t0 = Instant::from_nanos(1_000_000);

    // Active side (the rping client): REQ out, REP in, RTU out, DREQ out.
    let mut a = Connection::connect(t0, CmConfig::default(), tid, req.clone());
    assert_eq!(&emitted(&a.poll_transmit().unwrap()), req_b);
    a.handle_mad(t0, rep_m).unwrap();
    assert_eq!(
        &emitted(&a.poll_transmit().unwrap()),
        rtu_b,
        "RTU like frame 3"
    );
    let Some(CmEvent::Established(pa)) = a.poll_event() else {
        panic!("established")
    };
    assert!(a.disconnect(t0));
    assert_eq!(
        &emitted(&a.poll_transmit().unwrap()),
        dreq_b,
        "DREQ like frame 40"
    );

    // Passive side (the rping server): the REP Linux sent is what `accepting` builds.
    let ours = RepRepr::accepting(
        req,
        rep.local_comm_id,
        rep.local_qpn,
        rep.starting_psn,
        rep.local_ca_guid,
    );
    assert_eq!(&ours, rep);
    let mut p = Connection::accept(t0, CmConfig::default(), tid, req, ours);
    assert_eq!(
        &emitted(&p.poll_transmit().unwrap()),
        rep_b,
        "REP like frame 2"
    );
    p.handle_mad(t0, rtu_m).unwrap();
    let Some(CmEvent::Established(pp)) = p.poll_event() else {
        panic!("established")
    };
    p.handle_mad(t0, dreq_m).unwrap();
    assert_eq!(
        &emitted(&p.poll_transmit().unwrap()),
        drep_b,
        "DREP like frame 41"
    );
    assert_eq!(p.state(), CmState::TimeWait);
    assert_eq!(p.poll_event(), Some(CmEvent::Disconnected));

    // The negotiated PSNs and QPNs are the ones on the wire afterwards.
    let (f4, _) = roce(frames[3].data);
    let (f6, _) = roce(frames[5].data);
    assert_eq!(
        (f4.bth.dest_qp, f4.bth.psn),
        (pa.remote_qpn, pa.sq_psn),
        "client's first SEND"
    );
    assert_eq!(
        (f6.bth.dest_qp, f6.bth.psn),
        (pp.remote_qpn, pp.sq_psn),
        "server's first READ"
    );
    assert_eq!((pa.rq_psn, pp.rq_psn), (pp.sq_psn, pa.sq_psn));
    assert_eq!(pp.path.local_gid, gid4([192, 168, 77, 10]));
    assert_eq!(
        (pa.path_mtu, pa.ack_timeout, pa.rnr_retry_count),
        (3, 19, 7)
    );
}

/// droce as an rdma_cm client produces Linux's REQ, byte for byte, from the same inputs.
#[test]
fn rdma_cm_req_like_linux() {
    use droce_transport::cm::rdma_cm::RcConnect;
    use std::net::SocketAddr;

    let file = read_capture("G_rping.pcap");
    let mads = rping_mads(&file);
    let (req_b, req_m) = &mads[0];
    let CmMessage::Req(req) = &req_m.message else {
        panic!()
    };
    let ours = RcConnect {
        local_comm_id: 0x4c07_e89f,
        local_ca_guid: 0x5054_00ff_fe77_0011,
        local_qpn: Qpn::new(0x31),
        starting_psn: Psn::new(0xf9_e08a),
        src: SocketAddr::from(([192, 168, 77, 11], 0xb6b3)),
        dst: SocketAddr::from(([192, 168, 77, 10], 7174)),
        local_gid: gid4([192, 168, 77, 11]),
        remote_gid: gid4([192, 168, 77, 10]),
        path_mtu: 3,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        private_data: &[],
    }
    .to_req()
    .unwrap();
    assert_eq!(&ours, req);
    let mad = CmMad::new(req_m.header.transaction_id, CmMessage::Req(ours));
    assert_eq!(&emitted(&mad), req_b, "REQ like frame 1");
}
