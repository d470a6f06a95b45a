//! The transmit path's mbufs come from the pool in bulk and frames of one TX step share one
//! neighbour lookup; neither may change what goes out. On a net_ring loopback port (the ring
//! keeps every frame until the test dequeues it) a RoceDevice sends zero-copy WRITEs from a
//! pool smaller than one bulk refill: every frame still leaves as a 3-segment chain, asking
//! the pool for just what it needs. A neighbour's MAC changed between two TX steps is the one
//! the next step's frames carry. Nothing is left out of the pool once the device is gone.

mod roce_util;

use droce_dpdk::*;
use droce_transport::verbs::{SendOpcode, SendWr};
use droce_transport::wire::RoceRepr;
use droce_transport::{Psn, Rkey};
use roce_util::*;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

#[test]
fn small_pool_and_a_changed_neighbour() {
    let eal = Eal::init(&eal_args(&["--vdev=net_ring0"])).expect("EAL init with net_ring");
    let id = port_by_name("net_ring0").expect("net_ring0");
    // fewer mbufs than one bulk refill (32), no per-lcore cache: the pool's count is exact
    let pool = Arc::new(Mempool::create("txm_pool", &MempoolConfig { n: 31, cache_size: 0, ..Default::default() }).unwrap());
    let mut port = Port::new(id).unwrap();
    let configured = port.configure(&PortConfig::new(), &pool).unwrap();
    port.start().unwrap();

    let (ip, peer) = (Ipv4Addr::new(10, 9, 1, 1), Ipv4Addr::new(10, 9, 1, 2));
    let (mac1, mac2) = ([2, 0, 0, 0, 10, 2], [2, 0, 0, 0, 10, 3]);
    let mut buf = Buf::new(1 << 16);
    let (mut dev, r, qp) = zero_copy_rc(&configured, &pool, id, (ip, [2, 0, 0, 0, 10, 1]), (peer, mac1), 0x78, 200, &mut buf);

    let data = pattern(5, 5120);
    dev.write_mem(r.base, &data).unwrap();
    // 4 frames (12 mbufs) in one TX step, then the neighbour moves, then 1 frame
    let wr = SendWr::new(1, SendOpcode::Write).with_sge(r.base, 4096, r.mr.lkey).with_remote(0x5000_0000, Rkey(0x1234));
    dev.device_mut().post_send(qp, wr).unwrap();
    dev.flush();
    dev.add_neighbour(IpAddr::V4(peer), mac2);
    let wr = SendWr::new(2, SendOpcode::Write).with_sge(r.base + 4096, 1024, r.mr.lkey).with_remote(0x5000_1000, Rkey(0x1234));
    dev.device_mut().post_send(qp, wr).unwrap();
    dev.flush();
    let st = dev.stats().engine;
    assert_eq!((st.tx_zero_copy, st.tx_nombuf), (5, 0), "{}", droce_dpdk::roce::format_roce_stats(0, &dev.stats()));

    let mut batch: MbufBatch<64> = MbufBatch::new();
    let n = port.rx_burst(QueueId(0), &mut batch).unwrap();
    assert_eq!(n, 5);
    let mut got = Vec::new();
    for (k, m) in batch.drain().enumerate() {
        assert_eq!(m.nb_segs(), 3, "frame {k}");
        let f = m.to_vec();
        assert_eq!(f[..6], if k < 4 { mac1 } else { mac2 }, "frame {k}'s destination MAC");
        let (repr, range) = RoceRepr::parse(&f).expect("valid frame, ICRC good");
        assert_eq!(repr.bth.psn, Psn::new(200 + k as u32));
        got.extend_from_slice(&f[range]);
    }
    assert_eq!(got, data);
    assert_eq!(dev.zero_copy_in_flight(), 0);
    drop(dev);
    drop(buf);
    close_checking_pool(port, pool, eal);
}
