//! Statistics blocks laid out like dpdk-testpmd's (`nic_stats_display`, `fwd_stats_display`), so
//! that people and scripts used to testpmd read droce-pmd's output the same way.

use std::fmt::Write as _;
use std::time::Instant;

/// Port counters (what `rte_eth_stats_get` reports), as plain data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounters {
    pub ipackets: u64,
    pub imissed: u64,
    pub ibytes: u64,
    pub ierrors: u64,
    pub rx_nombuf: u64,
    pub opackets: u64,
    pub oerrors: u64,
    pub obytes: u64,
}

impl PortCounters {
    /// `self - base`, saturating (a PMD reset between the two reads gives zeros, not garbage).
    pub fn since(&self, base: &PortCounters) -> PortCounters {
        PortCounters {
            ipackets: self.ipackets.saturating_sub(base.ipackets),
            imissed: self.imissed.saturating_sub(base.imissed),
            ibytes: self.ibytes.saturating_sub(base.ibytes),
            ierrors: self.ierrors.saturating_sub(base.ierrors),
            rx_nombuf: self.rx_nombuf.saturating_sub(base.rx_nombuf),
            opackets: self.opackets.saturating_sub(base.opackets),
            oerrors: self.oerrors.saturating_sub(base.oerrors),
            obytes: self.obytes.saturating_sub(base.obytes),
        }
    }
}

/// Rates since the previous `show port stats` of the same port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Throughput {
    pub rx_pps: u64,
    pub rx_bps: u64,
    pub tx_pps: u64,
    pub tx_bps: u64,
}

/// Remembers the last shown counters of one port to compute "Throughput (since last show)".
#[derive(Debug, Clone, Copy, Default)]
pub struct RateMeter {
    last: Option<(Instant, PortCounters)>,
}

impl RateMeter {
    pub fn update(&mut self, now: Instant, c: &PortCounters) -> Throughput {
        let t = match self.last {
            Some((then, prev)) => {
                let ns = now.saturating_duration_since(then).as_nanos().max(1);
                let d = c.since(&prev);
                let rate = |n: u64| ((n as u128 * 1_000_000_000) / ns) as u64;
                Throughput {
                    rx_pps: rate(d.ipackets),
                    rx_bps: rate(d.ibytes * 8),
                    tx_pps: rate(d.opackets),
                    tx_bps: rate(d.obytes * 8),
                }
            }
            None => Throughput::default(),
        };
        self.last = Some((now, *c));
        t
    }

    pub fn reset(&mut self) {
        self.last = None;
    }
}

const NIC_BORDER: &str = "########################";
const FWD_BORDER: &str = "----------------------";
const ACC_BORDER: &str = "+++++++++++++++";

/// testpmd's "NIC statistics for port N" block.
pub fn nic_stats_block(port: u16, c: &PortCounters, t: &Throughput) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n  {NIC_BORDER} NIC statistics for port {port:<2} {NIC_BORDER}");
    let _ = writeln!(s, "  RX-packets: {:<10} RX-missed: {:<10} RX-bytes:  {}", c.ipackets, c.imissed, c.ibytes);
    let _ = writeln!(s, "  RX-errors: {}", c.ierrors);
    let _ = writeln!(s, "  RX-nombuf:  {:<10}", c.rx_nombuf);
    let _ = writeln!(s, "  TX-packets: {:<10} TX-errors: {:<10} TX-bytes:  {}", c.opackets, c.oerrors, c.obytes);
    let _ = writeln!(s, "\n  Throughput (since last show)");
    let _ = writeln!(s, "  Rx-pps: {:>12}          Rx-bps: {:>12}", t.rx_pps, t.rx_bps);
    let _ = writeln!(s, "  Tx-pps: {:>12}          Tx-bps: {:>12}", t.tx_pps, t.tx_bps);
    let _ = writeln!(s, "  {NIC_BORDER}############################{NIC_BORDER}");
    s
}

/// Per-port forwarding totals of one run (port counters since `start` plus the engine's drops).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FwdTotals {
    pub rx_packets: u64,
    pub rx_dropped: u64,
    pub rx_errors: u64,
    pub rx_nombuf: u64,
    pub tx_packets: u64,
    /// Frames the engine built or received but the PMD did not take (freed, never leaked).
    pub tx_dropped: u64,
}

