//! The mode registry: every way droce-pmd can drive its ports, by name.
//!
//! A mode is a row of [`MODES`]: a name (what `--forward-mode=` and `set fwd` take), a one-line
//! summary, and a [`Family`] that says which engine builds its streams. `start` turns the
//! current mode into one [`crate::fwd::Stream`] per (RX port, TX port) pair, spreads the streams
//! over the forwarding lcores, and each lcore polls its streams until `stop`; the stream trait
//! is the whole contract between the runner and a mode (`poll` one burst, report counters).
//!
//! # Adding modes (as the RDMA tests were added)
//! The perftest-style tests (`send_lat`, `send_bw`, `write_lat`, `write_bw`, `read_lat`,
//! `read_bw`, `atomic_lat`, `atomic_bw`) slot in as further rows with a new family, e.g.
//! `Family::Rdma(RdmaTest::SendLat)`: their streams own a transport device (sans-IO, driven
//! with `handle_rx` / `poll_transmit` inside `poll`), use the same ports, lcores, stats blocks
//! and prompt commands, and are selected by `--forward-mode=` / `set fwd` or by a `--test=`
//! alias that looks names up in this same table. Nothing else in the CLI needs to change:
//! argument parsing, `help`, error messages and `show config fwd` all read this table.

/// Raw packet-forwarding engines, as dpdk-testpmd's forwarding modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FwdKind {
    /// Receive on a port, send the same mbufs unchanged on its peer.
    Io,
    /// As io, with source MAC = TX port's MAC and destination MAC = the peer's (`--eth-peer`).
    Mac,
    /// As io, with source and destination MAC swapped.
    MacSwap,
    /// Receive, count, free.
    RxOnly,
    /// Build UDP/IPv4 frames from a template and send them; never receive.
    TxOnly,
}

/// Which engine builds a mode's streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Forward(FwdKind),
    /// One stream over every port: the L2 learning switch of `crate::switch`.
    Switch,
}

#[derive(Debug, Clone, Copy)]
pub struct ModeInfo {
    pub name: &'static str,
    pub summary: &'static str,
    pub family: Family,
}

/// All modes, in the order help texts list them.
pub const MODES: &[ModeInfo] = &[
    ModeInfo { name: "io", summary: "forward received packets unchanged to the peer port", family: Family::Forward(FwdKind::Io) },
    ModeInfo { name: "mac", summary: "forward with src MAC = TX port MAC, dst MAC = peer", family: Family::Forward(FwdKind::Mac) },
    ModeInfo { name: "macswap", summary: "forward with src and dst MAC swapped", family: Family::Forward(FwdKind::MacSwap) },
    ModeInfo { name: "rxonly", summary: "receive and free (count only)", family: Family::Forward(FwdKind::RxOnly) },
    ModeInfo { name: "txonly", summary: "send UDP/IPv4 frames of --txpkts bytes", family: Family::Forward(FwdKind::TxOnly) },
    ModeInfo { name: "switch", summary: "L2 learning switch over all ports (optional --bottleneck)", family: Family::Switch },
];

pub fn lookup(name: &str) -> Option<&'static ModeInfo> {
    MODES.iter().find(|m| m.name == name)
}

pub fn names() -> Vec<&'static str> {
    MODES.iter().map(|m| m.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry() {
        assert_eq!(names(), vec!["io", "mac", "macswap", "rxonly", "txonly", "switch"]);
        assert_eq!(lookup("switch").map(|m| m.family), Some(Family::Switch));
        assert_eq!(lookup("txonly").map(|m| m.family), Some(Family::Forward(FwdKind::TxOnly)));
        assert!(lookup("flowgen").is_none());
    }
}
