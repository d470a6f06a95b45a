//! The app half of the command line (after `--`): droce-pmd's options, their values, and the
//! `--help` text built from the same table.

use std::fmt;

use super::eal::EAL_LONG;
use super::{suggest, AppOptions, Topology, UsageError, MBUF_HEADROOM};
use crate::pkt::{MAX_BURST, MIN_TXPKTS};
use crate::modes;
use crate::switch::BottleneckScope;
use droce_transport::bottleneck::BottleneckConfig;

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
