//! A memif client that connects before its server's port is started comes up anyway.
//!
//! DPDK 22.11's memif server answers such a client with a disconnect ("ID 0 not found": the
//! server's device is still disabled) and the client never tries again; two droce-pmd
//! processes started together sometimes both waited out their link timeouts.
//! `Port::wait_link_up` reconnects a memif client whose link stays down.

mod common;

use droce_dpdk::*;
use std::time::{Duration, Instant};

#[test]
fn client_before_server_start_reconnects() {
    let tmp = common::TempDir::new("memif-reconnect");
    let sock = tmp.0.join("memif.sock");
    let s = format!("--vdev=net_memif0,role=server,socket={},socket-abstract=no", sock.display());
    let c = format!("--vdev=net_memif1,role=client,socket={},socket-abstract=no", sock.display());
    let eal = Eal::init(&common::eal_args(&[s.as_str(), c.as_str()])).expect("EAL init with memif");
    assert_eq!(vdev_args("net_memif1").as_deref(), Some(format!("role=client,socket={},socket-abstract=no", sock.display()).as_str()));
    let pool = Mempool::create("reconnect_pool", &MempoolConfig { n: 4095, ..Default::default() }).unwrap();
    let mut ps = Port::new(port_by_name("net_memif0").unwrap()).unwrap();
    let mut pc = Port::new(port_by_name("net_memif1").unwrap()).unwrap();
    ps.configure(&PortConfig::new(), &pool).unwrap();
    pc.configure(&PortConfig::new(), &pool).unwrap();
    // the client first: the server's socket exists (EAL created it), its port is not started
    pc.start().unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(200) {
        assert!(!pc.link().unwrap().up, "the link cannot be up before the server's port starts");
        std::thread::sleep(Duration::from_millis(10));
    }
    ps.start().unwrap();
    let t0 = Instant::now();
    assert!(pc.wait_link_up(Duration::from_secs(10)).unwrap(), "the client never came up");
    eprintln!("client link up {:?} after the server's start", t0.elapsed());
    assert!(ps.wait_link_up(Duration::from_secs(5)).unwrap(), "the server side never came up");
    pc.stop().unwrap();
    ps.stop().unwrap();
    pc.close().unwrap();
    ps.close().unwrap();
    drop(pool);
    drop(eal);
}
