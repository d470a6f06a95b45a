//! net_af_packet over a veth pair inside a network namespace the test creates for itself:
//! frames sent on one end arrive on the other with the same bytes.

mod common;

use droce_dpdk::*;

const ETHERTYPE: [u8; 2] = [0x88, 0xb5]; // IEEE local experimental

fn ip(args: &[&str]) -> bool {
    std::process::Command::new("ip").args(args).status().map(|s| s.success()).unwrap_or(false)
}

#[test]
#[allow(unsafe_code)]
fn af_packet_over_veth() {
    // SAFETY: unshare only changes this process's namespace; this test file is its own process.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        eprintln!("SKIPPED: cannot create a network namespace: {}", std::io::Error::last_os_error());
        return;
    }
    // the namespace (and the veth pair in it) disappears when this process exits
    if !ip(&["link", "add", "dveth0", "type", "veth", "peer", "name", "dveth1"]) {
        eprintln!("SKIPPED: `ip link add ... type veth` failed (iproute2 or veth missing)");
        return;
    }
    assert!(ip(&["link", "set", "dveth0", "up"]) && ip(&["link", "set", "dveth1", "up"]));
    let eal = Eal::init(&common::eal_args(&["--vdev=net_af_packet0,iface=dveth0", "--vdev=net_af_packet1,iface=dveth1"]))
        .expect("EAL init with af_packet");
    let pool = Mempool::create("afp_pool", &MempoolConfig { n: 8191, ..Default::default() }).unwrap();
    let mut a = Port::new(port_by_name("net_af_packet0").unwrap()).unwrap();
    let mut b = Port::new(port_by_name("net_af_packet1").unwrap()).unwrap();
    assert_eq!(a.info().unwrap().driver_name, "net_af_packet");
    a.configure(&PortConfig::new(), &pool).unwrap();
    b.configure(&PortConfig::new().promiscuous(true), &pool).unwrap();
    a.start().unwrap();
    b.start().unwrap();

    const N: u32 = 500;
    let src = a.mac_addr().unwrap().0;
    let dst = b.mac_addr().unwrap().0;
    let mut tx: MbufBatch<32> = MbufBatch::new();
    let mut rx: MbufBatch<32> = MbufBatch::new();
    let (mut sent, mut got, mut in_order) = (0u32, 0u32, true);
    let t0 = std::time::Instant::now();
    while (sent < N || got < sent) && t0.elapsed() < std::time::Duration::from_secs(10) {
        if sent < N && tx.is_empty() {
            let n = (N - sent).min(32) as usize;
            tx.alloc_bulk(&pool, n).unwrap();
            for (i, m) in tx.iter_mut().enumerate() {
                let f = m.set_len(100).unwrap();
                f.fill(0xa5);
                f[0..6].copy_from_slice(&dst);
                f[6..12].copy_from_slice(&src);
                f[12..14].copy_from_slice(&ETHERTYPE);
                f[14..18].copy_from_slice(&(sent + i as u32).to_be_bytes());
            }
        }
        sent += a.tx_burst(QueueId(0), &mut tx).unwrap() as u32;
        b.rx_burst(QueueId(0), &mut rx).unwrap();
        for m in rx.drain() {
            // the kernel may put its own frames (IPv6 ND) on the link: count ours only
            if m.data().len() >= 18 && m.data()[12..14] == ETHERTYPE {
                in_order &= m.len() == 100 && u32::from_be_bytes(m.data()[14..18].try_into().unwrap()) == got;
                got += 1;
            }
        }
    }
    drop(tx);
    drop(rx);
    assert_eq!(sent, N);
    assert_eq!(got, N, "every frame crossed the veth pair");
    assert!(in_order, "frames intact and in order");
    assert!(a.stats().unwrap().opackets >= N as u64);
    a.stop().unwrap();
    b.stop().unwrap();
    a.close().unwrap();
    b.close().unwrap();
    drop(pool);
    drop(eal);
}
