//! net_memif server and client in one process over one socket: the client's TX arrives at the
//! server's RX with the same bytes (works under --no-shconf: the driver only warns that its
//! multi-process action cannot be registered).

mod common;

use droce_dpdk::*;

#[test]
fn memif_client_to_server() {
    let tmp = common::TempDir::new("memif-test");
    let dir = tmp.0.clone();
    let sock = dir.join("memif.sock");
    let s = format!("--vdev=net_memif0,role=server,socket={},socket-abstract=no", sock.display());
    let c = format!("--vdev=net_memif1,role=client,socket={},socket-abstract=no", sock.display());
    let eal = Eal::init(&common::eal_args(&[s.as_str(), c.as_str()])).expect("EAL init with memif");
    let server = port_by_name("net_memif0").expect("memif server port");
    let client = port_by_name("net_memif1").expect("memif client port");
    let pool = Mempool::create("memif_pool", &MempoolConfig { n: 4095, ..Default::default() }).unwrap();
    let mut ps = Port::new(server).unwrap();
    let mut pc = Port::new(client).unwrap();
    assert_eq!(ps.info().unwrap().driver_name, "net_memif");
    ps.configure(&PortConfig::new(), &pool).unwrap();
    pc.configure(&PortConfig::new(), &pool).unwrap();
    ps.start().unwrap();
    pc.start().unwrap();
    // the control channel connects through the EAL interrupt thread: bounded wait for link up
    let t0 = std::time::Instant::now();
    while !(ps.link().unwrap().up && pc.link().unwrap().up) {
        assert!(t0.elapsed() < std::time::Duration::from_secs(10), "memif link did not come up");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut tx: MbufBatch<32> = MbufBatch::new();
    let mut rx: MbufBatch<32> = MbufBatch::new();
    let (mut sent, mut got, mut bytes_ok) = (0u32, 0u32, true);
    let t0 = std::time::Instant::now();
    while (sent < 1000 || got < sent) && t0.elapsed() < std::time::Duration::from_secs(10) {
        if sent < 1000 && tx.is_empty() {
            tx.alloc_bulk(&pool, 32).unwrap();
            for (i, m) in tx.iter_mut().enumerate() {
                let b = m.set_len(64).unwrap();
                b.fill(0);
                b[..4].copy_from_slice(&(sent + i as u32).to_be_bytes());
            }
        }
        sent += pc.tx_burst(QueueId(0), &mut tx).unwrap() as u32;
        ps.rx_burst(QueueId(0), &mut rx).unwrap();
        for m in rx.drain() {
            bytes_ok &= m.len() == 64 && u32::from_be_bytes(m.data()[..4].try_into().unwrap()) == got;
            got += 1;
        }
    }
    drop(tx);
    assert!(sent >= 1000, "sent {sent}");
    assert_eq!(got, sent, "memif delivered everything in order");
    assert!(bytes_ok, "payload sequence intact");
    // and back: 100 frames of 100 bytes from the server to the client
    let (mut back, mut back_got) = (0u32, 0u32);
    let mut tx: MbufBatch<32> = MbufBatch::new();
    let t0 = std::time::Instant::now();
    while (back < 100 || back_got < back) && t0.elapsed() < std::time::Duration::from_secs(10) {
        if back < 100 && tx.is_empty() {
            tx.alloc_bulk(&pool, 25).unwrap();
            for m in tx.iter_mut() {
                m.set_len(100).unwrap().fill(7);
            }
        }
        back += ps.tx_burst(QueueId(0), &mut tx).unwrap() as u32;
        pc.rx_burst(QueueId(0), &mut rx).unwrap();
        back_got += rx.drain().count() as u32;
    }
    drop(tx);
    assert_eq!((back, back_got), (100, 100));
    let want_c = (back_got as u64, 100 * back_got as u64, sent as u64, 64 * sent as u64);
    let want_s = (got as u64, 64 * got as u64, back as u64, 100 * back as u64);
    let four = |s: PortStats| (s.ipackets, s.ibytes, s.opackets, s.obytes);
    assert_eq!(four(pc.stats().unwrap()), want_c, "client: RX packets, bytes, TX packets, bytes");
    assert_eq!(four(ps.stats().unwrap()), want_s, "server: RX packets, bytes, TX packets, bytes");
    // The client leaves: DPDK 22.11's memif then reports 0 for every count of the server
    // (it sums the rings of the current connection only); droce counts these ports itself.
    pc.stop().unwrap();
    let t0 = std::time::Instant::now();
    while ps.link().unwrap().up {
        assert!(t0.elapsed() < std::time::Duration::from_secs(10), "the server's link stayed up after the client stopped");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(four(ps.stats().unwrap()), want_s, "server, its client gone: the counts are kept");
    assert_eq!(four(pc.stats().unwrap()), want_c, "client, stopped: the counts are kept");
    ps.reset_stats().unwrap();
    assert_eq!(four(ps.stats().unwrap()), (0, 0, 0, 0), "reset zeroes droce's counts too");
    ps.stop().unwrap();
    pc.close().unwrap();
    ps.close().unwrap();
    assert_eq!(pool.in_use_count(), 0, "no mbuf leaked");
    drop(pool);
    drop(eal);
}
