//! Fault injection (test feature) on both devices, RX and TX: 1% drop, duplicate and reorder
//! and 1% corruption of RoCE frames. ARP resolves through the losses; RC SEND, WRITE, READ
//! and atomics complete with every byte verified; the counters show the faults and the
//! transport's recovery (retransmissions, ICRC errors).

mod roce_util;

use droce_dpdk::roce::{format_roce_stats, FaultConfig};
use droce_transport::qp::{PathMtu, QpType};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{RecvWr, SendOpcode, SendWr};
use droce_transport::{Gid, Psn};
use roce_util::*;
use std::net::Ipv4Addr;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

#[test]
fn lossy_rc_data_verified() {
    let wire = Wire::memif("roce-faults", None);
    let (ipa, ipb) = (Ipv4Addr::new(10, 2, 0, 1), Ipv4Addr::new(10, 2, 0, 2));
    let faults: FaultConfig = "both:drop=0.01,dup=0.01,reorder=0.01,corrupt=0.01;seed=7".parse().unwrap();
    let mut ca = wire.config(0);
    ca.ipv4 = vec![ipa];
    ca.faults = Some(faults);
    ca.neigh.retry_ns = 5_000_000;
    ca.neigh.max_tries = 50;
    let mut cb = wire.config(1);
    cb.ipv4 = vec![ipb];
    cb.faults = Some(FaultConfig { seed: 8, ..faults });
    cb.neigh = ca.neigh;
    let mut a = wire.device(0, ca);
    let mut b = wire.device(1, cb);
    let (mut ba, mut bb) = (Buf::new(1 << 20), Buf::new(1 << 20));
    let ra = resources(&mut a, &mut ba);
    let rb = resources(&mut b, &mut bb);
    let qa = create_qp(&mut a, &ra, QpType::Rc);
    let qb = create_qp(&mut b, &rb, QpType::Rc);
    let (na, nb) = (qpn(&a, qa), qpn(&b, qb));
    rc_up(&mut a, qa, 1, Gid::from_ipv4(ipb), nb, Psn::new(100), Psn::new(0xfffff0), PathMtu::Mtu1024);
    rc_up(&mut b, qb, 1, Gid::from_ipv4(ipa), na, Psn::new(0xfffff0), Psn::new(100), PathMtu::Mtu1024);

    let rounds = 150u64;
    for i in 0..rounds {
        let len = 1 + (i as usize * 977) % 9000;
        let data = pattern(i as u8, len);
        let (src, dst, back) = (ra.base + 0x1000, rb.base + 0x40000, ra.base + 0x80000);
        a.write_mem(src, &data).unwrap();
        // SEND (multi-packet for most sizes), PSNs wrap through 0xffffff on the way
        b.device_mut().post_recv(qb, RecvWr::new(i).with_sge(dst, 16384, rb.mr.lkey)).unwrap();
        a.device_mut().post_send(qa, SendWr::new(i, SendOpcode::Send).with_sge(src, len as u32, ra.mr.lkey)).unwrap();
        let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
        assert_eq!((w.status, w.opcode, w.wr_id), (WcStatus::Success, WcOpcode::Send, i), "round {i}");
        let r = wait_wc(&mut a, &mut b, 1, rb.cq, T);
        assert_eq!((r.status, r.byte_len, r.wr_id), (WcStatus::Success, len as u32, i), "round {i}");
        assert_eq!(read(&b, dst, len), data, "SEND round {i}");
        // WRITE somewhere else, READ it back
        let remote = rb.base + 0x10000 + (i % 4) * 0x4000;
        a.device_mut()
            .post_send(qa, SendWr::new(i, SendOpcode::Write).with_sge(src, len as u32, ra.mr.lkey).with_remote(remote, rb.mr.rkey))
            .unwrap();
        let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
        assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::RdmaWrite), "round {i}");
        assert_eq!(read(&b, remote, len), data, "WRITE round {i}");
        a.write_mem(back, &vec![0; len]).unwrap();
        a.device_mut()
            .post_send(qa, SendWr::new(i, SendOpcode::Read).with_sge(back, len as u32, ra.mr.lkey).with_remote(remote, rb.mr.rkey))
            .unwrap();
        let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
        assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::RdmaRead), "round {i}");
        assert_eq!(read(&a, back, len), data, "READ round {i}");
        // fetch-add: executed exactly once even when requests are duplicated or retried
        a.device_mut()
            .post_send(
                qa,
                SendWr::new(i, SendOpcode::FetchAdd)
                    .with_sge(ra.base + 0x100, 8, ra.mr.lkey)
                    .with_remote(rb.base + 0x100, rb.mr.rkey)
                    .with_atomic(1, 0),
            )
            .unwrap();
        let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
        assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::FetchAdd), "round {i}");
        assert_eq!(read(&a, ra.base + 0x100, 8), i.to_ne_bytes(), "fetch-add original value, round {i}");
    }
    assert_eq!(read(&b, rb.base + 0x100, 8), rounds.to_ne_bytes());
    let (sa, sb) = (a.stats(), b.stats());
    println!("{}{}", format_roce_stats(0, &sa), format_roce_stats(1, &sb));
    for (s, name) in [(&sa, "a"), (&sb, "b")] {
        for (d, c) in [("rx", s.faults_rx), ("tx", s.faults_tx)] {
            assert!(c.dropped > 0 && c.duplicated > 0 && c.reordered > 0 && c.corrupted > 0, "{name} {d}: {c:?}");
        }
        assert_eq!(
            s.engine.injected_faults,
            [s.faults_rx, s.faults_tx].iter().map(|c| c.dropped + c.duplicated + c.reordered + c.corrupted).sum::<u64>()
        );
    }
    let retrans = sa.transport.retransmitted_pkts + sb.transport.retransmitted_pkts;
    let dups = sa.transport.duplicate_request + sb.transport.duplicate_request;
    let crc = sa.transport.rcvd_icrc_err + sb.transport.rcvd_icrc_err + sa.engine.bad_ip_cksum + sb.engine.bad_ip_cksum;
    assert!(retrans > 0, "losses were repaired by retransmission");
    assert!(dups > 0, "duplicates were seen by the responder");
    assert!(crc > 0, "corruption was caught");
    drop((a, b));
    drop((ba, bb));
    wire.finish();
}
