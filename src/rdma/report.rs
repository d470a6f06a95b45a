//! Result statistics and perftest-style output.

use droce_transport::status::WcStatus;
use droce_transport::Gid;

pub const LINE: &str = "---------------------------------------------------------------------------------------";

/// Latency summary of per-iteration samples (µs), as perftest's `print_report_lat`:
/// typical = median, percentiles by index into the sorted samples.
#[derive(Debug, Clone, PartialEq)]
pub struct LatStats {
    pub min: f64,
    pub max: f64,
    pub typical: f64,
    pub avg: f64,
    pub stdev: f64,
    pub p99: f64,
    pub p999: f64,
}

pub fn lat_stats(samples: &[f64]) -> Option<LatStats> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = s.len();
    let avg = s.iter().sum::<f64>() / n as f64;
    let var = s.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
    let pct = |p: f64| s[((n as f64 * p).ceil() as usize).saturating_sub(1).min(n - 1)];
    Some(LatStats { min: s[0], max: s[n - 1], typical: s[n / 2], avg, stdev: var.sqrt(), p99: pct(0.99), p999: pct(0.999) })
}

/// Bandwidth summary: `bytes` per message, completions over `secs`; peak from the best window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwStats {
    pub peak_mbs: f64,
    pub avg_mbs: f64,
    pub mpps: f64,
}

/// `stamps`: completion times (s since start) in order; the peak is the best rate over
/// windows of `max(1, n/16)` consecutive completions (a window smooths the jitter of a polled
/// software device). Only for a receiver, which knows no post times: the sender's figures
/// come from [`bw_stats_posted`].
#[cfg(test)]
pub fn bw_stats(size: u64, stamps: &[f64], secs: f64) -> BwStats {
    bw_stats_sampled(size, 1, stamps, stamps.len() as u64, secs)
}

/// As [`bw_stats`] with one stamp per `step` completions (a clock read per completion is
/// costly in a VM) and `total` completions in `secs`.
pub fn bw_stats_sampled(size: u64, step: u64, stamps: &[f64], total: u64, secs: f64) -> BwStats {
    windowed(size, step, stamps.len(), total, secs, |j, w| Some(stamps[j - 1] - stamps[(j - 1).checked_sub(w)?]))
}

/// `total` completions of `size` bytes in `secs`, and the peak over windows of `max(1, n/16)`
/// of the `n` stamps (each stamp standing for `step` messages): `span(j, w)` is how long the
/// `w * step` messages of the window ending with stamp `j - 1` took, `None` for no such
/// window. One loop for both ways of stamping a window (completion to completion, or post to
/// completion).
fn windowed(size: u64, step: u64, n: usize, total: u64, secs: f64, span: impl Fn(usize, usize) -> Option<f64>) -> BwStats {
    let avg = mbs(size, total as f64, secs);
    let w = (n / 16).max(1);
    let mut peak = avg;
    for j in w..=n {
        match span(j, w) {
            Some(dt) if dt > 0.0 => peak = peak.max(mbs(size, (w as u64 * step) as f64, dt)),
            _ => {}
        }
    }
    BwStats { peak_mbs: peak, avg_mbs: avg, mpps: if secs > 0.0 { total as f64 / secs / 1e6 } else { 0.0 } }
}

/// MB/s (2^20 bytes) of `msgs` messages of `size` bytes in `t` seconds; 0 for no time.
fn mbs(size: u64, msgs: f64, t: f64) -> f64 {
    if t > 0.0 {
        msgs * size as f64 / t / 1_048_576.0
    } else {
        0.0
    }
}

/// The sender's figures, the peak as perftest computes it: the time per message over a run
/// of messages runs from the *post* of its first to the *completion* of its last
/// (`(tcompleted[j] - tposted[i]) / (j - i + 1)`), never from one completion to another.
/// Completions come in batches (CQ moderation, several QPs polled in one pass): two
/// completion stamps can be nanoseconds apart, and a window between them once made a
/// 4-QP write_bw print a peak of 91553039 MB/s.
///
/// Both lists are sampled every `step` messages: `posted[k]` was read just before the
/// message with (0-based, all QPs) index `k * step` was posted, `completed[k]` once at
/// least `(k + 1) * step` messages had completed. Of those, at most `i * step` were posted
/// before `posted[i]`, so at least `(j - i) * step` messages were posted and completed
/// between `posted[i]` and `completed[j - 1]`: a rate the run really reached, over windows
/// of `max(1, n/16)` stamps as in [`bw_stats_sampled`]. `total` completions in `secs`.
pub fn bw_stats_posted(size: u64, step: u64, posted: &[f64], completed: &[f64], total: u64, secs: f64) -> BwStats {
    windowed(size, step, completed.len(), total, secs, |j, w| Some(completed[j - 1] - *posted.get(j - w)?))
}

/// IBA status name as `REM_ACCESS_ERR` (from the transport's `RemAccessErr`).
pub fn status_name(s: WcStatus) -> String {
    let dbg = format!("{s:?}");
    let mut out = String::new();
    for (i, c) in dbg.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

pub struct Header<'a> {
    pub title: &'a str,
    pub qps: usize,
    pub conn: &'a str,
    pub mtu: u32,
    pub tx_depth: usize,
    pub gid_index: u8,
    pub device: &'a str,
    pub extra: Vec<(String, String)>,
}

