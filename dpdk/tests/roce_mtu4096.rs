//! Ethernet MTU 9000 gives IB path MTU 4096 (as rxe); RC WRITE/READ/SEND of 64 KiB in 4096-byte
//! packets over memif (net_memif in 22.11 refuses a configured MTU above 1500 at
//! rte_eth_dev_configure, so the device's `eth_mtu` overrides the port's; memif itself carries
//! any frame length) (frames larger than memif's 2048-byte buffers arrive chained: the engine
//! linearises multi-segment frames), pool too small for such frames is refused.

mod roce_util;

use droce_dpdk::roce::{RoceDevice, RoceError};
use droce_dpdk::{Mempool, MempoolConfig};
use droce_transport::qp::{PathMtu, QpType};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{RecvWr, SendOpcode, SendWr};
use droce_transport::{Gid, Psn};
use roce_util::*;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

#[test]
fn path_mtu_4096_over_jumbo_port() {
    let wire = Wire::memif("roce-mtu4096", None);
    let (ipa, ipb) = (Ipv4Addr::new(10, 4, 0, 1), Ipv4Addr::new(10, 4, 0, 2));
    // a default pool (2048-byte data room) cannot hold 4096-byte RoCE frames
    let small = Arc::new(Mempool::create("small_pool", &MempoolConfig { n: 1023, ..Default::default() }).unwrap());
    assert_eq!(wire.pool.data_room_size(), MempoolConfig::default().data_room, "the wire's pool is small too");
    let big = Arc::new(Mempool::create("big_pool", &MempoolConfig { n: 4095, data_room: 9216 + 128, ..Default::default() }).unwrap());
    let mut c = wire.config(0);
    c.ipv4 = vec![ipa];
    c.eth_mtu = Some(9000);
    match RoceDevice::new(c.clone(), &wire.configured[0], small.clone()) {
        Err(RoceError::PoolTooSmall { need, have }) => assert!(need > 4096 && have == 2048, "{need} {have}"),
        other => panic!("expected PoolTooSmall, got {other:?}"),
    }
    drop(small);
    let mut a = RoceDevice::new(c, &wire.configured[0], big.clone()).unwrap();
    let mut cb = wire.config(1);
    cb.ipv4 = vec![ipb];
    cb.eth_mtu = Some(9000);
    let mut b = RoceDevice::new(cb, &wire.configured[1], big.clone()).unwrap();
    assert_eq!(a.path_mtu(), PathMtu::Mtu4096);
    let (mut ba, mut bb) = (Buf::new(1 << 20), Buf::new(1 << 20));
    let ra = resources(&mut a, &mut ba);
    let rb = resources(&mut b, &mut bb);
    let qa = create_qp(&mut a, &ra, QpType::Rc);
    let qb = create_qp(&mut b, &rb, QpType::Rc);
    let (na, nb) = (qpn(&a, qa), qpn(&b, qb));
    rc_up(&mut a, qa, 1, Gid::from_ipv4(ipb), nb, Psn::new(3), Psn::new(4), PathMtu::Mtu4096);
    rc_up(&mut b, qb, 1, Gid::from_ipv4(ipa), na, Psn::new(4), Psn::new(3), PathMtu::Mtu4096);
    let data = pattern(1, 65536);
    a.write_mem(ra.base, &data).unwrap();
    a.device_mut()
        .post_send(qa, SendWr::new(1, SendOpcode::Write).with_sge(ra.base, 65536, ra.mr.lkey).with_remote(rb.base, rb.mr.rkey))
        .unwrap();
    let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
    assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::RdmaWrite));
    assert_eq!(read(&b, rb.base, 65536), data);
    // First transmissions only: on a loaded machine the ARP exchange plus 16 chained jumbo
    // frames can outlast the 1 ms retransmit timeout (timeout 8), and go-back-N then resends
    // the window (seen once in CI: 32 = 16 + 16).
    let c = a.device().counters();
    let first = c.sent_pkts - c.retransmitted_pkts;
    assert_eq!(first, 16, "64 KiB in 16 packets of 4096 B ({} sent, {} of them retransmissions)", c.sent_pkts, c.retransmitted_pkts);
    a.device_mut()
        .post_send(qa, SendWr::new(2, SendOpcode::Read).with_sge(ra.base + 0x20000, 65536, ra.mr.lkey).with_remote(rb.base, rb.mr.rkey))
        .unwrap();
    let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
    assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::RdmaRead));
    assert_eq!(read(&a, ra.base + 0x20000, 65536), data);
    b.device_mut().post_recv(qb, RecvWr::new(3).with_sge(rb.base + 0x40000, 65536, rb.mr.lkey)).unwrap();
    a.device_mut().post_send(qa, SendWr::new(3, SendOpcode::Send).with_sge(ra.base, 65536, ra.mr.lkey)).unwrap();
    assert_eq!(wait_wc(&mut a, &mut b, 0, ra.cq, T).status, WcStatus::Success);
    let r = wait_wc(&mut a, &mut b, 1, rb.cq, T);
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 65536));
    assert_eq!(read(&b, rb.base + 0x40000, 65536), data);
    assert_eq!(a.device().counters().rcvd_icrc_err + b.device().counters().rcvd_icrc_err, 0);
    drop((a, b));
    assert_eq!(big.in_use_count(), 0, "no TX mbuf leaked");
    drop(big);
    drop((ba, bb));
    wire.finish();
}
