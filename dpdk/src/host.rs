//! droce inside an application's process, brought up from the environment (for libraries with
//! no command line: the libfabric provider and the UCX transport). User guide: `docs/host.md`.
//!
//! ```text
//! HostConfig::from_env() -> Result<HostConfig, HostError>
//!   DROCE_CONF=<file>   a conf file (format below), values rank-templated; rank from DROCE_RANK,
//!                       PMI_RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK (first set wins)
//!   (no DROCE_CONF)     the zero-config default: a memif mesh of up to MESH_MAX processes
//!   DROCE_LINK=<name>   name of the zero-config link (default "default"): separate meshes
//!   DROCE_PROGRESS=manual|thread, DROCE_HOLD_ACKS=1|0, DROCE_FAULTS=<spec>,
//!   DROCE_PCAP=<path> ({pid}, {rank}), DROCE_MTU=<Ethernet MTU> (the conf's `mtu`; 1500
//!                       keeps a memif pair at path MTU 1024),
//!   DROCE_EAL=<extra EAL args> override / extend the conf
//! HostConfig::peek_env()   the same without taking a zero-config slot (probes the locks)
//! HostConfig::parse(text, rank) -> Result<HostConfig, HostError>   (conf file text)
//! Host::open(cfg) -> Result<Host, HostError>   EAL (caller's CPU affinity restored), mempool,
//!                                              port up, RoceDevice, CmAgent on QP1
//!   dev(), cm(), cm_and_dev(), progress() (dev.poll + cm.poll; true if anything happened),
//!   progress_datapath() (dev.poll every call, cm.poll every CM_POLL_EVERY-th call),
//!   config(), local_ip(), local_gid_index(), port_id(), resolve_src(ip), resolve_dst(ip),
//!   peer_lost(), lost_peers_since(&mut seen) (peers whose memif link went down, in order),
//!   mesh_slot(), mesh_peers_up()
//! global() -> Result<&'static Mutex<Host>, HostError>   opened once from from_env(), never
//!   closed, errors sticky; Progress::Thread adds a background progress thread, manual
//!   progress with hold_acks the ACK watchdog thread (flushes held ACKs nobody polled out)
//! lock_global() -> Result<MutexGuard<'static, Host>, HostError>   global() + lock, ignoring
//!   poisoning (a panic while holding the lock leaves the engine usable)
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
//! with `bsize` ≥ 4224, the port's MTU elsewhere), `progress` (`manual` | `thread`),
//! `hold-acks` (`yes` | `no`, default yes: an RC ACK waits for the application's reply and leaves in its burst),
//! `hugepages` (`no` | `yes`; default no: `--no-huge -m <memory>`), `memory` (MB, default 256),
//! `mbufs` (pool size, default 8191),
//! `lcore` (the one EAL lcore; default: the first CPU the process may run on), `log-level`
//! (EAL `--log-level`, default `error`), `faults` (fault injection spec, a test feature),
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
//! slot is marked ready; a client port starts once its server's slot is ready. [`Host::open`]
//! waits (at most [`MESH_OPEN_WAIT`]) only for lower slots that are alive; slots that appear
//! later are connected from the progress calls. A link that goes down means its process has
//! gone ([`Host::lost_peers_since`]); the server side keeps its port for the slot's next
//! process, the client side starts its port again when a new process in that slot is ready.
//! A loopback destination means slot 1 for slot 0, slot 0 for the others (`peer`).
//!
//! # Exit
//! [`global`] marks the shared object it is in RTLD_NODELETE (libfabric dlclose()s providers
//! in its exit-time destructor while the host's threads still run) and stops its threads from
//! calling into DPDK in an exit handler, which also parks DPDK's interrupt thread for good
//! ([`crate::intr_gate::freeze`]). DPDK cannot be re-initialised in a process: the global host is
//! never closed. A `Host` that is dropped stops and closes its port
//! ([`crate::Port::close_at_exit`]) and ends EAL with [`Eal::release_for_exit`]; EAL cannot be
//! opened again in that process.

use crate::roce::cm::{CmAgent, CmAgentConfig};
use crate::roce::{FaultConfig, RoceConfig, RoceDevice};
use crate::{Eal, Mempool, MempoolConfig, Port, PortConfig, PortId, QueueId};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long a configured memif client keeps retrying to reach its server at `Host::open`.
pub const CLIENT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Mbufs in the host's pool unless the conf says `mbufs = N` (≈ 20 MB at 2 KiB each).
pub const DEFAULT_MBUFS: u32 = 8191;

/// [`Host::progress_datapath`] polls the CM agent once in this many calls.
pub const CM_POLL_EVERY: u32 = 32;

/// Addresses of the zero-config pair (slots 0 and 1 of the mesh).
pub const DEFAULT_SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
pub const DEFAULT_CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

/// Environment variables carrying the rank, in the order they are consulted.
pub const RANK_VARS: [&str; 4] = ["DROCE_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"];

/// Who polls the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Progress {
    /// The caller's threads poll (inside fi_cq_read, UCT progress, ...). The default.
    #[default]
    Manual,
    /// A background thread of [`global`] also polls.
    Thread,
}

/// What [`Host::open`] brings up.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Full EAL argv including the program name ("droce").
    pub eal_args: Vec<String>,
    /// Port device name (e.g. "net_memif0"); `None`: the first port.
    pub port: Option<String>,
    /// This process's RoCE address (its GID, IPv4-mapped or IPv6).
    pub ip: IpAddr,
    /// The other end of a point-to-point link (what a loopback destination means).
    pub peer: Option<IpAddr>,
    /// Static neighbour entries.
    pub neighbours: Vec<(IpAddr, [u8; 6])>,
    /// Ethernet MTU (a 4096 path MTU needs ≥ 4200); `None`: 9000 on ring ports and memif
    /// ports with `bsize` ≥ 4224, the port's elsewhere.
    pub eth_mtu: Option<u16>,
    pub progress: Progress,
    /// RC ACKs wait for the next poll and leave in one burst with the application's reply,
    /// just ahead of it (conf key `hold-acks`,
    /// env `DROCE_HOLD_ACKS`; default yes): see [`RoceConfig::hold_acks`]. [`global`] backs it
    /// with the ACK watchdog thread, so an application that stops polling after a receive
    /// still acknowledges it within [`ACK_WATCHDOG_TICK`] x 2.
    pub hold_acks: bool,
    pub faults: Option<FaultConfig>,
    pub pcap: Option<PathBuf>,
    pub rank: Option<u32>,
    /// Mbufs in the pool (conf key `mbufs`, default [`DEFAULT_MBUFS`]).
    pub mbufs: u32,
    /// Where this config came from, for messages: "DROCE_CONF=/x.conf rank 3", ...
    pub source: String,
    /// Set for the zero-config default: this process's end of the memif pair.
    pub link: Option<DefaultLink>,
}

/// Why the host could not be brought up. `Display` is one line saying what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    /// The environment or the conf file.
    Config(String),
    /// rte_eal_init (or a second init in one process).
    Eal(String),
    /// Port lookup, configure, start.
    Port(String),
    /// Mempool, RoceDevice, CM agent, progress thread.
    Device(String),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::Config(m) => write!(f, "droce config: {m}"),
            HostError::Eal(m) => write!(f, "droce EAL: {m}"),
            HostError::Port(m) => write!(f, "droce port: {m}"),
            HostError::Device(m) => write!(f, "droce device: {m}"),
        }
    }
}

impl std::error::Error for HostError {}

fn cfg_err(m: impl Into<String>) -> HostError {
    HostError::Config(m.into())
}

// ------------------------------------------------------------------------------ conf parsing

/// Replaces `{rank}`, `{rank+N}`, `{pid}` in `v`.
fn template(v: &str, rank: Option<u32>, pid: u32) -> Result<String, String> {
    let mut out = String::with_capacity(v.len());
    let mut rest = v;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let j = after.find('}').ok_or_else(|| format!("unclosed '{{' in '{v}'"))?;
        let inner: String = after[..j].chars().filter(|c| !c.is_whitespace()).collect();
        let inner = inner.as_str();
        let need_rank = || {
            rank.ok_or_else(|| {
                format!("'{{{inner}}}' needs the rank, but none of {} is set (run under mpirun/mpiexec or set DROCE_RANK)", RANK_VARS.join(", "))
            })
        };
        if inner == "pid" {
            out.push_str(&pid.to_string());
        } else if inner == "rank" {
            out.push_str(&need_rank()?.to_string());
        } else if let Some(n) = inner.strip_prefix("rank+") {
            let n: u32 = n.trim().parse().map_err(|_| format!("bad offset in '{{{inner}}}' (want {{rank+N}}, N a number)"))?;
            let r = need_rank()?;
            out.push_str(&r.checked_add(n).ok_or_else(|| format!("'{{{inner}}}' overflows"))?.to_string());
        } else {
            return Err(format!("unknown placeholder '{{{inner}}}' (known: {{rank}}, {{rank+N}}, {{pid}})"));
        }
        rest = &after[j + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return None;
    }
    let mut m = [0u8; 6];
    for (b, p) in m.iter_mut().zip(parts) {
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    Some(m)
}

fn yes_no(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "yes" | "true" | "on" | "1" => Some(true),
        "no" | "false" | "off" | "0" => Some(false),
        _ => None,
    }
}

