//! The RoCE device: a sans-IO transport [`Device`] bound to one DPDK port and queue.
//!
//! # Public API (for the CLI test modes, the libfabric provider and the UCX glue)
//! ```text
//! RoceConfig::new(PortId, QueueId)          fields: ipv4, ipv6, mac, eth_mtu, seed, neighbours,
//!                                           pcap, faults, rx_burst, tx_burst, neigh, transport,
//!                                           checksum_offload
//! RoceDevice::new(cfg, &ConfiguredPort, Arc<Mempool>) -> Result<RoceDevice, RoceError>
//!   (the port is configured and started by the caller; the pool's data room must hold
//!    max_frame_len() bytes after the headroom: 1500-byte MTU → default pool, 9000 → 8 KiB)
//! identity:   mac(), gids() / gid(index) (index 0 fe80::EUI-64, 1 ::ffff:IPv4 like rxe, then
//!             further IPv4, then IPv6), gid_index(&Gid), path_mtu(), av(dgid, sgid_index)
//! memory:     unsafe reg_mr(pd, addr, len, access) -> MemoryRegion {lkey, rkey, va, len};
//!             dereg_mr(lkey); read_mem(addr, buf) / write_mem(addr, data) (registered ranges)
//! verbs:      device() / device_mut(): &mut Device<ProcessMemory> for alloc_pd, create_cq,
//!             create_qp, modify_qp (device::rc_connect::{init_attr, rtr_attr, rts_attr}),
//!             query_qp (qp_num), post_send, post_recv, poll_cq, poll_event;
//!             post_send_ref(qp, &wr) / post_recv_ref / post_srq_recv_ref: the same with a
//!             work request the caller keeps and reuses (its SGEs are copied: no allocation
//!             per post, the fast path)
//! progress:   poll() -> Work (TX of what was posted, then of the ACKs held from the last
//!             round; one RX burst; timers; TX of what RX/timers made sendable); now();
//!             flush(); RoceConfig::hold_acks / set_hold_acks (ACKs wait one poll: opt-in
//!             for callers that keep polling or flush() before a blocking wait)
//! window:     on a memif port at path MTU 1024 the default max_unacked_psns becomes
//!             MEMIF_WINDOW (1024); elsewhere rxe's 128 (see MEMIF_WINDOW)
//! neighbours: neighbours() -> [(ip, mac, static)], add_neighbour(ip, mac)
//! stats:      stats() -> RoceStats {port, transport, engine, faults_rx, faults_tx};
//!             format_roce_stats(port, &stats) ("show roce stats" block); flush_pcap()
//! ```
//!
//! # Example: what a perftest-style client does
//! ```no_run
//! use droce_dpdk::roce::{RoceConfig, RoceDevice};
//! use droce_dpdk::*;
//! use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
//! use droce_transport::qp::{PathMtu, QpCap, QpInitAttr, QpType};
//! use droce_transport::verbs::{AccessFlags, SendOpcode, SendWr};
//! use droce_transport::{Gid, Psn, Qpn, Rkey};
//! use std::sync::Arc;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let args: Vec<String> = vec![];
//! let eal = Eal::init(&args)?;
//! let pool = Arc::new(Mempool::create("roce_pool", &MempoolConfig { n: 8191, ..Default::default() })?);
//! let mut port = Port::new(PortId(0))?;
//! let configured = port.configure(&PortConfig::new(), &pool)?;
//! port.start()?;
//! let mut cfg = RoceConfig::new(PortId(0), QueueId(0));
//! cfg.ipv4 = vec!["192.168.77.20".parse()?];
//! let mut dev = RoceDevice::new(cfg, &configured, pool.clone())?;
//! // the application's own buffer, registered (it must outlive the MR)
//! let mut buf = vec![0u64; 1 << 17];
//! let pd = dev.device_mut().alloc_pd();
//! // SAFETY: `buf` lives until after `dev` is dropped and is not touched while in use.
//! let mr = unsafe { dev.reg_mr(pd, buf.as_mut_ptr() as *mut u8, 1 << 20, AccessFlags::ALL) }
//!     .map_err(|e| format!("{e:?}"))?;
//! let cq = dev.device_mut().create_cq(1024).map_err(|e| format!("{e:?}"))?;
//! let init = QpInitAttr { qp_type: QpType::Rc, pd, send_cq: cq, recv_cq: cq, srq: None,
//!                         cap: QpCap::default(), sq_sig_all: false };
//! let qp = dev.device_mut().create_qp(init).map_err(|e| format!("{e:?}"))?;
//! // exchange over TCP: our QPN, PSN, GID (index 1 = ::ffff:IPv4, like rxe), rkey, va
//! let (my_qpn, my_psn, my_gid) = (dev.device().query_qp(qp).unwrap().qp_num, Psn::new(0x1234), dev.gid(1).unwrap());
//! let (my_rkey, my_va) = (mr.rkey, mr.va);
//! # let _ = (my_qpn, my_gid, my_rkey, my_va);
//! let (peer_qpn, peer_psn, peer_gid, peer_rkey, peer_va) =
//!     (Qpn::new(0x11), Psn::new(0x5678), Gid::from_ipv4("192.168.77.10".parse()?), Rkey(0x100), 0u64);
//! let d = dev.device_mut();
//! let (a, m) = init_attr(AccessFlags::ALL);
//! d.modify_qp(qp, &a, m).map_err(|e| format!("{e:?}"))?;
//! let av = droce_transport::verbs::AddressVector { dgid: peer_gid, sgid_index: 1, hop_limit: 64, ..Default::default() };
//! let (a, m) = rtr_attr(av, PathMtu::Mtu1024, peer_qpn, peer_psn, 16, 12);
//! d.modify_qp(qp, &a, m).map_err(|e| format!("{e:?}"))?;
//! let (a, m) = rts_attr(my_psn, 14, 7, 7, 16);
//! d.modify_qp(qp, &a, m).map_err(|e| format!("{e:?}"))?;
//! let wr = SendWr::new(1, SendOpcode::Write).with_sge(mr.va, 4096, mr.lkey).with_remote(peer_va, peer_rkey);
//! dev.device_mut().post_send(qp, wr).map_err(|e| format!("{e:?}"))?;
//! let wc = loop {
//!     dev.poll(); // manual progress: RX burst, timers, TX
//!     if let Some(wc) = dev.device_mut().poll_cq_one(cq).map_err(|e| format!("{e:?}"))? { break wc; }
//! };
//! println!("{:?} {}", wc.status, droce_dpdk::roce::format_roce_stats(0, &dev.stats()));
//! drop(dev);
//! # drop(buf); drop(eal);
//! # Ok(()) }
//! ```
//!
//! Addresses: the device resolves peers' MACs itself; the `dmac` of an address vector is
//! ignored. Every frame from the transport is re-addressed at TX from the neighbour table by
//! its IP destination; frames to an unknown IP wait (bounded) while ARP requests / neighbour
//! solicitations go out (retries, then drop + count). ARP requests and NS for own addresses
//! are answered; ARP and NA/NS sources are learned. Static entries from the config never
//! expire. The protocol is `droce_transport::neigh`; [`neigh`] does its I/O.
//!
//! RX demultiplexing (`droce_transport::wire::classify`): ARP, ICMPv6 NS/NA, IPv4/IPv6 UDP
//! to port 4791 (→ `handle_rx`); everything else is dropped and counted (`non_roce`), and
//! frames shorter than their headers say (`truncated`). The engine checks the IPv4 header
//! checksum (the transport's ICRC masks it; RX offload status is used when the port gives it)
//! and trims Ethernet padding; the transport checks the ICRC.
//!
//! TX: `poll_transmit` writes straight into an mbuf's data room; frames the PMD does not take
//! stay queued in order for the next `poll` (no drop, no leak). The transport always computes
//! the IPv4 header checksum and sends UDP checksum 0 over IPv4 as rxe does; with
//! `checksum_offload` and a port that enabled IPv4 checksum TX offload, frames are also
//! flagged for it (the NIC then rewrites the same value).
//!
//! Timers: TSC time since the device was created, in ns, is the transport's `Instant`.
//!
//! Fault injection (test feature): see [`fault`]. Capture: see [`pcap`]; every ARP, ND and
//! RoCE frame received (before RX faults) and sent (after TX faults).

