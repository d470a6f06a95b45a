//! net_ring end to end in one process: ports, configure/start, TX→RX loopback, stats, xstats,
//! mbuf editing, partial TX without leaks, error cases, lcore launch.

mod common;

use droce_dpdk::*;

fn frame(i: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..18].copy_from_slice(&i.to_be_bytes());
    f
}

#[test]
fn ring_loopback_end_to_end() {
    let eal = Eal::init(&common::eal_args(&["-l", "0-1", "--vdev=net_ring0", "--", "app-arg"])).expect("EAL init");
    assert_eq!(eal.app_args(), ["app-arg".to_string()]);
    assert!(is_running());
    assert!(matches!(Eal::init(&common::eal_args(&[])), Err(Error::EalAlreadyInitialized)));

    // ports found: the PMD was really loaded from the driver dir
    assert_eq!(port_count(), 1, "net_ring0 must give one port");
    assert_eq!(port_ids(), vec![PortId(0)]);
    assert_eq!(port_by_name("net_ring0"), Some(PortId(0)));

    // port id out of range
    let e = Port::new(PortId(7)).unwrap_err();
    assert_eq!(e, Error::PortOutOfRange { port: 7, available: vec![0] });
    assert!(e.to_string().contains("valid port ids are 0"), "{e}");

    let pool = Mempool::create("test_pool", &MempoolConfig { n: 4095, cache_size: 0, ..Default::default() }).expect("pool");
    assert_eq!(pool.size(), 4095);
    assert_eq!(pool.in_use_count(), 0);
    let baseline = pool.in_use_count();

    let mut port = Port::new(PortId(0)).unwrap();
    let info = port.info().unwrap();
    assert_eq!(info.driver_name, "net_ring");
    assert_eq!(info.device_name, "net_ring0");
    assert!(info.max_rx_queues >= 1 && info.max_tx_queues >= 1);
    // ring offers no checksum offload; asking for it must enable nothing, not fail
    let cfg = PortConfig::new().rx_desc(512).tx_desc(512).checksum_offload(true).promiscuous(true);
    let conf = port.configure(&cfg, &pool).expect("configure");
    assert_eq!(conf.rx_queues, 1);
    assert_eq!(conf.rx_ipv4_cksum(), info.rx_ipv4_cksum());
    assert_eq!(conf.tx_udp_cksum(), info.tx_udp_cksum());
    // an offload the PMD lacks, asked for explicitly, is an error
    let bad = PortConfig::new().tx_offloads(offload::RTE_ETH_TX_OFFLOAD_TCP_CKSUM);
    if !info.tx_offload_capa & offload::RTE_ETH_TX_OFFLOAD_TCP_CKSUM != 0 {
        assert!(matches!(port.configure(&bad, &pool), Err(Error::OffloadUnsupported { .. })));
        port.configure(&cfg, &pool).expect("reconfigure");
    }
    port.start().expect("start");
    assert!(port.link().unwrap().up);
    assert!(port.promiscuous().unwrap());
    let mac = port.mac_addr().unwrap();
    let new_mac: MacAddr = "02:de:ad:be:ef:01".parse().unwrap();
    // net_ring has no MAC setter: a clean ENOTSUP error, the address unchanged
    match port.set_mac_addr(new_mac) {
        Err(Error::Dpdk { errno, .. }) => assert_eq!(errno, libc::ENOTSUP),
        other => panic!("net_ring set_mac_addr: {other:?}"),
    }
    assert_eq!(port.mac_addr().unwrap(), mac);

    // queue out of range
    let mut batch: MbufBatch<32> = MbufBatch::new();
    assert!(matches!(port.rx_burst(QueueId(1), &mut batch), Err(Error::QueueOutOfRange { queue: 1, .. })));

    // TX then RX on the loopback ring: counts, bytes and contents
    port.reset_stats().unwrap();
    const LEN: usize = 100;
    for i in 0..32u32 {
        batch.push(pool.alloc_from_slice(&frame(i, LEN)).unwrap()).unwrap();
    }
    assert_eq!(pool.in_use_count(), baseline + 32);
    let sent = port.tx_burst(QueueId(0), &mut batch).unwrap();
    assert_eq!(sent, 32);
    assert!(batch.is_empty());
    let mut rx: MbufBatch<64> = MbufBatch::new();
    let got = port.rx_burst(QueueId(0), &mut rx).unwrap();
    assert_eq!(got, 32);
    for (i, m) in rx.iter().enumerate() {
        assert_eq!(m.data(), &frame(i as u32, LEN)[..]);
        assert_eq!(m.refcnt(), 1);
    }
    let st = port.stats().unwrap();
    assert_eq!((st.opackets, st.ipackets), (32, 32), "{st:?}");
    assert_eq!(st.oerrors, 0);
    eprintln!("ring stats after 32x{LEN}B: {st:?}");
    if st.obytes != 0 || st.ibytes != 0 {
        assert_eq!((st.obytes, st.ibytes), (32 * LEN as u64, 32 * LEN as u64));
    }
    let xs = port.xstats().unwrap();
    let names = port.xstat_names().unwrap();
    assert_eq!(xs.len(), names.len());
    let x = |n: &str| xs.iter().find(|x| x.name == n).map(|x| x.value);
    assert_eq!(x("rx_good_packets"), Some(32), "{xs:?}");
    assert_eq!(x("tx_good_packets"), Some(32));
    port.reset_stats().unwrap();
    assert_eq!(port.stats().unwrap(), PortStats::default());
    port.reset_xstats().unwrap();
    assert_eq!(port.xstats().unwrap().iter().find(|x| x.name == "rx_good_packets").map(|x| x.value), Some(0));
    drop(rx);
    assert_eq!(pool.in_use_count(), baseline, "rx batch drop must free all");

    // mbuf editing
    let mut m = pool.alloc().unwrap();
    assert_eq!(m.len(), 0);
    assert_eq!(m.headroom(), 128);
    m.append(10).unwrap().copy_from_slice(b"0123456789");
    m.prepend(4).unwrap().copy_from_slice(b"HDR:");
    assert_eq!(m.data(), b"HDR:0123456789");
    m.adj(4).unwrap();
    m.trim(5).unwrap();
    assert_eq!(m.data(), b"01234");
    assert!(m.adj(6).is_none(), "adj beyond data must fail");
    assert!(m.trim(6).is_none(), "trim beyond data must fail");
    assert!(m.prepend(200).is_none(), "no 200 B headroom");
    assert!(m.append(m.tailroom() + 1).is_none());
    assert_eq!(m.data(), b"01234");
    let raw = m.into_raw();
    // SAFETY: `raw` came from into_raw just above and is owned by nobody else.
    #[allow(unsafe_code)]
    let m = unsafe { Mbuf::from_raw(raw) };
    assert_eq!(m.to_vec(), b"01234");
    drop(m);
    assert_eq!(pool.in_use_count(), baseline);

    // partial TX on a full ring: the ring holds 1023, we offer 2048 in 64-bursts
    let mut txb: MbufBatch<64> = MbufBatch::new();
    let (mut sent, mut dropped) = (0u32, 0u32);
    for _ in 0..32 {
        txb.alloc_bulk(&pool, 64).unwrap();
        for m in txb.iter_mut() {
            m.set_len(60).unwrap().fill(0x5a);
        }
        let (s, d) = port.tx_burst_or_free(QueueId(0), &mut txb).unwrap();
        sent += s as u32;
        dropped += d as u32;
    }
    assert_eq!(sent + dropped, 2048);
    assert_eq!(sent, 1023, "net_ring's ring holds 1023 frames");
    assert_eq!(pool.in_use_count(), baseline + 1023, "dropped frames must go back to the pool");
    // leftover in a batch is freed by tx_burst's caller through Drop
    {
        let mut keep: MbufBatch<16> = MbufBatch::new();
        keep.alloc_bulk(&pool, 16).unwrap();
        let s = port.tx_burst(QueueId(0), &mut keep).unwrap();
        assert_eq!(s, 0, "ring is full");
        assert_eq!(keep.len(), 16);
    }
    assert_eq!(pool.in_use_count(), baseline + 1023);
    // drain the ring
    let mut total = 0;
    for _ in 0..100 {
        let n = port.rx_burst(QueueId(0), &mut rx_batch()).unwrap();
        total += n as u32;
        if n == 0 {
            break;
        }
    }
    assert_eq!(total, 1023);
    assert_eq!(pool.in_use_count(), baseline, "no mbuf leaked");

    // rx_burst_max asks for at most `max`; tx_burst_retry empties the batch
    let mut b64: MbufBatch<64> = MbufBatch::new();
    b64.alloc_bulk(&pool, 40).unwrap();
    for m in b64.iter_mut() {
        m.set_len(60).unwrap();
    }
    assert_eq!(port.tx_burst_retry(QueueId(0), &mut b64, 3).unwrap(), (40, 0));
    assert!(b64.is_empty());
    assert_eq!(port.rx_burst_max(QueueId(0), &mut b64, 10).unwrap(), 10);
    assert_eq!(port.rx_burst_max(QueueId(0), &mut b64, 100).unwrap(), 30);
    assert_eq!(b64.len(), 40);
    drop(b64);
    assert_eq!(pool.in_use_count(), baseline);

    // alloc_frames: single-segment frames of the given length starting with the header,
    // recycled mbufs included (their old content and length must not leak through), and they
    // survive the ring round trip; bad lengths are refused without taking mbufs
    let mut b: MbufBatch<64> = MbufBatch::new();
    b.alloc_bulk(&pool, 64).unwrap();
    for m in b.iter_mut() {
        m.set_len(1000).unwrap().fill(0xee);
    }
    b.clear();
    let hdr: Vec<u8> = (0..42u8).collect();
    assert_eq!(b.alloc_frames(&pool, 48, &hdr, 60).unwrap(), 48);
    assert_eq!(b.alloc_frames(&pool, 48, &hdr, 60).unwrap(), 16, "capped by the free slots");
    for m in b.iter() {
        assert_eq!((m.len(), m.nb_segs()), (60, 1));
        assert_eq!(&m.data()[..42], &hdr[..]);
        assert_eq!(m.headroom() as u32, sys::RTE_PKTMBUF_HEADROOM);
    }
    assert_eq!(port.tx_burst_retry(QueueId(0), &mut b, 3).unwrap(), (64, 0));
    assert_eq!(port.rx_burst_max(QueueId(0), &mut b, 64).unwrap(), 64);
    assert!(b.iter().all(|m| m.len() == 60 && m.data()[..42] == hdr[..]));
    b.clear();
    assert!(matches!(b.alloc_frames(&pool, 4, &hdr, 41), Err(Error::InvalidArgument(_))), "shorter than the header");
    assert!(matches!(b.alloc_frames(&pool, 4, &hdr, 9000), Err(Error::InvalidArgument(_))), "beyond the data room");
    assert!(b.is_empty());
    assert_eq!(pool.in_use_count(), baseline);

    // retain keeps order and frees the rest in bulk
    let mut b: MbufBatch<8> = MbufBatch::new();
    for i in 0..8u8 {
        b.push(pool.alloc_from_slice(&[i]).unwrap()).unwrap();
    }
    assert_eq!(b.retain(|m| m.data()[0] % 2 == 0), 4);
    assert_eq!(b.iter().map(|m| m.data()[0]).collect::<Vec<_>>(), vec![0, 2, 4, 6]);
    let mut popped = b.pop().unwrap();
    assert_eq!(popped.data(), &[6]);
    // AsRef / AsMut are the frame's bytes, writable in place (generic frame holders use them)
    popped.as_mut()[0] = 7;
    assert_eq!(AsRef::<[u8]>::as_ref(&popped), &[7]);
    popped.as_mut()[0] = 6;
    assert!(b.push(popped).is_ok());
    drop(b);
    assert_eq!(pool.in_use_count(), baseline);

    // a drain dropped half-way frees what it did not yield
    let mut b: MbufBatch<8> = MbufBatch::new();
    b.alloc_bulk(&pool, 8).unwrap();
    let first_two: Vec<Mbuf> = b.drain().take(2).collect();
    assert!(b.is_empty());
    assert_eq!(pool.in_use_count(), baseline + 2);
    drop(first_two);
    assert_eq!(pool.in_use_count(), baseline);

    // exhausting the pool is an error, not a crash
    let mut hold = Vec::new();
    loop {
        match pool.alloc() {
            Ok(m) => hold.push(m),
            Err(e) => {
                assert_eq!(e, Error::NoMbufs);
                break;
            }
        }
        assert!(hold.len() <= 4095);
    }
    assert_eq!(hold.len(), 4095);
    drop(hold);
    assert_eq!(pool.in_use_count(), baseline);

    // lcores: main + one worker, closure result and a caught panic
    let main = main_lcore().unwrap();
    assert_eq!(current_lcore(), Some(main));
    let workers = worker_lcores();
    assert_eq!(lcores().len(), 1 + workers.len());
    assert_eq!(workers.len(), 1, "-l 0-1 gives one worker");
    let w = workers[0];
    let h = launch(w, move || current_lcore().map(|l| l.0 as i32).unwrap_or(-5)).unwrap();
    assert_eq!(h.wait().unwrap(), w.0 as i32);
    // the expected panic is not printed: silence the hook for it
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let h = launch(w, || panic!("boom on worker")).unwrap();
    let res = h.wait();
    std::panic::set_hook(hook);
    match res {
        Err(Error::LcorePanicked { message, .. }) => assert!(message.contains("boom"), "{message}"),
        other => panic!("expected a caught panic, got {other:?}"),
    }
    assert!(matches!(launch(main, || 0), Err(Error::Lcore { .. })));
    assert!(matches!(launch(LcoreId(100), || 0), Err(Error::Lcore { .. })));

    // a plain std::thread gets an lcore id (and mempool caches) once registered
    let main_id = main.0;
    let t = std::thread::spawn(move || {
        let before = current_lcore();
        let l = register_thread().unwrap();
        let again = register_thread().unwrap();
        unregister_thread();
        (before, l, again, current_lcore())
    });
    let (before, l, again, after) = t.join().unwrap();
    assert_eq!(before, None);
    assert_ne!(l.0, main_id);
    assert_eq!(again, l, "registering twice keeps the id");
    assert_eq!(after, None);

    // TSC
    assert!(tsc_hz() > 0);
    let t = Tsc::new();
    assert_eq!(t.hz(), tsc_hz());

    port.stop().unwrap();
    port.close().unwrap();
    drop(pool);
    drop(eal);
    assert!(!is_running());
}

fn rx_batch() -> MbufBatch<64> {
    MbufBatch::new()
}