fn parse_progress(v: &str) -> Option<Progress> {
    match v.to_ascii_lowercase().as_str() {
        "manual" => Some(Progress::Manual),
        "thread" | "auto" => Some(Progress::Thread),
        _ => None,
    }
}

const KEYS: &str = "vdev, allow, port, ip, peer, neighbour, mtu, progress, hold-acks, hugepages, memory, mbufs, lcore, log-level, faults, pcap, eal";

/// Distinguishes the `--file-prefix` of successive EAL attempts in one process.
static PREFIX_SEQ: AtomicU32 = AtomicU32::new(0);

impl HostConfig {
    /// Reads the configuration from the environment (see the module docs).
    pub fn from_env() -> Result<HostConfig, HostError> {
        let rank = rank_from_env()?;
        let mut cfg = match std::env::var("DROCE_CONF").ok().filter(|p| !p.trim().is_empty()) {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|e| cfg_err(format!("DROCE_CONF={path}: cannot read the file: {e}")))?;
                let mut c = HostConfig::parse(&text, rank).map_err(|e| match e {
                    HostError::Config(m) => cfg_err(format!("DROCE_CONF={path}: {m}")),
                    e => e,
                })?;
                c.source = match rank {
                    Some(r) => format!("DROCE_CONF={path} rank {r}"),
                    None => format!("DROCE_CONF={path}"),
                };
                c
            }
            None => default_link(rank)?,
        };
        let pid = std::process::id();
        if let Ok(v) = std::env::var("DROCE_PROGRESS") {
            cfg.progress = parse_progress(v.trim()).ok_or_else(|| cfg_err(format!("DROCE_PROGRESS='{v}': want manual or thread")))?;
        }
        if let Ok(v) = std::env::var("DROCE_HOLD_ACKS") {
            if !v.trim().is_empty() {
                cfg.hold_acks = yes_no(v.trim()).ok_or_else(|| cfg_err(format!("DROCE_HOLD_ACKS='{v}': want 1 or 0 (yes or no)")))?;
            }
        }
        if let Ok(v) = std::env::var("DROCE_FAULTS") {
            if !v.trim().is_empty() {
                cfg.faults = Some(v.trim().parse().map_err(|e| cfg_err(format!("DROCE_FAULTS='{v}': {e}")))?);
            }
        }
        if let Ok(v) = std::env::var("DROCE_MTU") {
            if !v.trim().is_empty() {
                let m: u16 = v.trim().parse().ok().filter(|m| (576..=9600).contains(m)).ok_or_else(|| cfg_err(format!("DROCE_MTU='{v}': want an Ethernet MTU in 576..=9600")))?;
                cfg.eth_mtu = Some(m);
            }
        }
        if let Ok(v) = std::env::var("DROCE_PCAP") {
            if !v.trim().is_empty() {
                let p = template(v.trim(), rank, pid).map_err(|e| cfg_err(format!("DROCE_PCAP: {e}")))?;
                cfg.pcap = Some(PathBuf::from(p));
            }
        }
        if let Ok(v) = std::env::var("DROCE_EAL") {
            for w in v.split_whitespace() {
                cfg.eal_args.push(template(w, rank, pid).map_err(|e| cfg_err(format!("DROCE_EAL: {e}")))?);
            }
        }
        Ok(cfg)
    }

    /// Like [`HostConfig::from_env`], but takes no zero-config role: when this process has
    /// none yet, it reports the role it would get now (the locks are probed and released). For
    /// answers that must not commit the process (listing, fi_getinfo before any fabric).
    pub fn peek_env() -> Result<HostConfig, HostError> {
        PEEK.with(|p| p.set(true));
        let r = HostConfig::from_env();
        PEEK.with(|p| p.set(false));
        r
    }

    /// Parses conf file text (format in the module docs); `rank` fills `{rank}`.
    pub fn parse(text: &str, rank: Option<u32>) -> Result<HostConfig, HostError> {
        let pid = std::process::id();
        let mut vdevs: Vec<String> = Vec::new();
        let mut allows: Vec<String> = Vec::new();
        let mut extra: Vec<String> = Vec::new();
        let mut neighbours = Vec::new();
        let mut seen: Vec<(&str, usize)> = Vec::new();
        let (mut port, mut ip, mut peer, mut mtu, mut progress) = (None, None, None, None, Progress::Manual);
        let (mut huge, mut memory, mut lcore, mut log_level, mut faults, mut pcap) = (false, 256u32, None, "error".to_string(), None, None);
        let mut mbufs = DEFAULT_MBUFS;
        let mut hold_acks = true;
        for (no, raw) in text.lines().enumerate() {
            let no = no + 1;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(cfg_err(format!("line {no}: expected `key = value`, got '{line}'")));
            };
            let key = key.trim();
            let at = |m: String| cfg_err(format!("line {no}: key '{key}': {m}"));
            let value = template(value.trim(), rank, pid).map_err(at)?;
            if value.is_empty() {
                return Err(at("empty value".into()));
            }
            let single = matches!(
                key,
                "port" | "ip" | "peer" | "mtu" | "progress" | "hold-acks" | "hugepages" | "memory" | "lcore" | "log-level" | "faults" | "pcap" | "mbufs"
            );
            if single {
                if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
                    return Err(at(format!("given twice (first on line {first})")));
                }
                // `key` borrows `text`, which outlives `seen`
                seen.push((key, no));
            }
            match key {
                "vdev" => vdevs.push(value),
                "allow" => allows.push(value),
                "eal" => extra.extend(value.split_whitespace().map(String::from)),
                "port" => port = Some(value),
                "ip" => ip = Some(value.parse::<IpAddr>().map_err(|_| at(format!("'{value}' is not an IPv4 or IPv6 address")))?),
                "peer" => peer = Some(value.parse::<IpAddr>().map_err(|_| at(format!("'{value}' is not an IPv4 or IPv6 address")))?),
                "neighbour" | "neighbor" => {
                    let w: Vec<&str> = value.split_whitespace().collect();
                    let (Some(a), Some(m), 2) = (w.first(), w.get(1), w.len()) else {
                        return Err(at(format!("want `IP MAC`, got '{value}'")));
                    };
                    let a = a.parse::<IpAddr>().map_err(|_| at(format!("'{a}' is not an IP address")))?;
                    let m = parse_mac(m).ok_or_else(|| at(format!("'{m}' is not a MAC address (aa:bb:cc:dd:ee:ff)")))?;
                    neighbours.push((a, m));
                }
                "mtu" => {
                    let m: u16 = value.parse().map_err(|_| at(format!("'{value}' is not a number")))?;
                    if !(576..=9600).contains(&m) {
                        return Err(at(format!("{m} outside 576..=9600")));
                    }
                    mtu = Some(m);
                }
                "progress" => progress = parse_progress(&value).ok_or_else(|| at(format!("'{value}': want manual or thread")))?,
                "hold-acks" => hold_acks = yes_no(&value).ok_or_else(|| at(format!("'{value}': want yes or no")))?,
                "hugepages" => huge = yes_no(&value).ok_or_else(|| at(format!("'{value}': want yes or no")))?,
                "memory" => {
                    memory = value.parse().ok().filter(|m| *m >= 64).ok_or_else(|| at(format!("'{value}': want a size in MB (≥ 64)")))?
                }
                "lcore" => lcore = Some(value.parse::<u32>().map_err(|_| at(format!("'{value}' is not a CPU number")))?),
                "log-level" => log_level = value,
                "faults" => faults = Some(value.parse::<FaultConfig>().map_err(|e| at(e.to_string()))?),
                "pcap" => pcap = Some(PathBuf::from(value)),
                "mbufs" => {
                    mbufs = value.parse().ok().filter(|m| (1023..=1 << 20).contains(m)).ok_or_else(|| at(format!("'{value}': want a count from 1023 to 1048576")))?
                }
                _ => return Err(cfg_err(format!("line {no}: unknown key '{key}' (known: {KEYS})"))),
            }
        }
        let ip = ip.ok_or_else(|| cfg_err("no `ip = ...` line: droce needs this process's RoCE address (e.g. ip = 10.78.0.{rank+1})"))?;
        let extra_has = |names: &[&str]| extra.iter().any(|w| names.iter().any(|n| w == n || w.starts_with(&format!("{n}="))));
        if vdevs.is_empty() && allows.is_empty() && !extra_has(&["--vdev", "-a", "--allow"]) {
            return Err(cfg_err("no port: give `vdev = ...` (e.g. net_af_packet0,iface=droce{rank}) or `allow = <PCI address>`"));
        }
        let port = port.or_else(|| vdevs.first().map(|v| v.split(',').next().unwrap_or(v).to_string()));
        let mut eal = vec!["droce".to_string()];
        if !huge {
            eal.extend(["--no-huge".into(), "-m".into(), memory.to_string()]);
        }
        if allows.is_empty() && !extra_has(&["-a", "--allow"]) {
            eal.push("--no-pci".into());
        }
        let seq = PREFIX_SEQ.fetch_add(1, Ordering::Relaxed);
        eal.extend(["--no-shconf".into(), format!("--file-prefix=droce-{pid}-{seq}"), "--no-telemetry".into(), format!("--log-level={log_level}")]);
        if !extra_has(&["-l", "-c", "--lcores"]) {
            let cpu = match lcore {
                Some(c) => c,
                None => sys::first_allowed_cpu().unwrap_or(0),
            };
            eal.extend(["-l".into(), cpu.to_string()]);
        }
        eal.extend(vdevs.iter().map(|v| format!("--vdev={v}")));
        for a in allows {
            eal.extend(["-a".into(), a]);
        }
        eal.extend(extra);
        Ok(HostConfig {
            eal_args: eal,
            port,
            ip,
            peer,
            neighbours,
            eth_mtu: mtu,
            progress,
            hold_acks,
            faults,
            pcap,
            rank,
            mbufs,
            source: "conf text".into(),
            link: None,
        })
    }
}