pub mod cm;
pub mod fault;
#[allow(unsafe_code)]
pub mod memory;
pub mod mesh;
pub mod neigh;
pub mod pcap;

pub use fault::{FaultConfig, FaultCounters, FaultParseError, FaultProbs};
pub use memory::ProcessMemory;
pub use neigh::NeighConfig;

use crate::{ConfiguredPort, Mbuf, MbufBatch, Mempool, PortId, PortStats, QueueId, Tsc};
use droce_transport::counters::Counters;
use droce_transport::qp::PathMtu;
use droce_transport::verbs::mr::{DeregMrError, RegMrError};
use droce_transport::verbs::{AccessFlags, AddressVector, MemoryRegion, PdHandle};
use droce_transport::wire::{classify, eth, ipv4, EtherType, EthernetFrame, FrameKind, Ipv4Packet};
use droce_transport::{Device, DeviceConfig, Gid, Instant, Memory, MemoryError};
use fault::{apply_corruption, FaultInjector};
use neigh::Neighbours;
use std::collections::VecDeque;
use std::fmt::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::Arc;

/// Configuration of a [`RoceDevice`].
#[derive(Debug, Clone)]
pub struct RoceConfig {
    pub port: PortId,
    pub queue: QueueId,
    pub ipv4: Vec<Ipv4Addr>,
    pub ipv6: Vec<Ipv6Addr>,
    /// Source MAC; `None`: the port's.
    pub mac: Option<[u8; 6]>,
    /// Ethernet MTU the path MTU derives from (1500 → 1024, 9000 → 4096 like rxe); `None`:
    /// the configured port MTU.
    pub eth_mtu: Option<u32>,
    /// Seed of the transport's random choices (MR keys).
    pub seed: u64,
    /// Static neighbour entries (never expire).
    pub neighbours: Vec<(IpAddr, [u8; 6])>,
    /// Write every RoCE/ARP/ND frame sent and received to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Fault injection (a test feature).
    pub faults: Option<FaultConfig>,
    /// Most frames taken from the port per `poll`.
    pub rx_burst: u16,
    /// Most frames taken from the transport per `poll`.
    pub tx_burst: u16,
    pub neigh: NeighConfig,
    /// Transport knobs (`max_unacked_psns`, `ack_coalesce`, `hop_limit`, `first_qpn`); its
    /// `mac`, `gids`, `eth_mtu` and `seed` are set from the fields above. The default
    /// `max_unacked_psns` becomes [`MEMIF_WINDOW`] on a memif port at path MTU 1024.
    pub transport: DeviceConfig,
    /// Flag IPv4 frames for TX checksum offload when the port enabled it.
    pub checksum_offload: bool,
}

/// Which frames one TX pass of [`RoceDevice::poll`] takes from the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxRound {
    /// Requests, responses and retransmissions; plain ACK/NAK replies wait.
    DataOnly,
    /// Everything, held ACKs included.
    All,
    /// Right after RX: what the transport's ACK-hold policy lets go.
    AfterRx,
}

/// The send window (`DeviceConfig::max_unacked_psns`, PSNs) the engine uses on a memif port
/// when the config keeps the transport's default (rxe's 128) and the path MTU is 1024: about
/// one memif ring (1024 slots). With 128 a busy-polling peer that loses its CPU for a
/// scheduler slice stalls the sender after 128 frames; write_bw 64 KiB over memif on a loaded
/// 2-vCPU machine went from 0.23-0.34x to 0.39-0.48x of raw memif. memif is the one wire
/// that pushes back instead of dropping (a full ring makes `tx_burst` take fewer frames, which
/// the engine keeps), but only for frames that fit one 2048-byte ring buffer: DPDK 22.11's
/// memif garbles a frame spanning several buffers when the ring fills in the middle of it
/// (seen as `non_roce_drops` and go-back-N with 1024 x 4 KiB in flight). Kernel-backed ports
/// (af_packet, tap) drop bursts in socket buffers: there 1024 frames in flight under a ping
/// flood ended in RETRY_EXC_ERR, so they keep 128, and so does memif with injected faults
/// (go-back-N over 1024 frames with 2% drops and duplicated NAKs, each costing a retry, ran
/// out of retries). After a loss the transport halves the window (not below 128) and grows
/// it back per ACK.
pub const MEMIF_WINDOW: u32 = 1024;

