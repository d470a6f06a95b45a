//! Byte compatibility with Linux rxe: set up our devices with the QPNs, PSNs, addresses and
//! keys of a captured rxe exchange (`tests/vectors/`), post the same work request and check
//! that our requester emits the captured request frames and our responder, fed the captured
//! request, emits the captured response — byte for byte, except the IPv4 identification,
//! which Linux draws per packet (we copy it over, then recompute the IP checksum and ICRC).
//! rxe sends ECN 0 and no CNPs, so the byte comparisons run with congestion control off;
//! `ecn_on_differs_only_in_the_ecn_bits_and_the_ipv4_checksum` runs it on.

use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::pcap;
use droce_transport::qp::{PathMtu, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpState, QpType};
use droce_transport::status::WcStatus;
use droce_transport::verbs::{AccessFlags, AddressVector, MemoryRegion, PdHandle, RecvWr, SendOpcode, SendWr, UdDest, WcFlags};
use droce_transport::wire::{icrc, Opcode, RoceRepr};
use droce_transport::cc::CcConfig;
use droce_transport::{Device, DeviceConfig, Gid, Instant, Memory, Psn, QKey, Qpn, Rkey, VecMemory};

mod common;

fn frames(name: &str) -> Vec<Vec<u8>> {
    let path = common::vectors_dir().join(name);
    let file = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    pcap::read(&file).unwrap().iter().map(|f| f.data.to_vec()).collect()
}

/// Copy the IPv4 identification of `want` into `ours`, then fix the header checksum and ICRC.
fn patch_ip_id(ours: &mut [u8], want: &[u8]) {
    ours[18..20].copy_from_slice(&want[18..20]);
    ours[24..26].fill(0);
    let mut sum = 0u32;
    for c in ours[14..34].chunks(2) {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ours[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let n = ours.len();
    let crc = icrc::compute(&ours[14..n - 4]).unwrap();
    ours[n - 4..].copy_from_slice(&crc.to_le_bytes());
}

fn assert_same(ours: &[u8], want: &[u8], what: &str) {
    let mut o = ours.to_vec();
    patch_ip_id(&mut o, want);
    if o != want {
        let diff: Vec<usize> = (0..o.len().max(want.len())).filter(|&i| o.get(i) != want.get(i)).collect();
        panic!("{what}: {} bytes ours vs {} captured, differing at {diff:?}", o.len(), want.len());
    }
}

struct Runtime {
    dev: Device<VecMemory>,
    pd: PdHandle,
    mr: MemoryRegion,
    cq: droce_transport::verbs::CqHandle,
}

/// A device whose QPN counter starts at `qpn` and whose MR (over `base..base+len`) has the
/// key `want` (found by trying seeds: keys are `index << 8 | seeded 8-bit variant`, as rxe).
fn host(mac: [u8; 6], gid: Gid, qpn: Qpn, base: u64, len: usize, want: Option<Rkey>) -> Runtime {
    host_cc(mac, gid, qpn, base, len, want, CcConfig::off())
}

/// [`host`] with congestion control `cc`.
fn host_cc(mac: [u8; 6], gid: Gid, qpn: Qpn, base: u64, len: usize, want: Option<Rkey>, cc: CcConfig) -> Runtime {
    for seed in 0..100_000u64 {
        let cfg = DeviceConfig { mac, gids: vec![gid], seed, first_qpn: qpn.value(), cc: cc.clone(), ..DeviceConfig::default() };
        let mut dev = Device::new(cfg, VecMemory::new(base, len));
        let pd = dev.alloc_pd();
        let idx = want.map_or(0, |k| k.0 >> 8);
        for _ in 0..idx {
            dev.reg_mr(pd, base, 0, AccessFlags::NONE).unwrap();
        }
        let mr = dev.reg_mr(pd, base, len as u64, AccessFlags::ALL).unwrap();
        if want.is_some_and(|k| k != mr.rkey) {
            continue;
        }
        let cq = dev.create_cq(64).unwrap();
        return Runtime { dev, pd, mr, cq };
    }
    panic!("no seed gives rkey {want:?}");
}

fn qp(h: &mut Runtime, ty: QpType) -> QpHandle {
    h.dev
        .create_qp(QpInitAttr { qp_type: ty, pd: h.pd, send_cq: h.cq, recv_cq: h.cq, srq: None, cap: QpCap::default(), sq_sig_all: true })
        .unwrap()
}

fn connect(h: &mut Runtime, q: QpHandle, peer_mac: [u8; 6], peer_gid: Gid, peer_qpn: Qpn, sq_psn: Psn, rq_psn: Psn) {
    let av = AddressVector { dgid: peer_gid, dmac: peer_mac, sgid_index: 0, hop_limit: 64, traffic_class: 0, flow_label: 0 };
    let (a, m) = init_attr(AccessFlags::ALL);
    h.dev.modify_qp(q, &a, m).unwrap();
    let (a, m) = rtr_attr(av, PathMtu::Mtu1024, peer_qpn, rq_psn, 16, 12);
    h.dev.modify_qp(q, &a, m).unwrap();
    let (a, m) = rts_attr(sq_psn, 14, 7, 7, 16);
    h.dev.modify_qp(q, &a, m).unwrap();
}

fn transmit_all(d: &mut Device<VecMemory>) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; d.max_frame_len()];
    std::iter::from_fn(|| d.poll_transmit(Instant(0), &mut buf).map(|n| buf[..n].to_vec())).collect()
}