/// The rank from the first of [`RANK_VARS`] that is set.
pub fn rank_from_env() -> Result<Option<u32>, HostError> {
    for var in RANK_VARS {
        if let Ok(v) = std::env::var(var) {
            let t = v.trim();
            if t.is_empty() {
                continue;
            }
            return t.parse::<u32>().map(Some).map_err(|_| cfg_err(format!("{var}='{v}' is not a rank number")));
        }
    }
    Ok(None)
}

// ------------------------------------------------------------------------------ zero-config

/// Most processes on one zero-config link (slots 0 .. MESH_MAX-1): each has a memif port per
/// other slot, and DPDK 22.11's Debian build allows 32 ports per process.
pub const MESH_MAX: u32 = 16;

/// How long [`Host::open`] waits for a lower slot that is alive to start its ports, and then
/// for the links to the lower slots to come up (bounded: a process alone, or one whose peers
/// are stuck, opens all the same and connects to them when they come).
pub const MESH_OPEN_WAIT: Duration = Duration::from_secs(10);

/// A zero-config client port whose link did not come up this long after its start (the server
/// refused it: it raced the server's port start) connects again.
const MESH_CLIENT_RETRY: Duration = Duration::from_secs(5);

/// How often the lock directory is looked at for new ready slots.
const MESH_SCAN_EVERY: Duration = Duration::from_millis(100);

/// The address of zero-config slot `slot`: 10.77.<slot/250>.<slot%250+1>.
pub fn mesh_ip(slot: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, (slot / 250) as u8, (slot % 250 + 1) as u8)
}

/// The MAC of zero-config slot `slot`: 02:64:72:63:<slot+1, 16 bits>.
pub fn mesh_mac(slot: u32) -> [u8; 6] {
    let n = slot + 1;
    [0x02, 0x64, 0x72, 0x63, (n >> 8) as u8, n as u8]
}

/// The slot's lock file, held for the life of the process (`<pid>`, then `<pid> ready`).
static SLOT_LOCK: Mutex<Option<std::fs::File>> = Mutex::new(None);

/// Marks this process's slot ready: its server ports are started, higher slots may connect (a memif client that connects to a server port not started yet is refused for good
/// in DPDK 22.11, so clients wait for this mark).
fn mark_slot_ready() {
    use std::io::{Seek, Write};
    if let Some(f) = SLOT_LOCK.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
        let _ = f.set_len(0).and_then(|_| f.rewind()).and_then(|_| writeln!(f, "{} ready", std::process::id()));
    }
}

/// What a slot's lock file says: the pid of its holder (when that process is alive) and
/// whether it marked itself ready. A file left by a process that has gone reads as free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    Alive { pid: u32, ready: bool },
}

fn slot_state(path: &std::path::Path) -> SlotState {
    let Ok(t) = std::fs::read_to_string(path) else { return SlotState::Free };
    let mut w = t.split_whitespace();
    match w.next().and_then(|p| p.parse::<u32>().ok()) {
        Some(pid) if std::path::Path::new(&format!("/proc/{pid}")).exists() => SlotState::Alive { pid, ready: w.next() == Some("ready") },
        _ => SlotState::Free,
    }
}

fn slot_lock_path(dir: &std::path::Path, link: &str, slot: u32) -> PathBuf {
    dir.join(format!("{link}.{slot}.lock"))
}

thread_local! {
    /// Set while `peek_env` runs on this thread.
    static PEEK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The slot this process would get on `link` now, without keeping a lock.
fn probe_slot(link: &str) -> Result<u32, HostError> {
    let dir = lock_dir()?;
    for slot in 0..MESH_MAX {
        let path = slot_lock_path(&dir, link, slot);
        match sys::probe_lock(&path) {
            Ok(true) => return Ok(slot),
            Ok(false) => {}
            Err(e) => return Err(cfg_err(format!("zero-config default: lock file {}: {e}", path.display()))),
        }
    }
    Err(all_taken(link))
}

/// Takes the lowest free slot on `link` (the lock stays held for the life of the process).
fn take_slot(link: &str) -> Result<u32, HostError> {
    let dir = lock_dir()?;
    for slot in 0..MESH_MAX {
        let path = slot_lock_path(&dir, link, slot);
        match sys::try_lock(&path) {
            Ok(Some(f)) => {
                *SLOT_LOCK.lock().unwrap_or_else(PoisonError::into_inner) = Some(f);
                return Ok(slot);
            }
            Ok(None) => {}
            Err(e) => return Err(cfg_err(format!("zero-config default: lock file {}: {e}", path.display()))),
        }
    }
    Err(all_taken(link))
}

/// The error of a process beyond [`MESH_MAX`] on one zero-config link.
fn all_taken(link: &str) -> HostError {
    cfg_err(format!(
        "zero-config default link '{link}' already has {MESH_MAX} processes, the most one zero-config link serves: use DROCE_LINK=<other name> for a separate group, or DROCE_CONF for more processes (see docs/host.md)"
    ))
}

/// The slot this process took on its zero-config link (decided once; the lock stays held).
static DEFAULT_SLOT: OnceLock<Result<(u32, String), HostError>> = OnceLock::new();

fn mac_str(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// This process's end of the zero-config memif mesh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultLink {
    /// `DROCE_LINK` or "default".
    pub name: String,
    /// This process's slot (its address is [`mesh_ip`] of it).
    pub slot: u32,
    /// `/tmp/droce-<uid>`: the slots' lock files `<name>.<slot>.lock`.
    pub lock_dir: PathBuf,
}

impl DefaultLink {
    fn lock(&self, slot: u32) -> PathBuf {
        slot_lock_path(&self.lock_dir, &self.name, slot)
    }
}

/// The memif vdev of slot `me` towards slot `peer`: port `net_memif<peer>`; the lower slot of
/// the two serves on its own socket `@/droce-<uid>-<link>-<slot>` with the client's slot as the
/// interface id, the higher one is the client.
fn mesh_vdev(uid: u32, link: &str, me: u32, peer: u32) -> String {
    let (role, server_slot, id) = if me < peer { ("server", me, peer) } else { ("client", peer, me) };
    format!("net_memif{peer},role={role},id={id},socket=/droce-{uid}-{link}-{server_slot},socket-abstract=yes,bsize=8192,mac={}", mac_str(mesh_mac(me)))
}

fn default_link(rank: Option<u32>) -> Result<HostConfig, HostError> {
    let link = std::env::var("DROCE_LINK").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "default".into());
    if link.len() > 40 || !link.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(cfg_err(format!("DROCE_LINK='{link}': use at most 40 letters, digits, '-', '_' or '.'")));
    }
    let (slot, link) = match DEFAULT_SLOT.get() {
        Some(r) => r.clone()?,
        None if PEEK.with(|p| p.get()) => (probe_slot(&link)?, link),
        None => DEFAULT_SLOT.get_or_init(|| take_slot(&link).map(|s| (s, link.clone()))).clone()?,
    };
    let uid = sys::uid();
    let ip = mesh_ip(slot);
    // what a loopback destination means: the pair's other end (slot 0 <-> 1), slot 0 for the rest
    let peer = if slot == 0 { mesh_ip(1) } else { mesh_ip(0) };
    // abstract sockets: nothing on disk, released when their process ends; 8 KiB buffers carry
    // every frame of path MTU 4096 in one buffer (MEMIF_JUMBO_BSIZE)
    let mut text = String::new();
    for j in (0..MESH_MAX).filter(|&j| j != slot) {
        text.push_str(&format!("vdev = {}\nneighbour = {} {}\n", mesh_vdev(uid, &link, slot, j), mesh_ip(j), mac_str(mesh_mac(j))));
    }
    text.push_str(&format!("ip = {ip}\npeer = {peer}\n"));
    let mut c = HostConfig::parse(&text, rank)?;
    c.source = format!("embedded default (memif mesh slot {slot}: {ip}, link '{link}', up to {MESH_MAX} processes)");
    c.link = Some(DefaultLink { name: link, slot, lock_dir: lock_dir()? });
    Ok(c)
}

fn lock_dir() -> Result<PathBuf, HostError> {
    let dir = PathBuf::from(format!("/tmp/droce-{}", sys::uid()));
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(cfg_err(format!("zero-config default: cannot create {}: {e}", dir.display()))),
    }
    sys::check_private_dir(&dir).map_err(|m| cfg_err(format!("zero-config default: {}: {m}", dir.display())))?;
    Ok(dir)
}

