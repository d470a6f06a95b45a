//! The software-RoCE limit benchmark (not a test): two processes over a DPDK port (memif),
//! doing only the per-frame work no software RoCE can avoid, at droce's frame sizes:
//! - `tx`: copies MTU bytes of payload from a buffer into each frame behind a fixed
//!   Eth/IPv4/UDP/BTH header and runs one CRC-32 pass (droce's own kernel,
//!   `icrc::crc32_update`) over IP header to payload, stored as the 4-byte trailer;
//! - `rx`: runs one CRC-32 pass over the same bytes, checks it against the trailer, and copies
//!   the payload into a buffer.
//! No protocol, no ACKs, no completions: what `droce-pmd --test=write_bw` is measured against
//! (the software-RoCE yardstick of `docs/design.md`; `scripts/bench-limit.sh` runs both
//! alternately).
//!
//! ```text
//! roce_limit -l 0 --no-huge -m 1024 --no-pci --no-shconf --file-prefix=rx \
//!     --vdev=net_memif0,role=server,socket=/tmp/l.sock,socket-abstract=no -- rx 3 1024
//! roce_limit -l 1 --no-huge -m 1024 --no-pci --no-shconf --file-prefix=tx \
//!     --vdev=net_memif0,role=client,socket=/tmp/l.sock,socket-abstract=no -- tx 5 1024
//! ```
//! App arguments: `tx|rx SECONDS MTU [BURST=32] [BUF_KIB=8192]`: BUF_KIB is the application
//! buffer the payload is cycled through on each side (8 MiB: beyond the L2 cache, like a bulk
//! transfer's region; 64: what `write_bw -s 65536` touches, for a like-for-like limit). The receiver measures SECONDS from its
//! first frame and prints goodput (payload bytes/s), frames/s, wall ns per frame, CPU ns per
//! frame (its thread's CPU time from /proc/thread-self/schedstat) and the ns per frame spent
//! in the CRC + copy alone; the sender prints the same for its side. Run the sender longer
//! than the receiver's window.

use droce_dpdk::*;
use droce_transport::wire::icrc::{crc32_update, LRH_SEED};

const BURST_MAX: usize = 64;
/// Eth 14 + IPv4 20 + UDP 8 + BTH 12: a RoCEv2 RDMA WRITE middle packet's headers.
const HDR: usize = 54;
/// The application buffers the payload comes from and goes to (cycled through), by default:
/// larger than the L2 cache, like a registered region of a bulk transfer.
const BUF_KIB_DEFAULT: usize = 8 << 10;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Err(e) = run(&args) {
        eprintln!("roce_limit: {e}");
        std::process::exit(1);
    }
}

fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let eal = droce_dpdk::runtime::start_eal(args, false)?;
    let app = eal.app_args().to_vec();
    let usage = "app args: tx|rx SECONDS MTU [BURST=32] [BUF_KIB=8192]";
    let mode = app.first().ok_or(usage)?.clone();
    let secs: f64 = app.get(1).ok_or(usage)?.parse()?;
    let mtu: usize = app.get(2).ok_or(usage)?.parse()?;
    let burst: usize = app.get(3).map(|s| s.parse()).transpose()?.unwrap_or(32);
    let buf_len = app.get(4).map(|s| s.parse::<usize>()).transpose()?.unwrap_or(BUF_KIB_DEFAULT) * 1024;
    if !(1..=BURST_MAX).contains(&burst) || !(256..=4096).contains(&mtu) || mtu % 4 != 0 || buf_len < mtu || buf_len > 1 << 30 {
        return Err(format!("burst 1..={BURST_MAX}, MTU 256..=4096 and a multiple of 4, BUF_KIB from MTU/1024 to 1 GiB; {usage}").into());
    }
    let frame_len = HDR + mtu + 4;
    let data_room = if frame_len + 128 > 2048 { 9216 + 128 } else { MempoolConfig::default().data_room };
    let pool = Mempool::create("limit_pool", &MempoolConfig { n: 16383, cache_size: 512, data_room, ..Default::default() })?;
    let mut port = Port::new(*port_ids().first().ok_or("no port: add --vdev=...")?)?;
    port.configure(&PortConfig::new().rx_desc(1024).tx_desc(1024), &pool)?;
    port.start()?;
    if !port.wait_link_up(std::time::Duration::from_secs(15))? {
        return Err("link did not come up within 15 s".into());
    }

    let mut hdr = [0u8; HDR];
    hdr[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    hdr[6..12].copy_from_slice(&port.mac_addr()?.0);
    hdr[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = (frame_len - 14) as u16;
    hdr[14] = 0x45;
    hdr[16..18].copy_from_slice(&ip_len.to_be_bytes());
    hdr[22] = 64;
    hdr[23] = 17;
    hdr[26..30].copy_from_slice(&[10, 77, 0, 2]);
    hdr[30..34].copy_from_slice(&[10, 77, 0, 1]);
    hdr[34..36].copy_from_slice(&0xc000u16.to_be_bytes());
    hdr[36..38].copy_from_slice(&4791u16.to_be_bytes());
    hdr[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    hdr[42] = 0x07; // RC RDMA WRITE middle
    hdr[44..46].copy_from_slice(&0xffffu16.to_be_bytes());

    let mut buf: Vec<u8> = (0..buf_len).map(|i| (i * 131 + (i >> 12)) as u8).collect();
    let slots = buf_len / mtu;
    let tsc = Tsc::new();
    let q = QueueId(0);
    let mut batch: MbufBatch<BURST_MAX> = MbufBatch::new();
    let (mut frames, mut bad, mut slot, mut work_cycles) = (0u64, 0u64, 0usize, 0u64);
    let window = tsc.ns_to_cycles((secs * 1e9) as u64);
    let mut start: Option<(u64, u64)> = None; // (tsc, thread CPU ns) at the first frame
    let mut iter = 0u64;
    let t_begin = rdtsc();
    loop {
        iter += 1;
        if iter & 255 == 0 {
            match start {
                Some((t, _)) if rdtsc().wrapping_sub(t) > window => break,
                // the receiver gives up when no sender shows up within 30 s
                None if rdtsc().wrapping_sub(t_begin) > tsc.ns_to_cycles(30_000_000_000) => {
                    return Err("no frame within 30 s".into());
                }
                _ => {}
            }
        }
        match mode.as_str() {
            "tx" => {
                if start.is_none() {
                    start = Some((rdtsc(), thread_cpu_ns()));
                }
                let have = batch.len();
                if have < burst && batch.alloc_frames(&pool, burst - have, &hdr, frame_len as u16).is_ok() {
                    let t = rdtsc();
                    for m in &mut batch.as_mut_slice()[have..] {
                        let d = m.data_mut();
                        let off = slot * mtu;
                        slot = if slot + 1 == slots { 0 } else { slot + 1 };
                        d[HDR..HDR + mtu].copy_from_slice(&buf[off..off + mtu]);
                        let crc = crc32_update(LRH_SEED, &d[14..HDR + mtu]);
                        d[HDR + mtu..].copy_from_slice(&crc.to_le_bytes());
                    }
                    work_cycles += rdtsc().wrapping_sub(t);
                }
                frames += port.tx_burst(q, &mut batch)? as u64;
            }
            "rx" => {
                let n = port.rx_burst(q, &mut batch)?;
                if n == 0 {
                    continue;
                }
                if start.is_none() {
                    start = Some((rdtsc(), thread_cpu_ns()));
                }
                let t = rdtsc();
                for m in batch.iter() {
                    let d = m.data();
                    if d.len() != frame_len {
                        bad += 1;
                        continue;
                    }
                    let crc = crc32_update(LRH_SEED, &d[14..HDR + mtu]);
                    if crc.to_le_bytes() != d[HDR + mtu..] {
                        bad += 1;
                        continue;
                    }
                    let off = slot * mtu;
                    slot = if slot + 1 == slots { 0 } else { slot + 1 };
                    buf[off..off + mtu].copy_from_slice(&d[HDR..HDR + mtu]);
                }
                work_cycles += rdtsc().wrapping_sub(t);
                frames += n as u64;
                batch.clear();
            }
            other => return Err(format!("unknown mode '{other}'; {usage}").into()),
        }
    }
    let (t0, cpu0) = start.ok_or("no frame")?;
    let ns = tsc.cycles_to_ns(rdtsc().wrapping_sub(t0)) as f64;
    let cpu = thread_cpu_ns().saturating_sub(cpu0) as f64;
    let f = frames.max(1) as f64;
    println!(
        "roce_limit {mode} mtu={mtu} frame={frame_len} burst={burst} buf_kib={} secs={:.2} frames={frames} bad={bad} \
         goodput_MBps={:.1} mpps={:.3} wall_ns_per_frame={:.1} cpu_ns_per_frame={:.1} work_ns_per_frame={:.1}",
        buf_len / 1024,
        ns / 1e9,
        frames as f64 * mtu as f64 / ns * 1e3,
        frames as f64 / ns * 1e3,
        ns / f,
        cpu / f,
        tsc.cycles_to_ns(work_cycles) as f64 / f,
    );
    drop(batch);
    port.stop()?;
    port.close()?;
    drop(pool);
    drop(eal);
    Ok(())
}

/// CPU time of the calling thread in ns (first field of /proc/thread-self/schedstat).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}
