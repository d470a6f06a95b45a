//! The droce runtime: the one place that brings droce up in a process (EAL, mbuf pool, port,
//! RoCE device, CM agent on QP1), runs its poll loop and progress thread, and offers the
//! verbs-shaped calls every frontend uses (`verbs.rs`). Libraries with no command line (the
//! libfabric provider, the UCX transport) open it from the environment through [`global`].
//! User guide: `docs/runtime.md`.
//!
//! Files: `config.rs` (what to bring up: environment, conf file), `zeroconf.rs` (the memif
//! mesh of the zero-config default and the peer-loss watch), `progress.rs` (the process-wide
//! runtime, its progress thread, the ACK watchdog, the exit path), `verbs.rs` (the verbs),
//! `sys.rs` (OS helpers).
//!
//! ```text
//! RuntimeConfig::from_env() -> Result<RuntimeConfig, RuntimeError>
//!   DROCE_CONF=<file>   a conf file (format below), values rank-templated; rank from DROCE_RANK,
//!                       PMI_RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK (first set wins)
//!   (no DROCE_CONF)     the zero-config default: a memif mesh of up to MESH_MAX processes
//!   DROCE_LINK=<name>   name of the zero-config link (default "default"): separate meshes
//!   DROCE_PROGRESS=manual|thread, DROCE_HOLD_ACKS=1|0, DROCE_SELECTIVE_REPEAT=1|0,
//!   DROCE_FAULTS=<spec>,
//!   DROCE_PCAP=<path> ({pid}, {rank}), DROCE_MTU=<Ethernet MTU> (the conf's `mtu`; 1500
//!                       keeps a memif pair at path MTU 1024),
//!   DROCE_EAL=<extra EAL args> override / extend the conf
//! RuntimeConfig::peek_env()   the same without taking a zero-config slot (probes the locks)
//! RuntimeConfig::parse(text, rank) -> Result<RuntimeConfig, RuntimeError>   (conf file text)
//! Runtime::open(cfg) -> Result<Runtime, RuntimeError>   EAL (caller's CPU affinity restored), mempool,
//!                                              port up, RoceDevice, CmAgent on QP1
//!   the verbs (verbs.rs): alloc_pd, reg_mr, create_cq, create_qp, modify_qp, post_send,
//!   post_recv, poll_cq, connect, accept, ... (the device and CM agent underneath stay inside)
//!   progress() (dev.poll + cm.poll; true if anything happened),
//!   progress_datapath() (dev.poll every call, cm.poll every CM_POLL_EVERY-th call),
//!   config(), local_ip(), local_gid_index(), port_id(), resolve_src(ip), resolve_dst(ip),
//!   peer_lost(), lost_peers_since(&mut seen) (peers whose memif link went down, in order),
//!   mesh_slot(), mesh_peers_up()
//! global() -> Result<&'static Mutex<Runtime>, RuntimeError>   opened once from from_env(), never
//!   closed, errors sticky; Progress::Thread starts the progress thread, manual
//!   progress the ACK watchdog thread (polls and flushes when nobody polled for a tick)
//! lock_global() -> Result<MutexGuard<'static, Runtime>, RuntimeError>   global() + lock, ignoring
//!   poisoning (a panic while holding the lock leaves the engine usable)
//! start_progress_thread(step)   the process's one progress thread (a frontend's own step, or
//!   Runtime::progress under the lock)
//! ```
//!
//! # Conf file
//! One `key = value` per line; `#` starts a comment; blank lines are ignored. In values
//! `{rank}`, `{rank+N}` and `{pid}` are replaced. Keys (repeatable ones marked *):
//! `vdev`* (an EAL `--vdev`, e.g. `net_af_packet0,iface=droce{rank}`), `allow`* (a PCI address,
//! EAL `-a`; enables the PCI bus), `port` (device name; default: the first `vdev`, else the first
//! port), `ip` (required: this process's RoCE address, IPv4 or IPv6), `peer` (the other end of a
//! point-to-point link, the meaning of a loopback destination), `neighbour`* (`IP MAC`, static),
//! `mtu` (Ethernet MTU; ≥ 4200 gives a 4096 path MTU; default 9000 on ring ports and memif ports
//! with `bsize` ≥ 4224, the port's MTU elsewhere; on memif at most what one buffer holds, see
//! `memif_mtu_clamp`), `progress` (`manual` | `thread`),
//! `hold-acks` (`yes` | `no`, default yes: an RC ACK waits for the application's reply and leaves in its burst),
//! `selective-repeat` (`yes` | `no`, default yes: the UCX transport and the libfabric provider
//! offer selective repeat to droce peers; docs/selective-repeat.md),
//! `hugepages` (`no` | `yes`; default no: `--no-huge -m <memory>`), `memory` (MB, default 256),
//! `mbufs` (pool size, default 8191),
//! `lcore` (the one EAL lcore; default: the first CPU the process may run on), `log-level`
//! (EAL `--log-level`, default `error`), `faults` (fault injection spec, a test feature),
//! `cc` (congestion control: `on` (default), `off`, or `key=value,...`; `docs/dcqcn.md`),
//! `pcap` (capture file), `eal`* (extra EAL arguments, split at white space).
//!
//! # Zero-config default
//! Up to [`MESH_MAX`] processes on one machine, no configuration: a memif mesh, one link per
//! pair of processes. Each takes the lowest free slot, the flock on
//! `/tmp/droce-<uid>/<link>.<slot>.lock` (held until the process exits; `<pid>`, then
//! `<pid> ready`), and gets [`mesh_ip`] (10.77.0.1 for slot 0, 10.77.0.2 for slot 1, ...) and
//! [`mesh_mac`]; every other slot is a static neighbour. Port `net_memif<j>` links to slot j:
//! the lower slot of a pair serves on its own abstract socket `@/droce-<uid>-<link>-<slot>`
//! (memif `id` = the client's slot), the higher is the client. All ports exist from EAL start
//! and are never removed (DPDK 22.11's memif frees a listener's interrupt handle without
//! unregistering it when its last server port closes): server ports start at open, then the
//! slot is marked ready; a client port starts once its server's slot is ready. [`Runtime::open`]
//! waits (at most [`MESH_OPEN_WAIT`]) only for lower slots that are alive; slots that appear
//! later are connected from the progress calls. A link that goes down means its process has
//! gone ([`Runtime::lost_peers_since`]); the server side keeps its port for the slot's next
//! process, the client side starts its port again when a new process in that slot is ready.
//! A loopback destination means slot 1 for slot 0, slot 0 for the others (`peer`).
//!
//! # Exit
//! [`global`] marks the shared object it is in RTLD_NODELETE (libfabric dlclose()s providers
//! in its exit-time destructor while the host's threads still run) and stops its threads from
//! calling into DPDK in an exit handler, which also parks DPDK's interrupt thread for good
//! ([`crate::intr_gate::freeze`]). DPDK cannot be re-initialised in a process: the global host is
//! never closed. A `Runtime` that is dropped stops and closes its port
//! ([`crate::Port::close_at_exit`]) and ends EAL with [`Eal::release_for_exit`]; EAL cannot be
//! opened again in that process.

