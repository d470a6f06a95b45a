//! The RX mbufs of the RoCE device: an RX burst handles each frame in its mbuf and frees the
//! handled ones together in one bulk call, while ACKs received behind a request (and every
//! frame behind them) wait in their mbufs for the next round. Traffic in both directions at
//! once (WRITEs, READs and SENDs one way, a WRITE the other, in turn on a path-MTU-1024 QP
//! whose frames arrive in one mbuf and a path-MTU-4096 QP whose frames arrive chained over
//! memif's 2048-byte buffers and are linearised) puts requests and ACKs in the same bursts; afterwards every mbuf of the RX
//! pool is back in it exactly once (no leak, no double free: `assert_pool_whole`).

mod roce_util;

use droce_dpdk::roce::RoceDevice;
use droce_dpdk::{Mempool, MempoolConfig};
use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::qp::{PathMtu, QpHandle, QpType};
use droce_transport::status::WcStatus;
use droce_transport::verbs::{AccessFlags, RecvWr, SendOpcode, SendWr};
use droce_transport::{Gid, Psn, Qpn};
use roce_util::*;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LEN: u64 = 65536;

/// `rc_up` with a 67 ms ACK timeout (14) instead of 1 ms: what this test checks does not
/// depend on timing, and with 1 ms a debug build on a loaded 2-core machine, descheduled for
/// a few milliseconds at a time, ran out of retries (RetryExcErr) now and then.
#[allow(clippy::too_many_arguments)]
fn up(dev: &mut RoceDevice, qp: QpHandle, peer_gid: Gid, peer_qpn: Qpn, rq_psn: Psn, sq_psn: Psn, mtu: PathMtu) {
    let av = dev.av(peer_gid, 1);
    let d = dev.device_mut();
    let (a, m) = init_attr(AccessFlags::ALL);
    d.modify_qp(qp, &a, m).expect("INIT");
    let (a, m) = rtr_attr(av, mtu, peer_qpn, rq_psn, 16, 1);
    d.modify_qp(qp, &a, m).expect("RTR");
    let (a, m) = rts_attr(sq_psn, 14, 7, 7, 16);
    d.modify_qp(qp, &a, m).expect("RTS");
}

#[test]
fn rx_bursts_free_every_mbuf_once() {
    let wire = Wire::memif("roce-rx-mbufs", None);
    let (ipa, ipb) = (Ipv4Addr::new(10, 5, 0, 1), Ipv4Addr::new(10, 5, 0, 2));
    // TX frames up to 4096 B of payload need a jumbo pool; RX uses the wire's (2048 B)
    let tx_pool = Arc::new(Mempool::create("rxm_tx_pool", &MempoolConfig { n: 4095, data_room: 9216 + 128, ..Default::default() }).unwrap());
    let dev = |i: usize, ip: Ipv4Addr| {
        let mut c = wire.config(i);
        c.ipv4 = vec![ip];
        c.eth_mtu = Some(9000);
        RoceDevice::new(c, &wire.configured[i], tx_pool.clone()).unwrap()
    };
    let (mut a, mut b) = (dev(0, ipa), dev(1, ipb));
    let (mut ba, mut bb) = (Buf::new(1 << 20), Buf::new(1 << 20));
    let ra = resources(&mut a, &mut ba);
    let rb = resources(&mut b, &mut bb);
    let mut pairs = Vec::new();
    for mtu in [PathMtu::Mtu1024, PathMtu::Mtu4096] {
        let qa = create_qp(&mut a, &ra, QpType::Rc);
        let qb = create_qp(&mut b, &rb, QpType::Rc);
        let (na, nb) = (qpn(&a, qa), qpn(&b, qb));
        up(&mut a, qa, Gid::from_ipv4(ipb), nb, Psn::new(3), Psn::new(4), mtu);
        up(&mut b, qb, Gid::from_ipv4(ipa), na, Psn::new(4), Psn::new(3), mtu);
        pairs.push((qa, qb));
    }
    let data = pattern(7, LEN as usize);
    a.write_mem(ra.base, &data).unwrap();
    b.write_mem(rb.base, &data).unwrap();
    let t0 = Instant::now();
    for round in 0..6u64 {
        for &(qa, qb) in &pairs[round as usize % 2..][..1] {
            let id = round * 10;
            b.device_mut().post_recv(qb, RecvWr::new(id + 1).with_sge(rb.base + 0x80000, LEN as u32, rb.mr.lkey)).unwrap();
            let da = a.device_mut();
            da.post_send(qa, SendWr::new(id + 2, SendOpcode::Write).with_sge(ra.base, LEN as u32, ra.mr.lkey).with_remote(rb.base + 0x20000, rb.mr.rkey)).unwrap();
            da.post_send(qa, SendWr::new(id + 3, SendOpcode::Read).with_sge(ra.base + 0x40000, LEN as u32, ra.mr.lkey).with_remote(rb.base, rb.mr.rkey)).unwrap();
            da.post_send(qa, SendWr::new(id + 4, SendOpcode::Send).with_sge(ra.base, LEN as u32, ra.mr.lkey)).unwrap();
            let db = b.device_mut();
            db.post_send(qb, SendWr::new(id + 5, SendOpcode::Write).with_sge(rb.base, LEN as u32, rb.mr.lkey).with_remote(ra.base + 0x60000, ra.mr.rkey)).unwrap();
        }
        // a: WRITE, READ, SEND per pair; b: its WRITE and the receive per pair
        let (mut left_a, mut left_b) = (3, 2);
        while left_a + left_b > 0 {
            assert!(t0.elapsed() < Duration::from_secs(60), "round {round}: {left_a} + {left_b} completions missing");
            a.poll();
            b.poll();
            while let Some(wc) = a.device_mut().poll_cq_one(ra.cq).unwrap() {
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                left_a -= 1;
            }
            while let Some(wc) = b.device_mut().poll_cq_one(rb.cq).unwrap() {
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                left_b -= 1;
            }
        }
        assert_eq!(read(&a, ra.base + 0x40000, LEN as usize), data, "round {round}: READ");
        assert_eq!(read(&b, rb.base + 0x20000, LEN as usize), data, "round {round}: WRITE a -> b");
        assert_eq!(read(&b, rb.base + 0x80000, LEN as usize), data, "round {round}: SEND");
        assert_eq!(read(&a, ra.base + 0x60000, LEN as usize), data, "round {round}: WRITE b -> a");
    }
    assert_eq!(a.device().counters().rcvd_icrc_err + b.device().counters().rcvd_icrc_err, 0);
    drop((a, b));
    assert_pool_whole(&tx_pool);
    drop(tx_pool);
    drop((ba, bb));
    wire.finish();
}
