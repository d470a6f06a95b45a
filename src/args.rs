//! Command line of droce-pmd, with dpdk-testpmd's conventions:
//! `droce-pmd [--config FILE] [EAL args] -- [app args]`.
//!
//! The parser is written by hand rather than with clap because testpmd's grammar is two
//! getopt grammars glued by `--`: the EAL half must be forwarded to `rte_eal_init` verbatim
//! (including short options with attached values such as `-l0-1` and `-a0000:01:00.0`), and the
//! app half uses getopt_long's `--opt=value` / `--opt value` forms plus `-i` / `-a`, where `-a`
//! means `--auto-start` after `--` but "allow a PCI device" before it. Checking the EAL half here,
//! against the option table of DPDK 22.11, lets every malformed argument end in one clear line
//! instead of EAL's usage dump.

use std::fmt;

use crate::modes;
use crate::switch::BottleneckScope;
use droce_transport::bottleneck::BottleneckConfig;

/// One line saying what is wrong and what would be right; printed as `droce-pmd: error: ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

macro_rules! usage_err {
    ($($t:tt)*) => { UsageError(format!($($t)*)) };
}

/// Port pairing, as testpmd's `--port-topology`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// 0<->1, 2<->3, ...; an odd last port pairs with itself.
    Paired,
    /// 0->1->2->...->0.
    Chained,
    /// Every port sends back on itself.
    Loop,
}

impl Topology {
    pub fn name(self) -> &'static str {
        match self {
            Topology::Paired => "paired",
            Topology::Chained => "chained",
            Topology::Loop => "loop",
        }
    }

    /// Destination port of traffic received on `port` among `nb_ports` ports.
    pub fn peer(self, port: u16, nb_ports: u16) -> u16 {
        match self {
            Topology::Loop => port,
            Topology::Chained => (port + 1) % nb_ports.max(1),
            Topology::Paired => {
                let p = port ^ 1;
                if p >= nb_ports {
                    port
                } else {
                    p
                }
            }
        }
    }
}

/// Application options (the part after `--`).
#[derive(Debug, Clone, PartialEq)]
pub struct AppOptions {
    pub interactive: bool,
    pub auto_start: bool,
    pub tx_first: bool,
    pub stats_period: Option<u64>,
    pub forward_mode: &'static str,
    pub txpkts: u16,
    pub burst: u16,
    pub total_num_mbufs: Option<u32>,
    pub mbuf_size: u16,
    pub nb_cores: Option<u16>,
    pub rxd: u16,
    pub txd: u16,
    pub run_time: Option<f64>,
    pub topology: Topology,
    /// `--eth-peer=N,MAC`: destination MAC used by txonly and mac modes for port N.
    pub eth_peers: Vec<(u16, [u8; 6])>,
    /// `--bottleneck=SPEC`: the switch mode's emulated bottleneck.
    pub bottleneck: Option<BottleneckConfig>,
    /// `--bottleneck-scope`: a queue per egress port, or one for the whole switch.
    pub bottleneck_scope: Option<BottleneckScope>,
    pub help: bool,
}

impl Default for AppOptions {
    fn default() -> Self {
        AppOptions {
            interactive: false,
            auto_start: false,
            tx_first: false,
            stats_period: None,
            forward_mode: "io",
            txpkts: 64,
            burst: 32,
            total_num_mbufs: None,
            mbuf_size: DEFAULT_MBUF_DATA_SIZE,
            nb_cores: None,
            rxd: 1024,
            txd: 1024,
            run_time: None,
            topology: Topology::Paired,
            eth_peers: Vec::new(),
            bottleneck: None,
            bottleneck_scope: None,
            help: false,
        }
    }
}

/// Data room of an mbuf, as testpmd's default `--mbuf-size` (2048 + headroom).
pub const DEFAULT_MBUF_DATA_SIZE: u16 = 2048 + 128;
/// Mbuf headroom reserved by DPDK (RTE_PKTMBUF_HEADROOM in Debian's build).
pub const MBUF_HEADROOM: u16 = 128;
/// Ethernet + IPv4 + UDP headers: the smallest frame txonly can build.
pub const MIN_TXPKTS: u16 = 14 + 20 + 8;
/// testpmd's MAX_PKT_BURST.
pub const MAX_BURST: u16 = 512;

/// A fully split command line.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandLine {
    /// EAL arguments, program name first, forwarded to `rte_eal_init`.
    pub eal: Vec<String>,
    pub app: AppOptions,
    /// Where the arguments came from, for the banner.
    pub source: Source,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Embedded,
    File(String),
    Args,
}

