//! net_pcap: frames read from an rx_pcap file arrive intact (including frames larger than one
//! mbuf, which come as segment chains), and frames sent to a tx_pcap file are written intact.

mod common;

use droce_dpdk::*;

fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0u8; 8]);
    out.extend_from_slice(&262_144u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes()); // Ethernet
    for (i, f) in frames.iter().enumerate() {
        out.extend_from_slice(&(i as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    std::fs::write(path, out).unwrap();
}

fn read_pcap(path: &std::path::Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap();
    let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
    assert!(magic == 0xa1b2_c3d4 || magic == 0xa1b2_3c4d, "little-endian pcap (us or ns), magic {magic:#x}");
    let mut off = 24;
    let mut frames = Vec::new();
    while off + 16 <= b.len() {
        let caplen = u32::from_le_bytes(b[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16;
        frames.push(b[off..off + caplen].to_vec());
        off += caplen;
    }
    frames
}

fn frames() -> Vec<Vec<u8>> {
    [60usize, 64, 1514, 4000, 9000, 61, 128]
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let mut f: Vec<u8> = (0..len).map(|j| (j * 7 + i) as u8).collect();
            f[12..14].copy_from_slice(&[0x88, 0xb5]);
            f
        })
        .collect()
}

#[test]
fn pcap_rx_and_tx_files() {
    let tmp = common::TempDir::new("pcap-test");
    let dir = tmp.0.clone();
    let rx_file = dir.join("in.pcap");
    let tx_file = dir.join("out.pcap");
    let want = frames();
    write_pcap(&rx_file, &want);
    let vdev = format!("--vdev=net_pcap0,rx_pcap={},tx_pcap={}", rx_file.display(), tx_file.display());
    let eal = Eal::init(&common::eal_args(&[vdev.as_str()])).expect("EAL init with net_pcap");
    let pool = Mempool::create("pcap_pool", &MempoolConfig { n: 2047, cache_size: 0, ..Default::default() }).unwrap();
    let mut port = Port::new(PortId(0)).unwrap();
    assert_eq!(port.info().unwrap().driver_name, "net_pcap");
    // frames above one mbuf's room need multi-segment TX
    let cfg = PortConfig::new().tx_offloads(offload::RTE_ETH_TX_OFFLOAD_MULTI_SEGS & port.info().unwrap().tx_offload_capa);
    port.configure(&cfg, &pool).unwrap();
    port.start().unwrap();

    let mut batch: MbufBatch<32> = MbufBatch::new();
    let t0 = std::time::Instant::now();
    while batch.len() < want.len() && t0.elapsed() < std::time::Duration::from_secs(5) {
        port.rx_burst(QueueId(0), &mut batch).unwrap();
    }
    assert_eq!(batch.len(), want.len(), "every frame of the file received");
    for (m, w) in batch.iter().zip(&want) {
        assert_eq!(m.len(), w.len());
        assert_eq!(&m.to_vec(), w);
        if w.len() > 2048 {
            assert!(m.nb_segs() > 1, "a {} B frame spans several mbufs", w.len());
        }
    }
    let st = port.stats().unwrap();
    assert_eq!(st.ipackets, want.len() as u64);
    assert_eq!(st.ibytes, want.iter().map(|f| f.len() as u64).sum::<u64>());

    let (sent, dropped) = port.tx_burst_retry(QueueId(0), &mut batch, 10).unwrap();
    assert_eq!((sent as usize, dropped), (want.len(), 0));
    port.stop().unwrap();
    port.close().unwrap(); // flushes and closes the tx_pcap file
    assert_eq!(pool.in_use_count(), 0, "no mbuf leaked");
    assert_eq!(read_pcap(&tx_file), want, "tx_pcap holds what was sent");
    drop(pool);
    drop(eal);
}