pub fn header(h: &Header) -> String {
    let mut s = String::new();
    s.push_str(LINE);
    s.push('\n');
    s.push_str(&format!("                    {}\n", h.title));
    s.push_str(&format!(" Dual-port       : OFF\t\tDevice         : {}\n", h.device));
    s.push_str(&format!(" Number of qps   : {}\t\tTransport type : IB\n", h.qps));
    s.push_str(&format!(" Connection type : {}\t\tUsing SRQ      : OFF\n", h.conn));
    s.push_str(&format!(" TX depth        : {}\n", h.tx_depth));
    for (k, v) in &h.extra {
        s.push_str(&format!(" {k:<16}: {v}\n"));
    }
    s.push_str(&format!(" Mtu             : {}[B]\n", h.mtu));
    s.push_str(" Link type       : Ethernet\n");
    s.push_str(&format!(" GID index       : {}\n", h.gid_index));
    s.push_str(" Max inline data : 0[B]\n");
    s.push_str(" rdma_cm QPs\t : OFF\n");
    s.push_str(" Data ex. method : Ethernet\n");
    s.push_str(LINE);
    s.push('\n');
    s
}

/// perftest prints the GID bytes in decimal ("%02d:").
pub fn address_line(which: &str, qpn: u32, psn: u32, rkey: u32, vaddr: u64, gid: &Gid) -> String {
    let g: Vec<String> = gid.0.iter().map(|b| format!("{b:02}")).collect();
    format!(
        " {which} address: LID 0000 QPN {qpn:#06x} PSN {psn:#08x} RKey {rkey:#08x} VAddr {vaddr:#016x}\n GID: {}\n",
        g.join(":")
    )
}

pub const BW_COLUMNS: &str = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";

pub fn bw_row(size: u64, iters: u64, b: &BwStats) -> String {
    format!(" {size:<10} {iters:<10}       {:.2}            {:.2}\t\t   {:.6}", b.peak_mbs, b.avg_mbs, b.mpps)
}

pub const LAT_COLUMNS: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

pub fn lat_row(size: u64, iters: u64, l: &LatStats) -> String {
    format!(
        " {size:<7} {iters:<10}       {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        l.min, l.max, l.typical, l.avg, l.stdev, l.p99, l.p999
    )
}

/// Data pattern of message `iter` on QP `qp`: every byte depends on the position, the
/// iteration and the QP, so a stale, misplaced or mixed-up message fails the check.
pub fn pattern_byte(qp: usize, iter: u64, i: usize) -> u8 {
    let x = (i as u64).wrapping_mul(0x9E37_79B9).wrapping_add(iter.wrapping_mul(0x85EB_CA6B)).wrapping_add(qp as u64 * 0xC2B2_AE35);
    (x ^ (x >> 13) ^ (x >> 29)) as u8
}

pub fn fill_pattern(buf: &mut [u8], qp: usize, iter: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(qp, iter, i);
    }
}