impl RoceConfig {
    pub fn new(port: PortId, queue: QueueId) -> Self {
        RoceConfig {
            port,
            queue,
            ipv4: Vec::new(),
            ipv6: Vec::new(),
            mac: None,
            eth_mtu: None,
            seed: 0,
            neighbours: Vec::new(),
            pcap: None,
            faults: None,
            rx_burst: 32,
            tx_burst: 32,
            // A new QP sends its first window while the first ARP exchange runs: hold it all
            // (frames beyond max_held are dropped and cost a go-back-N resend).
            neigh: NeighConfig { max_held: MEMIF_WINDOW as usize + 256, ..NeighConfig::default() },
            transport: DeviceConfig::default(),
            checksum_offload: true,
        }
    }
}

/// Errors of [`RoceDevice::new`].
#[derive(Debug)]
pub enum RoceError {
    Dpdk(crate::Error),
    /// No IPv4 or IPv6 address configured.
    NoAddress,
    /// The pool's data room (after the headroom) cannot hold the largest frame.
    PoolTooSmall {
        need: usize,
        have: usize,
    },
    Pcap(PathBuf, std::io::Error),
}

impl fmt::Display for RoceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoceError::Dpdk(e) => write!(f, "{e}"),
            RoceError::NoAddress => write!(f, "the RoCE device needs an IPv4 or IPv6 address"),
            RoceError::PoolTooSmall { need, have } => {
                write!(f, "mbuf data room too small for RoCE frames: need {need} bytes after the headroom, pool has {have}")
            }
            RoceError::Pcap(p, e) => write!(f, "cannot create pcap file {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for RoceError {}

impl From<crate::Error> for RoceError {
    fn from(e: crate::Error) -> Self {
        RoceError::Dpdk(e)
    }
}

/// Counters of the engine itself (the transport and the port have their own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineCounters {
    pub rx_frames: u64,
    pub rx_roce: u64,
    pub tx_roce: u64,
    pub arp_requests_rx: u64,
    pub arp_replies_rx: u64,
    pub arp_requests_tx: u64,
    pub arp_replies_tx: u64,
    pub nd_solicits_rx: u64,
    pub nd_adverts_rx: u64,
    pub nd_solicits_tx: u64,
    pub nd_adverts_tx: u64,
    /// Frames that are neither RoCEv2, ARP nor ND (dropped).
    pub non_roce_drops: u64,
    /// Frames shorter than their headers claim (dropped).
    pub truncated: u64,
    /// IPv4 header checksum errors (dropped).
    pub bad_ip_cksum: u64,
    /// Frames dropped because their destination never resolved.
    pub neigh_unresolved_drops: u64,
    /// Frames dropped because the per-destination hold queue was full.
    pub neigh_queue_full: u64,
    /// Frames from the transport with no usable IP destination (dropped).
    pub tx_no_route: u64,
    /// Mbuf allocation failures.
    pub tx_nombuf: u64,
    pub pcap_frames: u64,
    pub pcap_errors: u64,
    /// Faults injected, all kinds and directions (details in `faults_rx` / `faults_tx`).
    pub injected_faults: u64,
}

impl EngineCounters {
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("rx_frames", self.rx_frames),
            ("rx_roce", self.rx_roce),
            ("tx_roce", self.tx_roce),
            ("arp_requests_rx", self.arp_requests_rx),
            ("arp_replies_rx", self.arp_replies_rx),
            ("arp_requests_tx", self.arp_requests_tx),
            ("arp_replies_tx", self.arp_replies_tx),
            ("nd_solicits_rx", self.nd_solicits_rx),
            ("nd_adverts_rx", self.nd_adverts_rx),
            ("nd_solicits_tx", self.nd_solicits_tx),
            ("nd_adverts_tx", self.nd_adverts_tx),
            ("non_roce_drops", self.non_roce_drops),
            ("truncated", self.truncated),
            ("bad_ip_cksum", self.bad_ip_cksum),
            ("neigh_unresolved_drops", self.neigh_unresolved_drops),
            ("neigh_queue_full", self.neigh_queue_full),
            ("tx_no_route", self.tx_no_route),
            ("tx_nombuf", self.tx_nombuf),
            ("pcap_frames", self.pcap_frames),
            ("pcap_errors", self.pcap_errors),
            ("injected_faults", self.injected_faults),
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

/// What one `poll` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    pub rx: u32,
    pub tx: u32,
    pub timers: bool,
}

impl Work {
    pub fn is_idle(&self) -> bool {
        self.rx == 0 && self.tx == 0 && !self.timers
    }
}

/// One held RX frame (fault reorder) and the time it was held.
struct HeldRx {
    frame: Vec<u8>,
    since: u64,
}

/// Idle polls between two TSC readings for the timers (timers are 20 us and coarser; an idle
/// poll takes ~0.1-0.3 us).
const IDLE_CLOCK_POLLS: u32 = 8;

/// How long a reordered frame waits for another to overtake it before it goes anyway.
const REORDER_HOLD_NS: u64 = 200_000;

/// TSC cycles since a start, in nanoseconds, by a multiply and a shift: `Tsc::cycles_to_ns`
/// divides 128-bit numbers (`__udivti3`, 4% of a send_bw profile when it ran on every poll).
#[derive(Debug, Clone, Copy)]
struct NsClock {
    start: u64,
    /// Nanoseconds per cycle as a 32.32 fixed-point number.
    mult: u64,
}

impl NsClock {
    const SHIFT: u32 = 32;

    fn new(tsc: &Tsc) -> NsClock {
        let mult = ((1_000_000_000u128 << Self::SHIFT) / tsc.hz().max(1) as u128).min(u64::MAX as u128) as u64;
        NsClock { start: crate::rdtsc(), mult }
    }

    #[inline]
    fn elapsed_ns(&self, tsc_now: u64) -> u64 {
        let c = tsc_now.saturating_sub(self.start);
        ((c as u128 * self.mult as u128) >> Self::SHIFT).min(u64::MAX as u128) as u64
    }
}

