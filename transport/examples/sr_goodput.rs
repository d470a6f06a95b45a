//! Goodput of one stream of 64 KiB RDMA WRITEs over a simulated 10 Gb/s link with 5 µs of
//! propagation delay each way, at 0 %, 0.1 %, 1 % and 3 % random frame loss (both directions), with
//! go-back-N and with selective repeat (docs/selective-repeat.md). Simulated time: the
//! figures are the same on every machine and every run.
//!
//! `cargo run --release -p droce-transport --example sr_goodput [messages]`

#[path = "../tests/sr_net/mod.rs"]
mod sr_net;

use droce_transport::sim::{RcOpts, MEM_BASE};
use droce_transport::status::WcStatus;
use droce_transport::verbs::{SendFlags, SendOpcode, SendWr};
use droce_transport::{DeviceConfig, Memory};
use sr_net::{bth, is_request, Fate, Link, Net};
use std::cell::Cell;
use std::rc::Rc;

const MSG: u64 = 64 * 1024;
/// The loss rates besides 0 %: 1 % is the target's; the others show how the two recoveries
/// scale (several holes per round trip at 3 %).
const LOSSES: [f64; 3] = [0.001, 0.01, 0.03];
/// WRITEs kept posted: enough that the requester's window, not the application, limits.
const DEPTH: u64 = 8;

struct Run {
    goodput_gbps: f64,
    /// Request frames sent beyond the 64 each message takes.
    resent: u64,
    timeouts: u64,
    dropped: u64,
    sim_ms: f64,
}

fn stream(sr: bool, loss: f64, msgs: u64, seed: u64) -> Run {
    let link = Link { loss, ..Link::CLEAN };
    let mut n = Net::new(link, seed, 2 * (DEPTH * MSG) as usize, DeviceConfig::default());
    // timeout 8: 4.096 µs * 2^8, about 1 ms, the usual order for RoCE NICs in a data centre
    let (qa, _) = n.rc_pair(RcOpts { timeout: 8, ..RcOpts::default() }, sr, sr);
    let (la, rkb) = (n.a.mr.lkey, n.b.mr.rkey);
    let src = MEM_BASE;
    let dst = MEM_BASE + DEPTH * MSG;
    let data: Vec<u8> = (0..DEPTH * MSG).map(|i| (i * 7 + i / 4096) as u8).collect();
    n.a.dev.memory_mut().write(src, &data).unwrap();
    let requests = Rc::new(Cell::new(0u64));
    let r = requests.clone();
    n.script = Some(Box::new(move |to_b, f| {
        if to_b && bth(f).is_some_and(|(op, _)| is_request(op)) {
            r.set(r.get() + 1);
        }
        Fate::Pass
    }));
    let (mut posted, mut done) = (0u64, 0u64);
    let mut steps = 0u64;
    while done < msgs {
        while posted < msgs && posted - done < DEPTH {
            let slot = posted % DEPTH;
            let wr = SendWr::new(posted, SendOpcode::Write)
                .with_sge(src + slot * MSG, MSG as u32, la)
                .with_remote(dst + slot * MSG, rkb)
                .with_flags(SendFlags::SIGNALED);
            n.a.dev.post_send(qa, wr).unwrap();
            posted += 1;
        }
        n.step();
        while let Some(wc) = n.a.poll() {
            assert_eq!((wc.wr_id, wc.status), (done, WcStatus::Success));
            done += 1;
        }
        steps += 1;
        assert!(steps < msgs * 1_000_000, "stuck");
    }
    assert!(n.b.dev.memory().slice(dst, (DEPTH * MSG) as usize) == &data[..], "data differs");
    let c = n.a.dev.counters();
    let secs = n.now.0 as f64 * 1e-9;
    Run {
        goodput_gbps: (msgs * MSG * 8) as f64 / secs / 1e9,
        resent: requests.get() - msgs * (MSG / 1024),
        timeouts: c.completer_retry_err,
        dropped: n.stats.dropped[0] + n.stats.dropped[1],
        sim_ms: secs * 1e3,
    }
}

fn main() {
    let msgs: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let l = Link::CLEAN;
    println!(
        "one stream of {msgs} x 64 KiB RDMA WRITE, MTU 1024, link {} Gb/s, {} us each way (RTT {:.1} us with a full frame), window {} PSNs",
        l.rate_gbps,
        l.delay.0 as f64 / 1e3,
        (2 * l.delay.0 + l.serialisation(1082).0 + l.serialisation(62).0) as f64 / 1e3,
        DeviceConfig::default().max_unacked_psns
    );
    println!("{:>5} {:>15} {:>13} {:>9} {:>9} {:>9} {:>8} {:>9}", "loss", "recovery", "goodput Gb/s", "x 0 %", "dropped", "resent", "timeouts", "sim ms");
    for sr in [false, true] {
        let clean = stream(sr, 0.0, msgs, 1);
        let lossy = LOSSES.iter().map(|&l| (l, Some(stream(sr, l, msgs, 0x1055))));
        for (loss, r) in std::iter::once((0.0, None)).chain(lossy) {
            let r = r.as_ref().unwrap_or(&clean);
            println!(
                "{:>4.1}% {:>15} {:>13.3} {:>9.3} {:>9} {:>9} {:>8} {:>9.2}",
                loss * 100.0,
                if sr { "selective" } else { "go-back-N" },
                r.goodput_gbps,
                r.goodput_gbps / clean.goodput_gbps,
                r.dropped,
                r.resent,
                r.timeouts,
                r.sim_ms
            );
        }
    }
}