use crate::roce::cm::{CmAgent, CmAgentConfig};
use crate::roce::{FaultConfig, RoceConfig, RoceDevice, Work};
use crate::{Eal, Mempool, MempoolConfig, Port, PortConfig, PortId, QueueId};
use droce_transport::device::max_frame_len;
use droce_transport::qp::PathMtu;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

pub use config::{parse_cc, rank_from_env, Progress, RuntimeConfig, RuntimeError, DEFAULT_CLIENT_IP, DEFAULT_SERVER_IP, RANK_VARS};
pub use progress::{global, install_global, lock_global, start_progress_thread, stop_progress_thread, ACK_WATCHDOG_TICK};
pub use zeroconf::{mesh_ip, mesh_mac, remove_stale_memif_sockets, DefaultLink, MESH_MAX, MESH_OPEN_WAIT};
use zeroconf::{mark_slot_ready, memif_client_socket, Mesh, MeshPeer};

/// How long a configured memif client keeps retrying to reach its server at `Runtime::open`.
pub const CLIENT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Mbufs in the host's pool unless the conf says `mbufs = N` (≈ 20 MB at 2 KiB each).
pub const DEFAULT_MBUFS: u32 = 8191;

/// [`Runtime::progress_datapath`] polls the CM agent once in this many calls.
pub const CM_POLL_EVERY: u32 = 32;

