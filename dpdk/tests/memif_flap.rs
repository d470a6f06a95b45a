//! A memif peer that disconnects while this process bursts at full speed: no crash.
//!
//! net_memif tears a port down from DPDK's interrupt thread when its peer disconnects (it
//! unmaps the shared rings); a burst running at that instant read unmapped memory (SIGSEGV)
//! before the interrupt-thread gate (`droce_dpdk::intr_gate`). Here a server port is polled
//! (RX and TX bursts, nothing else) by a second thread while the main thread starts and stops
//! a client port on the same socket over and over: every stop is a disconnect the server's
//! side handles on the interrupt thread, mid-burst. Without the gate (`DROCE_INTR_GATE=off`)
//! this process dies of SIGSEGV within a few hundred flaps on this machine.

mod common;

use droce_dpdk::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const FLAPS: u32 = 1000;

#[test]
fn memif_peer_disconnects_mid_burst() {
    let tmp = common::TempDir::new("memif-flap");
    let sock = tmp.0.join("memif.sock");
    // big rings and long TX bursts: the server is inside a burst most of the time
    let s = format!("--vdev=net_memif0,role=server,socket={},socket-abstract=no,rsize=13", sock.display());
    let c = format!("--vdev=net_memif1,role=client,socket={},socket-abstract=no,rsize=13", sock.display());
    let eal = Eal::init(&common::eal_args(&[s.as_str(), c.as_str()])).expect("EAL init with memif");
    assert!(intr_gate::stats().armed || std::env::var("DROCE_INTR_GATE").is_ok(), "the gate is armed by Eal::init");
    let pool = Arc::new(Mempool::create("flap_pool", &MempoolConfig { n: 16383, ..Default::default() }).unwrap());
    let mut ps = Port::new(port_by_name("net_memif0").unwrap()).unwrap();
    let mut pc = Port::new(port_by_name("net_memif1").unwrap()).unwrap();
    ps.configure(&PortConfig::new(), &pool).unwrap();
    pc.configure(&PortConfig::new(), &pool).unwrap();
    ps.start().unwrap();

    // the server side: bursts only, as a datapath lcore does
    let stop = Arc::new(AtomicBool::new(false));
    let (rx_frames, tx_frames) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let poller = {
        let (stop, pool, ps) = (stop.clone(), pool.clone(), ps.clone());
        let (rx_frames, tx_frames) = (rx_frames.clone(), tx_frames.clone());
        std::thread::spawn(move || {
            let mut rx: MbufBatch<32> = MbufBatch::new();
            let mut tx: MbufBatch<256> = MbufBatch::new();
            let t0 = Instant::now();
            while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(120) {
                let n = ps.rx_burst(QueueId(0), &mut rx).unwrap();
                rx_frames.fetch_add(n as u64, Ordering::Relaxed);
                rx.clear();
                if tx.is_empty() && tx.alloc_bulk(&pool, 256).is_ok() {
                    for m in tx.iter_mut() {
                        m.set_len(2000).unwrap()[..14].fill(0xff);
                    }
                }
                let (sent, _) = ps.tx_burst_or_free(QueueId(0), &mut tx).unwrap();
                tx_frames.fetch_add(sent as u64, Ordering::Relaxed);
            }
        })
    };

    // the client side: connect, exchange a little, disconnect; FLAPS times
    let mut ups = 0u32;
    let mut rx: MbufBatch<32> = MbufBatch::new();
    let mut tx: MbufBatch<32> = MbufBatch::new();
    let t_all = Instant::now();
    let mut flaps = 0u32;
    // 1000 flaps take ~6 s on a quiet host; a host loaded by parallel builds made it more than
    // 15 minutes (each link-up waits up to 5 s): past 60 s, stop at the next flap once 100 are done
    while flaps < FLAPS && !(flaps >= 100 && t_all.elapsed() > Duration::from_secs(60)) {
        flaps += 1;
        pc.start().unwrap();
        let t0 = Instant::now();
        while !pc.link().unwrap().up && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_micros(200));
        }
        if pc.link().unwrap().up {
            ups += 1;
            for _ in 0..20 {
                if tx.is_empty() {
                    tx.alloc_bulk(&pool, 8).unwrap();
                    for m in tx.iter_mut() {
                        m.set_len(512).unwrap()[..14].fill(0xff);
                    }
                }
                pc.tx_burst_or_free(QueueId(0), &mut tx).unwrap();
                pc.rx_burst(QueueId(0), &mut rx).unwrap();
                rx.clear();
            }
        }
        pc.stop().unwrap();
    }
    let flap_time = t_all.elapsed();
    stop.store(true, Ordering::Relaxed);
    poller.join().expect("poller thread");
    let g = intr_gate::stats();
    eprintln!(
        "{flaps} flaps ({ups} with link up) in {flap_time:?}; server burst {} RX / {} TX frames; gate: {} windows, {} waits, longest window {} us",
        rx_frames.load(Ordering::Relaxed),
        tx_frames.load(Ordering::Relaxed),
        g.windows,
        g.waits,
        g.window_ns_max / 1000
    );
    // the link came up again after (nearly) every disconnect: each flap was a real disconnect
    assert!(ups >= flaps * 9 / 10, "client link up in only {ups} of {flaps} starts");
    assert!(tx_frames.load(Ordering::Relaxed) > 0, "the server sent while connected");
    ps.stop().unwrap();
    pc.close().unwrap();
    ps.close().unwrap();
    drop(rx);
    drop(tx);
    drop(pool);
    drop(eal);
}