/// What `main` should do.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // made once per process
pub enum Parsed {
    Run(CommandLine),
    /// `-h` / `--help` on either side of `--`.
    Help,
}

/// Parses `args` (without argv\[0\]). No arguments at all selects the embedded default
/// configuration `conf/default.conf`; `--config FILE` as the first argument reads a file of the
/// same format, and the remaining arguments are appended (EAL ones before `--`, app ones after).
pub fn parse(args: &[String]) -> Result<Parsed, UsageError> {
    let (cfg, rest, source): (Option<crate::config::ConfigArgs>, &[String], Source) = if args.is_empty() {
        (Some(crate::config::embedded()?), args, Source::Embedded)
    } else if let Some(path) = args[0].strip_prefix("--config=") {
        (Some(crate::config::load(path)?), &args[1..], Source::File(path.to_string()))
    } else if args[0] == "--config" {
        let path = args.get(1).ok_or_else(|| usage_err!("--config needs a file name, e.g. --config conf/default.conf"))?;
        (Some(crate::config::load(path)?), &args[2..], Source::File(path.clone()))
    } else {
        (None, args, Source::Args)
    };

    let (mut eal_extra, app_extra) = split_dashdash(rest);
    let (mut eal, mut app) = match cfg {
        Some(c) => (c.eal, c.app),
        None => (Vec::new(), Vec::new()),
    };
    eal.append(&mut eal_extra);
    app.extend(app_extra);

    if check_eal(&eal)? == EalCheck::Help {
        return Ok(Parsed::Help);
    }
    let app = parse_app(&app)?;
    if app.help {
        return Ok(Parsed::Help);
    }
    let mut eal_argv = vec!["droce-pmd".to_string()];
    eal_argv.extend(eal);
    Ok(Parsed::Run(CommandLine { eal: eal_argv, app, source }))
}