// ------------------------------------------------------------------------------ Runtime

/// Ends EAL without rte_eal_cleanup when the host is dropped (declared last in `Runtime`).
#[derive(Debug)]
struct ExitEal(Option<Eal>);

impl Drop for ExitEal {
    fn drop(&mut self) {
        if let Some(e) = self.0.take() {
            e.release_for_exit();
        }
    }
}

/// Stops and closes the port when the host is dropped (memif: left to the exit).
#[derive(Debug)]
struct ExitPort(Option<Port>);

impl Drop for ExitPort {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = p.close_at_exit();
        }
    }
}

/// droce in this process: EAL, pool, port, RoCE device and CM agent (see the module docs).
/// Fields drop in declaration order: agent, device, port, pool, EAL.
#[derive(Debug)]
pub struct Runtime {
    /// Set on a point-to-point memif link (the zero-config pair, or a conf with `peer`): its
    /// link going down means the peer process has gone (see [`Runtime::peer_lost`]).
    link_watch: Option<LinkWatch>,
    /// The zero-config mesh (one memif link per other process on the link).
    mesh: Option<Mesh>,
    /// Peers found gone, in order (see [`Runtime::lost_peers_since`]).
    lost: Vec<IpAddr>,
    cm: CmAgent,
    /// `progress_datapath` calls since the CM agent was last polled.
    cm_skipped: u32,
    /// `forward_pkts` at the last [`received_since_last_look`](Self::received_since_last_look).
    rx_looked: u64,
    dev: RoceDevice,
    /// Held for its `Drop`.
    _port: ExitPort,
    port_id: PortId,
    pool: Arc<Mempool>,
    cfg: RuntimeConfig,
    /// Held for its `Drop`, after everything else.
    _eal: ExitEal,
}

/// How often a point-to-point memif link is looked at from the progress calls.
pub const LINK_WATCH_EVERY: Duration = Duration::from_millis(1);

#[derive(Debug)]
struct LinkWatch {
    port: Port,
    was_up: bool,
    next: Instant,
    lost: bool,
    /// Progress calls since the clock was last read (it is read once in 64 calls).
    calls: u32,
}

// `global()` shares a Runtime across threads behind a Mutex: it must be Send. Every part is
// (mbufs, batches and pools are Send in their modules); no unsafe impl is needed here.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Runtime>();
};

/// Ethernet MTU of a port whose conf gives none: 9000 (path MTU 4096) on the shared-memory
/// PMDs, whose frames never meet a kernel or a switch (ring passes mbufs; memif when one of
/// its buffers holds a whole frame, see [`MEMIF_JUMBO_BSIZE`]); `None` (the port's own MTU,
/// 1500 → path MTU 1024) on everything else, where a NIC or a kernel interface decides. Each
/// connection still takes the smaller path MTU of its two ends (IB CM, the perftest exchange,
/// the UCX endpoint address), so a peer at 1024 (rxe, a NIC) is unaffected. Four times fewer
/// frames per byte: see BENCHMARKS.md.
fn default_eth_mtu(driver: &str, memif_bsize: u32) -> Option<u16> {
    let jumbo = match driver {
        "net_ring" => true,
        "net_memif" => memif_bsize >= MEMIF_JUMBO_BSIZE,
        _ => false,
    };
    jumbo.then_some(9000)
}

/// The memif buffer size (vdev `bsize`) from which a memif port defaults to path MTU 4096:
/// the largest RoCE frame at that MTU ([`max_frame_len`]: 4205 bytes) in one buffer. DPDK
/// 22.11's memif loses frames when frames of several buffers and of one buffer share a ring:
/// its copying `tx_burst` sets `MEMIF_DESC_FLAG_NEXT` on every descriptor of a chain but the
/// last, and never clears the flag of a frame's first descriptor, so a one-buffer frame that
/// lands in a slot that was not the last of a chain on an earlier lap is glued to the slots
/// after it (seen as 2048-, 6144- and 8192-byte "ACKs" in a capture; the receiver may even
/// follow the stale flag past the last published slot). Fixed upstream in March 2026
/// ("net/memif: fix descriptor Tx flags corruption"), not in Debian's 22.11.11. So no frame
/// may span buffers: see [`memif_mtu_clamp`].
const MEMIF_JUMBO_BSIZE: u32 = 4224;

