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
mod poll;
mod rx;
mod stats;
mod txmbufs;
#[allow(unsafe_code)]
mod zerocopy;

pub use stats::{format_roce_stats, EngineCounters, RoceStats};

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
    /// Zero-copy transmit ([`zerocopy`]): RC data frames with at least this many payload
    /// bytes in one registered range go out as a chain whose payload segment is the
    /// registered memory itself. `None`: every payload is copied into the mbuf. Only on PMDs
    /// that read segments by virtual address (memif, ring, af_packet, af_xdp, tap, null; a NIC
    /// would need the memory DMA-mapped), and not while a capture or TX fault injection reads
    /// the frames. Default [`TX_ZERO_COPY_MIN`]; env `DROCE_TX_ZC` = `off` / `0` or a size.
    pub tx_zero_copy: Option<usize>,
    /// Received messages of at least this many bytes are copied into registered memory with
    /// non-temporal stores ([`ProcessMemory::with_stream_min`]); `None`: through the caches.
    /// Env `DROCE_NT_MIN` = `off` / `0` or a size in bytes.
    pub rx_stream_min: Option<u64>,
}

/// Default smallest payload sent zero-copy (`docs/design.md`, "Where the payload is copied").
pub const TX_ZERO_COPY_MIN: usize = 1024;

/// Drivers whose TX reads a segment through its virtual address (a copy or a pointer hand-off),
/// so an external buffer in plain process memory needs no DMA mapping.
const ZERO_COPY_DRIVERS: [&str; 6] = ["net_memif", "net_ring", "net_af_packet", "net_af_xdp", "net_tap", "net_null"];

/// Whether memif port `port` was created with `zero-copy=yes`.
fn memif_zero_copy(port: PortId) -> bool {
    crate::port_name(port).ok().and_then(|n| crate::vdev_args(&n)).is_some_and(|a| memif_args_zero_copy(&a))
}

/// Whether memif device arguments (`role=client,zero-copy=yes,...`) ask for zero-copy.
fn memif_args_zero_copy(args: &str) -> bool {
    args.split(',').filter_map(|kv| kv.split_once('=')).any(|(k, v)| k.trim() == "zero-copy" && v.trim().eq_ignore_ascii_case("yes"))
}

/// `DROCE_TX_ZC` (`off`, `no`, `0`: copy every payload; a number: the smallest payload sent
/// zero-copy) and `DROCE_FUSED_RX` (`1` / `yes` / `on`: the one-pass receive; by default
/// the ICRC is checked, then the payload copied): the A/B switches of the two payload paths.
/// Default smallest received message placed with non-temporal stores (`docs/design.md`,
/// "Where the payload is copied").
pub const RX_STREAM_MIN: Option<u64> = Some(256 * 1024);

/// `DROCE_NT_MIN`: `off` / `0`, `on` (the default size) or a message size in bytes.
fn stream_min_env() -> Option<u64> {
    match std::env::var("DROCE_NT_MIN").ok().map(|v| v.trim().to_ascii_lowercase()) {
        None => RX_STREAM_MIN,
        Some(v) if v == "off" || v == "no" || v == "0" => None,
        Some(v) if v.is_empty() || v == "on" || v == "yes" => RX_STREAM_MIN,
        Some(v) => match v.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                eprintln!("droce: DROCE_NT_MIN='{v}' is not off, on or a message size in bytes; using the default");
                RX_STREAM_MIN
            }
        },
    }
}

fn payload_path_env() -> (Option<usize>, bool) {
    let zc = match std::env::var("DROCE_TX_ZC").ok().map(|v| v.trim().to_ascii_lowercase()) {
        None => Some(TX_ZERO_COPY_MIN),
        Some(v) if v.is_empty() || v == "on" || v == "yes" => Some(TX_ZERO_COPY_MIN),
        Some(v) if v == "off" || v == "no" || v == "0" => None,
        Some(v) => match v.parse::<usize>() {
            Ok(n) => Some(n),
            Err(_) => {
                eprintln!("droce: DROCE_TX_ZC='{v}' is not off, on or a payload size in bytes; using {TX_ZERO_COPY_MIN}");
                Some(TX_ZERO_COPY_MIN)
            }
        },
    };
    let fused = matches!(std::env::var("DROCE_FUSED_RX").ok().map(|v| v.trim().to_ascii_lowercase()).as_deref(), Some("1" | "yes" | "on"));
    (zc, fused)
}

/// The send window (`DeviceConfig::max_unacked_psns`, PSNs) the engine uses on a memif port
/// when the config keeps the transport's default (rxe's 128) and the path MTU is 1024: about
/// one memif ring (1024 slots). With 128 a busy-polling peer that loses its CPU for a
/// scheduler slice stalls the sender after 128 frames; write_bw 64 KiB over memif on a loaded
/// 2-vCPU machine went from 0.23-0.34x to 0.39-0.48x of raw memif. memif is the one wire
/// that pushes back instead of dropping (a full ring makes `tx_burst` take fewer frames, which
/// the engine keeps), but only for frames that fit one ring buffer: DPDK 22.11's memif
/// garbles frames spanning several buffers (a stale chain flag on a frame's first descriptor,
/// see `MEMIF_JUMBO_BSIZE` in runtime/mod.rs; seen as `non_roce_drops` and go-back-N with
/// 1024 x 4 KiB in flight over 2 KiB buffers). The runtime no longer lets a frame span memif
/// buffers; the window at 4096 over 8 KiB buffers has not been measured, so it stays 128. Kernel-backed ports
/// (af_packet, tap) drop bursts in socket buffers: there 1024 frames in flight under a ping
/// flood ended in RETRY_EXC_ERR, so they keep 128, and so does memif with injected faults
/// (go-back-N over 1024 frames with 2% drops and duplicated NAKs, each costing a retry, ran
/// out of retries). After a loss the transport halves the window (not below 128) and grows
/// it back per ACK.
pub const MEMIF_WINDOW: u32 = 1024;

