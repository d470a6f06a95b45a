//! Incast through a simulated switch port, with and without congestion control.
//!
//! `cargo run --release -p droce-transport --example incast -- [--senders 2|8] [--cc on|off] [--ms 200]`
//!
//! N senders each stream 64 KiB RDMA WRITEs (8 outstanding) to one receiver through the
//! fabric of `FabricConfig::incast`: 10 Gb/s hosts, 2 us cables (base RTT about 10 us), a
//! switch egress port toward the receiver with RED/ECN marking from Kmin = 40 KiB to Kmax =
//! 160 KiB (pmax 0.2) and a buffer of 4 x Kmax; RC QPs with the transport timeout perftest
//! uses (14: 67 ms) and retry_cnt 7. "CC on" is `CcConfig::default()` (DCQCN with the
//! droce defaults: ConnectX parameters with the paper's timers, at the hosts' line rate), "off" is `CcConfig::off()`. Simulated time:
//! the figures are the same on every machine and every run. Without `--senders` / `--cc` it
//! runs 2 and 8 senders, CC off and on, and prints them side by side with the targets.
//!
//! Measured after convergence (`--warmup` ms, default a quarter of the run): per-sender
//! goodput (acknowledged WRITE bytes), the bottleneck's utilisation (bytes on its wire over
//! its capacity), Jain's fairness index of the senders' bytes through the bottleneck in
//! every 10 ms window (min and median), the queue sampled every 10 us (median, p99, max),
//! the senders' mean DCQCN rate; over the whole run: drops (and those after the warm-up),
//! ECN marks, CE frames and CNPs (sent, seen on the wire, received), rate cuts, pacing
//! stalls, retransmitted packets (the senders' `retransmitted_pkts`, with their timeouts and
//! sequence NAKs), and QPs that failed.
//!
//! To try other settings: `--switch rate=10g,kmin=10k,kmax=160k,pmax=0.5` (the switch ports
//! in the bottleneck's text form; without `queue=` the buffer is 4 x Kmax), `--cc-param
//! dce_tcp_rtt=55,rpg_byte_reset=10000000` (the congestion-control text form of the conf key
//! `cc` and `droce-pmd --cc`: any `CcConfig` field by name, durations in microseconds unless
//! suffixed, rates in Mb/s; the line rate stays the hosts'), `--max-unacked N` (the requester's window in PSNs, 128
//! by default), `--timeout T`, `--warmup MS`, `--size BYTES`, `--outstanding K`, `--seed S`.

use droce_transport::sim::fabric::{Fabric, FabricConfig, StreamOp, StreamSpec};
use droce_transport::bottleneck::BottleneckConfig;
use droce_transport::cc::CcConfig;
use droce_transport::sim::RcOpts;
use droce_transport::{DeviceConfig, Duration, Instant};

const WINDOW: Duration = Duration::from_millis(10);
const SAMPLE: Duration = Duration::from_micros(10);

struct Args {
    senders: Vec<usize>,
    cc: Vec<bool>,
    ms: u64,
    warmup_ms: Option<u64>,
    size: usize,
    outstanding: usize,
    seed: u64,
    switch: BottleneckConfig,
    /// DCQCN parameters changed from their defaults (`--cc-param`).
    cc_params: String,
    /// The QPs' local ACK timeout exponent (4.096 us * 2^timeout).
    timeout: u8,
    /// The devices' `max_unacked_psns` (the requester's window), None: the default.
    max_unacked: Option<u32>,
}