/// The Ethernet MTU to use instead of `eth_mtu` on memif port `port` whose buffers hold
/// `bsize` bytes, with the one-line warning that says so: `None` when every frame at
/// `eth_mtu`'s path MTU fits one buffer, else the largest path MTU whose frames do (1500 for
/// path MTU 1024, as the port's own; the smallest, 256, if none does). A frame
/// spanning buffers runs into the PMD bug at [`MEMIF_JUMBO_BSIZE`] (read_bw -m 4096 over
/// 2 KiB buffers: 12.6 M retransmitted packets and 1370 ICRC errors for 300 messages), and the
/// engine cannot avoid it: the stale flag is in the ring, which only the PMD sees. A memif's
/// buffers are the client's (`memif_init_regions_and_queues` runs on the client, for both
/// directions; a server's `bsize` is not used: that read_bw is clean with `bsize=8192` on the
/// client alone and storms with it on the server alone), but each end can only read its own vdev: both
/// ends judge by their own `bsize`, and each connection takes the smaller path MTU of its two
/// ends, so a client with 2 KiB buffers keeps a server with `bsize=8192` at 1024 too.
fn memif_mtu_clamp(port: &str, eth_mtu: u16, bsize: u32) -> Option<(u16, String)> {
    let want = PathMtu::for_eth_mtu(eth_mtu as u32);
    // (buffers too small even for path MTU 256 are beyond help: left as they are)
    if max_frame_len(want) <= bsize as usize || want == PathMtu::Mtu256 {
        return None;
    }
    let fits = [PathMtu::Mtu4096, PathMtu::Mtu2048, PathMtu::Mtu1024, PathMtu::Mtu512]
        .into_iter()
        .find(|m| *m < want && max_frame_len(*m) <= bsize as usize)
        .unwrap_or(PathMtu::Mtu256);
    // + 84: the header room PathMtu::for_eth_mtu takes off, so the least Ethernet MTU of `fits`
    let eth = if fits == PathMtu::Mtu1024 { 1500 } else { fits.bytes() as u16 + 84 };
    let line = format!(
        "droce: warning: {port}: path MTU {} needs {}-byte frames, more than one memif buffer (bsize {bsize}) holds: using path \
         MTU {} (DPDK 22.11's memif garbles frames that span buffers); give both ends' --vdev bsize=8192 for {}",
        want.bytes(),
        max_frame_len(want),
        fits.bytes(),
        want.bytes()
    );
    Some((eth, line))
}

/// The buffer size of the memif vdev `port` in `eal_args` (`bsize`, DPDK's default 2048).
fn memif_bsize(eal_args: &[String], port: &str) -> u32 {
    let specs = crate::devargs::vdev_specs(eal_args);
    let v = specs.iter().find(|v| v.split(',').next() == Some(port));
    v.and_then(|v| v.split(',').skip(1).filter_map(|p| p.split_once('=')).find(|(k, _)| *k == "bsize").and_then(|(_, b)| b.parse().ok()))
        .unwrap_or(2048)
}

/// The one place droce starts EAL (`args[0]` is the program name). `embedded` (droce inside
/// someone else's program, [`RuntimeConfig::embedded`]): EAL's log goes to a copy of stderr,
/// its usage text is kept off stdout (fi_pingpong's and MPI programs' output must not get it),
/// and the calling thread's CPU affinity is restored afterwards (EAL pins it to the main lcore;
/// the application's threads, and every MPI rank on the machine, would otherwise all land on
/// that one CPU). Not embedded (droce-pmd): the caller's stdio and EAL's pinning as they are.
/// A memif server's socket file left behind by a server that is gone is removed first
/// ([`remove_stale_memif_sockets`]).
pub fn start_eal(args: &[String], embedded: bool) -> Result<Eal, crate::Error> {
    remove_stale_memif_sockets(args);
    if !embedded {
        return Eal::init(args);
    }
    let saved = sys::get_affinity();
    sys::eal_log_to_stderr();
    let res = sys::stdout_to_stderr(|| Eal::init(args));
    if let Some(set) = &saved {
        sys::set_affinity(set);
    }
    res
}

