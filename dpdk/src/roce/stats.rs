//! Counters of the RoCE device: the engine's own, and the `show roce stats` block that puts
//! them beside the port's and the transport's.

use super::neigh::NeighCounters;
use super::*;

/// Counters of the engine itself (the transport and the port have their own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineCounters {
    pub rx_frames: u64,
    pub rx_roce: u64,
    pub tx_roce: u64,
    /// ARP and ND, as the transport's neighbour resolution counts them.
    pub neigh: NeighCounters,
    /// Frames that are neither RoCEv2, ARP nor ND (dropped).
    pub non_roce_drops: u64,
    /// Frames shorter than their headers claim (dropped).
    pub truncated: u64,
    /// IPv4 header checksum errors (dropped).
    pub bad_ip_cksum: u64,
    /// Frames from the transport with no usable IP destination (dropped).
    pub tx_no_route: u64,
    /// Mbuf allocation failures.
    pub tx_nombuf: u64,
    /// TX bursts the PMD did not take whole: its TX ring was full (a peer that does not
    /// drain it: stopped, overloaded, gone), or the port could not send at all (net_memif
    /// takes nothing while its connection is down). The rest wait in the engine's queue and, while
    /// four bursts wait, the transport is given no room: its frames, retransmissions too,
    /// are not made at all, so a requester can end in `RETRY_EXC_ERR` with
    /// `retransmitted_pkts` 0 (its retries never left), and this counter says why.
    pub tx_ring_full: u64,
    pub pcap_frames: u64,
    pub pcap_errors: u64,
    /// Faults injected, all kinds and directions (details in `faults_rx` / `faults_tx`).
    pub injected_faults: u64,
    /// Data frames sent zero-copy (payload segment over registered memory).
    pub tx_zero_copy: u64,
    /// `dereg_mr` calls refused because the PMD still held frames over the MR.
    pub dereg_busy: u64,
    /// Port calls that waited for the interrupt-thread gate's window to close, and the
    /// longest such wait in microseconds ([`crate::intr_gate::GateStats`]; the process's,
    /// filled in by [`RoceDevice::stats`]): a datapath that stood still for DPDK's interrupt
    /// thread shows here.
    pub gate_waits: u64,
    pub gate_wait_max_us: u64,
}

impl EngineCounters {
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("rx_frames", self.rx_frames),
            ("rx_roce", self.rx_roce),
            ("tx_roce", self.tx_roce),
            ("arp_requests_rx", self.neigh.arp_requests_rx),
            ("arp_replies_rx", self.neigh.arp_replies_rx),
            ("arp_requests_tx", self.neigh.arp_requests_tx),
            ("arp_replies_tx", self.neigh.arp_replies_tx),
            ("nd_solicits_rx", self.neigh.nd_solicits_rx),
            ("nd_adverts_rx", self.neigh.nd_adverts_rx),
            ("nd_solicits_tx", self.neigh.nd_solicits_tx),
            ("nd_adverts_tx", self.neigh.nd_adverts_tx),
            ("non_roce_drops", self.non_roce_drops),
            ("truncated", self.truncated),
            ("bad_ip_cksum", self.bad_ip_cksum),
            ("neigh_unresolved_drops", self.neigh.unresolved_drops),
            ("neigh_queue_full", self.neigh.queue_full),
            ("tx_no_route", self.tx_no_route),
            ("tx_nombuf", self.tx_nombuf),
            ("tx_ring_full", self.tx_ring_full),
            ("pcap_frames", self.pcap_frames),
            ("pcap_errors", self.pcap_errors),
            ("injected_faults", self.injected_faults),
            ("tx_zero_copy", self.tx_zero_copy),
            ("dereg_busy", self.dereg_busy),
            ("gate_waits", self.gate_waits),
            ("gate_wait_max_us", self.gate_wait_max_us),
        ]
        .into_iter()
    }
}

