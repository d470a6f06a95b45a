//! Microbenchmark of the burst API (not a test): txonly or rxonly on port 0 of whatever the
//! EAL arguments create, run on the main lcore for a fixed time, printing Mpps.
//!
//! ```text
//! cargo run --release -p droce-dpdk --example burst_bench -- \
//!     --no-huge -m 512 --no-pci --no-shconf --file-prefix=bench-$$ -l 0 --vdev=net_null0 \
//!     -- txonly 5 64 32
//! ```
//! App arguments: `txonly|rxonly|io|ping SECONDS [PKT_SIZE=64] [BURST=32]`.
//! `ping` sends one frame and spins until it comes back from a peer running `io`, then prints
//! the round-trip times: the raw floor under every latency figure over that port.

use droce_dpdk::*;

const BURST_MAX: usize = 64;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Err(e) = run(&args) {
        eprintln!("burst_bench: {e}");
        std::process::exit(1);
    }
}

fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let eal = droce_dpdk::runtime::start_eal(args, false)?;
    let app = eal.app_args().to_vec();
    let usage = "app args: txonly|rxonly|io|ping SECONDS [PKT_SIZE=64] [BURST=32]";
    let mode = app.first().ok_or(usage)?.clone();
    let secs: f64 = app.get(1).ok_or(usage)?.parse()?;
    let size: u16 = app.get(2).map(|s| s.parse()).transpose()?.unwrap_or(64);
    let burst: usize = app.get(3).map(|s| s.parse()).transpose()?.unwrap_or(32);
    if !(1..=BURST_MAX).contains(&burst) || size < 60 {
        return Err(format!("burst 1..={BURST_MAX}, size >= 60; {usage}").into());
    }
    let pool = Mempool::create("bench_pool", &MempoolConfig { n: 16383, cache_size: 512, ..Default::default() })?;
    let mut port = Port::new(*port_ids().first().ok_or("no port: add --vdev=...")?)?;
    port.configure(&PortConfig::new().promiscuous(true), &pool)?;
    port.start()?;
    let t0 = std::time::Instant::now();
    while !port.link()?.up && t0.elapsed().as_secs() < 15 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if !port.link()?.up {
        return Err("link did not come up within 15 s".into());
    }
    port.reset_stats()?;

    // Ethernet / IPv4 / UDP template, like dpdk-testpmd txonly.
    let mut tmpl = [0u8; 42];
    tmpl[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    tmpl[6..12].copy_from_slice(&port.mac_addr()?.0);
    tmpl[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = size - 14;
    tmpl[14] = 0x45;
    tmpl[16..18].copy_from_slice(&ip_len.to_be_bytes());
    tmpl[22] = 64;
    tmpl[23] = 17;
    tmpl[26..30].copy_from_slice(&[198, 18, 0, 1]);
    tmpl[30..34].copy_from_slice(&[198, 18, 0, 2]);
    tmpl[34..36].copy_from_slice(&9u16.to_be_bytes());
    tmpl[36..38].copy_from_slice(&9u16.to_be_bytes());
    tmpl[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    // Same as dpdk-testpmd --txpkts=SIZE: SIZE bytes of frame in the mbuf (CRC not included).
    let frame_len = size;

    let tsc = Tsc::new();
    let end = tsc.ns_to_cycles((secs * 1e9) as u64);
    let start = tsc.now();
    let (mut tx_pkts, mut rx_pkts, mut dropped, mut nombuf) = (0u64, 0u64, 0u64, 0u64);
    let mut batch: MbufBatch<BURST_MAX> = MbufBatch::new();
    let q = QueueId(0);
    let mut iter = 0u64;
    let mut rtts: Vec<u64> = Vec::new();
    loop {
        iter += 1;
        if iter & 1023 == 0 && rdtsc().wrapping_sub(start.0) > end {
            break;
        }
        match mode.as_str() {
            "txonly" => {
                if batch.alloc_bulk(&pool, burst).is_err() {
                    nombuf += 1;
                    continue;
                }
                for m in batch.iter_mut() {
                    if let Some(d) = m.set_len(frame_len) {
                        d[..42].copy_from_slice(&tmpl);
                    }
                }
                let (s, d) = port.tx_burst_or_free(q, &mut batch)?;
                tx_pkts += s as u64;
                dropped += d as u64;
            }
            "rxonly" => {
                rx_pkts += port.rx_burst(q, &mut batch)? as u64;
                batch.clear();
            }
            "ping" => {
                // One frame out, spin until one comes back (the peer runs `io`): the raw
                // round trip that bounds every latency test over this port.
                if batch.alloc_bulk(&pool, 1).is_err() {
                    nombuf += 1;
                    continue;
                }
                if let Some(d) = batch.iter_mut().next().and_then(|m| m.set_len(frame_len)) {
                    d[..42].copy_from_slice(&tmpl);
                }
                let t = rdtsc();
                let (s, d) = port.tx_burst_or_free(q, &mut batch)?;
                tx_pkts += s as u64;
                dropped += d as u64;
                if s == 1 {
                    let mut got = 0;
                    for _ in 0..10_000_000u32 {
                        got = port.rx_burst(q, &mut batch)?;
                        if got > 0 {
                            break;
                        }
                    }
                    rx_pkts += got as u64;
                    batch.clear();
                    if got > 0 {
                        rtts.push(rdtsc().wrapping_sub(t));
                    }
                }
            }
            "io" => {
                rx_pkts += port.rx_burst(q, &mut batch)? as u64;
                let (s, d) = port.tx_burst_or_free(q, &mut batch)?;
                tx_pkts += s as u64;
                dropped += d as u64;
            }
            other => return Err(format!("unknown mode '{other}'; {usage}").into()),
        }
    }
    let ns = tsc.elapsed_ns(start) as f64;
    let st = port.stats()?;
    println!(
        "mode={mode} size={size} burst={burst} secs={:.2} tx={tx_pkts} rx={rx_pkts} dropped={dropped} nombuf={nombuf} \
         tx_mpps={:.3} rx_mpps={:.3} port_opackets={} port_ipackets={}",
        ns / 1e9,
        tx_pkts as f64 / ns * 1e3,
        rx_pkts as f64 / ns * 1e3,
        st.opackets,
        st.ipackets
    );
    if !rtts.is_empty() {
        rtts.sort_unstable();
        let us = |c: u64| tsc.cycles_to_ns(c) as f64 / 1e3;
        println!(
            "ping: {} round trips, rtt min {:.2} us median {:.2} us p99 {:.2} us; half round trip median {:.2} us",
            rtts.len(),
            us(rtts[0]),
            us(rtts[rtts.len() / 2]),
            us(rtts[rtts.len() * 99 / 100]),
            us(rtts[rtts.len() / 2]) / 2.0
        );
    }
    port.stop()?;
    port.close()?;
    drop(batch);
    drop(pool);
    drop(eal);
    Ok(())
}
