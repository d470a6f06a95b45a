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
/// windows of `max(1, n/16)` consecutive completions (perftest takes the best interval between
/// two completions; a window smooths the jitter of a polled software device).
#[cfg(test)]
pub fn bw_stats(size: u64, stamps: &[f64], secs: f64) -> BwStats {
    bw_stats_sampled(size, 1, stamps, stamps.len() as u64, secs)
}

/// As [`bw_stats`] with one stamp per `step` completions (a clock read per completion is
/// costly in a VM) and `total` completions in `secs`.
pub fn bw_stats_sampled(size: u64, step: u64, stamps: &[f64], total: u64, secs: f64) -> BwStats {
    let n = stamps.len();
    let mb = |msgs: f64, t: f64| if t > 0.0 { msgs * size as f64 / t / 1_048_576.0 } else { 0.0 };
    let avg = mb(total as f64, secs);
    let w = (n / 16).max(1);
    let mut peak = avg;
    for i in w..n {
        let dt = stamps[i] - stamps[i - w];
        if dt > 0.0 {
            peak = peak.max(mb((w as u64 * step) as f64, dt));
        }
    }
    BwStats { peak_mbs: peak, avg_mbs: avg, mpps: if secs > 0.0 { total as f64 / secs / 1e6 } else { 0.0 } }
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