fn split_dashdash(args: &[String]) -> (Vec<String>, Vec<String>) {
    match args.iter().position(|a| a == "--") {
        Some(i) => (args[..i].to_vec(), args[i + 1..].to_vec()),
        None => (args.to_vec(), Vec::new()),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Arg {
    None,
    Required,
    /// Only in the `--opt=value` form.
    Optional,
}

/// EAL options of DPDK 22.11 (`dpdk-testpmd -h`), with whether they take a value.
const EAL_SHORT: &[(char, Arg)] = &[
    ('a', Arg::Required),
    ('b', Arg::Required),
    ('c', Arg::Required),
    ('d', Arg::Required),
    ('h', Arg::None),
    ('l', Arg::Required),
    ('m', Arg::Required),
    ('n', Arg::Required),
    ('r', Arg::Required),
    ('s', Arg::Required),
    ('S', Arg::Required),
    ('v', Arg::None),
];

const EAL_LONG: &[(&str, Arg)] = &[
    ("allow", Arg::Required),
    ("base-virtaddr", Arg::Required),
    ("block", Arg::Required),
    ("create-uio-dev", Arg::None),
    ("file-prefix", Arg::Required),
    ("force-max-simd-bitwidth", Arg::Required),
    ("help", Arg::None),
    ("huge-dir", Arg::Required),
    ("huge-unlink", Arg::Optional),
    ("huge-worker-stack", Arg::Optional),
    ("in-memory", Arg::None),
    ("iova-mode", Arg::Required),
    ("lcores", Arg::Required),
    ("legacy-mem", Arg::None),
    ("log-level", Arg::Required),
    ("main-lcore", Arg::Required),
    ("match-allocations", Arg::None),
    ("mbuf-pool-ops-name", Arg::Required),
    ("no-hpet", Arg::None),
    ("no-huge", Arg::None),
    ("no-pci", Arg::None),
    ("no-shconf", Arg::None),
    ("no-telemetry", Arg::None),
    ("proc-type", Arg::Required),
    ("single-file-segments", Arg::None),
    ("socket-limit", Arg::Required),
    ("socket-mem", Arg::Required),
    ("syslog", Arg::Required),
    ("telemetry", Arg::None),
    ("trace", Arg::Required),
    ("trace-bufsz", Arg::Required),
    ("trace-dir", Arg::Required),
    ("trace-mode", Arg::Required),
    ("vdev", Arg::Required),
    ("vfio-intr", Arg::Required),
    ("vfio-vf-token", Arg::Required),
    ("vmware-tsc-map", Arg::None),
];

#[derive(Debug, PartialEq, Eq)]
enum EalCheck {
    Ok,
    Help,
}

/// Checks EAL arguments against the 22.11 option table and the value syntax of the common ones.
fn check_eal(eal: &[String]) -> Result<EalCheck, UsageError> {
    let mut help = false;
    let mut i = 0;
    while i < eal.len() {
        let a = &eal[i];
        if let Some(long) = a.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let Some(&(_, kind)) = EAL_LONG.iter().find(|(n, _)| *n == name) else {
                let hint = suggest(name, EAL_LONG.iter().map(|(n, _)| *n));
                let app_hint = if APP_OPTIONS.iter().any(|o| o.long == name) {
                    format!("; '--{name}' is an app option: put it after '--'")
                } else {
                    String::new()
                };
                return Err(usage_err!(
                    "unknown EAL option '--{name}'{hint}{app_hint} (EAL options go before '--', e.g. droce-pmd -l 0-1 --vdev=net_ring0 -- -i)"
                ));
            };
            let value = match (kind, inline) {
                (Arg::None, Some(_)) => return Err(usage_err!("EAL option '--{name}' takes no value (write just --{name})")),
                (Arg::None, None) | (Arg::Optional, None) => None,
                (_, Some(v)) => Some(v.to_string()),
                (Arg::Required, None) => {
                    i += 1;
                    Some(eal.get(i).cloned().ok_or_else(|| usage_err!("EAL option '--{name}' needs a value, e.g. {}", eal_example(name)))?)
                }
            };
            if name == "help" {
                help = true;
            }
            if let Some(v) = value {
                check_eal_value(&format!("--{name}"), name, &v)?;
            }
        } else if let Some(short) = a.strip_prefix('-').filter(|s| !s.is_empty()) {
            let c = short.chars().next().unwrap_or('?');
            let Some(&(_, kind)) = EAL_SHORT.iter().find(|(s, _)| *s == c) else {
                return Err(usage_err!(
                    "unknown EAL option '-{c}' (EAL short options are -a -b -c -d -h -l -m -n -r -s -S -v; app options such as -i go after '--')"
                ));
            };
            let attached = &short[c.len_utf8()..];
            match kind {
                Arg::None => {
                    if !attached.is_empty() {
                        return Err(usage_err!("EAL option '-{c}' takes no value, got '{a}'"));
                    }
                    if c == 'h' {
                        help = true;
                    }
                }
                _ => {
                    let v = if !attached.is_empty() {
                        attached.to_string()
                    } else {
                        i += 1;
                        eal.get(i).cloned().ok_or_else(|| usage_err!("EAL option '-{c}' needs a value, e.g. {}", eal_example(&c.to_string())))?
                    };
                    check_eal_value(&format!("-{c}"), &c.to_string(), &v)?;
                }
            }
        } else {
            return Err(usage_err!(
                "unexpected EAL argument '{a}': EAL arguments are options such as --vdev=net_ring0; app arguments go after '--'"
            ));
        }
        i += 1;
    }
    Ok(if help { EalCheck::Help } else { EalCheck::Ok })
}

fn eal_example(name: &str) -> &'static str {
    match name {
        "l" => "-l 0-1",
        "c" => "-c 0x3",
        "m" => "-m 512",
        "n" => "-n 4",
        "a" | "allow" => "-a 0000:01:00.0",
        "b" | "block" => "-b 0000:01:00.0",
        "vdev" => "--vdev=net_ring0",
        "file-prefix" => "--file-prefix=droce1",
        "proc-type" => "--proc-type=primary",
        "iova-mode" => "--iova-mode=va",
        "log-level" => "--log-level=lib.eal:debug",
        "lcores" => "--lcores=0@0,1@1",
        "main-lcore" => "--main-lcore=0",
        "socket-mem" => "--socket-mem=1024",
        _ => "--<option>=<value>",
    }
}

