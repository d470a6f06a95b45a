//! What `show` prints: port information and counters, the forward statistics, the switch and
//! its bottlenecks.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{App, AppResult};
use crate::stats::{self, FwdTotals, PortCounters};
use crate::switch::BottleneckScope;

impl App {
    /// The switch's block (MACs, floods, filtered frames), empty outside switch mode.
    pub(super) fn switch_block(&self) -> String {
        match &self.switch {
            Some(c) => stats::switch_block(&stats::SwitchTotals {
                macs: c.sw.macs.load(Ordering::Relaxed),
                flooded: c.sw.flooded.load(Ordering::Relaxed),
                filtered: c.sw.filtered.load(Ordering::Relaxed),
                copy_failed: c.sw.copy_failed.load(Ordering::Relaxed),
            }),
            None => String::new(),
        }
    }

    /// The bottleneck blocks of `ports` (port scope), or the shared queue's block (switch scope).
    pub(super) fn bottleneck_report(&self, ports: &[u16]) -> String {
        let Some(c) = &self.switch else { return String::new() };
        let mut s = String::new();
        if self.scope() == BottleneckScope::Switch {
            if let Some(b) = c.bottlenecks.first() {
                s.push_str(&stats::bottleneck_block("all ports (scope switch)", &b.load()));
            }
            return s;
        }
        for &p in ports {
            if let Some(b) = c.bottlenecks.get(usize::from(p)) {
                s.push_str(&stats::bottleneck_block(&format!("port {p}"), &b.load()));
            }
        }
        s
    }

    /// Everything the switch counted: its block and its bottlenecks' (empty in other modes).
    pub(super) fn switch_report(&self) -> String {
        let all: Vec<u16> = (0..self.nb_ports()).collect();
        format!("{}{}", self.switch_block(), self.bottleneck_report(&all))
    }

    pub(super) fn show_port_stats(&mut self, ports: &[u16]) {
        let now = Instant::now();
        let mut out = String::new();
        for &p in ports {
            let c = self.counters(p);
            let t = self.ports[p as usize].meter.update(now, &c);
            out.push_str(&stats::nic_stats_block(p, &c, &t));
        }
        out.push_str(&self.bottleneck_report(ports));
        print!("{out}");
        let _ = std::io::stdout().flush();
    }

    pub(super) fn show_port_info(&self, ports: &[u16]) -> AppResult<()> {
        for &p in ports {
            let st = &self.ports[p as usize];
            let info = st.port.info().map_err(|e| e.to_string())?;
            let link = st.port.link().ok();
            let promisc = st.port.promiscuous().unwrap_or(false);
            println!("\n********************* Infos for port {p:<2} *********************");
            println!("MAC address: {}", stats::mac(&st.mac));
            println!("Device name: {}", info.device_name);
            println!("Driver name: {}", info.driver_name);
            println!("Connect to socket: {}", info.socket_id.max(0));
            if let Some(l) = link {
                println!("Link status: {}", if l.up { "up" } else { "down" });
                let speed = match l.speed_mbps {
                    0 => "None".to_string(),
                    u32::MAX => "Unknown".to_string(),
                    s if s % 1000 == 0 => format!("{} Gbps", s / 1000),
                    s => format!("{s} Mbps"),
                };
                println!("Link speed: {speed}");
                println!("Link duplex: {}", if l.full_duplex { "full-duplex" } else { "half-duplex" });
                println!("Autoneg status: {}", if l.autoneg { "On" } else { "Off" });
            }
            println!("MTU: {}", info.mtu);
            println!("Promiscuous mode: {}", if promisc { "enabled" } else { "disabled" });
            println!("Minimum/maximum MTU: {}/{}", info.min_mtu, info.max_mtu);
            println!("Max possible RX queues: {}", info.max_rx_queues);
            println!("Max possible number of RXDs per queue: {}", info.rx_desc_max);
            println!("Min possible number of RXDs per queue: {}", info.rx_desc_min);
            println!("Current number of RX queues: {}", info.nb_rx_queues);
            println!("Max possible TX queues: {}", info.max_tx_queues);
            println!("Max possible number of TXDs per queue: {}", info.tx_desc_max);
            println!("Min possible number of TXDs per queue: {}", info.tx_desc_min);
            println!("Current number of TX queues: {}", info.nb_tx_queues);
            println!(
                "Checksum offload: RX IPv4 {} UDP {}, TX IPv4 {} UDP {}",
                yes(info.rx_ipv4_cksum()),
                yes(info.rx_udp_cksum()),
                yes(info.tx_ipv4_cksum()),
                yes(info.tx_udp_cksum())
            );
        }
        Ok(())
    }

    pub(super) fn show_port_xstats(&self, ports: &[u16]) -> AppResult<()> {
        for &p in ports {
            let xs = self.ports[p as usize].port.xstats().map_err(|e| format!("port {p}: {e}"))?;
            println!("###### NIC extended statistics for port {p:<2}");
            for x in xs.iter().filter(|x| x.value != 0) {
                println!("{}: {}", x.name, x.value);
            }
            println!("#################################################");
        }
        Ok(())
    }

    pub(super) fn clear_port_stats(&mut self, ports: &[u16]) -> AppResult<()> {
        for &p in ports {
            self.ports[p as usize].port.reset_stats().map_err(|e| format!("port {p}: {e}"))?;
            self.ports[p as usize].meter.reset();
            if let Some(run) = self.run.as_mut() {
                run.base[p as usize] = PortCounters::default();
            }
            println!("\n  NIC statistics for port {p} cleared");
        }
        Ok(())
    }
}

pub(super) fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// Forward statistics of every port and the accumulated block, as testpmd prints at `stop`.
pub(super) fn fwd_report(per_port: &[FwdTotals]) -> String {
    let mut s = String::new();
    let mut acc = FwdTotals::default();
    for (p, t) in per_port.iter().enumerate() {
        s.push_str(&stats::fwd_stats_block(p as u16, t));
        acc.add(t);
    }
    s.push_str(&stats::accumulated_block(&acc));
    s
}
