//! Two RoceDevices back to back over memif, manual progress, IPv4: ARP resolution from an empty
//! table, RC SEND/WRITE/READ/atomics and UD SEND with data checks, a non-RoCE flood counted
//! and ignored, truncated frames counted, pcap read back by the transport's reader (and
//! tshark when installed).

mod roce_util;

use droce_dpdk::roce::format_roce_stats;
use droce_dpdk::*;
use droce_transport::qp::{PathMtu, QpType};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{RecvWr, SendOpcode, SendWr, UdDest};
use droce_transport::wire::RoceRepr;
use droce_transport::{Gid, Psn, QKey};
use roce_util::*;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);
const MEM: usize = 1 << 20;

#[test]
fn rc_ud_arp_flood_pcap_manual_progress() {
    let wire = Wire::memif("roce-rc", None);
    let pa = wire.tmp.0.join("a.pcap");
    let pb = wire.tmp.0.join("b.pcap");
    let ipa = Ipv4Addr::new(10, 0, 0, 1);
    let ipb = Ipv4Addr::new(10, 0, 0, 2);
    let mut ca = wire.config(0);
    ca.ipv4 = vec![ipa];
    ca.seed = 1;
    ca.pcap = Some(pa.clone());
    let mut cb = wire.config(1);
    cb.ipv4 = vec![ipb];
    cb.seed = 2;
    cb.pcap = Some(pb.clone());
    let mut a = wire.device(0, ca);
    let mut b = wire.device(1, cb);
    // GID table like rxe: 0 = fe80::EUI-64 of the MAC, 1 = ::ffff:10.0.0.x
    assert_eq!(a.gid(1), Some(Gid::from_ipv4(ipa)));
    assert_eq!(a.gid(0).unwrap().0[..2], [0xfe, 0x80]);
    assert_eq!(a.path_mtu(), PathMtu::Mtu1024, "1500-byte port MTU gives IB MTU 1024");
    assert!(a.neighbours().is_empty() && b.neighbours().is_empty(), "no static entries");
    let (mut ba, mut bb) = (Buf::new(MEM), Buf::new(MEM));
    let ra = resources(&mut a, &mut ba);
    let rb = resources(&mut b, &mut bb);
    let qa = create_qp(&mut a, &ra, QpType::Rc);
    let qb = create_qp(&mut b, &rb, QpType::Rc);
    let (na, nb) = (qpn(&a, qa), qpn(&b, qb));
    let (psa, psb) = (Psn::new(0x1234), Psn::new(0xabcdef));
    rc_up(&mut a, qa, 1, Gid::from_ipv4(ipb), nb, psb, psa, PathMtu::Mtu1024);
    rc_up(&mut b, qb, 1, Gid::from_ipv4(ipa), na, psa, psb, PathMtu::Mtu1024);

    // SEND of several sizes (the first one waits for ARP)
    for (i, &len) in [0usize, 1, 64, 1024, 1025, 4096, 10_000].iter().enumerate() {
        let data = pattern(i as u8, len);
        let (src, dst) = (ra.base + 0x1000, rb.base + 0x40000);
        a.write_mem(src, &data).unwrap();
        b.write_mem(dst, &vec![0xee; 16384]).unwrap();
        b.device_mut().post_recv(qb, RecvWr::new(100 + i as u64).with_sge(dst, 16384, rb.mr.lkey)).unwrap();
        a.device_mut().post_send(qa, SendWr::new(i as u64, SendOpcode::Send).with_sge(src, len as u32, ra.mr.lkey)).unwrap();
        let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
        assert_eq!((w.status, w.opcode, w.wr_id), (WcStatus::Success, WcOpcode::Send, i as u64));
        let r = wait_wc(&mut a, &mut b, 1, rb.cq, T);
        assert_eq!((r.status, r.opcode, r.byte_len, r.wr_id), (WcStatus::Success, WcOpcode::Recv, len as u32, 100 + i as u64));
        assert_eq!(read(&b, dst, len), data, "SEND {len} B");
        assert!(read(&b, dst + len as u64, 16).iter().all(|&x| x == 0xee));
    }
    // both sides learned each other by ARP (a asked; b learned a from the request)
    let ea = a.neighbours();
    assert_eq!(ea, vec![(IpAddr::V4(ipb), b.mac(), false)]);
    assert_eq!(b.neighbours(), vec![(IpAddr::V4(ipa), a.mac(), false)]);
    assert_eq!(a.counters().neigh.arp_requests_tx, 1);
    assert_eq!(b.counters().neigh.arp_requests_rx, 1);
    assert_eq!(b.counters().neigh.arp_replies_tx, 1);
    assert_eq!(a.counters().neigh.arp_replies_rx, 1);
    assert_eq!(b.counters().neigh.arp_requests_tx, 0, "b needed no ARP of its own");

    // WRITE, READ back, atomics
    for (i, &len) in [8usize, 1500, 65536].iter().enumerate() {
        let data = pattern(40 + i as u8, len);
        let (src, remote, back) = (ra.base + 0x1000, rb.base + 0x20000, ra.base + 0x80000);
        a.write_mem(src, &data).unwrap();
        a.device_mut()
            .post_send(qa, SendWr::new(1, SendOpcode::Write).with_sge(src, len as u32, ra.mr.lkey).with_remote(remote, rb.mr.rkey))
            .unwrap();
        let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
        assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::RdmaWrite));
        assert_eq!(read(&b, remote, len), data, "WRITE {len}");
        a.write_mem(back, &vec![0; len]).unwrap();
        a.device_mut()
            .post_send(qa, SendWr::new(2, SendOpcode::Read).with_sge(back, len as u32, ra.mr.lkey).with_remote(remote, rb.mr.rkey))
            .unwrap();
        let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
        assert_eq!((w.status, w.opcode, w.byte_len), (WcStatus::Success, WcOpcode::RdmaRead, len as u32));
        assert_eq!(read(&a, back, len), data, "READ {len}");
    }
    let target = rb.base + 0x100;
    b.write_mem(target, &40u64.to_ne_bytes()).unwrap();
    let res = ra.base + 0x200;
    a.device_mut()
        .post_send(qa, SendWr::new(10, SendOpcode::FetchAdd).with_sge(res, 8, ra.mr.lkey).with_remote(target, rb.mr.rkey).with_atomic(2, 0))
        .unwrap();
    let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
    assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::FetchAdd));
    assert_eq!(read(&a, res, 8), 40u64.to_ne_bytes());
    a.device_mut()
        .post_send(
            qa,
            SendWr::new(11, SendOpcode::CmpSwap).with_sge(res, 8, ra.mr.lkey).with_remote(target, rb.mr.rkey).with_atomic(42, 99),
        )
        .unwrap();
    let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
    assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::CompSwap));
    assert_eq!(read(&a, res, 8), 42u64.to_ne_bytes());
    assert_eq!(read(&b, target, 8), 99u64.to_ne_bytes(), "the target word itself (atomic on process memory)");

    // UD SEND both ways
    let qkey = QKey(0x1111_1111);
    let ua = create_qp(&mut a, &ra, QpType::Ud);
    let ub = create_qp(&mut b, &rb, QpType::Ud);
    ud_up(&mut a, ua, qkey);
    ud_up(&mut b, ub, qkey);
    let data = pattern(7, 1000);
    a.write_mem(ra.base + 0x3000, &data).unwrap();
    b.device_mut().post_recv(ub, RecvWr::new(55).with_sge(rb.base + 0x50000, 1040, rb.mr.lkey)).unwrap();
    let dest = UdDest { av: a.av(Gid::from_ipv4(ipb), 1), remote_qpn: qpn(&b, ub), remote_qkey: qkey };
    a.device_mut().post_send(ua, SendWr::new(56, SendOpcode::Send).with_sge(ra.base + 0x3000, 1000, ra.mr.lkey).with_ud(dest)).unwrap();
    let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
    assert_eq!((w.status, w.wr_id), (WcStatus::Success, 56));
    let r = wait_wc(&mut a, &mut b, 1, rb.cq, T);
    assert_eq!((r.status, r.byte_len, r.src_qp), (WcStatus::Success, 1040, qpn(&a, ua)), "40-byte GRH + payload");
    assert_eq!(read(&b, rb.base + 0x50000 + 40, 1000), data);

    // a non-RoCE flood on the wire: counted and ignored, RoCE still works
    let before = b.counters().non_roce_drops;
    let flood_port = Port::new(wire.ports[0].id()).unwrap();
    let mut sent = 0u64;
    let t0 = std::time::Instant::now();
    while sent < 5000 && t0.elapsed() < T {
        let mut batch: MbufBatch<32> = MbufBatch::new();
        batch.alloc_bulk(&wire.pool, 32).unwrap();
        for (k, m) in batch.iter_mut().enumerate() {
            let f = m.set_len(128).unwrap();
            f.fill(0x5a);
            f[0..6].copy_from_slice(&b.mac());
            f[6..12].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
            // a mix: unknown ethertype, IPv4 TCP, IPv4 UDP to another port, IPv6 UDP to another port
            match k % 4 {
                0 => f[12..14].copy_from_slice(&[0x88, 0xb5]),
                1 => {
                    f[12..14].copy_from_slice(&[0x08, 0x00]);
                    f[14] = 0x45;
                    f[16..18].copy_from_slice(&100u16.to_be_bytes());
                    f[23] = 6;
                }
                2 => {
                    f[12..14].copy_from_slice(&[0x08, 0x00]);
                    f[14] = 0x45;
                    f[16..18].copy_from_slice(&100u16.to_be_bytes());
                    f[23] = 17;
                    f[36..38].copy_from_slice(&53u16.to_be_bytes());
                }
                _ => {
                    f[12..14].copy_from_slice(&[0x86, 0xdd]);
                    f[14] = 0x60;
                    f[18..20].copy_from_slice(&50u16.to_be_bytes());
                    f[20] = 17;
                    f[56..58].copy_from_slice(&53u16.to_be_bytes());
                }
            }
        }
        let (s, _) = flood_port.tx_burst_retry(QueueId(0), &mut batch, 100).unwrap();
        sent += s as u64;
        b.poll();
    }
    // truncated frames: an IPv4 header claiming more than the frame holds, and a runt
    let mut t1 = wire.pool.alloc().unwrap();
    let f = t1.set_len(40).unwrap();
    f.fill(0);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&1000u16.to_be_bytes());
    let t2 = wire.pool.alloc_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]).unwrap();
    let mut tb: MbufBatch<2> = MbufBatch::new();
    tb.push(t1).ok().unwrap();
    tb.push(t2).ok().unwrap();
    flood_port.tx_burst_retry(QueueId(0), &mut tb, 100).unwrap();
    pump(&mut a, &mut b, Duration::from_millis(100));
    assert!(sent >= 5000, "flood sent {sent}");
    assert_eq!(b.counters().non_roce_drops - before, sent, "every flood frame counted as non-RoCE");
    assert_eq!(b.counters().truncated, 2);
    // RoCE still fine after the flood
    let data = pattern(99, 3000);
    a.write_mem(ra.base + 0x1000, &data).unwrap();
    a.device_mut()
        .post_send(
            qa,
            SendWr::new(77, SendOpcode::Write).with_sge(ra.base + 0x1000, 3000, ra.mr.lkey).with_remote(rb.base + 0x9000, rb.mr.rkey),
        )
        .unwrap();
    let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
    assert_eq!(w.status, WcStatus::Success);
    assert_eq!(read(&b, rb.base + 0x9000, 3000), data);

    let sa = a.stats();
    let sb = b.stats();
    let text = format_roce_stats(0, &sa);
    println!("{text}{}", format_roce_stats(1, &sb));
    assert!(text.contains("RoCE statistics for port 0"));
    assert!(text.contains("arp_requests_tx: 1"));
    assert!(text.contains(&format!("sent_pkts: {}", sa.transport.sent_pkts)));
    assert_eq!(sa.transport.rcvd_icrc_err + sb.transport.rcvd_icrc_err, 0);
    assert_eq!(sb.engine.non_roce_drops, sent);
    assert!(sa.port.opackets >= sa.engine.tx_roce);

    // pcap: every ARP and RoCE frame in and out, and nothing of the flood
    let (pa_frames, pb_frames) = (sa.engine.pcap_frames, sb.engine.pcap_frames);
    drop(a);
    drop(b);
    for (path, n) in [(&pa, pa_frames), (&pb, pb_frames)] {
        let bytes = std::fs::read(path).unwrap();
        let frames = droce_transport::pcap::read(&bytes).expect("droce pcap reader");
        assert_eq!(frames.len() as u64, n);
        let arp = frames.iter().filter(|f| f.data[12..14] == [0x08, 0x06]).count();
        assert_eq!(arp, 2, "request + reply in each capture");
        for f in frames.iter().filter(|f| f.data[12..14] == [0x08, 0x00]) {
            RoceRepr::parse(f.data).expect("every captured IPv4 frame is RoCEv2 with a good ICRC");
        }
        assert!(frames.windows(2).all(|w| w[0].timestamp_ns <= w[1].timestamp_ns));
        if let Some(c) = tshark_count(path) {
            assert_eq!(c, frames.len(), "tshark reads every frame");
            // and dissects the UDP 4791 frames as RoCEv2 (InfiniBand BTH) and the rest as ARP
            let out = std::process::Command::new("tshark").arg("-r").arg(path).args(["-T", "fields", "-e", "frame.protocols"]).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let ib = text.lines().filter(|l| l.contains("infiniband")).count();
            let arp = text.lines().filter(|l| l.ends_with(":arp")).count();
            assert_eq!((ib + arp, arp), (frames.len(), 2), "{text}");
        }
    }
    drop(ba);
    drop(bb);
    wire.finish();
}