fn check_eal_value(shown: &str, name: &str, v: &str) -> Result<(), UsageError> {
    if v.is_empty() {
        return Err(usage_err!("EAL option '{shown}' has an empty value, e.g. {}", eal_example(name)));
    }
    match name {
        "l" => parse_corelist(v).map(|_| ()).map_err(|e| usage_err!("EAL option -l '{v}': {e}; write a core list such as -l 0-1 or -l 0,2")),
        "c" => {
            let hex = v.trim_start_matches("0x").trim_start_matches("0X");
            if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) || hex.chars().all(|c| c == '0') {
                Err(usage_err!("EAL option -c '{v}' is not a non-zero hexadecimal core mask, e.g. -c 0x3"))
            } else {
                Ok(())
            }
        }
        "m" | "n" | "r" | "main-lcore" => v
            .parse::<u32>()
            .ok()
            .filter(|&n| n > 0 || name == "main-lcore")
            .map(|_| ())
            .ok_or_else(|| usage_err!("EAL option '{shown}' needs a positive integer, got '{v}', e.g. {}", eal_example(name))),
        "vdev" => {
            let drv = v.split(',').next().unwrap_or("");
            if !drv.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                || !drv.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                Err(usage_err!("--vdev '{v}' is not <driver><id>[,key=val...], e.g. --vdev=net_ring0 or --vdev=net_memif0,role=server"))
            } else if drv.starts_with("net_memif") {
                // memif creates its socket lazily and only logs a failure: check the directory here.
                let sock = v.split(',').find_map(|kv| kv.strip_prefix("socket=")).unwrap_or("/run/memif.sock");
                let dir = std::path::Path::new(sock).parent().filter(|d| !d.as_os_str().is_empty());
                match dir {
                    Some(d) if !d.is_dir() => Err(usage_err!(
                        "--vdev '{v}': the socket directory '{}' does not exist; use an existing one, e.g. socket=/tmp/memif.sock",
                        d.display()
                    )),
                    _ => Ok(()),
                }
            } else {
                Ok(())
            }
        }
        "proc-type" => one_of(shown, v, &["primary", "secondary", "auto"]),
        "iova-mode" => one_of(shown, v, &["pa", "va"]),
        "vfio-intr" => one_of(shown, v, &["legacy", "msi", "msix"]),
        "file-prefix" => {
            if v.contains('/') {
                Err(usage_err!("--file-prefix '{v}' must not contain '/', e.g. --file-prefix=droce1"))
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

fn one_of(shown: &str, v: &str, allowed: &[&str]) -> Result<(), UsageError> {
    if allowed.contains(&v) {
        Ok(())
    } else {
        Err(usage_err!("{shown} '{v}' is not one of {}", allowed.join("|")))
    }
}

/// Parses an EAL core list (`0-1`, `0,2-3`) into core ids.
pub fn parse_corelist(s: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let lo: u32 = lo.trim().parse().map_err(|_| format!("'{part}' is not a core number or range"))?;
        let hi: u32 = hi.trim().parse().map_err(|_| format!("'{part}' is not a core number or range"))?;
        if lo > hi {
            return Err(format!("range '{part}' goes backwards"));
        }
        if hi >= 1024 {
            return Err(format!("core {hi} is beyond any machine"));
        }
        out.extend(lo..=hi);
    }
    Ok(out)
}

/// One application option: `long` name, optional short letter, whether it takes a value.
pub struct AppOption {
    pub long: &'static str,
    pub short: Option<char>,
    pub value: Option<&'static str>,
    pub help: &'static str,
}

/// The app options droce-pmd understands; also the source of `--help`.
pub const APP_OPTIONS: &[AppOption] = &[
    AppOption { long: "interactive", short: Some('i'), value: None, help: "run the interactive prompt" },
    AppOption { long: "auto-start", short: Some('a'), value: None, help: "start forwarding at once (batch mode)" },
    AppOption { long: "tx-first", short: None, value: None, help: "send one burst on every port before forwarding (io/mac/macswap)" },
    AppOption { long: "stats-period", short: None, value: Some("SECS"), help: "print port statistics every SECS seconds (batch mode)" },
    AppOption { long: "forward-mode", short: None, value: Some("MODE"), help: "forwarding mode: io, mac, macswap, rxonly, txonly, switch (default io)" },
    AppOption { long: "txpkts", short: None, value: Some("SIZE"), help: "frame size in bytes built by txonly, 42..mbuf room (default 64)" },
    AppOption { long: "burst", short: None, value: Some("N"), help: "packets per burst, 1..512 (default 32)" },
    AppOption { long: "total-num-mbufs", short: None, value: Some("N"), help: "mbufs in the pool, >= 1024 (default 8192 per port)" },
    AppOption { long: "mbuf-size", short: None, value: Some("BYTES"), help: "mbuf data room incl. 128 B headroom (default 2176)" },
    AppOption { long: "nb-cores", short: None, value: Some("N"), help: "forwarding lcores to use (default: all worker lcores)" },
    AppOption { long: "rxd", short: None, value: Some("N"), help: "RX descriptors per queue (default 1024)" },
    AppOption { long: "txd", short: None, value: Some("N"), help: "TX descriptors per queue (default 1024)" },
    AppOption { long: "run-time", short: None, value: Some("SECS"), help: "batch mode: stop and exit after SECS seconds (decimals allowed)" },
    AppOption { long: "port-topology", short: None, value: Some("T"), help: "paired (0<->1, 2<->3), chained or loop (default paired)" },
    AppOption { long: "eth-peer", short: None, value: Some("N,MAC"), help: "destination MAC for port N in txonly/mac modes" },
    AppOption { long: "bottleneck", short: None, value: Some("SPEC"), help: "switch mode: emulated bottleneck, e.g. rate=2g,queue=256k,kmin=20k,kmax=80k,pmax=0.2,seed=1" },
    AppOption { long: "bottleneck-scope", short: None, value: Some("S"), help: "port (a queue per egress port, default) or switch (one queue for all)" },
    AppOption { long: "help", short: Some('h'), value: None, help: "this help" },
];

/// Parses the app arguments (after `--`).
pub fn parse_app(args: &[String]) -> Result<AppOptions, UsageError> {
    let mut o = AppOptions::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let (opt, inline): (&AppOption, Option<String>) = if let Some(long) = a.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let Some(opt) = APP_OPTIONS.iter().find(|o| o.long == name) else {
                let hint = suggest(name, APP_OPTIONS.iter().map(|o| o.long));
                let eal_hint = if EAL_LONG.iter().any(|(n, _)| *n == name) {
                    format!("; '--{name}' is an EAL option: put it before '--'")
                } else {
                    String::new()
                };
                return Err(usage_err!("unknown app option '--{name}'{hint}{eal_hint} (run droce-pmd -- --help for the list)"));
            };
            (opt, inline)
        } else if let Some(short) = a.strip_prefix('-').filter(|s| s.len() == 1) {
            let c = short.chars().next().unwrap_or('?');
            let Some(opt) = APP_OPTIONS.iter().find(|o| o.short == Some(c)) else {
                return Err(usage_err!("unknown app option '-{c}' (app short options are -i, -a, -h; run droce-pmd -- --help)"));
            };
            (opt, None)
        } else if a.starts_with('-') && a.len() > 2 {
            return Err(usage_err!("unknown app option '{a}': short app options are single letters (-i, -a, -h), long ones look like --forward-mode=txonly"));
        } else {
            return Err(usage_err!("unexpected app argument '{a}': app options look like --forward-mode=txonly (run droce-pmd -- --help)"));
        };
        let value = match (opt.value, inline) {
            (None, Some(_)) => return Err(usage_err!("option '--{}' takes no value (write just --{})", opt.long, opt.long)),
            (None, None) => None,
            (Some(_), Some(v)) => Some(v),
            (Some(meta), None) => {
                i += 1;
                Some(args.get(i).cloned().ok_or_else(|| usage_err!("option '--{}' needs a value: --{}={meta}", opt.long, opt.long))?)
            }
        };
        apply(&mut o, opt, value.as_deref())?;
        i += 1;
    }
    if o.bottleneck.is_some() && o.forward_mode != "switch" {
        return Err(usage_err!(
            "--bottleneck works in the switch mode only (it is the switch's egress queue); add --forward-mode=switch"
        ));
    }
    if o.bottleneck_scope.is_some() && o.bottleneck.is_none() {
        return Err(usage_err!("--bottleneck-scope needs --bottleneck=SPEC, e.g. --bottleneck=rate=2g,queue=256k"));
    }
    if let Some(b) = &o.bottleneck {
        let frame = usize::from(o.mbuf_size.saturating_sub(MBUF_HEADROOM));
        if b.queue_bytes < frame {
            return Err(usage_err!(
                "--bottleneck: queue={} B is less than one frame of up to {frame} B, so such frames would always be dropped; give queue >= {frame}",
                b.queue_bytes
            ));
        }
    }
    if o.txpkts > o.mbuf_size.saturating_sub(MBUF_HEADROOM) {
        return Err(usage_err!(
            "--txpkts={} does not fit in one mbuf of {} data bytes; use --txpkts <= {} or raise --mbuf-size",
            o.txpkts,
            o.mbuf_size - MBUF_HEADROOM,
            o.mbuf_size - MBUF_HEADROOM
        ));
    }
    Ok(o)
}