/// Replays the first RC exchange of a capture: the client's request frame(s) and the
/// server's first response.
fn rc_exchange(file: &str) {
    let fr = frames(file);
    let (r1, _) = RoceRepr::parse(&fr[0]).unwrap();
    let client_ip = r1.ip.src_gid();
    // The request frames of the first message, and the server's first response.
    let parsed: Vec<RoceRepr> = fr.iter().map(|f| RoceRepr::parse(f).unwrap().0).collect();
    let nreq = 1 + parsed.iter().position(|r| r.bth.opcode.info().ends_message()).unwrap();
    assert!(parsed[..nreq].iter().all(|r| r.ip.src_gid() == client_ip));
    let reqs = &fr[..nreq];
    let resp = &fr[parsed.iter().position(|r| r.ip.src_gid() != client_ip).unwrap()];
    let (r2, r2_pl) = RoceRepr::parse(resp).unwrap();
    let (cmac, smac) = (r1.eth.src_addr.0, r1.eth.dst_addr.0);
    let (cgid, sgid) = (r1.ip.src_gid(), r1.ip.dst_gid());
    let (cqpn, sqpn) = (r2.bth.dest_qp, r1.bth.dest_qp);
    let rkey = r1.ext.reth.map(|r| r.rkey).or(r1.ext.atomic.map(|a| a.rkey));
    let va = r1.ext.reth.map(|r| r.va).or(r1.ext.atomic.map(|a| a.va)).unwrap_or(0x1000_0000);
    let sbase = va & !0xffff;
    let mut client = host(cmac, cgid, cqpn, 0x5000_0000, 1 << 20, None);
    let mut server = host(smac, sgid, sqpn, sbase, 1 << 20, rkey);
    let qc = qp(&mut client, QpType::Rc);
    let qs = qp(&mut server, QpType::Rc);
    assert_eq!(client.dev.query_qp(qc).unwrap().qp_num, cqpn);
    assert_eq!(server.dev.query_qp(qs).unwrap().qp_num, sqpn);
    let psn = r1.bth.psn;
    connect(&mut client, qc, smac, sgid, sqpn, psn, Psn::new(0x123456));
    connect(&mut server, qs, cmac, cgid, cqpn, Psn::new(0x123456), psn);
    // The work request behind the capture.
    let payload: Vec<u8> = reqs.iter().flat_map(|f| { let (_, r) = RoceRepr::parse(f).unwrap(); f[r].to_vec() }).collect();
    let local = 0x5000_0000u64;
    client.dev.memory_mut().write(local, &payload).unwrap();
    let lk = client.mr.lkey;
    let wr = match r1.bth.opcode {
        Opcode::RcSendOnly | Opcode::RcSendFirst => {
            let lkb = server.mr.lkey;
            server.dev.post_recv(qs, RecvWr::new(1).with_sge(sbase, 8192, lkb)).unwrap();
            SendWr::new(1, SendOpcode::Send).with_sge(local, payload.len() as u32, lk)
        }
        Opcode::RcWriteOnly | Opcode::RcWriteFirst => {
            let reth = r1.ext.reth.unwrap();
            SendWr::new(1, SendOpcode::Write).with_sge(local, payload.len() as u32, lk).with_remote(reth.va, reth.rkey)
        }
        Opcode::RcReadRequest => {
            let reth = r1.ext.reth.unwrap();
            // The server's memory holds what the capture read.
            server.dev.memory_mut().write(reth.va, &resp[r2_pl.clone()]).unwrap();
            SendWr::new(1, SendOpcode::Read).with_sge(local, reth.len, lk).with_remote(reth.va, reth.rkey)
        }
        Opcode::RcFetchAdd | Opcode::RcCompareSwap => {
            let a = r1.ext.atomic.unwrap();
            server.dev.memory_mut().write(a.va, &r2.ext.atomic_ack.unwrap().orig.to_ne_bytes()).unwrap();
            let op = if r1.bth.opcode == Opcode::RcFetchAdd { SendOpcode::FetchAdd } else { SendOpcode::CmpSwap };
            let (ca, sw) = if op == SendOpcode::FetchAdd { (a.swap_add, 0) } else { (a.compare, a.swap_add) };
            SendWr::new(1, op).with_sge(local, 8, lk).with_remote(a.va, a.rkey).with_atomic(ca, sw)
        }
        op => panic!("unexpected first opcode {op:?}"),
    };
    client.dev.post_send(qc, wr).unwrap();
    let ours = transmit_all(&mut client.dev);
    assert_eq!(ours.len(), reqs.len(), "{file}: number of request frames");
    for (i, (o, w)) in ours.iter().zip(reqs).enumerate() {
        assert_same(o, w, &format!("{file} request frame {}", i + 1));
    }
    // Our responder, fed rxe's request, answers like rxe.
    for f in reqs {
        server.dev.handle_rx(Instant(0), &mut f.clone());
    }
    let answer = transmit_all(&mut server.dev);
    assert!(!answer.is_empty(), "{file}: no response");
    assert_same(&answer[0], resp, &format!("{file} response"));
    // And our requester accepts rxe's response.
    client.dev.handle_rx(Instant(0), &mut resp.to_vec());
    let wc = client.dev.poll_cq_one(client.cq).unwrap();
    if r1.bth.opcode == Opcode::RcReadRequest && nreq == 1 && r2.bth.opcode != Opcode::RcReadResponseOnly {
        return; // multi-packet READ responses: only the first was replayed
    }
    assert_eq!(wc.map(|w| w.status), Some(WcStatus::Success), "{file}");
}