impl FwdTotals {
    pub fn add(&mut self, o: &FwdTotals) {
        self.rx_packets += o.rx_packets;
        self.rx_dropped += o.rx_dropped;
        self.rx_errors += o.rx_errors;
        self.rx_nombuf += o.rx_nombuf;
        self.tx_packets += o.tx_packets;
        self.tx_dropped += o.tx_dropped;
    }
}

fn fwd_lines(s: &mut String, t: &FwdTotals) {
    let _ = writeln!(
        s,
        "  RX-packets: {:<14} RX-dropped: {:<14} RX-total: {}",
        t.rx_packets,
        t.rx_dropped,
        t.rx_packets + t.rx_dropped
    );
    if t.rx_errors > 0 {
        let _ = writeln!(s, "  RX-error: {:<14}", t.rx_errors);
    }
    if t.rx_nombuf > 0 {
        let _ = writeln!(s, "  RX-nombufs: {:<14}", t.rx_nombuf);
    }
    let _ = writeln!(
        s,
        "  TX-packets: {:<14} TX-dropped: {:<14} TX-total: {}",
        t.tx_packets,
        t.tx_dropped,
        t.tx_packets + t.tx_dropped
    );
}

/// testpmd's "Forward statistics for port N" block.
pub fn fwd_stats_block(port: u16, t: &FwdTotals) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n  {FWD_BORDER} Forward statistics for port {port:<2} {FWD_BORDER}");
    fwd_lines(&mut s, t);
    let _ = writeln!(s, "  {FWD_BORDER}--------------------------------{FWD_BORDER}");
    s
}

/// testpmd's "Accumulated forward statistics for all ports" block.
pub fn accumulated_block(t: &FwdTotals) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n  {ACC_BORDER} Accumulated forward statistics for all ports{ACC_BORDER}");
    fwd_lines(&mut s, t);
    let _ = writeln!(s, "  {ACC_BORDER}++++++++++++++++++++++++++++++++++++++++++++++{ACC_BORDER}");
    s
}

/// Counters of the switch mode as a whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwitchTotals {
    pub macs: u64,
    pub flooded: u64,
    pub filtered: u64,
    pub copy_failed: u64,
}

/// The switch's block, bordered like the forward statistics.
pub fn switch_block(t: &SwitchTotals) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n  {FWD_BORDER} Switch statistics {FWD_BORDER}-----------");
    let _ = writeln!(s, "  MACs-learnt: {:<13} Flooded: {:<14} Filtered: {}", t.macs, t.flooded, t.filtered);
    if t.copy_failed > 0 {
        let _ = writeln!(s, "  Flood-copy-failed: {}", t.copy_failed);
    }
    let _ = writeln!(s, "  {FWD_BORDER}--------------------------------{FWD_BORDER}");
    s
}

/// The bottleneck's settings in the CLI's own text form (what `--bottleneck=` takes).
pub fn bottleneck_config(b: &droce_transport::bottleneck::BottleneckConfig) -> String {
    format!("rate={} queue={} B kmin={} B kmax={} B pmax={} seed={}", rate_text(b.rate_bps), b.queue_bytes, b.kmin, b.kmax, b.pmax, b.seed)
}

/// Bits per second in the largest decimal unit that divides them.
fn rate_text(bps: u64) -> String {
    for (div, unit) in [(1_000_000_000, "g"), (1_000_000, "m"), (1_000, "k")] {
        if bps >= div && bps.is_multiple_of(div) {
            return format!("{}{unit}", bps / div);
        }
    }
    bps.to_string()
}

/// One bottleneck queue's counters: what it took, dropped and marked, and what it released.
pub fn bottleneck_block(what: &str, b: &droce_transport::bottleneck::BottleneckStats) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n  {FWD_BORDER} Bottleneck statistics for {what} {FWD_BORDER}");
    let _ = writeln!(s, "  Offered: {:<15} Dropped: {:<14} Marked: {}", b.enqueued, b.dropped, b.marked);
    let _ = writeln!(s, "  Dequeued: {:<14} Bytes-out: {:<12} Queue-bytes: {} (max {})", b.dequeued, b.bytes_out, b.queue_bytes, b.max_queue_bytes);
    let _ = writeln!(s, "  {FWD_BORDER}--------------------------------{FWD_BORDER}");
    s
}

