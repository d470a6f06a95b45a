//! Zero-copy transmit on a PMD that holds the frames: net_ring keeps every mbuf in its ring
//! until someone dequeues it. A RoceDevice on a net_ring loopback port sends RDMA WRITEs to a
//! peer that is the test itself: the frames are chains whose payload segment is the registered
//! memory; deregistering the MR while they sit in the ring is refused (`InUse`) and leaves the
//! memory registered; once the "peer" dequeues and frees them the count of frames in flight is
//! back to zero and the MR deregisters. The frames read out of the ring are valid RoCEv2 (ICRC
//! good) with the payload of the memory.

mod roce_util;

use droce_dpdk::*;
use droce_transport::verbs::mr::DeregMrError;
use droce_transport::verbs::{SendOpcode, SendWr};
use droce_transport::wire::{Opcode, RoceRepr};
use droce_transport::{Psn, Rkey};
use roce_util::*;
use std::net::Ipv4Addr;
use std::sync::Arc;

#[test]
fn dereg_waits_for_frames_the_pmd_holds() {
    let eal = Eal::init(&eal_args(&["--vdev=net_ring0"])).expect("EAL init with net_ring");
    let id = port_by_name("net_ring0").expect("net_ring0");
    let pool = Arc::new(Mempool::create("zc_pool", &MempoolConfig { n: 4095, ..Default::default() }).unwrap());
    let mut port = Port::new(id).unwrap();
    let configured = port.configure(&PortConfig::new(), &pool).unwrap();
    port.start().unwrap();

    let (ip, peer) = (Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 0, 2));
    let mut buf = Buf::new(1 << 20);
    let (mut dev, r, qp) = zero_copy_rc(&configured, &pool, id, (ip, [2, 0, 0, 0, 9, 1]), (peer, [2, 0, 0, 0, 9, 2]), 0x77, 100, &mut buf);

    // 8 x 1 KiB frames of one WRITE, and one 100-byte WRITE that stays a copy (below the threshold)
    let data = pattern(3, 8192);
    dev.write_mem(r.base, &data).unwrap();
    let wr = SendWr::new(1, SendOpcode::Write).with_sge(r.base, 8192, r.mr.lkey).with_remote(0x5000_0000, Rkey(0x1234));
    dev.device_mut().post_send(qp, wr).unwrap();
    let wr = SendWr::new(2, SendOpcode::Write).with_sge(r.base + 9000, 100, r.mr.lkey).with_remote(0x5000_0000, Rkey(0x1234));
    dev.device_mut().post_send(qp, wr).unwrap();
    dev.flush(); // TX only: no RX burst takes the frames back out of the loopback ring
    assert_eq!(dev.stats().engine.tx_zero_copy, 8, "{}", droce_dpdk::roce::format_roce_stats(0, &dev.stats()));
    assert_eq!(dev.zero_copy_in_flight(), 8, "the ring holds the 8 chains");

    // deregistration while the PMD holds them: refused after the bounded wait, MR intact
    let t0 = std::time::Instant::now();
    assert_eq!(dev.dereg_mr(r.mr.lkey), Err(DeregMrError::InUse));
    assert!(t0.elapsed() >= droce_dpdk::roce::DEREG_WAIT, "it waited");
    assert_eq!(dev.stats().engine.dereg_busy, 1);
    assert!(dev.device().query_mr(r.mr.lkey).is_some(), "still registered");
    assert_eq!(read(&dev, r.base, 16), data[..16], "still reachable");

    // the peer's RX burst: the frames, linearised, are the WRITE with a good ICRC
    let mut batch: MbufBatch<64> = MbufBatch::new();
    let n = port.rx_burst(QueueId(0), &mut batch).unwrap();
    assert_eq!(n, 9);
    let mut got = Vec::new();
    for (k, m) in batch.drain().enumerate() {
        assert_eq!(m.nb_segs(), if k < 8 { 3 } else { 1 }, "frame {k}");
        let f = m.to_vec();
        let (repr, range) = RoceRepr::parse(&f).expect("valid frame, ICRC good");
        assert_eq!(repr.bth.psn, Psn::new(100 + k as u32));
        if k < 8 {
            got.extend_from_slice(&f[range]);
            assert_eq!(repr.bth.opcode, [Opcode::RcWriteFirst, Opcode::RcWriteMiddle, Opcode::RcWriteLast][k.min(1) + usize::from(k == 7)]);
        }
        if k == 6 {
            // one frame still held by the "peer"
            assert_eq!(dev.zero_copy_in_flight(), 2, "freed frames are counted out");
        }
    }
    assert_eq!(got, data);
    assert_eq!(dev.zero_copy_in_flight(), 0, "every frame freed");
    assert_eq!(dev.dereg_mr(r.mr.lkey), Ok(()));
    assert!(dev.device().query_mr(r.mr.lkey).is_none());
    drop(dev);
    drop(buf);
    close_checking_pool(port, pool, eal);
}