#[test]
fn a1_send_only_and_ack() {
    rc_exchange("A1_rc_pingpong_64.pcap");
}
#[test]
fn a2_send_first_middle_last_and_ack() {
    rc_exchange("A2_rc_pingpong_4096.pcap");
}
#[test]
fn a3_send_only_with_pad() {
    rc_exchange("A3_rc_pingpong_13.pcap");
}
#[test]
fn a4_send_first_last_with_pad() {
    rc_exchange("A4_rc_pingpong_1027.pcap");
}
#[test]
fn b1_write_64k_ackreq_only_on_last() {
    rc_exchange("B1_write_bw_64k.pcap");
}
#[test]
fn b2_write_only_and_ack() {
    rc_exchange("B2_write_lat_8.pcap");
}
#[test]
fn c2_read_request_and_response_only() {
    rc_exchange("C2_read_lat_8.pcap");
}
#[test]
fn d3_fetch_add_and_atomic_ack() {
    rc_exchange("D3_atomic_lat_fadd.pcap");
}
#[test]
fn d4_cmp_swap_and_atomic_ack() {
    rc_exchange("D4_atomic_lat_cswap.pcap");
}

#[test]
fn c1_read_64k_response_stream() {
    // Our responder answers rxe's 64 KiB READ request with the same 64 response frames.
    let fr = frames("C1_read_bw_64k.pcap");
    let (r1, _) = RoceRepr::parse(&fr[0]).unwrap();
    let reth = r1.ext.reth.unwrap();
    let resp: Vec<&Vec<u8>> = fr.iter().filter(|f| RoceRepr::parse(f).unwrap().0.bth.opcode.info().is_response()).take(64).collect();
    let (first, _) = RoceRepr::parse(resp[0]).unwrap();
    assert_eq!(first.bth.psn, r1.bth.psn);
    let (cmac, smac) = (r1.eth.src_addr.0, r1.eth.dst_addr.0);
    let mut server = host(smac, r1.ip.dst_gid(), r1.bth.dest_qp, reth.va & !0xffff, 1 << 20, Some(reth.rkey));
    let qs = qp(&mut server, QpType::Rc);
    connect(&mut server, qs, cmac, r1.ip.src_gid(), first.bth.dest_qp, Psn::new(0), r1.bth.psn);
    let data: Vec<u8> = resp.iter().flat_map(|f| { let (_, r) = RoceRepr::parse(f).unwrap(); f[r].to_vec() }).collect();
    assert_eq!(data.len(), 65536);
    server.dev.memory_mut().write(reth.va, &data).unwrap();
    server.dev.handle_rx(Instant(0), &mut fr[0].clone());
    let ours = transmit_all(&mut server.dev);
    assert_eq!(ours.len(), 64);
    for (i, (o, w)) in ours.iter().zip(&resp).enumerate() {
        assert_same(o, w, &format!("C1 response {}", i + 1));
    }
}

