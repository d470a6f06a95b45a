//! What the runtime brings up: [`RuntimeConfig`] from the environment (`DROCE_*`) or a conf
//! file, rank templating, and the one-line errors of a failed bring-up.

use super::zeroconf::default_link;
use super::*;
use droce_transport::cc::CcConfig;
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

/// What [`Runtime::open`] brings up.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Full EAL argv including the program name ("droce").
    pub eal_args: Vec<String>,
    /// Port device name (e.g. "net_memif0"); `None`: port number [`RuntimeConfig::port_index`].
    pub port: Option<String>,
    /// The port when no name is given (0: the first port EAL found).
    pub port_index: usize,
    /// This process's RoCE address (its GID, IPv4-mapped or IPv6).
    pub ip: IpAddr,
    /// The other end of a point-to-point link (what a loopback destination means).
    pub peer: Option<IpAddr>,
    /// Static neighbour entries.
    pub neighbours: Vec<(IpAddr, [u8; 6])>,
    /// Ethernet MTU (a 4096 path MTU needs ≥ 4200); `None`: 9000 on ring ports and memif
    /// ports with `bsize` ≥ 4224, the port's elsewhere. On a memif port [`Runtime::open`]
    /// lowers it (with a warning) to the largest path MTU whose frames fit one buffer.
    pub eth_mtu: Option<u16>,
    pub progress: Progress,
    /// RC ACKs wait for the next poll and leave in one burst with the application's reply,
    /// just ahead of it (conf key `hold-acks`,
    /// env `DROCE_HOLD_ACKS`; default yes): see [`RoceConfig::hold_acks`]. [`global`] backs
    /// manual progress with the ACK watchdog thread, so an application that stops polling
    /// still receives and acknowledges within [`ACK_WATCHDOG_TICK`] x 2.
    pub hold_acks: bool,
    pub faults: Option<FaultConfig>,
    /// Congestion control (conf key `cc`, env `DROCE_CC`, CLI `--cc`; text form in
    /// `droce_transport::cc`): ECN marking, CNPs and DCQCN, on by default. Its `line_rate_bps`
    /// is the port's reported speed unless the text names a `line_rate`
    /// ([`RuntimeConfig::cc_line_rate_given`]).
    pub cc: CcConfig,
    /// The `cc` text gave `line_rate=`: keep it instead of the port's speed.
    pub cc_line_rate_given: bool,
    /// Offer selective repeat to droce peers (conf key `selective-repeat`, env
    /// `DROCE_SELECTIVE_REPEAT`; default yes). The frontends that connect RC QPs between droce
    /// peers (the UCX transport, the libfabric provider) put the offer in what they exchange
    /// and set `QpAttr::selective_repeat` only when both ends offer it
    /// (docs/selective-repeat.md); `no` keeps their QPs on go-back-N, for A/B runs.
    pub selective_repeat: bool,
    pub pcap: Option<PathBuf>,
    pub rank: Option<u32>,
    /// Mbufs in the pool (conf key `mbufs`, default [`DEFAULT_MBUFS`]).
    pub mbufs: u32,
    /// Where this config came from, for messages: "DROCE_CONF=/x.conf rank 3", ...
    pub source: String,
    /// Set for the zero-config default: this process's end of the memif pair.
    pub link: Option<DefaultLink>,
    /// With no `eth_mtu`, take 9000 where frames never meet a kernel or a switch (ring ports,
    /// memif ports whose buffers hold a jumbo frame). Default yes; the CLI, whose `--mtu`
    /// decides, says no.
    pub auto_jumbo: bool,
    /// droce lives inside someone else's program (a library under MPI, fabtests): EAL's log
    /// goes to (a copy of) stderr, its usage text is kept off stdout, and the calling thread's
    /// CPU affinity is restored after EAL pinned it to the main lcore. Default yes; the CLI
    /// says no (its thread stays on its `-l` lcore, and it captures EAL's output itself to
    /// explain a failed start). See [`start_eal`].
    pub embedded: bool,
    /// Wait this long at open for the port's link to come up, and fail if it does not (the
    /// CLI: its tests start right after). `None` (default): only a memif client waits.
    pub link_wait: Option<Duration>,
}