impl RoceConfig {
    pub fn new(port: PortId, queue: QueueId) -> Self {
        let (tx_zero_copy, fused_rx) = payload_path_env();
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
            transport: DeviceConfig { fused_rx, ..DeviceConfig::default() },
            checksum_offload: true,
            tx_zero_copy,
            rx_stream_min: stream_min_env(),
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

/// How long [`RoceDevice::dereg_mr`] waits for the PMD to free frames over the MR.
pub const DEREG_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

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
    /// `poll` calls so far (wrapping): [`RoceDevice::poll_if_unpolled`] tells from it
    /// whether the application polled since its last look.
    polls: u64,
    spare: Option<Mbuf>,
    /// The frames of a TX step's train, with their destination, until it ends (empty
    /// between steps: `transmit_frames`).
    tx_step: Vec<(Option<IpAddr>, Mbuf)>,
    /// Fresh TX mbufs, allocated in bulk.
    tx_mbufs: txmbufs::TxMbufs,
    /// The destination of the last frame routed in the current TX step and its MAC. Valid
    /// only inside one step (`transmit`), which clears it before and after: frames are also
    /// routed outside a step (ARP-held frames released when the reply comes), and those must
    /// see the neighbour table as it is then, never a MAC remembered from an earlier step.
    tx_route: Option<(IpAddr, [u8; 6])>,
    /// Several peers' ports instead of `port` for I/O (the host's zero-config mesh).
    mesh: Option<mesh::MeshWire>,
    /// The smallest payload sent zero-copy on this port (`None`: copy).
    zc_min: Option<usize>,
    /// Frames in flight per registered range (after every queue above: their frames are
    /// freed, and counted out, first).
    ext: zerocopy::ExtRanges,
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
        let driver = port.info().map(|i| i.driver_name).unwrap_or_default();
        let memif = driver == "net_memif" && cfg.faults.is_none();
        let mut zc_min = cfg.tx_zero_copy.filter(|_| ZERO_COPY_DRIVERS.contains(&driver.as_str()));
        if zc_min.is_some() && driver == "net_memif" && memif_zero_copy(cfg.port) {
            // memif's own zero-copy mode hands each segment to the peer as an offset into
            // this process's shared regions (its mempool): a segment of registered memory
            // outside them reached the peer as garbage (every frame an ICRC error) or crashed
            // it (DPDK 22.11's memif reads the offset unchecked). Payloads are copied instead.
            eprintln!("droce: port {}: memif zero-copy=yes: payloads are copied into its mbufs (droce's zero-copy transmit needs a copying memif)", cfg.port.0);
            zc_min = None;
        }
        if memif && tcfg.max_unacked_psns == DeviceConfig::default().max_unacked_psns && PathMtu::for_eth_mtu(eth_mtu) <= PathMtu::Mtu1024 {
            tcfg.max_unacked_psns = MEMIF_WINDOW;
        }
        let dev = Device::new(tcfg, ProcessMemory::with_stream_min(cfg.rx_stream_min));
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
            tx_step: Vec::new(),
            tx_mbufs: Default::default(),
            tx_route: None,
            mesh: None,
            zc_min,
            ext: zerocopy::ExtRanges::default(),
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
        self.ext.add(addr as u64, len as u64);
        Ok(mr)
    }

    /// Deregister an MR made with [`reg_mr`](Self::reg_mr); the range is no longer touched.
    ///
    /// Frames sent zero-copy point into the registered memory until the PMD frees them. With
    /// frames over this MR still in flight, the call pushes the TX queue to the PMD and asks
    /// the PMD to free what it has sent (`rte_eth_tx_done_cleanup`) for up to
    /// [`DEREG_WAIT`]; if frames still remain (a ring whose consumer has not dequeued them,
    /// a NIC that has not sent them), it fails with [`DeregMrError::InUse`] and the MR stays
    /// registered: the application must not free the memory yet, and may try again. As with
    /// verbs, freeing registered memory without a successful deregistration is the
    /// application's error.
    pub fn dereg_mr(&mut self, lkey: droce_transport::Lkey) -> Result<(), DeregMrError> {
        let (va, len) = {
            let mr = self.dev.query_mr(lkey).ok_or(DeregMrError::InvalidMr)?;
            (mr.va, mr.len)
        };
        if self.ext.in_flight(va, len) > 0 {
            let t0 = std::time::Instant::now();
            while self.ext.in_flight(va, len) > 0 && t0.elapsed() < DEREG_WAIT {
                self.flush_tx();
                self.port.tx_done_cleanup(self.cfg.queue);
                std::hint::spin_loop();
            }
            if self.ext.in_flight(va, len) > 0 {
                self.counters.dereg_busy += 1;
                return Err(DeregMrError::InUse);
            }
        }
        self.dev.dereg_mr(lkey)?;
        self.dev.memory_mut().remove_region(va, len);
        self.ext.remove(va, len);
        Ok(())
    }

    /// Frames sent zero-copy that the PMD (or the device's TX queue) still holds, over all
    /// registered memory.
    pub fn zero_copy_in_flight(&self) -> u64 {
        self.ext.total_in_flight()
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
}


impl Drop for RoceDevice {
    fn drop(&mut self) {
        self.flush_pcap();
        // Held frames, spare, queues are plain `Mbuf`s/batches: their drops free them before
        // the pool (declared last).
    }
}