/// A transport `Device` on a DPDK port and queue (see the module docs).
pub struct RoceDevice {
    cfg: RoceConfig,
    dev: Device<ProcessMemory>,
    port: crate::Port,
    mac: [u8; 6],
    gids: Vec<Gid>,
    tx_ip_offload: bool,
    rx_ip_offload: bool,
    clock: NsClock,
    neigh: Neighbours<Mbuf>,
    counters: EngineCounters,
    pcap: Option<pcap::PcapWriter>,
    fault_rx: Option<FaultInjector>,
    fault_tx: Option<FaultInjector>,
    held_rx: Option<HeldRx>,
    held_tx: Option<(Mbuf, u64)>,
    scratch: Vec<u8>,
    frame_len: usize,
    rx_batch: MbufBatch<64>,
    tx_batch: MbufBatch<64>,
    tx_queue: VecDeque<Mbuf>,
    /// Plain ACKs received behind a request in the last burst, and every frame behind
    /// them (handled first next round, in order; [`RxOrder`]).
    rx_acks_later: VecDeque<Mbuf>,
    /// Engine time at the last TSC reading, and idle polls since.
    last_now: Instant,
    idle_polls: u32,
    /// `poll` calls so far (wrapping): [`RoceDevice::flush_if_unpolled`] tells from it
    /// whether the application polled since its last look.
    polls: u64,
    spare: Option<Mbuf>,
    /// Several peers' ports instead of `port` for I/O (the host's zero-config mesh).
    mesh: Option<mesh::MeshWire>,
    // Dropped last: every mbuf above returns to it first.
    pool: Arc<Mempool>,
}

impl fmt::Debug for RoceDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoceDevice").field("port", &self.cfg.port).field("mac", &self.mac).field("gids", &self.gids).finish()
    }
}

impl RoceDevice {
    /// Bind a transport device to `configured`'s port (configured and started by the caller)
    /// and `cfg.queue`. `pool` provides the TX mbufs.
    pub fn new(cfg: RoceConfig, configured: &ConfiguredPort, pool: Arc<Mempool>) -> Result<RoceDevice, RoceError> {
        if cfg.ipv4.is_empty() && cfg.ipv6.is_empty() {
            return Err(RoceError::NoAddress);
        }
        let port = crate::Port::new(cfg.port)?;
        let mac = match cfg.mac {
            Some(m) => m,
            None => port.mac_addr()?.0,
        };
        let eth_mtu = cfg.eth_mtu.unwrap_or(configured.mtu as u32);
        // GID table like rxe: 0 = link-local from the MAC, 1.. = IPv4-mapped, then IPv6.
        let ll = neigh::link_local_from_mac(mac);
        let mut gids = vec![Gid::from_ipv6(ll)];
        gids.extend(cfg.ipv4.iter().map(|a| Gid::from_ipv4(*a)));
        gids.extend(cfg.ipv6.iter().filter(|a| **a != ll).map(|a| Gid::from_ipv6(*a)));
        let mut tcfg = DeviceConfig { mac, gids: gids.clone(), seed: cfg.seed, eth_mtu, ..cfg.transport.clone() };
        // memif without injected faults: a wire that does not lose frames
        let memif = port.info().is_ok_and(|i| i.driver_name == "net_memif") && cfg.faults.is_none();
        if memif && tcfg.max_unacked_psns == DeviceConfig::default().max_unacked_psns && PathMtu::for_eth_mtu(eth_mtu) <= PathMtu::Mtu1024 {
            tcfg.max_unacked_psns = MEMIF_WINDOW;
        }
        let dev = Device::new(tcfg, ProcessMemory::new());
        let frame_len = dev.max_frame_len();
        let have = pool.data_room_size() as usize - crate::sys::RTE_PKTMBUF_HEADROOM as usize;
        if have < frame_len {
            return Err(RoceError::PoolTooSmall { need: frame_len, have });
        }
        // Neighbour solicitations go to solicited-node multicast MACs: without all-multicast
        // (or promiscuous mode) a real NIC filters them out. PMDs without the knob (memif,
        // ring) deliver everything anyway, so a refusal is only logged. Every device has an
        // IPv6 link-local GID, so this is always wanted.
        if let Err(e) = port.set_allmulticast(true) {
            log::debug!("port {}: all-multicast not enabled ({e}); IPv6 ND relies on the PMD delivering 33:33:ff:* frames", cfg.port.0);
        }
        let clock = NsClock::new(&Tsc::new());
        let pcap = match &cfg.pcap {
            Some(p) => Some(pcap::PcapWriter::create(p, 0).map_err(|e| RoceError::Pcap(p.clone(), e))?),
            None => None,
        };
        let mut neigh = Neighbours::new(cfg.neigh, mac, &cfg.ipv4, &cfg.ipv6);
        for (ip, m) in &cfg.neighbours {
            neigh.add_static(*ip, *m);
        }
        let (fault_rx, fault_tx) = match &cfg.faults {
            Some(f) => (
                Some(FaultInjector::new(f.rx, f.seed)).filter(|i| i.is_active()),
                Some(FaultInjector::new(f.tx, f.seed ^ 0x5eed_7a11)).filter(|i| i.is_active()),
            ),
            None => (None, None),
        };
        Ok(RoceDevice {
            tx_ip_offload: cfg.checksum_offload && configured.tx_ipv4_cksum(),
            rx_ip_offload: configured.rx_ipv4_cksum(),
            cfg,
            dev,
            port,
            mac,
            gids,
            clock,
            neigh,
            counters: EngineCounters::default(),
            pcap,
            fault_rx,
            fault_tx,
            held_rx: None,
            held_tx: None,
            scratch: Vec::with_capacity(frame_len.max(2048)),
            frame_len,
            rx_batch: MbufBatch::new(),
            tx_batch: MbufBatch::new(),
            tx_queue: VecDeque::new(),
            rx_acks_later: VecDeque::new(),
            last_now: Instant(0),
            idle_polls: 0,
            polls: 0,
            spare: None,
            mesh: None,
            pool,
        })
    }

    // ------------------------------------------------------------------ identity