/// Why the host could not be brought up. `Display` is one line saying what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeError {
    /// The environment or the conf file.
    Config(String),
    /// rte_eal_init (or a second init in one process).
    Eal(String),
    /// Port lookup, configure, start.
    Port(String),
    /// Mempool, RoceDevice, CM agent, progress thread.
    Device(String),
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::Config(m) => write!(f, "droce config: {m}"),
            RuntimeError::Eal(m) => write!(f, "droce EAL: {m}"),
            RuntimeError::Port(m) => write!(f, "droce port: {m}"),
            RuntimeError::Device(m) => write!(f, "droce device: {m}"),
        }
    }
}

impl std::error::Error for RuntimeError {}

fn cfg_err(m: impl Into<String>) -> RuntimeError {
    RuntimeError::Config(m.into())
}

// ------------------------------------------------------------------------------ conf parsing

/// Replaces `{rank}`, `{rank+N}`, `{pid}` in `v`.
pub(super) fn template(v: &str, rank: Option<u32>, pid: u32) -> Result<String, String> {
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

pub(super) fn parse_mac(s: &str) -> Option<[u8; 6]> {
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

pub(super) fn yes_no(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "yes" | "true" | "on" | "1" => Some(true),
        "no" | "false" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// A congestion-control text (`droce_transport::cc`), and whether it names the line rate.
pub fn parse_cc(v: &str) -> Result<(CcConfig, bool), String> {
    let cc = v.parse::<CcConfig>().map_err(|e| e.to_string())?;
    Ok((cc, v.split(',').any(|i| i.trim().starts_with("line_rate"))))
}

pub(super) fn parse_progress(v: &str) -> Option<Progress> {
    match v.to_ascii_lowercase().as_str() {
        "manual" => Some(Progress::Manual),
        "thread" | "auto" => Some(Progress::Thread),
        _ => None,
    }
}

pub(super) const KEYS: &str = "vdev, allow, port, ip, peer, neighbour, mtu, progress, hold-acks, selective-repeat, hugepages, memory, mbufs, lcore, log-level, faults, cc, pcap, eal";

/// Distinguishes the `--file-prefix` of successive EAL attempts in one process.
pub(super) static PREFIX_SEQ: AtomicU32 = AtomicU32::new(0);

impl RuntimeConfig {
    /// Reads the configuration from the environment (see the module docs).
    pub fn from_env() -> Result<RuntimeConfig, RuntimeError> {
        RuntimeConfig::read_env(false)
    }

    /// Like [`RuntimeConfig::from_env`], but takes no zero-config role: when this process has
    /// none yet, it reports the role it would get now (the locks are probed and released). For
    /// answers that must not commit the process (listing, fi_getinfo before any fabric).
    pub fn peek_env() -> Result<RuntimeConfig, RuntimeError> {
        RuntimeConfig::read_env(true)
    }

    fn read_env(peek: bool) -> Result<RuntimeConfig, RuntimeError> {
        let rank = rank_from_env()?;
        let mut cfg = match std::env::var("DROCE_CONF").ok().filter(|p| !p.trim().is_empty()) {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|e| cfg_err(format!("DROCE_CONF={path}: cannot read the file: {e}")))?;
                let mut c = RuntimeConfig::parse(&text, rank).map_err(|e| match e {
                    RuntimeError::Config(m) => cfg_err(format!("DROCE_CONF={path}: {m}")),
                    e => e,
                })?;
                c.source = match rank {
                    Some(r) => format!("DROCE_CONF={path} rank {r}"),
                    None => format!("DROCE_CONF={path}"),
                };
                c
            }
            None => {
                let (link, text) = default_link(peek).map_err(cfg_err)?;
                let mut c = RuntimeConfig::parse(&text, rank)?;
                let (slot, ip) = (link.slot, mesh_ip(link.slot));
                c.source = format!("embedded default (memif mesh slot {slot}: {ip}, link '{}', up to {MESH_MAX} processes)", link.name);
                c.link = Some(link);
                c
            }
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
        if let Ok(v) = std::env::var("DROCE_SELECTIVE_REPEAT") {
            if !v.trim().is_empty() {
                cfg.selective_repeat = yes_no(v.trim()).ok_or_else(|| cfg_err(format!("DROCE_SELECTIVE_REPEAT='{v}': want 1 or 0 (yes or no)")))?;
            }
        }
        if let Ok(v) = std::env::var("DROCE_FAULTS") {
            if !v.trim().is_empty() {
                cfg.faults = Some(v.trim().parse().map_err(|e| cfg_err(format!("DROCE_FAULTS='{v}': {e}")))?);
            }
        }
        if let Ok(v) = std::env::var("DROCE_CC") {
            if !v.trim().is_empty() {
                (cfg.cc, cfg.cc_line_rate_given) = parse_cc(v.trim()).map_err(|e| cfg_err(format!("DROCE_CC='{v}': {e}")))?;
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

    /// Parses conf file text (format in the module docs); `rank` fills `{rank}`.
    pub fn parse(text: &str, rank: Option<u32>) -> Result<RuntimeConfig, RuntimeError> {
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
        let mut selective_repeat = true;
        let mut cc = None;
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
                "port" | "ip" | "peer" | "mtu" | "progress" | "hold-acks" | "selective-repeat" | "hugepages" | "memory" | "lcore" | "log-level" | "faults" | "cc" | "pcap" | "mbufs"
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
                "selective-repeat" => selective_repeat = yes_no(&value).ok_or_else(|| at(format!("'{value}': want yes or no")))?,
                "hugepages" => huge = yes_no(&value).ok_or_else(|| at(format!("'{value}': want yes or no")))?,
                "memory" => {
                    memory = value.parse().ok().filter(|m| *m >= 64).ok_or_else(|| at(format!("'{value}': want a size in MB (≥ 64)")))?
                }
                "lcore" => lcore = Some(value.parse::<u32>().map_err(|_| at(format!("'{value}' is not a CPU number")))?),
                "log-level" => log_level = value,
                "faults" => faults = Some(value.parse::<FaultConfig>().map_err(|e| at(e.to_string()))?),
                "cc" => cc = Some(parse_cc(&value).map_err(at)?),
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
        let mut c = RuntimeConfig::new(eal, ip);
        c.port = port;
        c.peer = peer;
        c.neighbours = neighbours;
        c.eth_mtu = mtu;
        c.progress = progress;
        c.hold_acks = hold_acks;
        c.selective_repeat = selective_repeat;
        c.faults = faults;
        if let Some((cc, given)) = cc {
            (c.cc, c.cc_line_rate_given) = (cc, given);
        }
        c.pcap = pcap;
        c.rank = rank;
        c.mbufs = mbufs;
        Ok(c)
    }

    /// The defaults around the two things every runtime needs: EAL's arguments (program name
    /// first) and this process's RoCE address. The first port, manual progress, ACKs held,
    /// [`DEFAULT_MBUFS`], library stdio, jumbo frames where they fit.
    pub fn new(eal_args: Vec<String>, ip: IpAddr) -> RuntimeConfig {
        RuntimeConfig {
            eal_args,
            port: None,
            port_index: 0,
            ip,
            peer: None,
            neighbours: Vec::new(),
            eth_mtu: None,
            progress: Progress::Manual,
            hold_acks: true,
            faults: None,
            cc: CcConfig::default(),
            cc_line_rate_given: false,
            selective_repeat: true,
            pcap: None,
            rank: None,
            mbufs: DEFAULT_MBUFS,
            source: "conf text".into(),
            link: None,
            auto_jumbo: true,
            embedded: true,
            link_wait: None,
        }
    }
}

/// The rank from the first of [`RANK_VARS`] that is set.
pub fn rank_from_env() -> Result<Option<u32>, RuntimeError> {
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