fn usage(why: &str) -> ! {
    eprintln!("incast: {why}");
    eprintln!("usage: incast [--senders N] [--cc on|off] [--ms MS] [--warmup MS] [--size BYTES] [--outstanding K] [--seed S] [--switch rate=..,queue=..,kmin=..,kmax=..,pmax=..]");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args { senders: vec![2, 8], cc: vec![false, true], ms: 200, warmup_ms: None, size: 64 << 10, outstanding: 8, seed: 1, switch: FabricConfig::incast(1).switch, cc_params: String::new(), timeout: 14, max_unacked: None };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| usage(&format!("{k} needs a value")));
        let num = |s: String| s.parse::<u64>().unwrap_or_else(|_| usage(&format!("{k}: '{s}' is not a number")));
        match k.as_str() {
            "--senders" => a.senders = vec![num(v()) as usize],
            "--cc" => {
                a.cc = match v().as_str() {
                    "on" => vec![true],
                    "off" => vec![false],
                    o => usage(&format!("--cc: '{o}' is not on or off")),
                }
            }
            "--ms" => a.ms = num(v()),
            "--warmup" => a.warmup_ms = Some(num(v())),
            "--size" => a.size = num(v()) as usize,
            "--outstanding" => a.outstanding = num(v()) as usize,
            "--seed" => a.seed = num(v()),
            "--timeout" => a.timeout = num(v()).min(31) as u8,
            "--max-unacked" => a.max_unacked = Some(num(v()) as u32),
            "--cc-param" => {
                let text = v();
                text.parse::<CcConfig>().unwrap_or_else(|e| usage(&format!("--cc-param: {e}")));
                a.cc_params = text;
            }
            "--switch" => {
                let text = v();
                let mut c: BottleneckConfig = text.parse().unwrap_or_else(|e| usage(&format!("--switch: {e}")));
                if !text.split(',').any(|kv| kv.trim().starts_with("queue")) {
                    c.queue_bytes = 4 * c.kmax;
                }
                a.switch = c;
            }
            "-h" | "--help" => usage("incast benchmark"),
            o => usage(&format!("unknown option '{o}'")),
        }
    }
    if a.warmup_ms.unwrap_or(a.ms / 4) + 10 > a.ms {
        usage("the run must last at least 10 ms past the warm-up (one fairness window)");
    }
    if a.senders.iter().any(|&n| n == 0 || n > 100) {
        usage("--senders must be 1..=100");
    }
    a
}

/// CC on: DCQCN with droce's defaults at the hosts' line rate, but for the
/// `--cc-param`s; off: none of it.
fn device_config(cc: bool, line_rate_bps: u64, params: &str, max_unacked: Option<u32>) -> DeviceConfig {
    let cc = if cc {
        // checked when the arguments were read
        let c: CcConfig = params.parse().unwrap_or_default();
        CcConfig { line_rate_bps, ..c }
    } else {
        CcConfig::off()
    };
    let d = DeviceConfig::default();
    DeviceConfig { cc, max_unacked_psns: max_unacked.unwrap_or(d.max_unacked_psns), ..d }
}

/// Jain's fairness index: (sum x)^2 / (n * sum x^2); 1 = equal shares.
fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    if q == 0.0 {
        return 0.0;
    }
    s * s / (x.len() as f64 * q)
}