    pub fn config(&self) -> &RoceConfig {
        &self.cfg
    }
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }
    pub fn gids(&self) -> &[Gid] {
        &self.gids
    }
    pub fn gid(&self, index: usize) -> Option<Gid> {
        self.gids.get(index).copied()
    }
    pub fn gid_index(&self, gid: &Gid) -> Option<u8> {
        self.gids.iter().position(|g| g == gid).map(|i| i as u8)
    }
    /// The port's path MTU (the largest a QP may use).
    pub fn path_mtu(&self) -> PathMtu {
        self.dev.port_mtu()
    }
    /// Address vector to `dgid` from our GID `sgid_index` (MAC resolved by the engine).
    pub fn av(&self, dgid: Gid, sgid_index: u8) -> AddressVector {
        AddressVector { dgid, dmac: [0; 6], sgid_index, hop_limit: 64, traffic_class: 0, flow_label: 0 }
    }
    /// Largest frame the transport produces (TX mbufs hold this much).
    pub fn max_frame_len(&self) -> usize {
        self.frame_len
    }

    pub fn device(&self) -> &Device<ProcessMemory> {
        &self.dev
    }
    /// The transport device for verbs (PD, CQ, QP, post/poll). MRs over process memory go
    /// through [`RoceDevice::reg_mr`] so that the memory layer knows the range.
    pub fn device_mut(&mut self) -> &mut Device<ProcessMemory> {
        &mut self.dev
    }

    /// Engine time: TSC nanoseconds since the device was created.
    pub fn now(&self) -> Instant {
        Instant(self.clock.elapsed_ns(crate::rdtsc()))
    }

    // ------------------------------------------------------------------ memory

    /// Register `len` bytes of process memory at `addr` as an MR of `pd`.
    ///
    /// # Safety
    /// `addr..addr + len` must stay valid for reads and writes until `dereg_mr(lkey)` or the
    /// drop of the device, and the application must not access it while a work request or a
    /// remote peer may use it (see [`memory`]).
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr(&mut self, pd: PdHandle, addr: *mut u8, len: usize, access: AccessFlags) -> Result<MemoryRegion, RegMrError> {
        let mr = self.dev.reg_mr(pd, addr as u64, len as u64, access)?;
        // SAFETY: forwarded from this function's contract.
        if unsafe { self.dev.memory_mut().add_region(addr as u64, len as u64) }.is_err() {
            let _ = self.dev.dereg_mr(mr.lkey);
            return Err(RegMrError::InvalidRange);
        }
        Ok(mr)
    }

    /// Deregister an MR made with [`reg_mr`](Self::reg_mr); the range is no longer touched.
    pub fn dereg_mr(&mut self, lkey: droce_transport::Lkey) -> Result<(), DeregMrError> {
        let (va, len) = {
            let mr = self.dev.query_mr(lkey).ok_or(DeregMrError::InvalidMr)?;
            (mr.va, mr.len)
        };
        self.dev.dereg_mr(lkey)?;
        self.dev.memory_mut().remove_region(va, len);
        Ok(())
    }

    /// Copy registered memory out (for checks; no work request may be writing it).
    pub fn read_mem(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        self.dev.memory().read(addr, buf)
    }
    /// Copy into registered memory (no work request may be using it).
    pub fn write_mem(&mut self, addr: u64, data: &[u8]) -> Result<(), MemoryError> {
        self.dev.memory_mut().write(addr, data)
    }

    // ------------------------------------------------------------------ neighbours

    pub fn neighbours(&self) -> Vec<(IpAddr, [u8; 6], bool)> {
        self.neigh.entries()
    }
    pub fn add_neighbour(&mut self, ip: IpAddr, mac: [u8; 6]) {
        self.neigh.add_static(ip, mac);
    }

    // ------------------------------------------------------------------ stats

    pub fn counters(&self) -> &EngineCounters {
        &self.counters
    }

    pub fn stats(&self) -> RoceStats {
        RoceStats {
            port: self.port.stats().unwrap_or_default(),
            transport: self.dev.counters().clone(),
            engine: self.counters.clone(),
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

    fn capture(&mut self, now: u64, frame: &[u8]) {
        if let Some(p) = &mut self.pcap {
            if p.write(now, frame).is_ok() {
                self.counters.pcap_frames += 1;
            } else {
                self.counters.pcap_errors += 1;
            }
        }
    }

    fn sync_fault_total(&mut self) {
        let sum = |c: FaultCounters| c.dropped + c.duplicated + c.reordered + c.corrupted;
        self.counters.injected_faults =
            self.fault_rx.as_ref().map_or(0, |f| sum(f.counters)) + self.fault_tx.as_ref().map_or(0, |f| sum(f.counters));
    }

    // ------------------------------------------------------------------ the loop

    /// One round: frames the application posted since the last round go out first (then the
    /// acknowledgements held from the last round's RX, with `hold_acks`), an RX burst
    /// (≤ `rx_burst`), due timers, and what RX and timers made sendable (ACKs unless held,
    /// READ/atomic responses, requests the window now allows, retransmissions) — each TX
    /// step up to `tx_burst` frames and one TX burst. Returns what happened so callers can
    /// spin or back off.
    ///
    /// Order for latency: a reply posted after a completion leaves at the very start of the
    /// next round without an RX burst in front of it; with [`RoceConfig::hold_acks`] the
    /// ACK for the request it answers waits for it (held one round in the transport,
    /// [`Device::poll_transmit_data`]) and leaves in the same burst, just ahead of it, so
    /// the peer completes its send before the receive. Plain ACKs received behind a request
    /// in one burst, and every frame behind them, are handled at the next round ([`RxOrder`]).
    pub fn poll(&mut self) -> Work {
        let mut work = Work::default();
        self.polls = self.polls.wrapping_add(1);
        // The TSC is read only when there is work, or every IDLE_CLOCK_POLLS idle polls for
        // the timers (rdtsc costs ~45 ns in a VM: half the self time of an idle poll).
        let t0 = if self.dev.tx_ready() || !self.rx_acks_later.is_empty() || self.idle_polls >= IDLE_CLOCK_POLLS {
            crate::rdtsc()
        } else {
            0
        };
        let mut now = if t0 != 0 { self.fresh_now(t0) } else { self.last_now };
        // TX: what the application posted, then the held ACKs
        self.transmit(now, TxRound::DataOnly, &mut work);
        self.transmit(now, TxRound::All, &mut work);
        // RX: the ACKs held back from the last burst, then a new burst
        while let Some(m) = self.rx_acks_later.pop_front() {
            work.rx += 1;
            self.rx_mbuf(now, m);
        }
        let mut n = 0;
        if let Some(mw) = &mut self.mesh {
            n = mw.rx_burst(self.cfg.queue, &mut self.rx_batch, self.cfg.rx_burst);
            work.rx += n as u32;
        } else if let Ok(k) = self.port.rx_burst_max(self.cfg.queue, &mut self.rx_batch, self.cfg.rx_burst) {
            n = k;
            work.rx += k as u32;
        }
        if n > 0 && t0 == 0 {
            now = self.fresh_now(crate::rdtsc());
        }
        if n > 0 {
            let mut batch = core::mem::take(&mut self.rx_batch);
            // Plain ACKs behind a request wait for the next round: the request's completion
            // (a ping-pong's receive) reaches the application first. Once one waits, every
            // later frame of the burst waits too: responses, so the response stream keeps
            // its order, and requests, which the peer may have sent as its answer to the
            // message that ACK acknowledges (its receive must not complete before our send:
            // ofi_rxm's atomics free the request on the answer).
            let mut order = RxOrder::default();
            let defer = self.fault_rx.is_none();
            for m in batch.drain() {
                let op = (m.nb_segs() == 1).then(|| rc_bth_opcode(m.data()));
                if defer && order.later(op) {
                    self.rx_acks_later.push_back(m);
                    continue;
                }
                self.rx_mbuf(now, m);
            }
            self.rx_batch = batch;
        }
        if let Some(h) = &self.held_rx {
            if now.0.saturating_sub(h.since) >= REORDER_HOLD_NS {
                let mut h = self.held_rx.take().map(|h| h.frame).unwrap_or_default();
                self.rx_frame(now, &mut h);
            }
        }
        // timers
        if let Some(t) = self.dev.poll_timeout() {
            if t <= now {
                self.dev.handle_timeout(now);
                work.timers = true;
            }
        }
        if self.neigh.poll_timeout().is_some_and(|t| t <= now) {
            work.timers = true;
            self.neigh_timers(now.0);
        }
        if let Some((_, since)) = &self.held_tx {
            if now.0.saturating_sub(*since) >= REORDER_HOLD_NS {
                if let Some((m, _)) = self.held_tx.take() {
                    self.wire_tx(now.0, m);
                }
            }
        }
        // TX what RX and timers made sendable; with the ACK-hold policy the ACKs they queued
        // wait for the next round
        if work.rx > 0 || work.timers {
            self.transmit(now, TxRound::AfterRx, &mut work);
        } else {
            self.flush_tx();
        }
        if work.is_idle() {
            self.idle_polls += 1;
        }
        work
    }

    /// Send everything the transport has now, held ACKs included, and push the TX queue to
    /// the PMD: for a caller with [`RoceConfig::hold_acks`] before it stops polling.
    pub fn flush(&mut self) -> Work {
        let mut work = Work::default();
        let now = self.now();
        self.transmit(now, TxRound::All, &mut work);
        work
    }

    /// Hold the ACKs RX produces until the next poll: the transport's ACK-hold policy
    /// ([`DeviceConfig::hold_acks`]). Only for callers that keep polling, or [`flush`](Self::flush)
    /// before they stop: a held ACK is not sent without a further `poll`/`flush`.
    pub fn set_hold_acks(&mut self, on: bool) {
        self.dev.set_hold_acks(on);
    }

    /// Whether ACKs RX produces wait for the next poll.
    pub fn hold_acks(&self) -> bool {
        self.dev.hold_acks()
    }

    /// The safety net of [`RoceConfig::hold_acks`] for a caller that may stop polling (a
    /// library under an application): called every so often from another thread (with the
    /// device's lock), it [`flush`](Self::flush)es when no `poll` ran since the previous call
    /// (`*seen` keeps the count between calls) and frames wait: ACKs held behind a last
    /// receive, frames the TX ring refused. Returns whether it flushed. Timers and RX stay
    /// with `poll` (manual progress): only what the device already decided to send leaves.
    pub fn flush_if_unpolled(&mut self, seen: &mut u64) -> bool {
        let idle = self.polls == *seen;
        *seen = self.polls;
        if idle && (self.dev.tx_ready() || self.tx_pending() > 0) {
            self.flush();
            true
        } else {
            false
        }
    }

    /// `now` from a TSC reading, remembered for the idle polls that skip the read.
    #[inline]
    fn fresh_now(&mut self, tsc: u64) -> Instant {
        let now = Instant(self.clock.elapsed_ns(tsc).max(self.last_now.0));
        self.last_now = now;
        self.idle_polls = 0;
        now
    }

    /// Frames from the transport (all, or without plain ACK/NAKs) up to the budget, bounded
    /// by frames still waiting for the PMD, then a TX burst.
    fn transmit(&mut self, now: Instant, round: TxRound, work: &mut Work) {
        if !self.dev.tx_ready() {
            self.flush_tx();
            return;
        }
        let room = match &self.mesh {
            Some(mw) if mw.backlogged() => 0,
            Some(_) => self.cfg.tx_burst as usize * 4,
            None => (self.cfg.tx_burst as usize * 4).saturating_sub(self.tx_queue.len() + self.tx_batch.len()),
        };
        let budget = (self.cfg.tx_burst as usize).min(room);
        let mut sent = 0;
        while sent < budget {
            let mut m = match self.spare.take() {
                Some(m) => m,
                None => match self.pool.alloc() {
                    Ok(m) => m,
                    Err(_) => {
                        self.counters.tx_nombuf += 1;
                        break;
                    }
                },
            };
            let Some(buf) = m.set_len(self.frame_len as u16) else {
                self.counters.tx_nombuf += 1;
                break;
            };
            let r = match round {
                TxRound::DataOnly => self.dev.poll_transmit_data(now, buf),
                TxRound::All => self.dev.poll_transmit(now, buf),
                TxRound::AfterRx => self.dev.poll_transmit_after_rx(now, buf),
            };
            match r {
                Some(n) => {
                    let _ = m.set_len(n as u16);
                    sent += 1;
                    self.counters.tx_roce += 1;
                    self.route(now.0, m);
                }
                None => {
                    self.spare = Some(m);
                    break;
                }
            }
        }
        work.tx += sent as u32;
        self.flush_tx();
    }

    fn flush_tx(&mut self) {
        if let Some(mw) = &mut self.mesh {
            // every frame to its peer's port (the single-port batch stays unused)
            if self.tx_queue.is_empty() {
                mw.flush(self.cfg.queue);
            } else {
                mw.transmit(self.cfg.queue, &mut self.tx_queue, &self.pool);
            }
            return;
        }
        if self.tx_queue.is_empty() && self.tx_batch.is_empty() {
            return;
        }
        self.tx_batch.fill_from(&mut self.tx_queue);
        if !self.tx_batch.is_empty() {
            // Unsent frames stay in the batch (in order) for the next poll.
            let _ = self.port.tx_burst(self.cfg.queue, &mut self.tx_batch);
        }
    }

    /// Frames queued for the PMD, not yet taken by it.
    pub fn tx_pending(&self) -> usize {
        self.tx_queue.len() + self.tx_batch.len() + self.mesh.as_ref().map_or(0, |m| m.pending())
    }

    /// Does I/O through the ports of `mesh` from now on instead of the device's own port
    /// (which still gives the MTU, the offloads and the window; see [`mesh`]).
    pub fn attach_mesh(&mut self, mesh: mesh::MeshWire) {
        self.mesh = Some(mesh);
    }

    /// The attached mesh (its owner marks ports up and down).
    pub fn mesh_mut(&mut self) -> Option<&mut mesh::MeshWire> {
        self.mesh.as_mut()
    }

    /// The last step before the PMD: TX faults, capture, queue.
    fn wire_tx(&mut self, now: u64, mut m: Mbuf) {
        if let Some(f) = &mut self.fault_tx {
            let a = f.decide(m.len(), is_roce(m.data()));
            self.sync_fault_total();
            if a.drop {
                return;
            }
            apply_corruption(m.data_mut(), &a);
            if a.dup {
                if let Ok(c) = self.pool.alloc_from_slice(m.data()) {
                    self.enqueue_wire(now, c);
                }
            }
            if a.reorder && self.held_tx.is_none() {
                self.held_tx = Some((m, now));
                return;
            }
        }
        self.enqueue_wire(now, m);
        if let Some((h, _)) = self.held_tx.take() {
            self.enqueue_wire(now, h);
        }
    }

    fn enqueue_wire(&mut self, now: u64, mut m: Mbuf) {
        if self.pcap.is_some() {
            let d = m.data().to_vec();
            self.capture(now, &d);
        }
        if self.tx_ip_offload {
            if let Some(ihl) = ipv4_header_len(m.data()) {
                m.set_tx_ipv4_cksum_offload(eth::HEADER_LEN as u8, ihl, true, false);
            }
        }
        self.tx_queue.push_back(m);
    }

    // ------------------------------------------------------------------ receive

    fn rx_mbuf(&mut self, now: Instant, mut m: Mbuf) {
        self.counters.rx_frames += 1;
        if m.nb_segs() == 1 && self.fault_rx.is_none() {
            // The common path: parse in the mbuf, no copy before the transport.
            self.rx_frame_with_mbuf(now, &mut m);
            return;
        }
        let mut frame = core::mem::take(&mut self.scratch);
        frame.clear();
        frame.extend_from_slice(&m.to_vec());
        drop(m);
        if self.pcap.is_some() && is_captured(&frame) {
            let copy = frame.clone();
            self.capture(now.0, &copy);
        }
        let len = frame.len();
        let roce = is_roce(&frame);
        match self.fault_rx.as_mut().map(|f| f.decide(len, roce)) {
            Some(a) => {
                self.sync_fault_total();
                if !a.drop {
                    apply_corruption(&mut frame, &a);
                    if a.reorder && self.held_rx.is_none() {
                        self.held_rx = Some(HeldRx { frame: frame.clone(), since: now.0 });
                    } else {
                        self.demux(now, &mut frame, None);
                        if a.dup {
                            self.demux(now, &mut frame, None);
                        }
                        if let Some(mut h) = self.held_rx.take() {
                            self.demux(now, &mut h.frame, None);
                        }
                    }
                }
            }
            None => self.demux(now, &mut frame, None),
        }
        self.scratch = frame;
    }

    fn rx_frame_with_mbuf(&mut self, now: Instant, m: &mut Mbuf) {
        if self.pcap.is_some() && is_captured(m.data()) {
            self.capture(now.0, m.data());
        }
        let ip_ok = if self.rx_ip_offload { Some(m.rx_ip_cksum()) } else { None };
        self.demux(now, m.data_mut(), ip_ok);
    }

    /// A frame released from the RX reorder hold.
    fn rx_frame(&mut self, now: Instant, frame: &mut [u8]) {
        self.demux(now, frame, None);
    }

    /// `f` is scratch for the transport's ICRC check ([`Device::handle_rx`]): unchanged
    /// on return.
    fn demux(&mut self, now: Instant, f: &mut [u8], ip_cksum: Option<crate::CksumStatus>) {
        match classify(f) {
            FrameKind::RoceV2 { ipv6, len, .. } => {
                // The IPv4 header checksum: the ICRC masks it, so it is checked here.
                let ok = ipv6
                    || match ip_cksum {
                        Some(crate::CksumStatus::Good) => true,
                        Some(crate::CksumStatus::Bad) => false,
                        _ => Ipv4Packet::new_unchecked(&f[eth::HEADER_LEN..len]).verify_checksum(),
                    };
                if !ok {
                    self.counters.bad_ip_cksum += 1;
                    return;
                }
                self.counters.rx_roce += 1;
                self.dev.handle_rx(now, &mut f[..len]);
            }
            FrameKind::Arp => self.rx_arp(now.0, f),
            FrameKind::Icmpv6 { .. } => self.rx_nd(now.0, f),
            FrameKind::Truncated => self.counters.truncated += 1,
            FrameKind::Other => self.counters.non_roce_drops += 1,
        }
    }
}

/// BTH opcodes of the RC responses: RDMA READ Response First (0x0d) .. Atomic Acknowledge (0x12).
const OPCODE_RC_FIRST_RESPONSE: u8 = 0x0d;
const OPCODE_RC_LAST_RESPONSE: u8 = 0x12;
/// Whether a BTH opcode is an RC response (READ response, ACK/NAK, atomic ACK).
#[inline]
fn is_rc_response(op: u8) -> bool {
    (OPCODE_RC_FIRST_RESPONSE..=OPCODE_RC_LAST_RESPONSE).contains(&op)
}

/// BTH opcode of the RC Acknowledge (ACK/NAK, no payload).
const OPCODE_RC_ACK: u8 = 0x11;
/// The first opcode past the RC range (UC starts at 0x20; UD is 0x64, CNP 0x81).
const OPCODE_UC_FIRST: u8 = 0x20;

/// Which frames of one RX burst wait for the next round. A plain ACK behind a request waits
/// (the request's completion, a ping-pong's receive, reaches the application first), and
/// once one waits every later frame of the burst waits too: responses, so the response
/// stream keeps its order, and requests, which the peer may have sent as its answer to the
/// message that ACK acknowledges (their receive must not complete before our send: ofi_rxm's
/// atomics free a request's buffer on the answer). Frames are fed in burst order.
#[derive(Debug, Default)]
struct RxOrder {
    request_seen: bool,
    deferring: bool,
    hold_all: bool,
}

impl RxOrder {
    /// `op`: `None` for a multi-segment frame (not classified), `Some(None)` for a frame
    /// that is not RC, `Some(Some(opcode))` for an RC frame. True: it waits.
    fn later(&mut self, op: Option<Option<u8>>) -> bool {
        if self.hold_all {
            return true;
        }
        match op {
            Some(Some(op)) if is_rc_response(op) => {
                let wait = self.deferring || (op == OPCODE_RC_ACK && self.request_seen);
                self.deferring |= wait;
                wait
            }
            // behind a held response nothing overtakes: not a request, not a CM MAD (a DREQ
            // would move the QP to error before the ACK it follows completes our send), not
            // a frame the fixed-offset read could not classify
            _ if self.deferring => {
                self.hold_all = true;
                true
            }
            // only an RC request (opcodes below 0x20) lets a later ACK wait
            Some(Some(op)) if op < OPCODE_UC_FIRST => {
                self.request_seen = true;
                false
            }
            _ => false,
        }
    }
}

/// The BTH opcode of a RoCEv2 frame, for scheduling only: the transport parses.
#[inline]
fn rc_bth_opcode(f: &[u8]) -> Option<u8> {
    f.get(classify(f).bth_offset()?).copied()
}

/// Whether a frame is RoCEv2 (IPv4 or IPv6, UDP to 4791).
fn is_roce(f: &[u8]) -> bool {
    matches!(classify(f), FrameKind::RoceV2 { .. })
}

/// Whether a frame is one the capture keeps: ARP, ICMPv6, RoCEv2.
fn is_captured(f: &[u8]) -> bool {
    classify(f).is_engine_frame()
}

/// The IPv4 header length of an IPv4 frame (for TX checksum offload).
fn ipv4_header_len(f: &[u8]) -> Option<u16> {
    let frame = EthernetFrame::new_checked(f).ok()?;
    if frame.ethertype() != EtherType::Ipv4 {
        return None;
    }
    let l3 = frame.payload();
    (l3.len() >= ipv4::HEADER_LEN).then(|| Ipv4Packet::new_unchecked(l3).header_len() as u16)
}

impl Drop for RoceDevice {
    fn drop(&mut self) {
        self.flush_pcap();
        // Held frames, spare, queues are plain `Mbuf`s/batches: their drops free them before
        // the pool (declared last).
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds one burst of opcodes (None: a multi-segment frame; Some(None): not RC) and
    /// returns which frames waited for the next round.
    fn waits(burst: &[Option<Option<u8>>]) -> Vec<bool> {
        let mut o = RxOrder::default();
        burst.iter().map(|&op| o.later(op)).collect()
    }

    #[test]
    fn rx_order_keeps_requests_behind_a_held_ack() {
        const SEND: Option<Option<u8>> = Some(Some(0x04)); // RC SEND Only
        const ACK: Option<Option<u8>> = Some(Some(OPCODE_RC_ACK));
        const READ_RESP: Option<Option<u8>> = Some(Some(0x10)); // RDMA READ Response Only
        const UD: Option<Option<u8>> = Some(Some(0x64)); // UD SEND Only: CM MADs (a DREQ) too
        const OTHER: Option<Option<u8>> = Some(None); // not classified (ARP, IP options, ...)
        const MULTI: Option<Option<u8>> = None; // multi-segment
        // an ACK in front of the request it answers goes first, in order
        assert_eq!(waits(&[ACK, SEND]), [false, false]);
        // an ACK behind a request waits; so does every response behind it
        assert_eq!(waits(&[SEND, ACK, READ_RESP]), [false, true, true]);
        // a request behind a held ACK waits too: the peer's answer to what the ACK covers
        // must not complete before our send (this was processed at once before)
        assert_eq!(waits(&[SEND, ACK, SEND, ACK]), [false, true, true, true]);
        assert_eq!(waits(&[SEND, ACK, MULTI, SEND]), [false, true, true, true]);
        // nothing overtakes a held ACK: a DREQ behind it, an unclassified frame
        assert_eq!(waits(&[SEND, ACK, UD]), [false, true, true]);
        assert_eq!(waits(&[SEND, ACK, OTHER]), [false, true, true]);
        // a UD frame (a DREQ) is not a request that lets the ACK behind it wait: that ACK
        // completes our last send before the DREQ moves the QP to error
        assert_eq!(waits(&[UD, ACK, SEND]), [false, false, false]);
        assert_eq!(waits(&[OTHER, UD, MULTI, ACK]), [false, false, false, false]);
    }

    #[test]
    fn ns_clock_matches_the_division() {
        for hz in [1_000_000_000u64, 2_100_000_000, 2_994_374_000, 3_700_000_123] {
            let tsc = Tsc::with_hz(hz);
            let c = NsClock { start: 1000, mult: NsClock::new(&tsc).mult };
            for cycles in [0u64, 1, 999, 123_456_789, 3_600 * hz, 86_400 * hz] {
                let exact = tsc.cycles_to_ns(cycles);
                let got = c.elapsed_ns(1000 + cycles);
                // 32 fractional bits: off by at most one part in 2^31 (plus rounding)
                assert!(exact.abs_diff(got) <= exact / (1 << 31) + 1, "hz {hz} cycles {cycles}: {got} vs {exact}");
            }
            assert_eq!(c.elapsed_ns(10), 0, "a reading before the start is time 0");
        }
    }
}