/// Formats a MAC address the way testpmd prints it.
pub fn mac(m: &[u8; 6]) -> String {
    format!("{:02X}:{:02X}:{:02X}:{:02X}:{:02X}:{:02X}", m[0], m[1], m[2], m[3], m[4], m[5])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn nic_block_matches_testpmd_layout() {
        let c = PortCounters { ipackets: 5, opackets: 1023, obytes: 65472, ..Default::default() };
        let b = nic_stats_block(0, &c, &Throughput { tx_pps: 511, ..Default::default() });
        let want = "\n  ######################## NIC statistics for port 0  ########################\n  \
RX-packets: 5          RX-missed: 0          RX-bytes:  0\n  \
RX-errors: 0\n  \
RX-nombuf:  0         \n  \
TX-packets: 1023       TX-errors: 0          TX-bytes:  65472\n\n  \
Throughput (since last show)\n  \
Rx-pps:            0          Rx-bps:            0\n  \
Tx-pps:          511          Tx-bps:            0\n  \
############################################################################\n";
        assert_eq!(b, want);
    }

    #[test]
    fn fwd_block_matches_testpmd_layout() {
        let t = FwdTotals { tx_packets: 1023, tx_dropped: 239036065, ..Default::default() };
        let b = fwd_stats_block(0, &t);
        assert!(b.contains("  ---------------------- Forward statistics for port 0  ----------------------\n"));
        assert!(b.contains("  RX-packets: 0              RX-dropped: 0              RX-total: 0\n"));
        assert!(b.contains("  TX-packets: 1023           TX-dropped: 239036065      TX-total: 239037088\n"));
        assert!(b.ends_with("  ----------------------------------------------------------------------------\n"));
        let a = accumulated_block(&t);
        assert!(a.contains("+++++++++++++++ Accumulated forward statistics for all ports+++++++++++++++"));
        assert!(a.ends_with("  ++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++\n"));
    }

    #[test]
    fn bottleneck_lines() {
        let b = droce_transport::bottleneck::BottleneckStats { enqueued: 10, dropped: 2, marked: 3, dequeued: 9, bytes_out: 9000, queue_bytes: 1000, max_queue_bytes: 4000 };
        let s = bottleneck_block("port 1", &b);
        assert!(s.contains("Bottleneck statistics for port 1 "), "{s}");
        assert!(s.contains("  Offered: 10              Dropped: 2              Marked: 3\n"), "{s}");
        assert!(s.contains("  Dequeued: 9              Bytes-out: 9000         Queue-bytes: 1000 (max 4000)\n"), "{s}");
        let c: droce_transport::bottleneck::BottleneckConfig = "rate=2g,queue=256k,kmin=20k,kmax=80k,pmax=0.2,seed=1".parse().unwrap();
        assert_eq!(bottleneck_config(&c), "rate=2g queue=262144 B kmin=20480 B kmax=81920 B pmax=0.2 seed=1");
        assert_eq!(rate_text(2_500_000_000), "2500m");
        assert_eq!(rate_text(1234), "1234");
    }

    #[test]
    fn rates_since_last_show() {
        let mut m = RateMeter::default();
        let t0 = Instant::now();
        let c0 = PortCounters { ipackets: 100, ibytes: 6400, ..Default::default() };
        assert_eq!(m.update(t0, &c0), Throughput::default());
        let c1 = PortCounters { ipackets: 1100, ibytes: 70400, opackets: 500, obytes: 32000, ..Default::default() };
        let t = m.update(t0 + Duration::from_millis(500), &c1);
        assert_eq!(t, Throughput { rx_pps: 2000, rx_bps: 1_024_000, tx_pps: 1000, tx_bps: 512_000 });
    }

    #[test]
    fn counters_since_saturate() {
        let a = PortCounters { ipackets: 1, ..Default::default() };
        let b = PortCounters { ipackets: 5, ..Default::default() };
        assert_eq!(a.since(&b).ipackets, 0);
    }
}
