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


use crate::switch::BottleneckScope;
use droce_transport::bottleneck::BottleneckConfig;


macro_rules! usage_err {
    ($($t:tt)*) => { UsageError(format!($($t)*)) };
}

mod eal;
pub mod error;
mod options;

pub use error::UsageError;

pub use options::usage;
use eal::{check_eal, EalCheck};
use options::parse_app;

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

#[cfg(test)]
mod tests {
    use super::options::parse_mac;
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
            ("--vdev=net_memif0,role=server,socket=/nonexistent/x.sock", "bad socket directory: the directory /nonexistent does not exist"),
        ] {
            let e = err(line);
            assert!(e.contains(want), "{line:?}: {e}");
            assert!(!e.contains('\n'), "{line:?}: {e}");
        }
        // a regular file on the way is named as what to change, not as a missing directory
        let f = std::env::temp_dir().join(format!("droce-args-afile-{}", std::process::id()));
        std::fs::write(&f, b"").unwrap();
        let e = err(&format!("--vdev=net_memif0,role=server,socket={}/s.sock", f.display()));
        std::fs::remove_file(&f).unwrap();
        assert!(e.contains(&format!("bad socket directory: {} is not a directory", f.display())), "{e}");
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