/// The link to one other slot of the mesh.
#[derive(Debug)]
struct MeshPeer {
    slot: u32,
    ip: IpAddr,
    port: Port,
    /// Index in the device's [`MeshWire`].
    idx: usize,
    /// This process serves the link (the peer's slot is higher): the port stays started and
    /// takes whichever process holds the peer's slot next.
    server: bool,
    /// Client: the server process it connected to (started) or last had (stopped).
    server_pid: Option<u32>,
    /// Client: the port is started (connecting or connected), since when.
    started: Option<Instant>,
    up: bool,
}

/// The zero-config mesh of this process: its slot and one link per other slot.
#[derive(Debug)]
struct Mesh {
    link: DefaultLink,
    peers: Vec<MeshPeer>,
    next_scan: Instant,
    next_watch: Instant,
    /// Progress calls since the clock was last read.
    calls: u32,
}

// ------------------------------------------------------------------------------ Host

/// Ends EAL without rte_eal_cleanup when the host is dropped (declared last in `Host`).
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
pub struct Host {
    /// Set on a point-to-point memif link (the zero-config pair, or a conf with `peer`): its
    /// link going down means the peer process has gone (see [`Host::peer_lost`]).
    link_watch: Option<LinkWatch>,
    /// The zero-config mesh (one memif link per other process on the link).
    mesh: Option<Mesh>,
    /// Peers found gone, in order (see [`Host::lost_peers_since`]).
    lost: Vec<IpAddr>,
    cm: CmAgent,
    /// `progress_datapath` calls since the CM agent was last polled.
    cm_skipped: u32,
    dev: RoceDevice,
    /// Held for its `Drop`.
    _port: ExitPort,
    port_id: PortId,
    pool: Arc<Mempool>,
    cfg: HostConfig,
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

// `global()` shares a Host across threads behind a Mutex: it must be Send. Every part is
// (mbufs, batches and pools are Send in their modules); no unsafe impl is needed here.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Host>();
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
/// the largest RoCE frame at that MTU (Ethernet 14 + IPv6 40 + UDP 8 + BTH 12 + RETH 16 +
/// 4096 + ICRC 4 = 4190 bytes) in one buffer. DPDK 22.11's memif loses frames when frames of
/// several buffers and of one buffer share a ring: a one-buffer frame that lands in a slot
/// that began a chain before is glued to the slots after it (seen as 2048-, 6144- and
/// 8192-byte "ACKs" in a capture, then retries exhausted), so no frame may span buffers.
const MEMIF_JUMBO_BSIZE: u32 = 4224;

/// The buffer size of the memif vdev `port` in `eal_args` (`bsize`, DPDK's default 2048).
fn memif_bsize(eal_args: &[String], port: &str) -> u32 {
    let v = eal_args.iter().filter_map(|a| a.strip_prefix("--vdev=")).find(|v| v.split(',').next() == Some(port));
    v.and_then(|v| v.split(',').skip(1).filter_map(|p| p.split_once('=')).find(|(k, _)| *k == "bsize").and_then(|(_, b)| b.parse().ok()))
        .unwrap_or(2048)
}

impl Host {
    /// Brings droce up in this process. EAL can be initialised once per process: a second
    /// `open` (or one after a failed EAL init that got past argument parsing) fails.
    pub fn open(cfg: HostConfig) -> Result<Host, HostError> {
        sys::eal_log_to_stderr();
        let saved = sys::get_affinity();
        // rte_eal_init prints its usage text to stdout on a bad argument: the application's
        // output (fi_pingpong, MPI programs) must not get it
        let res = sys::stdout_to_stderr(|| Eal::init(&cfg.eal_args));
        // EAL pins the calling thread to the main lcore; the application's threads (and every
        // MPI rank on the machine) would otherwise all land on that one CPU
        if let Some(set) = &saved {
            sys::set_affinity(set);
        }
        let eal = res.map_err(|e| HostError::Eal(format!("{e} ({}; EAL args: {})", cfg.source, cfg.eal_args[1..].join(" "))))?;
        let eal = ExitEal(Some(eal));
        sys::remove_empty_runtime_dir();

        let ids = crate::port_ids();
        let names = || ids.iter().map(|p| crate::port_name(*p).unwrap_or_else(|_| p.0.to_string())).collect::<Vec<_>>().join(", ");
        let id = match &cfg.port {
            Some(n) => crate::port_by_name(n).ok_or_else(|| HostError::Port(format!("no port named '{n}' (ports: {}) ({})", names(), cfg.source)))?,
            None => *ids.first().ok_or_else(|| HostError::Port(format!("EAL found no port ({}): give a vdev or a PCI allowlist entry", cfg.source)))?,
        };
        let mut port = Port::new(id).map_err(|e| HostError::Port(format!("port {}: {e}", id.0)))?;
        let info = port.info().map_err(|e| HostError::Port(format!("port {}: {e}", id.0)))?;
        let memif = info.driver_name == "net_memif";
        let mut cfg = cfg;
        let pname = crate::port_name(id).unwrap_or_else(|_| id.0.to_string());
        cfg.eth_mtu = cfg.eth_mtu.or_else(|| default_eth_mtu(&info.driver_name, memif_bsize(&cfg.eal_args, &pname)));
        let jumbo = cfg.eth_mtu.unwrap_or(1500) > 1500;
        let data_room = if jumbo { 9216 + 128 } else { MempoolConfig::default().data_room };
        let n = cfg.mbufs;
        let pool = Arc::new(
            Mempool::create("droce_host", &MempoolConfig { n, data_room, ..Default::default() })
                .map_err(|e| HostError::Device(format!("mbuf pool ({n} x {data_room} B): {e} (raise `memory` in the conf)")))?,
        );
        let mut pc = PortConfig::new().rx_desc(1024).tx_desc(1024).checksum_offload(true);
        if let Some(m) = cfg.eth_mtu {
            // net_memif refuses a configured MTU above 1500 but carries any frame length:
            // the device's eth_mtu alone sets the path MTU there
            if !memif && m >= info.min_mtu && m <= info.max_mtu {
                pc = pc.mtu(m);
            }
        }
        let configured = port.configure(&pc, &pool).map_err(|e| HostError::Port(format!("{pname}: configure: {e}")))?;
        // the zero-config mesh: every other slot's port configured like this one; the server
        // ports started (then this slot is marked ready), the client ports started once their
        // server is ready (Host::watch_mesh)
        let mut mesh = None;
        let mut mesh_ports = Vec::new();
        if let Some(l) = cfg.link.clone() {
            let mut peers = Vec::new();
            for j in (0..MESH_MAX).filter(|&j| j != l.slot) {
                let name = format!("net_memif{j}");
                let pid = crate::port_by_name(&name).ok_or_else(|| HostError::Port(format!("no port named '{name}' ({})", cfg.source)))?;
                let mut p = if pid == id { port.clone() } else { Port::new(pid).map_err(|e| HostError::Port(format!("{name}: {e}")))? };
                if pid != id {
                    p.configure(&pc, &pool).map_err(|e| HostError::Port(format!("{name}: configure: {e}")))?;
                }
                let server = l.slot < j;
                if server {
                    p.start().map_err(|e| HostError::Port(format!("{name}: start: {e}")))?;
                }
                peers.push(MeshPeer { slot: j, ip: IpAddr::V4(mesh_ip(j)), port: p.clone(), idx: peers.len(), server, server_pid: None, started: None, up: false });
                mesh_ports.push((p, mesh_mac(j)));
            }
            mark_slot_ready();
            mesh = Some(Mesh { link: l, peers, next_scan: Instant::now(), next_watch: Instant::now(), calls: 0 });
        } else {
            let client_sock = if memif { memif_client_socket(&cfg.eal_args, &pname) } else { None };
            let t0 = Instant::now();
            if let Some(sock) = &client_sock {
                // a memif client's start fails while its server is not listening, and in DPDK
                // 22.11 a port whose start failed does not come up on a later start: wait for
                // the listener
                while !sock.listening() {
                    if t0.elapsed() > CLIENT_CONNECT_TIMEOUT {
                        return Err(HostError::Port(format!(
                            "{pname}: no memif server listening on {} within {CLIENT_CONNECT_TIMEOUT:?} ({})",
                            sock.describe(),
                            cfg.source
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            port.start().map_err(|e| {
                let hint = if client_sock.is_some() { " (is the memif server running?)" } else { "" };
                HostError::Port(format!("{pname}: start: {e}{hint}"))
            })?;
            if client_sock.is_some() {
                // the handshake follows the connect: let the first sends find the link up; a
                // configured memif client reconnects with Port's back-off
                let _ = port.wait_link_up(CLIENT_CONNECT_TIMEOUT.saturating_sub(t0.elapsed()));
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
        rc.hold_acks = cfg.hold_acks;
        let mut dev = RoceDevice::new(rc, &configured, pool.clone()).map_err(|e| HostError::Device(format!("RoCE device on {pname}: {e}")))?;
        let cm = CmAgent::new(&mut dev, CmAgentConfig { seed: seed() ^ 0x636d, ..Default::default() })
            .map_err(|e| HostError::Device(format!("CM agent: {e}")))?;
        if !mesh_ports.is_empty() {
            let mut w = crate::roce::mesh::MeshWire::new();
            for (p, mac) in mesh_ports {
                w.add_port(p, mac);
            }
            dev.attach_mesh(w);
        }
        let link_watch = (memif && cfg.peer.is_some() && mesh.is_none())
            .then(|| LinkWatch { port: port.clone(), was_up: port.link().map(|l| l.up).unwrap_or(false), next: Instant::now(), lost: false, calls: 0 });
        let mut host = Host { link_watch, mesh, lost: Vec::new(), cm, cm_skipped: 0, dev, _port: ExitPort(Some(port)), port_id: id, pool, cfg, _eal: eal };
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

    /// Whether some peer behind a point-to-point memif link (a zero-config mesh link, or a conf
    /// with `peer` on a memif port) has gone: its link was up and went down. A memif link goes
    /// down only when the other side closes its control socket (exit, kill, port stop), so the
    /// process is gone. Frontends use [`Host::lost_peers_since`] to fail only the connections
    /// to the peers that went, at once, instead of waiting for retries that only come when
    /// something is outstanding (a ping-pong side waiting for the reply of a dead peer waited
    /// forever, as over UCX tcp). Looked at every [`LINK_WATCH_EVERY`] by the progress calls.
    pub fn peer_lost(&self) -> bool {
        !self.lost.is_empty()
    }

    /// The peers found gone since the caller last asked (`*seen` keeps its place; start at
    /// 0): on the zero-config mesh the process behind each memif link that went down (one link
    /// per peer, so only that peer's connections are affected), on a configured
    /// point-to-point memif link its `peer`. A zero-config slot taken again by a new process
    /// later has the same address: its new connections are unaffected by the old loss.
    pub fn lost_peers_since(&self, seen: &mut usize) -> &[IpAddr] {
        let from = (*seen).min(self.lost.len());
        *seen = self.lost.len();
        &self.lost[from..]
    }

    /// Whether `ip` is a zero-config peer with no process behind it now: its link is down and
    /// its slot is free. A connection to it can only time out; callers fail it at once, as a
    /// TCP connect to a port nobody listens on does.
    pub fn peer_gone(&self, ip: IpAddr) -> bool {
        let Some(m) = self.mesh.as_ref() else { return false };
        m.peers.iter().find(|p| p.ip == ip).is_some_and(|p| !p.up && slot_state(&m.link.lock(p.slot)) == SlotState::Free)
    }

    /// The zero-config peers whose memif link is up now (empty elsewhere).
    pub fn mesh_peers_up(&self) -> Vec<IpAddr> {
        self.mesh.as_ref().map(|m| m.peers.iter().filter(|p| p.up).map(|p| p.ip).collect()).unwrap_or_default()
    }

    /// This process's zero-config slot, if on the zero-config mesh.
    pub fn mesh_slot(&self) -> Option<u32> {
        self.mesh.as_ref().map(|m| m.link.slot)
    }

    /// At open: waits (bounded by [`MESH_OPEN_WAIT`]) for the lower slots that are alive to
    /// mark themselves ready, connects to them and waits for those links to come up, so that
    /// the first sends to processes already running find their links. Higher slots connect
    /// to this process themselves; slots that appear later are connected by the progress calls.
    fn open_mesh(&mut self) {
        let Some(m) = self.mesh.as_ref() else { return };
        let lower: Vec<u32> = m.peers.iter().filter(|p| !p.server).map(|p| p.slot).collect();
        let t0 = Instant::now();
        while t0.elapsed() < MESH_OPEN_WAIT {
            let Some(m) = self.mesh.as_ref() else { return };
            let waiting = lower.iter().any(|&j| {
                let p = m.peers.iter().find(|p| p.slot == j);
                match slot_state(&m.link.lock(j)) {
                    SlotState::Free => false,
                    // alive: not ready yet, or the link to it is not up yet
                    SlotState::Alive { ready, .. } => !ready || p.is_some_and(|p| !p.up),
                }
            });
            if !waiting {
                break;
            }
            if let Some(m) = self.mesh.as_mut() {
                m.next_scan = Instant::now();
            }
            self.watch_mesh(true);
            std::thread::sleep(Duration::from_millis(2));
        }
        self.watch_mesh(true);
    }

    /// Looks at every mesh link (every [`LINK_WATCH_EVERY`]) and the lock directory (every
    /// [`MESH_SCAN_EVERY`]): links that came up are used, links that went down are reported
    /// lost (their peer process has gone), client ports are started towards slots that became
    /// ready (a new process in a slot) and stopped when their server went. Port start and stop
    /// run under the interrupt-thread gate (`Port`); no port is ever created or removed here.
    fn watch_mesh(&mut self, scan_now: bool) {
        let Some(m) = self.mesh.as_mut() else { return };
        let now = Instant::now();
        let scan = scan_now || now >= m.next_scan;
        if scan {
            m.next_scan = now + MESH_SCAN_EVERY;
        }
        for p in m.peers.iter_mut() {
            let up = (p.server || p.started.is_some()) && p.port.link_quiet().map(|l| l.up).unwrap_or(false);
            if up && !p.up {
                p.up = true;
                populate_memif_regions();
                if let Some(w) = self.dev.mesh_mut() {
                    w.set_up(p.idx, true);
                }
            } else if !up && p.up {
                p.up = false;
                if let Some(w) = self.dev.mesh_mut() {
                    w.set_up(p.idx, false);
                }
                self.lost.push(p.ip);
                eprintln!("droce: the memif link to {} (zero-config slot {}) went down: that process has gone", p.ip, p.slot);
                if !p.server {
                    // a client does not reconnect to the same server process; a new process in
                    // that slot is connected when it marks itself ready
                    let _ = p.port.stop();
                    p.started = None;
                }
            }
            if p.server || !scan {
                continue;
            }
            let st = slot_state(&m.link.lock(p.slot));
            match (p.started, st) {
                (None, SlotState::Alive { pid, ready: true }) if p.server_pid != Some(pid) && p.port.start().is_ok() => {
                    p.server_pid = Some(pid);
                    p.started = Some(now);
                }
                (Some(since), _) if !p.up => {
                    let gone = match st {
                        SlotState::Alive { pid, .. } => Some(pid) != p.server_pid,
                        SlotState::Free => true,
                    };
                    if gone || now.duration_since(since) >= MESH_CLIENT_RETRY {
                        // its server went before the link came up, or refused the connection:
                        // start again when (a process in) that slot is ready
                        let _ = p.port.stop();
                        p.started = None;
                        if gone {
                            // a process that died before its link came up has gone all the
                            // same: what was connecting to it fails now (no link went down)
                            self.lost.push(p.ip);
                            eprintln!("droce: zero-config slot {} ({}) ended before its memif link came up: that process has gone", p.slot, p.ip);
                        } else {
                            p.server_pid = None;
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// [`Host::watch_mesh`] at most every [`LINK_WATCH_EVERY`] (the clock read once in 64 calls).
    #[inline]
    fn tick_mesh(&mut self) {
        let Some(m) = self.mesh.as_mut() else { return };
        m.calls = m.calls.wrapping_add(1);
        if m.calls % 64 != 0 {
            return;
        }
        let now = Instant::now();
        if now < m.next_watch {
            return;
        }
        m.next_watch = now + LINK_WATCH_EVERY;
        self.watch_mesh(false);
    }

    fn watch_link(&mut self) {
        let Some(w) = self.link_watch.as_mut() else { return };
        w.calls = w.calls.wrapping_add(1);
        if w.lost || w.calls % 64 != 0 {
            return;
        }
        let now = Instant::now();
        if now < w.next {
            return;
        }
        w.next = now + LINK_WATCH_EVERY;
        let up = w.port.link().map(|l| l.up).unwrap_or(false);
        if w.was_up && !up {
            w.lost = true;
            if let Some(p) = self.cfg.peer {
                self.lost.push(p);
            }
            eprintln!("droce: the memif link to the peer ({}) went down: the peer process has gone", self.cfg.peer.map(|p| p.to_string()).unwrap_or_default());
        }
        if up && !w.was_up {
            populate_memif_regions();
        }
        w.was_up |= up;
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
        !w.is_idle() || c
    }

    pub fn config(&self) -> &HostConfig {
        &self.cfg
    }

    pub fn local_ip(&self) -> IpAddr {
        self.cfg.ip
    }

    /// GID index of [`Host::local_ip`] (1: index 0 is the link-local GID, like rxe).
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

/// The control socket a memif client port connects to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MemifSocket {
    path: String,
    abstract_: bool,
}

impl MemifSocket {
    fn describe(&self) -> String {
        if self.abstract_ {
            format!("abstract socket @{}", self.path)
        } else {
            self.path.clone()
        }
    }

    /// Whether a server listens there (abstract: /proc/net/unix of this network namespace;
    /// a path: the socket file exists).
    fn listening(&self) -> bool {
        if !self.abstract_ {
            return std::path::Path::new(&self.path).exists();
        }
        let want = format!("@{}", self.path);
        let Ok(t) = std::fs::read_to_string("/proc/net/unix") else { return true };
        t.lines().skip(1).any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Num RefCount Protocol Flags Type St Inode Path; Flags 00010000 = listening
            f.len() >= 8 && f[3] == "00010000" && f[7] == want
        })
    }
}

/// The socket of `--vdev=<port>,role=client,...` among the EAL args (DPDK 22.11 defaults:
/// /run/memif.sock, abstract).
fn memif_client_socket(eal_args: &[String], port: &str) -> Option<MemifSocket> {
    let v = eal_args.iter().filter_map(|a| a.strip_prefix("--vdev=")).find(|v| v.split(',').next() == Some(port))?;
    let kv: Vec<(&str, &str)> = v.split(',').skip(1).filter_map(|p| p.split_once('=')).collect();
    let get = |k: &str| kv.iter().find(|(a, _)| *a == k).map(|(_, b)| *b);
    if get("role") != Some("client") {
        return None;
    }
    Some(MemifSocket {
        path: get("socket").unwrap_or("/run/memif.sock").to_string(),
        abstract_: get("socket-abstract").map(|a| a != "no").unwrap_or(true),
    })
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

// ------------------------------------------------------------------------------ global

static GLOBAL: OnceLock<Result<&'static Mutex<Host>, HostError>> = OnceLock::new();

/// The process-wide host: opened from [`HostConfig::from_env`] on first use, never closed.
/// Errors are sticky (every caller gets the first error). With [`Progress::Thread`] a background
/// thread ("droce-progress") locks the mutex and progresses, sleeping briefly when idle.
pub fn global() -> Result<&'static Mutex<Host>, HostError> {
    GLOBAL
        .get_or_init(|| {
            let cfg = HostConfig::from_env()?;
            let thread = cfg.progress == Progress::Thread;
            let watchdog = cfg.hold_acks && !thread;
            // Threads run this library's code to the end of the process: ours, and from EAL
            // init on DPDK's interrupt thread, parked in the interrupt-thread gate's callback.
            // libfabric dlclose()s its providers in its exit-time destructor, and a thread that
            // woke up in unmapped code crashed the process at exit (fi_dom_test, 2 in 12 runs;
            // a host whose open failed after EAL init, in fi_multi_mr). Pinned before EAL starts.
            sys::pin_own_library();
            sys::at_exit(stop_threads);
            let host = Host::open(cfg)?;
            let m: &'static Mutex<Host> = Box::leak(Box::new(Mutex::new(host)));
            if thread {
                std::thread::Builder::new()
                    .name("droce-progress".into())
                    .spawn(move || progress_loop(m))
                    .map_err(|e| HostError::Device(format!("progress thread: {e}")))?;
            }
            if watchdog {
                std::thread::Builder::new()
                    .name("droce-acks".into())
                    .spawn(move || ack_watchdog(m))
                    .map_err(|e| HostError::Device(format!("ACK watchdog thread: {e}")))?;
            }
            Ok(m)
        })
        .clone()
}

/// [`global`] locked; a poisoned lock (a panic while it was held) is taken over.
pub fn lock_global() -> Result<MutexGuard<'static, Host>, HostError> {
    Ok(global()?.lock().unwrap_or_else(PoisonError::into_inner))
}

/// How often the ACK watchdog of [`global`] looks at the device.
pub const ACK_WATCHDOG_TICK: Duration = Duration::from_millis(1);

/// Held ACKs ([`HostConfig::hold_acks`]) leave with the application's next poll; this thread
/// sends them when the application stopped polling (it got its last completion and went on to
/// other things, or waits elsewhere): each tick it takes the lock if free and flushes when no
/// poll ran for a whole tick. The peer's send completes ~1-2 ms late instead of retrying out.
/// A busy application keeps the lock mostly free and polls between ticks: the watchdog costs
/// one wake-up and one uncontended lock per tick.
fn ack_watchdog(m: &'static Mutex<Host>) {
    let mut seen = 0u64;
    loop {
        std::thread::sleep(ACK_WATCHDOG_TICK);
        let mut h = match m.try_lock() {
            Ok(h) => h,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            // the application is in a call: that call polls
            Err(std::sync::TryLockError::WouldBlock) => continue,
        };
        if EXITING.load(Ordering::SeqCst) {
            return;
        }
        h.dev.flush_if_unpolled(&mut seen);
    }
}

/// Set by the exit handler: the host's threads stop touching DPDK (whose destructors run next).
static EXITING: AtomicBool = AtomicBool::new(false);

/// Maps in every page of the memif shared regions (`memfd:memif_region_N`: rings and
/// buffers) once, when a memif link comes up. The PMD maps them lazily and each process then
/// faulted them in page by page on first use: the first ~1000 frames each way (one ring) ran at
/// a tenth of the speed, ~3.5 ms per 1 MiB round trip instead of ~0.4 (BENCHMARKS.md).
/// `MADV_POPULATE_WRITE` faults the pages in without changing them; a kernel without it
/// (before 5.14) answers EINVAL and the pages fault in as before.
fn populate_memif_regions() {
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    static DONE: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return };
    let mut done = DONE.lock().unwrap_or_else(PoisonError::into_inner);
    for line in maps.lines().filter(|l| l.contains("memif_region") && l.split_whitespace().nth(1).is_some_and(|p| p.starts_with("rw"))) {
        let Some((a, b)) = line.split_whitespace().next().and_then(|r| r.split_once('-')) else { continue };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { continue };
        if end <= start || done.contains(&(start, end)) {
            continue;
        }
        if sys::madvise(start, end - start, MADV_POPULATE_WRITE) {
            done.push((start, end));
        }
    }
}

/// At process exit (before the libraries' destructors): the progress and watchdog threads
/// check [`EXITING`] with the host lock held, so once this handler has set it and passed the
/// lock neither calls into DPDK again. The lock is waited for at most 50 ms (an application
/// thread may hold it while another exits). Then DPDK's interrupt thread is parked for good:
/// nothing of DPDK runs during the destructors.
extern "C" fn stop_threads() {
    EXITING.store(true, Ordering::SeqCst);
    if let Some(Ok(m)) = GLOBAL.get() {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(50) {
            match m.try_lock() {
                Ok(_) | Err(std::sync::TryLockError::Poisoned(_)) => break,
                Err(std::sync::TryLockError::WouldBlock) => std::thread::yield_now(),
            }
        }
    }
    crate::intr_gate::freeze();
}

fn progress_loop(m: &'static Mutex<Host>) {
    let mut idle = 0u32;
    loop {
        let mut h = m.lock().unwrap_or_else(PoisonError::into_inner);
        if EXITING.load(Ordering::SeqCst) {
            return;
        }
        let busy = h.progress();
        drop(h);
        if busy {
            idle = 0;
            // let application threads waiting for the lock in
            std::thread::yield_now();
        } else {
            idle = idle.saturating_add(1);
            if idle < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

// ------------------------------------------------------------------------------ OS helpers

#[cfg(test)]
#[allow(unsafe_code)]
mod populate_tests {
    /// A shared mapping named like memif's regions is resident after populate_memif_regions,
    /// not before (mincore).
    #[test]
    fn memif_regions_are_mapped_in_at_link_up() {
        const LEN: usize = 64 * 4096;
        // SAFETY: a fresh memfd of LEN bytes mapped shared; mincore reads its residency into a
        // vector of one byte per page; everything is released at the end.
        unsafe {
            let fd = libc::memfd_create(c"memif_region_test".as_ptr(), 0);
            assert!(fd >= 0);
            assert_eq!(libc::ftruncate(fd, LEN as libc::off_t), 0);
            let p = libc::mmap(std::ptr::null_mut(), LEN, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            assert_ne!(p, libc::MAP_FAILED);
            let resident = || {
                let mut v = vec![0u8; LEN / 4096];
                assert_eq!(libc::mincore(p, LEN, v.as_mut_ptr()), 0);
                v.iter().filter(|&&b| b & 1 != 0).count()
            };
            assert_eq!(resident(), 0, "a fresh memfd has no pages");
            super::populate_memif_regions();
            assert_eq!(resident(), LEN / 4096, "every page mapped in");
            assert!(std::slice::from_raw_parts(p as *const u8, LEN).iter().all(|&b| b == 0), "contents unchanged");
            libc::munmap(p, LEN);
            libc::close(fd);
        }
    }
}

#[allow(unsafe_code)]
mod sys {
    use std::ffi::c_int;
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::os::unix::io::AsRawFd;
    use std::path::Path;

    extern "C" {
        // lib/log in DPDK 22.11 (librte_eal), not in dpdk-sys's bindgen allowlist
        fn rte_openlog_stream(f: *mut libc::FILE) -> c_int;
    }

    /// Keeps the shared object this code is in (the libfabric provider, the UCX module)
    /// loaded until the process exits: RTLD_NODELETE on the already loaded object. Nothing
    /// happens in an executable or when the loader refuses.
    pub fn pin_own_library() {
        // SAFETY: dladdr fills `info` for an address of our own code; dlopen with RTLD_NOLOAD
        // only looks up an object already loaded (the name dladdr gave) and marks it
        // NODELETE; the handle it returns is deliberately never closed.
        unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            let here = pin_own_library as *const libc::c_void;
            if libc::dladdr(here, &mut info) != 0 && !info.dli_fname.is_null() {
                libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE);
            }
        }
    }

    /// madvise(addr, len, advice) for a range of this process's own mappings; true on success.
    pub fn madvise(addr: usize, len: usize, advice: libc::c_int) -> bool {
        // SAFETY: a range /proc/self/maps lists as one of our shared mappings; populating
        // changes no byte of it (a range unmapped meanwhile only makes madvise fail).
        unsafe { libc::madvise(addr as *mut libc::c_void, len, advice) == 0 }
    }

    /// Registers `f` to run at process exit (C `atexit`; with the library pinned it runs at
    /// exit, before the libraries' destructors).
    pub fn at_exit(f: extern "C" fn()) {
        // SAFETY: `f` is a plain function with no arguments, valid for the whole process.
        unsafe {
            libc::atexit(f);
        }
    }

    pub fn uid() -> u32 {
        // SAFETY: getuid has no preconditions and cannot fail.
        unsafe { libc::getuid() }
    }

    /// Sends EAL's log lines to stderr (DPDK 22.11 writes them to stdout, which is the
    /// application's output).
    pub fn eal_log_to_stderr() {
        // SAFETY: dup of fd 2 and fdopen on the new fd; the FILE is handed to DPDK for the rest
        // of the process and never closed. A failure leaves DPDK's default stream.
        unsafe {
            let fd = libc::dup(2);
            if fd < 0 {
                return;
            }
            let f = libc::fdopen(fd, c"w".as_ptr());
            if f.is_null() {
                libc::close(fd);
                return;
            }
            rte_openlog_stream(f);
        }
    }

    /// Runs `f` with file descriptor 1 pointing at stderr (C stdio flushed before and after).
    pub fn stdout_to_stderr<T>(f: impl FnOnce() -> T) -> T {
        let _ = std::io::stdout().flush();
        // SAFETY: plain fd calls on fds 1 and 2 and a dup we own and close; fflush(NULL)
        // flushes every C stream. If the dup fails nothing is redirected.
        let saved = unsafe {
            libc::fflush(std::ptr::null_mut());
            let saved = libc::dup(1);
            if saved >= 0 && libc::dup2(2, 1) < 0 {
                libc::close(saved);
                -1
            } else {
                saved
            }
        };
        let r = f();
        if saved >= 0 {
            // SAFETY: as above; `saved` is our dup of the original fd 1.
            unsafe {
                libc::fflush(std::ptr::null_mut());
                libc::dup2(saved, 1);
                libc::close(saved);
            }
        }
        r
    }

    pub fn get_affinity() -> Option<libc::cpu_set_t> {
        // SAFETY: cpu_set_t is plain data (all-zero is a valid empty set); the call writes at
        // most size_of::<cpu_set_t>() bytes into it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0).then_some(set)
        }
    }

    pub fn set_affinity(set: &libc::cpu_set_t) {
        // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 = the calling thread.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set);
        }
    }

    pub fn first_allowed_cpu() -> Option<u32> {
        let set = get_affinity()?;
        // SAFETY: CPU_ISSET reads the set within CPU_SETSIZE.
        (0..libc::CPU_SETSIZE as usize).find(|&c| unsafe { libc::CPU_ISSET(c, &set) }).map(|c| c as u32)
    }

    /// With --no-shconf EAL puts nothing in its runtime directory but creates it; the global
    /// host never ends EAL, so remove the empty directory now instead of leaving one per process.
    pub fn remove_empty_runtime_dir() {
        // SAFETY: EAL is initialised; the returned string is owned by EAL and copied at once.
        let dir = unsafe {
            let p = crate::sys::rte_eal_get_runtime_dir();
            if p.is_null() {
                return;
            }
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        };
        let _ = std::fs::remove_dir(dir);
    }

    /// The lock directory must be a real directory owned by us and not writable by others.
    pub fn check_private_dir(dir: &Path) -> Result<(), String> {
        let md = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
        if !md.is_dir() {
            return Err("not a directory".into());
        }
        if md.uid() != uid() {
            return Err(format!("owned by uid {}, not by this user ({})", md.uid(), uid()));
        }
        if md.mode() & 0o022 != 0 {
            std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Opens `path` (created if missing, never truncated) and takes an exclusive flock on it
    /// without waiting: the open file when taken (the lock lasts as long as it stays open),
    /// Ok(None) when another process holds it.
    fn lock_file(path: &Path) -> std::io::Result<Option<std::fs::File>> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)?;
        // SAFETY: flock on a file descriptor we own; closing it (drop) releases the lock.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            return if e.raw_os_error() == Some(libc::EWOULDBLOCK) { Ok(None) } else { Err(e) };
        }
        Ok(Some(f))
    }

    /// Whether the flock on `path` is free now (taken and released at once; the file is not
    /// written).
    pub fn probe_lock(path: &Path) -> std::io::Result<bool> {
        Ok(lock_file(path)?.is_some())
    }

    /// Takes an exclusive flock on `path` (created if missing) without waiting: the open file
    /// when taken (it then holds our pid; the lock lasts as long as the file stays open),
    /// Ok(None) when another process holds it.
    pub fn try_lock(path: &Path) -> std::io::Result<Option<std::fs::File>> {
        let Some(mut f) = lock_file(path)? else { return Ok(None) };
        f.set_len(0)?;
        let _ = writeln!(f, "{}", std::process::id());
        Ok(Some(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str, rank: Option<u32>) -> Result<HostConfig, HostError> {
        HostConfig::parse(text, rank)
    }

    fn eal_has(c: &HostConfig, w: &str) -> bool {
        c.eal_args.iter().any(|a| a == w)
    }

    #[test]
    fn ranks_conf_templating() {
        let text = "# comment\nvdev = net_af_packet0,iface=droce{rank}  # inline\nip = 10.78.0.{rank+1}\nprogress = thread\n";
        let c = p(text, Some(3)).unwrap();
        assert_eq!(c.ip, "10.78.0.4".parse::<IpAddr>().unwrap());
        assert_eq!(c.port.as_deref(), Some("net_af_packet0"));
        assert!(eal_has(&c, "--vdev=net_af_packet0,iface=droce3"), "{:?}", c.eal_args);
        assert_eq!(c.eal_args[0], "droce");
        for w in ["--no-huge", "--no-pci", "--no-shconf", "--no-telemetry", "--log-level=error", "-l"] {
            assert!(eal_has(&c, w), "{w} in {:?}", c.eal_args);
        }
        assert!(c.eal_args.iter().any(|a| a.starts_with(&format!("--file-prefix=droce-{}-", std::process::id()))));
        assert_eq!(c.progress, Progress::Thread);
        assert_eq!(c.rank, Some(3));
        let c0 = p(text, Some(0)).unwrap();
        assert_eq!(c0.ip, "10.78.0.1".parse::<IpAddr>().unwrap());
        assert_ne!(c.eal_args, c0.eal_args);
    }

    #[test]
    fn every_key() {
        let text = "vdev = net_memif0,role=server\nvdev=net_ring0\nallow = 0000:01:00.0\nport = net_ring0\nip = fd00::{rank}\n\
                    peer = fd00::9\nneighbour = fd00::9 02:00:00:00:00:09\nneighbor = 10.0.0.1 2:0:0:0:0:a\nmtu = 9000\n\
                    hugepages = yes\nhold-acks = no\nlcore = 1\nmbufs = 4095\nlog-level = lib.eal:debug\nfaults = rx:drop=0.5;seed=3\npcap = /tmp/x{pid}.pcap\n\
                    eal = --in-memory  -n 4\n";
        let c = p(text, Some(7)).unwrap();
        assert_eq!(c.ip, "fd00::7".parse::<IpAddr>().unwrap());
        assert_eq!(c.peer, Some("fd00::9".parse().unwrap()));
        assert_eq!(c.port.as_deref(), Some("net_ring0"));
        assert_eq!(c.neighbours.len(), 2);
        assert_eq!(c.neighbours[1].1, [2, 0, 0, 0, 0, 0xa]);
        assert_eq!(c.eth_mtu, Some(9000));
        assert_eq!(c.mbufs, 4095);
        assert!(!c.hold_acks);
        assert!(c.faults.unwrap().rx.drop == 0.5 && c.faults.unwrap().seed == 3);
        assert_eq!(c.pcap, Some(PathBuf::from(format!("/tmp/x{}.pcap", std::process::id()))));
        assert!(!eal_has(&c, "--no-huge") && !eal_has(&c, "--no-pci"));
        let s = c.eal_args.join(" ");
        assert!(s.contains("-l 1 --vdev=net_memif0,role=server --vdev=net_ring0 -a 0000:01:00.0 --in-memory -n 4"), "{s}");
        assert!(s.contains("--log-level=lib.eal:debug"));
        let c = p("vdev = net_ring0\nip = 1.2.3.4\nmemory = 128\neal = --lcores=0@1\n", None).unwrap();
        let s = c.eal_args.join(" ");
        assert!(s.contains("--no-huge -m 128 --no-pci") && !s.contains(" -l "), "{s}");
        assert!(c.hold_acks, "ACKs are held by default");
    }

    fn err(text: &str, rank: Option<u32>) -> String {
        let e = p(text, rank).unwrap_err();
        assert!(matches!(e, HostError::Config(_)));
        let s = e.to_string();
        assert!(!s.contains('\n'), "one line: {s}");
        s
    }

    #[test]
    fn clear_errors() {
        let s = err("vdev = net_ring0\nip = 10.0.0.{rank}\n", None);
        assert!(s.contains("line 2") && s.contains("'ip'") && s.contains("DROCE_RANK"), "{s}");
        let s = err("vdev = net_ring0\nip = 10.0.0.1\nfoo = 3\n", None);
        assert!(s.contains("line 3") && s.contains("unknown key 'foo'"), "{s}");
        let s = err("vdev = net_ring0\nip = 10.0.0.300\n", None);
        assert!(s.contains("line 2") && s.contains("not an IPv4 or IPv6"), "{s}");
        let s = err("vdev = net_ring0\nip = 10.0.0.1\nip = 10.0.0.2\n", None);
        assert!(s.contains("line 3") && s.contains("given twice (first on line 2)"), "{s}");
        let s = err("vdev = net_ring0\n", None);
        assert!(s.contains("no `ip = ...`"), "{s}");
        let s = err("ip = 10.0.0.1\n", None);
        assert!(s.contains("no port"), "{s}");
        let s = err("vdev = net_ring0\nip = 10.0.0.1\njust words\n", None);
        assert!(s.contains("line 3") && s.contains("key = value"), "{s}");
        let s = err("vdev = x{rank+z}\nip = 10.0.0.1\n", Some(1));
        assert!(s.contains("line 1") && s.contains("rank+z"), "{s}");
        let s = err("vdev = x{host}\nip = 10.0.0.1\n", Some(1));
        assert!(s.contains("unknown placeholder '{host}'"), "{s}");
        let s = err("vdev = x\nip = 10.0.0.1\nneighbour = 10.0.0.2 zz:00:00:00:00:00\n", None);
        assert!(s.contains("line 3") && s.contains("MAC"), "{s}");
        let s = err("vdev = x\nip = 10.0.0.1\nprogress = sometimes\n", None);
        assert!(s.contains("line 3") && s.contains("manual or thread"), "{s}");
        let s = err("vdev = x\nip = 10.0.0.1\nhold-acks = later\n", None);
        assert!(s.contains("line 3") && s.contains("'hold-acks'") && s.contains("yes or no"), "{s}");
        let s = err("vdev = x\nip = 10.0.0.1\nfaults = rx:explode=1\n", None);
        assert!(s.contains("line 3") && s.contains("'faults'"), "{s}");
        let s = err("vdev = x\nip = 10.0.0.1\nmtu = 100000\n", None);
        assert!(s.contains("line 3"), "{s}");
    }

    #[test]
    fn memif_client_socket_from_args() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let args = a(&["droce", "--vdev=net_memif0,role=client,socket=/x/y.sock,socket-abstract=no", "--vdev=net_memif1,role=client"]);
        assert_eq!(memif_client_socket(&args, "net_memif0"), Some(MemifSocket { path: "/x/y.sock".into(), abstract_: false }));
        assert_eq!(memif_client_socket(&args, "net_memif1"), Some(MemifSocket { path: "/run/memif.sock".into(), abstract_: true }));
        assert_eq!(memif_client_socket(&a(&["--vdev=net_memif0,role=server"]), "net_memif0"), None);
        assert!(!MemifSocket { path: format!("/droce-none-{}", std::process::id()), abstract_: true }.listening());
    }

    #[test]
    fn jumbo_default_only_where_frames_fit() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let args = a(&["droce", "--vdev=net_memif0,role=client,bsize=8192", "--vdev=net_memif1,role=server"]);
        assert_eq!(memif_bsize(&args, "net_memif0"), 8192);
        assert_eq!(memif_bsize(&args, "net_memif1"), 2048);
        assert_eq!(default_eth_mtu("net_memif", memif_bsize(&args, "net_memif0")), Some(9000));
        assert_eq!(default_eth_mtu("net_memif", memif_bsize(&args, "net_memif1")), None);
        assert_eq!(default_eth_mtu("net_ring", 0), Some(9000));
        for d in ["net_af_packet", "net_af_xdp", "net_tap", "mlx5_pci", "net_i40e"] {
            assert_eq!(default_eth_mtu(d, 8192), None, "{d}");
        }
        // the zero-config pair (8 KiB buffers) qualifies: tests/host_pair.rs sees path MTU 4096
        assert!(memif_bsize(&a(&["--vdev=net_memif0,role=server,id=0,bsize=8192,mac=x"]), "net_memif0") >= MEMIF_JUMBO_BSIZE);
    }

    #[test]
    fn template_forms() {
        assert_eq!(template("a{rank}b{rank+10}c{ rank + 2 }", Some(5), 9).unwrap(), "a5b15c7");
        assert_eq!(template("p{pid}", None, 42).unwrap(), "p42");
        assert!(template("x{rank", Some(1), 1).is_err());
        assert_eq!(template("plain", None, 1).unwrap(), "plain");
    }

    #[test]
    fn loopback_aliases() {
        let is_lb = |s: &str| is_loopback(s.parse().unwrap());
        assert!(is_lb("127.0.0.1") && is_lb("127.1.2.3") && is_lb("::1") && is_lb("::ffff:127.0.0.1"));
        assert!(!is_lb("10.77.0.1") && !is_lb("::ffff:10.0.0.1") && !is_lb("fd00::1"));
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let (own, peer) = (ip("10.77.0.1"), ip("10.77.0.2"));
        for lb in ["127.0.0.1", "::1", "127.0.0.5"] {
            assert_eq!(resolve_src(ip(lb), own), own);
            assert_eq!(resolve_dst(ip(lb), own, Some(peer)), peer);
            assert_eq!(resolve_dst(ip(lb), own, None), own, "no peer: loopback is this process");
        }
        assert_eq!(resolve_src(ip("0.0.0.0"), own), own);
        assert_eq!(resolve_src(ip("::"), own), own);
        assert_eq!(resolve_dst(ip("0.0.0.0"), own, Some(peer)), ip("0.0.0.0"), "unspecified is no destination alias");
        assert_eq!(resolve_src(ip("10.9.9.9"), own), ip("10.9.9.9"));
        assert_eq!(resolve_dst(ip("10.9.9.9"), own, Some(peer)), ip("10.9.9.9"));
    }

    #[test]
    fn slot_lock_states() {
        let dir = std::env::temp_dir().join(format!("droce-slot-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lock = dir.join("default.3.lock");
        assert_eq!(slot_state(&lock), SlotState::Free, "no file");
        std::fs::write(&lock, format!("{}\n", std::process::id())).unwrap();
        assert_eq!(slot_state(&lock), SlotState::Alive { pid: std::process::id(), ready: false });
        std::fs::write(&lock, format!("{} ready\n", std::process::id())).unwrap();
        assert_eq!(slot_state(&lock), SlotState::Alive { pid: std::process::id(), ready: true });
        // pid_max is at most 2^22 on Linux: this pid cannot exist
        std::fs::write(&lock, "4194305 ready\n").unwrap();
        assert_eq!(slot_state(&lock), SlotState::Free, "left by a process that has gone");
        std::fs::write(&lock, "").unwrap();
        assert_eq!(slot_state(&lock), SlotState::Free);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn mesh_addresses_and_vdevs() {
        assert_eq!(mesh_ip(0), DEFAULT_SERVER_IP);
        assert_eq!(mesh_ip(1), DEFAULT_CLIENT_IP);
        assert_eq!(mesh_ip(15), Ipv4Addr::new(10, 77, 0, 16));
        assert_eq!(mesh_ip(250), Ipv4Addr::new(10, 77, 1, 1));
        assert_eq!(mesh_mac(0), [0x02, 0x64, 0x72, 0x63, 0x00, 0x01], "the pair's MACs are unchanged");
        assert_eq!(mesh_mac(1), [0x02, 0x64, 0x72, 0x63, 0x00, 0x02]);
        // one link per pair of slots: the lower serves on its own socket, the id is the client's slot
        assert_eq!(mesh_vdev(7, "x", 1, 3), "net_memif3,role=server,id=3,socket=/droce-7-x-1,socket-abstract=yes,bsize=8192,mac=02:64:72:63:00:02");
        assert_eq!(mesh_vdev(7, "x", 3, 1), "net_memif1,role=client,id=3,socket=/droce-7-x-1,socket-abstract=yes,bsize=8192,mac=02:64:72:63:00:04");
        let a = vec!["droce".to_string(), format!("--vdev={}", mesh_vdev(7, "x", 0, 1))];
        assert!(memif_bsize(&a, "net_memif1") >= MEMIF_JUMBO_BSIZE, "path MTU 4096 on every mesh link");
    }

    #[test]
    fn shipped_confs_parse() {
        for (f, rank) in [("ranks.conf", Some(2)), ("real-nic-lib.conf", Some(0))] {
            let path = format!("{}/../conf/{f}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let c = p(&text, rank).unwrap_or_else(|e| panic!("{f}: {e}"));
            if f == "ranks.conf" {
                assert_eq!(c.ip, "10.78.0.3".parse::<IpAddr>().unwrap());
                assert!(eal_has(&c, "--vdev=net_af_packet0,iface=droce2"), "{:?}", c.eal_args);
            } else {
                assert!(!eal_has(&c, "--no-huge") && eal_has(&c, "-a"), "{:?}", c.eal_args);
            }
        }
    }
}