fn pct<T: Copy + Ord + Default>(v: &[T], p: f64) -> T {
    if v.is_empty() {
        return T::default();
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    s[((s.len() - 1) as f64 * p).round() as usize]
}

fn median_f(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

struct Run {
    cc: bool,
    rate_mean_gbps: Vec<f64>,
    cnp_rcvd: u64,
    rate_cuts: u64,
    errors: u64,
    retry_exceeded: u64,
    pacing_stalls: u64,
    cnp_sent: u64,
    ce_rcvd: u64,
    goodput_gbps: Vec<f64>,
    util: f64,
    jain_min: f64,
    jain_median: f64,
    q_median: usize,
    q_p99: usize,
    q_max_after: usize,
    q_max: usize,
    drops: u64,
    drops_after: u64,
    marks: u64,
    cnps: u64,
    retx: u64,
    timeouts: u64,
    seq_naks: u64,
    verified: u64,
    kmin: usize,
    kmax: usize,
    buffer: usize,
}

fn run(n: usize, cc: bool, a: &Args) -> Run {
    let cfg = FabricConfig { seed: a.seed, switch: a.switch, host_rate_bps: a.switch.rate_bps, ..FabricConfig::incast(n) };
    let mut f = Fabric::new(cfg, |_| device_config(cc, cfg.host_rate_bps, &a.cc_params, a.max_unacked));
    let r = f.receiver(0);
    let streams: Vec<usize> = (0..n)
        .map(|i| {
            let spec = StreamSpec { from: f.sender(i), to: r, op: StreamOp::Write, size: a.size, outstanding: a.outstanding, count: None, verify: true };
            f.add_stream(spec, RcOpts { timeout: a.timeout, ..RcOpts::default() })
        })
        .collect();
    let warmup = Duration::from_millis(a.warmup_ms.unwrap_or(a.ms / 4));
    let end = Instant(Duration::from_millis(a.ms).as_nanos());
    let start = Instant(warmup.as_nanos());
    let b = f.bottleneck();
    let max_rounds = 1u64 << 40;

    assert!(f.run_until(start, max_rounds));
    let out0 = f.port_stats(b).bytes_out;
    let drops0 = f.port_stats(b).dropped;
    let good0: Vec<u64> = streams.iter().map(|&s| f.stream_stats(s).bytes_completed).collect();
    let mut win0: Vec<u64> = (0..n).map(|i| f.delivered_bytes_from[f.sender(i)]).collect();
    let mut next_window = start + WINDOW;
    let mut jains = Vec::new();
    let mut queue = Vec::new();
    // Each sender's DCQCN rate, summed over the samples (for its mean).
    let mut rate_sum = vec![0f64; n];
    let mut t = start;
    while t < end {
        t = t + SAMPLE;
        assert!(f.run_until(t, max_rounds));
        queue.push(f.port_stats(b).queue_bytes);
        for (i, &s) in streams.iter().enumerate() {
            let qp = f.stream_qps(s).0;
            rate_sum[i] += f.nodes[f.sender(i)].dev.qp_rate_bps(qp).unwrap_or(0) as f64;
        }
        if t >= next_window {
            let now: Vec<u64> = (0..n).map(|i| f.delivered_bytes_from[f.sender(i)]).collect();
            let d: Vec<f64> = now.iter().zip(&win0).map(|(x, y)| (x - y) as f64).collect();
            jains.push(jain(&d));
            win0 = now;
            next_window = next_window + WINDOW;
        }
    }
    let secs = (end.as_nanos() - start.as_nanos()) as f64 / 1e9;
    let bs = f.port_stats(b);
    let util = (bs.bytes_out - out0) as f64 * 8.0 / (f.cfg.switch.rate_bps as f64 * secs);
    let goodput_gbps =
        streams.iter().zip(&good0).map(|(&s, g0)| (f.stream_stats(s).bytes_completed - g0) as f64 * 8.0 / secs / 1e9).collect();
    let senders: Vec<usize> = (0..n).map(|i| f.sender(i)).collect();
    let sum = |c: fn(&droce_transport::counters::Counters) -> u64| senders.iter().map(|&h| c(f.nodes[h].dev.counters())).sum::<u64>();
    let samples = queue.len().max(1) as f64;
    Run {
        cc,
        rate_mean_gbps: rate_sum.iter().map(|r| r / samples / 1e9).collect(),
        cnp_rcvd: sum(|c| c.cnp_rcvd),
        rate_cuts: sum(|c| c.cc_rate_cuts),
        errors: streams.iter().map(|&s| f.stream_stats(s).errors).sum(),
        retry_exceeded: sum(|c| c.retry_exceeded_err),
        pacing_stalls: sum(|c| c.cc_pacing_stalls),
        cnp_sent: f.nodes[r].dev.counters().cnp_sent,
        ce_rcvd: f.nodes[r].dev.counters().ecn_ce_rcvd,
        goodput_gbps,
        util,
        jain_min: jains.iter().copied().fold(f64::INFINITY, f64::min),
        jain_median: median_f(&jains),
        q_median: pct(&queue, 0.5),
        q_p99: pct(&queue, 0.99),
        q_max_after: *queue.iter().max().unwrap_or(&0),
        q_max: bs.max_queue_bytes,
        drops: bs.dropped,
        drops_after: bs.dropped - drops0,
        marks: bs.marked,
        cnps: senders.iter().map(|&h| f.cnps_to[h]).sum(),
        retx: sum(|c| c.retransmitted_pkts),
        timeouts: sum(|c| c.completer_retry_err),
        seq_naks: sum(|c| c.rcvd_seq_err),
        verified: streams.iter().map(|&s| f.stream_stats(s).verified).sum(),
        kmin: f.cfg.switch.kmin,
        kmax: f.cfg.switch.kmax,
        buffer: f.cfg.switch.queue_bytes,
    }
}

fn kib(b: usize) -> String {
    format!("{:.1} KiB", b as f64 / 1024.0)
}

fn yes(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

fn main() {
    let a = parse_args();
    println!(
        "incast: WRITE streams of {} B, {} outstanding; hosts and switch ports at {} Gb/s, 2 us cables; {} ms ({} ms warm-up), seed {}",
        a.size,
        a.outstanding,
        a.switch.rate_bps as f64 / 1e9,
        a.ms,
        a.warmup_ms.unwrap_or(a.ms / 4),
        a.seed
    );
    for &n in &a.senders {
        let runs: Vec<Run> = a.cc.iter().map(|&cc| run(n, cc, &a)).collect();
        let r0 = &runs[0];
        println!();
        println!("{n} -> 1   (Kmin {}, Kmax {}, buffer {})", kib(r0.kmin), kib(r0.kmax), kib(r0.buffer));
        let head: Vec<String> = runs.iter().map(|r| format!("{:>22}", if r.cc { "CC on" } else { "CC off" })).collect();
        println!("{:<34}{}", "", head.join(""));
        let row = |name: &str, f: &dyn Fn(&Run) -> String| {
            let cells: Vec<String> = runs.iter().map(|r| format!("{:>22}", f(r))).collect();
            println!("{:<34}{}", name, cells.join(""));
        };
        for i in 0..n {
            row(&format!("goodput sender {i} (Gb/s)"), &|r| format!("{:.3}", r.goodput_gbps[i]));
        }
        row("goodput total (Gb/s)", &|r| format!("{:.3}", r.goodput_gbps.iter().sum::<f64>()));
        row("bottleneck utilisation", &|r| format!("{:.3}", r.util));
        row("Jain per 10 ms: min", &|r| format!("{:.4}", r.jain_min));
        row("Jain per 10 ms: median", &|r| format!("{:.4}", r.jain_median));
        row("queue median", &|r| kib(r.q_median));
        row("queue p99", &|r| kib(r.q_p99));
        row("queue max after warm-up", &|r| kib(r.q_max_after));
        row("queue max (whole run)", &|r| kib(r.q_max));
        row("drops at the bottleneck", &|r| r.drops.to_string());
        row("  of which after warm-up", &|r| r.drops_after.to_string());
        row("ECN marks", &|r| r.marks.to_string());
        row("CE frames at the receiver", &|r| r.ce_rcvd.to_string());
        row("CNPs sent / on the wire / rcvd", &|r| format!("{} / {} / {}", r.cnp_sent, r.cnps, r.cnp_rcvd));
        row("DCQCN rate cuts", &|r| r.rate_cuts.to_string());
        row("pacing stalls", &|r| r.pacing_stalls.to_string());
        row("DCQCN rate, mean of senders (Gb/s)", &|r| format!("{:.3}", r.rate_mean_gbps.iter().sum::<f64>() / r.rate_mean_gbps.len() as f64));
        row("retransmitted packets", &|r| r.retx.to_string());
        row("  of which timeouts / seq NAKs", &|r| format!("{} / {}", r.timeouts, r.seq_naks));
        row("messages verified", &|r| r.verified.to_string());
        row("QPs failed (retry exceeded) / error WCs", &|r| format!("{} / {}", r.retry_exceeded, r.errors));
        for r in runs.iter().filter(|r| r.cc) {
            println!(
                "targets with CC ({n} -> 1): Jain >= 0.95 every window {} ({:.4}); queue < Kmax after warm-up {} ({}); zero drops {} ({}); utilisation >= 0.9 {} ({:.3})",
                yes(r.jain_min >= 0.95),
                r.jain_min,
                yes(r.q_max_after < r.kmax),
                kib(r.q_max_after),
                yes(r.drops == 0),
                r.drops,
                yes(r.util >= 0.9),
                r.util
            );
        }
    }
}