fn num<T: std::str::FromStr + PartialOrd + fmt::Display + Copy>(
    name: &str,
    v: &str,
    lo: T,
    hi: T,
) -> Result<T, UsageError> {
    match v.parse::<T>() {
        Ok(n) if n >= lo && n <= hi => Ok(n),
        _ => Err(usage_err!("--{name}={v} is not valid: expected an integer in {lo}..={hi}")),
    }
}

fn apply(o: &mut AppOptions, opt: &AppOption, v: Option<&str>) -> Result<(), UsageError> {
    let val = || v.unwrap_or("");
    match opt.long {
        "interactive" => o.interactive = true,
        "auto-start" => o.auto_start = true,
        "tx-first" => o.tx_first = true,
        "help" => o.help = true,
        "stats-period" => o.stats_period = Some(num("stats-period", val(), 1u64, 86_400)?),
        "forward-mode" => {
            o.forward_mode = modes::lookup(val())
                .map(|m| m.name)
                .ok_or_else(|| usage_err!("--forward-mode={} is not a mode; choose one of {}", val(), modes::names().join(", ")))?
        }
        "txpkts" => {
            if val().contains(',') {
                return Err(usage_err!("--txpkts={}: multi-segment frames are not supported; give one size, e.g. --txpkts=64", val()));
            }
            o.txpkts = num("txpkts", val(), MIN_TXPKTS, 9600)?
        }
        "burst" => o.burst = num("burst", val(), 1u16, MAX_BURST)?,
        "total-num-mbufs" => o.total_num_mbufs = Some(num("total-num-mbufs", val(), 1024u32, 16 * 1024 * 1024)?),
        "mbuf-size" => o.mbuf_size = num("mbuf-size", val(), MBUF_HEADROOM + MIN_TXPKTS, u16::MAX)?,
        "nb-cores" => o.nb_cores = Some(num("nb-cores", val(), 1u16, 1024)?),
        "rxd" => o.rxd = num("rxd", val(), 32u16, 16384)?,
        "txd" => o.txd = num("txd", val(), 32u16, 16384)?,
        "run-time" => {
            let t: f64 = val().parse().map_err(|_| usage_err!("--run-time={} is not a number of seconds, e.g. --run-time=5", val()))?;
            if !(t > 0.0 && t <= 86_400.0 * 365.0) {
                return Err(usage_err!("--run-time={} must be a positive number of seconds, e.g. --run-time=5", val()));
            }
            o.run_time = Some(t);
        }
        "port-topology" => {
            o.topology = match val() {
                "paired" => Topology::Paired,
                "chained" => Topology::Chained,
                "loop" => Topology::Loop,
                other => return Err(usage_err!("--port-topology={other} is not one of paired, chained, loop")),
            }
        }
        "eth-peer" => {
            let (p, mac) = val()
                .split_once(',')
                .ok_or_else(|| usage_err!("--eth-peer={} must be N,XX:XX:XX:XX:XX:XX, e.g. --eth-peer=0,02:00:00:00:00:01", val()))?;
            let port = num("eth-peer", p, 0u16, 1023)?;
            let mac = parse_mac(mac).ok_or_else(|| usage_err!("--eth-peer: '{mac}' is not a MAC address like 02:00:00:00:00:01"))?;
            o.eth_peers.retain(|(q, _)| *q != port);
            o.eth_peers.push((port, mac));
        }
        "bottleneck" => {
            o.bottleneck = Some(val().parse::<BottleneckConfig>().map_err(|e| {
                usage_err!("--bottleneck={}: {e}; write e.g. --bottleneck=rate=2g,queue=256k,kmin=20k,kmax=80k,pmax=0.2,seed=1", val())
            })?)
        }
        "bottleneck-scope" => {
            o.bottleneck_scope = Some(match val() {
                "port" => BottleneckScope::Port,
                "switch" => BottleneckScope::Switch,
                other => return Err(usage_err!("--bottleneck-scope={other} is not one of port, switch")),
            })
        }
        other => return Err(usage_err!("option --{other} is listed but not handled (bug)")),
    }
    Ok(())
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in mac.iter_mut() {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// `; did you mean '--x'?` when a known name is within edit distance 2.
fn suggest<'a>(name: &str, known: impl Iterator<Item = &'a str>) -> String {
    known
        .map(|k| (edit_distance(name, k), k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| format!("; did you mean '--{k}'?"))
        .unwrap_or_default()
}

pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The `--help` text.
pub fn usage() -> String {
    let mut s = String::from(
        "Usage: droce-pmd [--config FILE] [EAL options] -- [app options]\n\
         \n\
         With no arguments at all, droce-pmd runs its embedded demo (conf/default.conf):\n\
         two net_ring ports, no hugepages, no NIC, ending by itself.\n\
         --config FILE reads EAL and app arguments from FILE (same format); arguments given\n\
         after it are appended (EAL ones before '--', app ones after).\n\
         \n\
         EAL options (DPDK 22.11), most used:\n\
         \x20 -l CORELIST            lcores, e.g. -l 0-1 (first is the main lcore)\n\
         \x20 -a PCI                 allow a PCI device, e.g. -a 0000:01:00.0\n\
         \x20 --vdev=DRV[,k=v..]     virtual port: net_ring0, net_null0, net_memif0,role=server,socket=/tmp/x.sock,\n\
         \x20                        net_af_packet0,iface=eth0, net_tap0, net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap\n\
         \x20 --no-huge -m 512       run without hugepages on 512 MB of ordinary memory\n\
         \x20 --no-pci --no-shconf   no PCI scan, no shared config files\n\
         \x20 --file-prefix=NAME     unique per process when several run at once\n\
         \n\
         App options (after '--'):\n",
    );
    for o in APP_OPTIONS {
        let mut left = match o.short {
            Some(c) => format!("-{c}, --{}", o.long),
            None => format!("--{}", o.long),
        };
        if let Some(v) = o.value {
            left.push('=');
            left.push_str(v);
        }
        s.push_str(&format!("  {left:<26} {}\n", o.help));
    }
    s.push_str("\nInteractive commands: run with -i and type 'help'.\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn run(s: &str) -> CommandLine {
        match parse(&v(s)).unwrap() {
            Parsed::Run(c) => c,
            Parsed::Help => panic!("help"),
        }
    }

    fn err(s: &str) -> String {
        parse(&v(s)).unwrap_err().0
    }

    #[test]
    fn testpmd_style_line() {
        let c = run("-l 0-1 --no-huge -m 512 --vdev=net_ring0 -- --forward-mode=txonly --txpkts=1500 -a --stats-period 2 --burst=64");
        assert_eq!(c.eal, v("droce-pmd -l 0-1 --no-huge -m 512 --vdev=net_ring0"));
        assert_eq!(c.app.forward_mode, "txonly");
        assert_eq!(c.app.txpkts, 1500);
        assert!(c.app.auto_start);
        assert_eq!(c.app.stats_period, Some(2));
        assert_eq!(c.app.burst, 64);
        assert_eq!(c.source, Source::Args);
    }

    #[test]
    fn attached_short_values() {
        let c = run("-l0 -a0000:01:00.0 -m512 -- -i");
        assert!(c.app.interactive);
        assert_eq!(c.eal[1], "-l0");
    }

    #[test]
    fn dash_a_means_allow_before_and_autostart_after() {
        let c = run("-a 0000:01:00.0 -- -a");
        assert!(c.app.auto_start);
        assert_eq!(&c.eal[1..], &v("-a 0000:01:00.0")[..]);
    }

    #[test]
    fn no_args_is_the_embedded_default() {
        let c = match parse(&[]).unwrap() {
            Parsed::Run(c) => c,
            Parsed::Help => panic!(),
        };
        assert_eq!(c.source, Source::Embedded);
        assert!(c.eal.iter().any(|a| a.starts_with("--vdev=net_ring")));
        assert!(c.eal.iter().any(|a| a == "--no-huge"));
        assert!(c.app.run_time.is_some(), "the demo must end by itself");
        let pfx = c.eal.iter().find(|a| a.starts_with("--file-prefix=")).unwrap();
        assert!(pfx.contains(&std::process::id().to_string()), "{pfx}");
    }

    #[test]
    fn bad_eal_options_are_one_line() {
        for (line, want) in [
            ("--bogus -- -i", "unknown EAL option '--bogus'"),
            ("--no-hug -- -i", "did you mean '--no-huge'"),
            ("--forward-mode=io", "is an app option"),
            ("-l", "needs a value"),
            ("-l 1-0", "goes backwards"),
            ("-l x", "not a core number"),
            ("-m abc", "positive integer"),
            ("--vdev=", "empty value"),
            ("--vdev=net-ring0", "driver"),
            ("--no-huge=1", "takes no value"),
            ("-x", "unknown EAL option '-x'"),
            ("stray", "unexpected EAL argument"),
            ("--proc-type=other", "primary|secondary|auto"),
            ("--vdev=net_memif0,role=server,socket=/nonexistent/x.sock", "socket directory '/nonexistent' does not exist"),
        ] {
            let e = err(line);
            assert!(e.contains(want), "{line:?}: {e}");
            assert!(!e.contains('\n'), "{line:?}: {e}");
        }
    }

    #[test]
    fn bad_app_options_are_one_line() {
        for (line, want) in [
            ("-- --forward-mode=bogus", "choose one of io, mac, macswap, rxonly, txonly"),
            ("-- --forward-mod=io", "did you mean '--forward-mode'"),
            ("-- --txpkts=10", "42..=9600"),
            ("-- --txpkts=3000", "does not fit in one mbuf"),
            ("-- --txpkts=64,64", "multi-segment"),
            ("-- --burst=0", "1..=512"),
            ("-- --burst=x", "1..=512"),
            ("-- --run-time=-1", "positive"),
            ("-- --run-time=abc", "number of seconds"),
            ("-- --stats-period", "needs a value"),
            ("-- -i=1", "unknown app option"),
            ("-- -z", "unknown app option '-z'"),
            ("-- --no-huge", "is an EAL option"),
            ("-- --eth-peer=0,zz", "MAC"),
            ("-- --total-num-mbufs=10", "1024"),
            ("-- --port-topology=ring", "paired, chained, loop"),
            ("-- --forward-mode=switch --bottleneck=rate=0", "rate must be above 0"),
            ("-- --forward-mode=switch --bottleneck=rate=fast", "'fast' is not a rate"),
            ("-- --forward-mode=switch --bottleneck=speed=1g", "unknown bottleneck key 'speed'"),
            ("-- --forward-mode=switch --bottleneck=kmin=90k,kmax=80k", "kmin 92160 is above kmax 81920"),
            ("-- --forward-mode=switch --bottleneck=pmax=2", "pmax 2 is not within 0..=1"),
            ("-- --forward-mode=switch --bottleneck=rate=1g,queue=1k", "less than one frame"),
            ("-- --bottleneck=rate=1g", "works in the switch mode only"),
            ("-- --bottleneck=rate=1g --forward-mode=io", "works in the switch mode only"),
            ("-- --forward-mode=switch --bottleneck-scope=switch", "needs --bottleneck"),
            ("-- --forward-mode=switch --bottleneck=rate=1g --bottleneck-scope=trunk", "port, switch"),
            ("-- stray", "unexpected app argument"),
        ] {
            let e = err(line);
            assert!(e.contains(want), "{line:?}: {e}");
            assert!(!e.contains('\n'), "{line:?}: {e}");
        }
    }

    #[test]
    fn help_either_side() {
        assert_eq!(parse(&v("-h")).unwrap(), Parsed::Help);
        assert_eq!(parse(&v("--no-huge -- --help")).unwrap(), Parsed::Help);
        assert!(usage().contains("--forward-mode=MODE"));
    }

    #[test]
    fn topology_pairs_like_testpmd() {
        assert_eq!(Topology::Paired.peer(0, 2), 1);
        assert_eq!(Topology::Paired.peer(1, 2), 0);
        assert_eq!(Topology::Paired.peer(2, 3), 2);
        assert_eq!(Topology::Paired.peer(0, 1), 0);
        assert_eq!(Topology::Chained.peer(2, 3), 0);
        assert_eq!(Topology::Loop.peer(1, 2), 1);
    }

    #[test]
    fn switch_with_a_bottleneck() {
        let c = run("-- --bottleneck=rate=2g,queue=256k,kmin=20k,kmax=80k,pmax=0.2,seed=1 --forward-mode=switch --bottleneck-scope=switch");
        assert_eq!(c.app.forward_mode, "switch");
        let b = c.app.bottleneck.unwrap();
        assert_eq!((b.rate_bps, b.queue_bytes, b.kmin, b.kmax, b.pmax, b.seed), (2_000_000_000, 256 << 10, 20 << 10, 80 << 10, 0.2, 1));
        assert_eq!(c.app.bottleneck_scope, Some(BottleneckScope::Switch));
        let c = run("-- --forward-mode=switch");
        assert_eq!((c.app.bottleneck, c.app.bottleneck_scope), (None, None));
    }

    #[test]
    fn eth_peer_and_mac() {
        let c = run("-- --eth-peer=1,02:00:00:00:00:0a");
        assert_eq!(c.app.eth_peers, vec![(1, [2, 0, 0, 0, 0, 10])]);
        assert_eq!(parse_mac("1:2:3:4:5"), None);
        assert_eq!(parse_mac("1:2:3:4:5:6:7"), None);
    }
}