/// Everything `show roce stats` prints.
#[derive(Debug, Clone, Default)]
pub struct RoceStats {
    pub port: PortStats,
    pub transport: Counters,
    pub engine: EngineCounters,
    pub faults_rx: FaultCounters,
    pub faults_tx: FaultCounters,
}

const BORDER: &str = "########################";

/// The `show roce stats` block, laid out like testpmd's `show port stats` (three
/// `name: value` columns per line).
pub fn format_roce_stats(port: u16, s: &RoceStats) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\n  {BORDER} RoCE statistics for port {port:<2} {BORDER}");
    let _ = writeln!(out, "  RX-packets: {:<10} RX-missed: {:<10} RX-bytes:  {}", s.port.ipackets, s.port.imissed, s.port.ibytes);
    let _ = writeln!(out, "  TX-packets: {:<10} TX-errors: {:<10} TX-bytes:  {}", s.port.opackets, s.port.oerrors, s.port.obytes);
    let cols = |out: &mut String, title: &str, items: Vec<(&'static str, u64)>| {
        let _ = writeln!(out, "\n  {title}");
        for row in items.chunks(3) {
            let mut line = String::from(" ");
            for (k, v) in row {
                let _ = write!(line, " {:<28}", format!("{k}: {v}"));
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
    };
    cols(&mut out, "Transport", s.transport.iter().collect());
    cols(&mut out, "Engine", s.engine.iter().collect());
    let f = |d: &str, c: &FaultCounters| {
        vec![
            (if d == "rx" { "rx_fault_drop" } else { "tx_fault_drop" }, c.dropped),
            (if d == "rx" { "rx_fault_dup" } else { "tx_fault_dup" }, c.duplicated),
            (if d == "rx" { "rx_fault_reorder" } else { "tx_fault_reorder" }, c.reordered),
            (if d == "rx" { "rx_fault_corrupt" } else { "tx_fault_corrupt" }, c.corrupted),
        ]
    };
    if s.engine.injected_faults > 0 {
        let mut v = f("rx", &s.faults_rx);
        v.extend(f("tx", &s.faults_tx));
        cols(&mut out, "Injected faults (test feature)", v);
    }
    let _ = writeln!(out, "  {BORDER}############################{BORDER}");
    out
}

impl RoceDevice {
    // ------------------------------------------------------------------ stats

    pub fn counters(&self) -> &EngineCounters {
        &self.counters
    }

    pub fn stats(&self) -> RoceStats {
        let gate = crate::intr_gate::stats();
        RoceStats {
            port: self.port.stats().unwrap_or_default(),
            transport: self.dev.counters().clone(),
            engine: EngineCounters {
                gate_waits: gate.waits,
                gate_wait_max_us: gate.wait_ns_max / 1000,
                tx_ring_full: self.counters.tx_ring_full + self.mesh.as_ref().map_or(0, |m| m.ring_full),
                ..self.counters.clone()
            },
            faults_rx: self.fault_rx.as_ref().map(|f| f.counters).unwrap_or_default(),
            faults_tx: self.fault_tx.as_ref().map(|f| f.counters).unwrap_or_default(),
        }
    }

    pub fn flush_pcap(&mut self) {
        if let Some(p) = &mut self.pcap {
            if p.flush().is_err() {
                self.counters.pcap_errors += 1;
            }
        }
    }

    pub(super) fn capture(&mut self, now: u64, frame: &[u8]) {
        if let Some(p) = &mut self.pcap {
            if p.write(now, frame).is_ok() {
                self.counters.pcap_frames += 1;
            } else {
                self.counters.pcap_errors += 1;
            }
        }
    }

    pub(super) fn sync_fault_total(&mut self) {
        let sum = |c: FaultCounters| c.dropped + c.duplicated + c.reordered + c.corrupted;
        self.counters.injected_faults =
            self.fault_rx.as_ref().map_or(0, |f| sum(f.counters)) + self.fault_tx.as_ref().map_or(0, |f| sum(f.counters));
    }
}