/// First mismatching offset, if any.
pub fn check_pattern(buf: &[u8], qp: usize, iter: u64) -> Option<usize> {
    buf.iter().enumerate().position(|(i, &b)| b != pattern_byte(qp, iter, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_statistics() {
        let s: Vec<f64> = (1..=1000).map(|i| i as f64).collect();
        let l = lat_stats(&s).unwrap();
        assert_eq!((l.min, l.max, l.typical), (1.0, 1000.0, 501.0));
        assert!((l.avg - 500.5).abs() < 1e-9);
        assert_eq!((l.p99, l.p999), (990.0, 999.0));
        assert!((l.stdev - 288.675).abs() < 0.01);
        assert!(lat_stats(&[]).is_none());
        let one = lat_stats(&[2.5]).unwrap();
        assert_eq!((one.min, one.p999, one.stdev), (2.5, 2.5, 0.0));
    }

    #[test]
    fn bandwidth_statistics() {
        // 100 messages of 1 MiB in 1 s, evenly: avg = peak = 100 MB/s, 0.0001 Mpps
        let st: Vec<f64> = (1..=100).map(|i| i as f64 / 100.0).collect();
        let b = bw_stats(1 << 20, &st, 1.0);
        assert!((b.avg_mbs - 100.0).abs() < 1e-9 && (b.peak_mbs - 100.0).abs() < 1e-6, "{b:?}");
        assert!((b.mpps - 0.0001).abs() < 1e-12);
        // a burst: half the messages in the first 0.1 s → the peak is higher than the average
        let mut st: Vec<f64> = (1..=50).map(|i| i as f64 / 500.0).collect();
        st.extend((1..=50).map(|i| 0.1 + i as f64 * 0.018));
        let b = bw_stats(1 << 20, &st, 1.0);
        assert!(b.peak_mbs > 400.0 && (b.avg_mbs - 100.0).abs() < 1e-9, "{b:?}");
    }

    #[test]
    fn sender_peak_runs_from_post_to_completion() {
        // The breaker's case: write_bw -q 4 -n 40 -s 300001, CQ moderation: 160 messages, one
        // completion per QP at the very end, polled 50 ns apart, after 0.01 s; stamps every
        // 16 messages. Completion to completion that is 16 messages in 50 ns (91553039 MB/s).
        let size = 300_001;
        let posted: Vec<f64> = (0..10).map(|k| k as f64 * 1e-5).collect();
        let mut completed = vec![0.01; 3];
        completed.extend([0.01 + 50e-9; 3]);
        completed.extend([0.01 + 100e-9; 2]);
        completed.extend([0.01 + 150e-9; 2]);
        let old = bw_stats_sampled(size, 16, &completed, 160, 0.0101);
        assert!(old.peak_mbs > 1e7, "the completion-only window is what went wrong: {old:?}");
        let b = bw_stats_posted(size, 16, &posted, &completed, 160, 0.0101);
        // 160 messages in ~10 ms: ~4.5 GB/s on average; no window can beat 16 messages over
        // the ~9.9 ms from the last post stamp to the first completion after it
        assert!((b.avg_mbs - 4532.1).abs() < 1.0, "{b:?}");
        assert!(b.peak_mbs >= b.avg_mbs && b.peak_mbs < 4700.0, "{b:?}");

        // Streaming 1 MiB messages at 100 MB/s, each completing 0.05 s after its post: the
        // average (over 1.04 s) is the peak, a window is 6 messages from a post to a
        // completion 0.1 s later; the same with 0.1 ms from post to completion: a window
        // is 6 messages in 0.0501 s, as perftest counts it (j - i + 1 messages, post i to
        // completion j).
        let size = 1 << 20;
        let posted: Vec<f64> = (0..100).map(|k| k as f64 * 0.01).collect();
        let completed: Vec<f64> = (0..100).map(|k| k as f64 * 0.01 + 0.05).collect();
        let b = bw_stats_posted(size, 1, &posted, &completed, 100, 1.04);
        assert!((b.peak_mbs - b.avg_mbs).abs() < 1e-9 && (b.avg_mbs - 96.15).abs() < 0.01, "{b:?}");
        let quick: Vec<f64> = (0..100).map(|k| k as f64 * 0.01 + 0.0001).collect();
        let b = bw_stats_posted(size, 1, &posted, &quick, 100, 0.9901);
        assert!((b.peak_mbs - 6.0 / 0.0501).abs() < 1e-6, "{b:?}");
        // nothing is read past the post stamps there are
        let b3 = bw_stats_posted(size, 1, &posted[..3], &completed, 100, 1.05);
        assert!(b3.peak_mbs.is_finite() && b3.peak_mbs >= b3.avg_mbs);
    }

    #[test]
    fn status_names_are_iba_style() {
        assert_eq!(status_name(WcStatus::RemAccessErr), "REM_ACCESS_ERR");
        assert_eq!(status_name(WcStatus::RetryExcErr), "RETRY_EXC_ERR");
        assert_eq!(status_name(WcStatus::WrFlushErr), "WR_FLUSH_ERR");
        assert_eq!(WcStatus::RemAccessErr.value(), 10);
    }

    #[test]
    fn output_looks_like_perftest() {
        let h = header(&Header { title: "RDMA_Write BW Test", qps: 1, conn: "RC", mtu: 1024, tx_depth: 128, gid_index: 1, device: "droce0", extra: vec![] });
        for want in ["RDMA_Write BW Test", "Dual-port       : OFF", "Number of qps   : 1", "Transport type : IB", "Connection type : RC", "Mtu             : 1024[B]"] {
            assert!(h.contains(want), "{want} in\n{h}");
        }
        let a = address_line("local", 0x11, 0x3b7e5a, 0x204, 0x7f5d0b1e0000, &Gid::from_ipv4(std::net::Ipv4Addr::new(192, 168, 77, 10)));
        assert!(a.starts_with(" local address: LID 0000 QPN 0x0011 PSN 0x3b7e5a RKey 0x000204 VAddr 0x007f5d0b1e0000\n GID: 00:00:"), "{a}");
        assert!(a.ends_with(":255:255:192:168:77:10\n"), "{a}");
        let r = bw_row(65536, 5000, &BwStats { peak_mbs: 1042.3, avg_mbs: 1041.72, mpps: 0.016668 });
        assert!(r.starts_with(" 65536      5000") && r.contains("1042.30") && r.contains("0.016668"), "{r}");
        assert!(BW_COLUMNS.contains("BW peak[MB/sec]") && LAT_COLUMNS.contains("99.9% percentile[usec]"));
    }

    #[test]
    fn patterns_vary_per_iteration_and_qp() {
        let mut a = vec![0u8; 4096];
        fill_pattern(&mut a, 0, 7);
        assert_eq!(check_pattern(&a, 0, 7), None);
        assert!(check_pattern(&a, 0, 8).is_some());
        assert!(check_pattern(&a, 1, 7).is_some());
        a[4000] ^= 1;
        assert_eq!(check_pattern(&a, 0, 7), Some(4000));
    }
}
