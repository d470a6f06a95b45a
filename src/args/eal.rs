//! The EAL half of the command line (before `--`): DPDK 22.11's option table and the value
//! syntax of the common options, checked here so that a malformed argument ends in one line.

use super::options::APP_OPTIONS;
use super::{suggest, UsageError};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Arg {
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

pub(super) const EAL_LONG: &[(&str, Arg)] = &[
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
pub(super) enum EalCheck {
    Ok,
    Help,
}

/// Checks EAL arguments against the 22.11 option table and the value syntax of the common ones.
pub(super) fn check_eal(eal: &[String]) -> Result<EalCheck, UsageError> {
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
                match dir.and_then(droce_dpdk::not_a_directory) {
                    Some(why) => Err(usage_err!(
                        "--vdev '{v}': bad socket directory: {why}; use an existing one, e.g. socket=/tmp/memif.sock"
                    )),
                    None => Ok(()),
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
