//! Frames per second through two devices in the deterministic simulation (perfect link):
//! RC SEND of 64 B and RC WRITE of 4 KiB (path MTU 1024 and 4096), UD SEND of 64 B.
//! Prints a table; run with `cargo bench -p droce-transport --features sim --bench sim`.
//! The figure counts every frame both devices put on the wire (requests and ACKs) and is
//! the cost of the transport itself: frame build + ICRC + parse + ICRC + QP processing,
//! on one core, with no NIC or copy to a driver.

use droce_transport::qp::PathMtu;
use droce_transport::qp::QpHandle;
use droce_transport::sim::{LinkConfig, Pair, RcOpts, MEM_BASE};
use droce_transport::verbs::{RecvWr, SendOpcode, SendWr};
use droce_transport::QKey;
use std::time::Instant;

const WINDOW: usize = 64;

struct Case {
    name: &'static str,
    op: SendOpcode,
    len: u32,
    mtu: PathMtu,
    ud: bool,
    msgs: u64,
}

/// CPU time of this thread in seconds: the first field of /proc/thread-self/schedstat
/// (nanoseconds on the CPU), or utime + stime from /proc/self/stat (100 Hz ticks) where
/// schedstat is missing. The machine is shared, so rates are given per CPU-second as well
/// as per wall second.
fn cpu_seconds() -> f64 {
    if let Some(ns) = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()))
    {
        return ns as f64 / 1e9;
    }
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / 100.0
}

fn run(c: &Case) -> (f64, f64, f64, u64, f64) {
    let mut p = Pair::new(LinkConfig::PERFECT, 42, 1 << 22);
    p.link.delay = droce_transport::Duration(0);
    let eth_mtu = if c.mtu == PathMtu::Mtu4096 { 9000 } else { 1500 };
    if eth_mtu != 1500 {
        // rebuild with a jumbo-frame port
        p = jumbo_pair();
    }
    let (qa, qb): (QpHandle, QpHandle) = if c.ud {
        p.ud_pair(QKey(0x1111))
    } else {
        p.rc_pair(RcOpts { mtu: c.mtu, timeout: 14, ..RcOpts::default() })
    };
    let dest = p.ud_dest(true, qb, QKey(0x1111));
    let (la, lb, rkb) = (p.a.mr.lkey, p.b.mr.lkey, p.b.mr.rkey);
    let needs_recv = c.op == SendOpcode::Send;
    let (mut posted, mut done) = (0u64, 0u64);
    let mut outstanding = 0usize;
    let t0 = Instant::now();
    let c0 = cpu_seconds();
    while done < c.msgs {
        while posted < c.msgs && outstanding < WINDOW {
            if needs_recv {
                p.b.dev.post_recv(qb, RecvWr::new(posted).with_sge(MEM_BASE + (1 << 21), 8192, lb)).unwrap();
            }
            let mut wr = SendWr::new(posted, c.op).with_sge(MEM_BASE, c.len, la).with_remote(MEM_BASE + (1 << 20), rkb);
            if c.ud {
                wr = wr.with_ud(dest);
            }
            p.a.dev.post_send(qa, wr).unwrap();
            posted += 1;
            outstanding += 1;
        }
        p.step();
        while let Some(wc) = p.a.poll() {
            assert_eq!(wc.status, droce_transport::status::WcStatus::Success);
            done += 1;
            outstanding -= 1;
        }
        while p.b.poll().is_some() {}
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (cpu_seconds() - c0).max(1e-6);
    let frames = p.stats.sent;
    (frames as f64 / cpu, c.msgs as f64 / cpu, c.msgs as f64 * c.len as f64 * 8.0 / cpu / 1e9, frames, frames as f64 / wall)
}

fn jumbo_pair() -> Pair {
    // Same as Pair::new but with 9000-byte Ethernet MTU devices (IB MTU 4096).
    Pair::with_eth_mtu(LinkConfig { delay: droce_transport::Duration(0), ..LinkConfig::PERFECT }, 42, 1 << 22, 9000)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick") || std::env::var_os("DROCE_BENCH_QUICK").is_some();
    let k = if quick { 10 } else { 1 };
    let cases = [
        Case { name: "RC SEND 64 B", op: SendOpcode::Send, len: 64, mtu: PathMtu::Mtu1024, ud: false, msgs: 2_000_000 / k },
        Case { name: "RC WRITE 4 KiB (MTU 1024)", op: SendOpcode::Write, len: 4096, mtu: PathMtu::Mtu1024, ud: false, msgs: 500_000 / k },
        Case { name: "RC WRITE 4 KiB (MTU 4096)", op: SendOpcode::Write, len: 4096, mtu: PathMtu::Mtu4096, ud: false, msgs: 1_000_000 / k },
        Case { name: "UD SEND 64 B", op: SendOpcode::Send, len: 64, mtu: PathMtu::Mtu1024, ud: true, msgs: 2_000_000 / k },
    ];
    println!("| case | frames/CPU-s (both directions) | messages/CPU-s | payload Gbit/CPU-s | frames | frames/wall-s |");
    println!("|---|---:|---:|---:|---:|---:|");
    for c in &cases {
        let (fps, mps, gbps, frames, wall_fps) = run(c);
        println!("| {} | {:.2} M | {:.2} M | {:.2} | {} | {:.2} M |", c.name, fps / 1e6, mps / 1e6, gbps, frames, wall_fps / 1e6);
    }
}