impl Runtime {
    /// Brings droce up in this process. EAL can be initialised once per process: a second
    /// `open` (or one after a failed EAL init that got past argument parsing) fails.
    pub fn open(cfg: RuntimeConfig) -> Result<Runtime, RuntimeError> {
        let res = start_eal(&cfg.eal_args, cfg.embedded);
        let eal = res.map_err(|e| RuntimeError::Eal(format!("{e} ({}; EAL args: {})", cfg.source, cfg.eal_args[1..].join(" "))))?;
        let eal = ExitEal(Some(eal));
        sys::remove_empty_runtime_dir();

        let ids = crate::port_ids();
        let names = || ids.iter().map(|p| crate::port_name(*p).unwrap_or_else(|_| p.0.to_string())).collect::<Vec<_>>().join(", ");
        let id = match &cfg.port {
            Some(n) => crate::port_by_name(n).ok_or_else(|| RuntimeError::Port(format!("no port named '{n}' (ports: {}) ({})", names(), cfg.source)))?,
            None => *ids.get(cfg.port_index).ok_or_else(|| match cfg.port_index {
                0 => RuntimeError::Port(format!("EAL found no port ({}): give a vdev or a PCI allowlist entry", cfg.source)),
                i => RuntimeError::Port(format!("no port {i}: EAL found {} ({})", ids.len(), cfg.source)),
            })?,
        };
        let mut port = Port::new(id).map_err(|e| RuntimeError::Port(format!("port {}: {e}", id.0)))?;
        let info = port.info().map_err(|e| RuntimeError::Port(format!("port {}: {e}", id.0)))?;
        let memif = info.driver_name == "net_memif";
        let mut cfg = cfg;
        let pname = crate::port_name(id).unwrap_or_else(|_| id.0.to_string());
        if cfg.auto_jumbo {
            cfg.eth_mtu = cfg.eth_mtu.or_else(|| default_eth_mtu(&info.driver_name, memif_bsize(&cfg.eal_args, &pname)));
        }
        if memif {
            if let Some((m, line)) = memif_mtu_clamp(&pname, cfg.eth_mtu.unwrap_or(info.mtu), memif_bsize(&cfg.eal_args, &pname)) {
                eprintln!("{line}");
                cfg.eth_mtu = Some(m);
            }
        }
        let jumbo = cfg.eth_mtu.unwrap_or(1500) > 1500;
        let data_room = if jumbo { 9216 + 128 } else { MempoolConfig::default().data_room };
        let n = cfg.mbufs;
        let pool = Arc::new(
            Mempool::create("droce_host", &MempoolConfig { n, data_room, ..Default::default() })
                .map_err(|e| RuntimeError::Device(format!("mbuf pool ({n} x {data_room} B): {e} (raise the memory EAL may use: `-m MB` on a droce-pmd command line, `memory` in a conf)")))?,
        );
        let mut pc = PortConfig::new().rx_desc(1024).tx_desc(1024).checksum_offload(true);
        if let Some(m) = cfg.eth_mtu {
            // net_memif refuses a configured MTU above 1500 but carries any frame length:
            // the device's eth_mtu alone sets the path MTU there
            if !memif && m >= info.min_mtu && m <= info.max_mtu {
                pc = pc.mtu(m);
            }
        }
        let configured = port.configure(&pc, &pool).map_err(|e| RuntimeError::Port(format!("{pname}: configure: {e}")))?;
        // the zero-config mesh: every other slot's port configured like this one; the server
        // ports started (then this slot is marked ready), the client ports started once their
        // server is ready (Runtime::watch_mesh)
        let mut mesh = None;
        let mut mesh_ports = Vec::new();
        if let Some(l) = cfg.link.clone() {
            let mut peers = Vec::new();
            for j in (0..MESH_MAX).filter(|&j| j != l.slot) {
                let name = format!("net_memif{j}");
                let pid = crate::port_by_name(&name).ok_or_else(|| RuntimeError::Port(format!("no port named '{name}' ({})", cfg.source)))?;
                let mut p = if pid == id { port.clone() } else { Port::new(pid).map_err(|e| RuntimeError::Port(format!("{name}: {e}")))? };
                if pid != id {
                    p.configure(&pc, &pool).map_err(|e| RuntimeError::Port(format!("{name}: configure: {e}")))?;
                }
                let server = l.slot < j;
                if server {
                    p.start().map_err(|e| RuntimeError::Port(format!("{name}: start: {e}")))?;
                }
                peers.push(MeshPeer { slot: j, ip: IpAddr::V4(mesh_ip(j)), port: p.clone(), idx: peers.len(), server, server_pid: None, started: None, up: false });
                mesh_ports.push((p, mesh_mac(j)));
            }
            mark_slot_ready();
            mesh = Some(Mesh { link: l, peers, next_scan: Instant::now(), next_watch: Instant::now(), calls: 0 });
        } else {
            let client_sock = if memif { memif_client_socket(&cfg.eal_args, &pname) } else { None };
            let t0 = Instant::now();
            let connect_wait = cfg.link_wait.unwrap_or(CLIENT_CONNECT_TIMEOUT);
            if let Some(sock) = &client_sock {
                // a memif client's start fails while its server is not listening: wait for the
                // listener (a path no server can listen on fails at once)
                loop {
                    if let Some(why) = sock.not_a_socket() {
                        return Err(RuntimeError::Port(format!("{pname}: {why} ({})", cfg.source)));
                    }
                    if sock.listening() {
                        break;
                    }
                    if t0.elapsed() > connect_wait {
                        return Err(RuntimeError::Port(format!(
                            "{pname}: no memif server listening on {} within {connect_wait:?}: the link did not come up ({})",
                            sock.describe(),
                            cfg.source
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            // The start of a memif client is its connect(2) to the server's socket; it fails
            // (rte_eth_dev_start -1 without an errno, shown as EIO) where a socket file exists
            // but nothing accepts on it: the server has bound its socket and not yet called
            // listen (a loaded machine can hold it there for a while), or a stale file of a
            // server that is gone. A client retries within the same bounded wait.
            let mut pause = Duration::from_millis(10);
            loop {
                match port.start() {
                    Ok(()) => break,
                    Err(e) => {
                        let Some(sock) = &client_sock else {
                            return Err(RuntimeError::Port(format!("{pname}: start: {e}")));
                        };
                        if t0.elapsed() + pause > connect_wait {
                            return Err(RuntimeError::Port(format!(
                                "{pname}: could not connect to the memif server on {} within {connect_wait:?} (last try: {e}): \
                                 is its server running? ({})",
                                sock.describe(),
                                cfg.source
                            )));
                        }
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(200));
                    }
                }
            }
            if client_sock.is_some() {
                // the handshake follows the connect: let the first sends find the link up; a
                // configured memif client reconnects with Port's back-off
                let _ = port.wait_link_up(connect_wait.saturating_sub(t0.elapsed()));
            }
            if let Some(wait) = cfg.link_wait {
                // a memif client has spent part of this same wait connecting
                let left = if client_sock.is_some() { wait.saturating_sub(t0.elapsed()) } else { wait };
                if !port.wait_link_up(left).unwrap_or(false) {
                    // a client that connected but got no link: its server refused it, most
                    // often because another client holds that interface id (breaker: a second
                    // client was told only to check that its peer runs)
                    let hint = match (memif, client_sock.is_some()) {
                        (true, true) => " (is the memif peer running? a memif server takes one client per interface id: is another client connected to it? give this pair its own socket= or id=)",
                        (true, false) => " (is the memif peer running?)",
                        _ => "",
                    };
                    return Err(RuntimeError::Port(format!("{pname}: link did not come up within {wait:?}{hint}")));
                }
            }
        }
        let mut rc = RoceConfig::new(id, QueueId(0));
        match cfg.ip {
            IpAddr::V4(a) => rc.ipv4 = vec![a],
            IpAddr::V6(a) => rc.ipv6 = vec![a],
        }
        rc.eth_mtu = cfg.eth_mtu.map(u32::from);
        rc.seed = seed();
        rc.neighbours = cfg.neighbours.clone();
        rc.pcap = cfg.pcap.clone();
        rc.faults = cfg.faults;
        rc.rx_burst = 64;
        rc.tx_burst = 64;
        rc.checksum_offload = true;
        rc.transport.hold_acks = cfg.hold_acks;
        rc.transport.cc = cfg.cc.clone();
        if !cfg.cc_line_rate_given {
            // DCQCN recovers a QP to the line rate: the port's, when the PMD reports one
            if let Some(mbps) = port.link_quiet().ok().map(|l| l.speed_mbps).filter(|s| *s != 0 && *s != u32::MAX) {
                rc.transport.cc.line_rate_bps = mbps as u64 * 1_000_000;
            }
        }
        let mut dev = RoceDevice::new(rc, &configured, pool.clone()).map_err(|e| RuntimeError::Device(format!("RoCE device on {pname}: {e}")))?;
        let cm = CmAgent::new(&mut dev, CmAgentConfig { seed: seed() ^ 0x636d, ..Default::default() })
            .map_err(|e| RuntimeError::Device(format!("CM agent: {e}")))?;
        if !mesh_ports.is_empty() {
            let mut w = crate::roce::mesh::MeshWire::new();
            for (p, mac) in mesh_ports {
                w.add_port(p, mac);
            }
            dev.attach_mesh(w);
        }
        let link_watch = (memif && cfg.peer.is_some() && mesh.is_none())
            .then(|| LinkWatch { port: port.clone(), was_up: port.link().map(|l| l.up).unwrap_or(false), next: Instant::now(), lost: false, calls: 0 });
        let mut host = Runtime { link_watch, mesh, lost: Vec::new(), cm, cm_skipped: 0, rx_looked: 0, dev, _port: ExitPort(Some(port)), port_id: id, pool, cfg, _eal: eal };
        host.open_mesh();
        Ok(host)
    }

    pub fn dev(&mut self) -> &mut RoceDevice {
        &mut self.dev
    }

    pub fn cm(&mut self) -> &mut CmAgent {
        &mut self.cm
    }

    /// The CM agent and the device together (agent calls take the device).
    pub fn cm_and_dev(&mut self) -> (&mut CmAgent, &mut RoceDevice) {
        (&mut self.cm, &mut self.dev)
    }


    /// One round: device poll (RX burst, timers, TX) and CM agent poll. True if anything
    /// happened.
    pub fn progress(&mut self) -> bool {
        self.watch_link();
        self.tick_mesh();
        let w = self.dev.poll();
        let c = self.cm.poll(&mut self.dev);
        !w.is_idle() || c
    }

    /// A datapath round for callers that do not use the CM agent on their fast path (the UCX
    /// transport connects QPs by address exchange): the device every call, the CM agent only
    /// every [`CM_POLL_EVERY`]-th call (it still answers MADs and runs its timers, a few
    /// microseconds late). Saves the agent's clock read and CQ poll per call. True if anything
    /// happened.
    pub fn progress_datapath(&mut self) -> bool {
        let (w, c) = self.datapath_round();
        !w.is_idle() || c
    }

    /// [`progress_datapath`](Self::progress_datapath) for a caller that bounds how long it
    /// waits for its peer: true only if a RoCE packet reached one of this device's QPs (an RC
    /// QP's only from its peer) and moved it on (the transport's
    /// [`forward_pkts`](droce_transport::counters::Counters::forward_pkts): not a duplicate, a dropped
    /// out-of-sequence packet or an RNR NAK either way; a send_bw client whose `-n` exceeded
    /// its server's kept the server's wait for the report alive for ever with SENDs retried
    /// on RNR NAKs). This side's own timers and
    /// frames are no sign of the peer: a selective-repeat responder reminds its peer of an
    /// open gap for as long as the gap stays open, so a wait that counted every busy round as
    /// life never ended once the peer had gone in the middle of a lossy transfer. Nor are
    /// other frames on the wire: an rc_pingpong server whose client had failed waited forever
    /// on a port that kept receiving unrelated frames (net_null's, a busy LAN's).
    pub fn progress_datapath_rx(&mut self) -> bool {
        let before = self.dev.device().counters().forward_pkts();
        self.datapath_round();
        self.dev.device().counters().forward_pkts() != before
    }

    /// Whether RoCE packets moved this device's QPs on since the last call (as
    /// [`progress_datapath_rx`](Self::progress_datapath_rx) counts them), by any poll (a
    /// progress thread's too): with progress on a thread, an application's bounded waits take
    /// this as the peer's activity, as they take a manual poll's.
    pub fn received_since_last_look(&mut self) -> bool {
        let n = self.dev.device().counters().forward_pkts();
        let seen = n != self.rx_looked;
        self.rx_looked = n;
        seen
    }

    fn datapath_round(&mut self) -> (Work, bool) {
        self.watch_link();
        self.tick_mesh();
        let w = self.dev.poll();
        self.cm_skipped += 1;
        let c = if self.cm_skipped >= CM_POLL_EVERY {
            self.cm_skipped = 0;
            self.cm.poll(&mut self.dev)
        } else {
            false
        };
        (w, c)
    }

    /// Whether RC ACKs wait for the next poll, to leave in one burst with the application's
    /// reply ([`RuntimeConfig::hold_acks`]); the one switch of the ACK-hold policy.
    pub fn set_hold_acks(&mut self, on: bool) {
        self.dev.set_hold_acks(on);
    }

    /// Whether ACKs wait for the next poll (the ACK-hold policy).
    pub fn hold_acks(&self) -> bool {
        self.dev.hold_acks()
    }

    /// Sends what waits now (held ACKs, queued frames).
    pub fn flush(&mut self) {
        self.dev.flush();
    }

    /// The index of `gid` in this port's GID table.
    pub fn gid_index(&self, gid: &droce_transport::Gid) -> Option<u8> {
        self.dev.gid_index(gid)
    }

    /// Writes what the pcap capture holds (conf `pcap`) to its file.
    pub fn flush_pcap(&mut self) {
        self.dev.flush_pcap();
    }

    /// Stops and closes the port and ends EAL without `rte_eal_cleanup`, for a process about to
    /// exit (the CLI at the end of a run): DPDK's interrupt thread is parked first
    /// ([`Port::close_at_exit`]). The runtime is unusable afterwards. A pcap capture is the
    /// caller's to flush first ([`Runtime::flush_pcap`]), before it prints the counters.
    pub fn close_for_exit(&mut self) {
        drop(self._port.0.take().map(|p| p.close_at_exit()));
        if let Some(e) = self._eal.0.take() {
            e.release_for_exit();
        }
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.cfg
    }

    pub fn local_ip(&self) -> IpAddr {
        self.cfg.ip
    }

    /// GID index of [`Runtime::local_ip`] (1: index 0 is the link-local GID, like rxe).
    pub fn local_gid_index(&self) -> u8 {
        let g = match self.cfg.ip {
            IpAddr::V4(a) => droce_transport::Gid::from_ipv4(a),
            IpAddr::V6(a) => droce_transport::Gid::from_ipv6(a),
        };
        self.dev.gid_index(&g).unwrap_or(1)
    }

    pub fn port_id(&self) -> PortId {
        self.port_id
    }

    pub fn pool(&self) -> &Arc<Mempool> {
        &self.pool
    }

    /// As a source, loopback (127.0.0.0/8, ::1, ::ffff:127.x) and unspecified addresses mean
    /// this process's address; any other address is returned unchanged.
    pub fn resolve_src(&self, ip: IpAddr) -> IpAddr {
        resolve_src(ip, self.cfg.ip)
    }

    /// As a destination, loopback means `peer` (the other end of the default link), or this
    /// process's own address when there is no peer; any other address is returned unchanged.
    pub fn resolve_dst(&self, ip: IpAddr) -> IpAddr {
        resolve_dst(ip, self.cfg.ip, self.cfg.peer)
    }
}


fn resolve_src(ip: IpAddr, own: IpAddr) -> IpAddr {
    if is_loopback(ip) || ip.is_unspecified() {
        own
    } else {
        ip
    }
}

fn resolve_dst(ip: IpAddr, own: IpAddr, peer: Option<IpAddr>) -> IpAddr {
    if is_loopback(ip) {
        peer.unwrap_or(own)
    } else {
        ip
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_loopback(),
        IpAddr::V6(a) => a.is_loopback() || a.to_ipv4_mapped().map(|v| v.is_loopback()).unwrap_or(false),
    }
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
    t ^ (std::process::id() as u64).rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15
}

mod config;
pub mod idle;
mod progress;
mod sys;
mod verbs;
mod zeroconf;
#[cfg(test)]
mod tests;