#[test]
fn e1_ud_send_only() {
    let fr = frames("E1_ud_pingpong_64.pcap");
    let (r1, pl) = RoceRepr::parse(&fr[0]).unwrap();
    let deth = r1.ext.deth.unwrap();
    let (cmac, smac) = (r1.eth.src_addr.0, r1.eth.dst_addr.0);
    let mut client = host(cmac, r1.ip.src_gid(), deth.src_qp, 0x5000_0000, 1 << 16, None);
    let mut server = host(smac, r1.ip.dst_gid(), r1.bth.dest_qp, 0x6000_0000, 1 << 16, None);
    let qc = qp(&mut client, QpType::Ud);
    let qs = qp(&mut server, QpType::Ud);
    for (h, q, psn) in [(&mut client, qc, r1.bth.psn), (&mut server, qs, Psn::new(0))] {
        let a = QpAttr { qp_state: QpState::Init, qkey: deth.qkey, ..QpAttr::default() };
        h.dev.modify_qp(q, &a, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY).unwrap();
        h.dev.modify_qp(q, &QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
        let a = QpAttr { qp_state: QpState::Rts, sq_psn: psn, ..QpAttr::default() };
        h.dev.modify_qp(q, &a, QpAttrMask::STATE | QpAttrMask::SQ_PSN).unwrap();
    }
    client.dev.memory_mut().write(0x5000_0000, &fr[0][pl.clone()]).unwrap();
    let av = AddressVector { dgid: r1.ip.dst_gid(), dmac: smac, sgid_index: 0, hop_limit: 64, traffic_class: 0, flow_label: 0 };
    let dest = UdDest { av, remote_qpn: r1.bth.dest_qp, remote_qkey: QKey(0x8000_0000) };
    let lk = client.mr.lkey;
    client.dev.post_send(qc, SendWr::new(1, SendOpcode::Send).with_sge(0x5000_0000, pl.len() as u32, lk).with_ud(dest)).unwrap();
    let ours = transmit_all(&mut client.dev);
    assert_eq!(ours.len(), 1);
    assert_same(&ours[0], &fr[0], "E1 UD SEND only");
    // Receive rxe's datagram: GRH (IPv4 header in the last 20 bytes) + payload.
    let lks = server.mr.lkey;
    server.dev.post_recv(qs, RecvWr::new(3).with_sge(0x6000_0000, 4096, lks)).unwrap();
    server.dev.handle_rx(Instant(0), &mut fr[0].clone());
    let wc = server.dev.poll_cq_one(server.cq).unwrap().unwrap();
    assert_eq!((wc.status, wc.byte_len, wc.src_qp), (WcStatus::Success, 40 + pl.len() as u32, deth.src_qp));
    assert!(wc.wc_flags.contains(WcFlags::GRH));
    assert_eq!(server.dev.memory().slice(0x6000_0000 + 20, 20), &fr[0][14..34]);
    assert_eq!(server.dev.memory().slice(0x6000_0000 + 40, pl.len()), &fr[0][pl]);
}

/// With ECN on (the default), droce's frames are rxe's with ECT(0) in the IPv4 TOS and the
/// header checksum that follows from it: the ICRC masks the TOS, so it is rxe's. And rxe's
/// frames, which carry ECN 0, are taken as before, with no CNP in answer.
#[test]
fn ecn_on_differs_only_in_the_ecn_bits_and_the_ipv4_checksum() {
    let fr = frames("A1_rc_pingpong_64.pcap");
    let (r1, pl) = RoceRepr::parse(&fr[0]).unwrap();
    let resp = fr.iter().find(|f| RoceRepr::parse(f).unwrap().0.ip.src_gid() != r1.ip.src_gid()).unwrap();
    let (r2, _) = RoceRepr::parse(resp).unwrap();
    let (cmac, smac) = (r1.eth.src_addr.0, r1.eth.dst_addr.0);
    let (cgid, sgid) = (r1.ip.src_gid(), r1.ip.dst_gid());
    let mut client = host_cc(cmac, cgid, r2.bth.dest_qp, 0x5000_0000, 1 << 16, None, CcConfig::default());
    let mut server = host_cc(smac, sgid, r1.bth.dest_qp, 0x6000_0000, 1 << 16, None, CcConfig::default());
    let qc = qp(&mut client, QpType::Rc);
    let qs = qp(&mut server, QpType::Rc);
    connect(&mut client, qc, smac, sgid, r1.bth.dest_qp, r1.bth.psn, Psn::new(0x123456));
    connect(&mut server, qs, cmac, cgid, r2.bth.dest_qp, Psn::new(0x123456), r1.bth.psn);
    client.dev.memory_mut().write(0x5000_0000, &fr[0][pl.clone()]).unwrap();
    let lk = client.mr.lkey;
    client.dev.post_send(qc, SendWr::new(1, SendOpcode::Send).with_sge(0x5000_0000, pl.len() as u32, lk)).unwrap();
    let ours = transmit_all(&mut client.dev);
    assert_eq!(ours.len(), 1);
    let mut o = ours[0].clone();
    let want = &fr[0];
    // Ours verifies as sent; then take the capture's IPv4 identification (Linux draws it
    // per packet), and recompute the IPv4 checksum and the ICRC over that.
    let n = o.len();
    assert!(icrc::verify(&o[14..]), "our ICRC");
    o[18..20].copy_from_slice(&want[18..20]);
    let crc = icrc::compute(&o[14..n - 4]).unwrap();
    o[n - 4..].copy_from_slice(&crc.to_le_bytes());
    let sum = |h: &[u8]| {
        let mut s: u32 = h.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]) as u32).sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    };
    let mut h = o[14..34].to_vec();
    h[10..12].fill(0);
    o[24..26].copy_from_slice(&(!sum(&h)).to_be_bytes());
    assert_eq!(want[15] & 3, 0, "rxe sends Not-ECT");
    assert_eq!(o[15], want[15] | 0b10, "ECT(0), DSCP kept");
    assert_ne!(o[24..26], want[24..26], "the TOS is in the IPv4 checksum");
    assert_eq!(sum(&o[14..34]), 0xffff, "our IPv4 checksum verifies");
    let differ: Vec<usize> = (0..o.len()).filter(|&i| o[i] != want[i]).collect();
    assert!(differ.iter().all(|i| [15, 24, 25].contains(i)), "bytes differing: {differ:?}");
    assert_eq!(o.len(), want.len());
    assert_eq!(o[n - 4..], want[n - 4..], "the ICRC, computed over our ECT(0) TOS, is rxe's");
    // rxe's request into our responder with CC on: accepted, answered, no CNP, no CE.
    let lks = server.mr.lkey;
    server.dev.post_recv(qs, RecvWr::new(1).with_sge(0x6000_0000, 4096, lks)).unwrap();
    server.dev.handle_rx(Instant(0), &mut want.clone());
    let answer = transmit_all(&mut server.dev);
    assert_eq!(answer.len(), 1);
    let (a, _) = RoceRepr::parse(&answer[0]).unwrap();
    assert_eq!(a.bth.opcode, Opcode::RcAcknowledge);
    let c = server.dev.counters();
    assert_eq!((c.ecn_ce_rcvd, c.cnp_sent, c.rcvd_pkts), (0, 0, 1));
    // And rxe's ACK completes our send.
    client.dev.handle_rx(Instant(0), &mut resp.to_vec());
    assert_eq!(client.dev.poll_cq_one(client.cq).unwrap().map(|w| w.status), Some(WcStatus::Success));
    assert_eq!(client.dev.qp_rate_bps(qc), Some(CcConfig::default().line_rate_bps));
}
