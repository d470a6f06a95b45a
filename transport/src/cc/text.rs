//! The text form of [`CcConfig`], for config files, environment variables and the CLI:
//! `on` (the defaults), `off` ([`CcConfig::off`]), `connectx` ([`CcConfig::connectx`], the
//! NIC firmware's DCQCN timers), or comma-separated `key=value` pairs applied on top of the
//! defaults, optionally after one of those words:
//!
//! `off,ecn=on` (mark ECT but neither notify nor react), `line_rate=25g,rpg_ai_rate=10`,
//! `cnp_interval=20us`.
//!
//! Keys: the [`CcConfig`] field names (`ecn`, `np`, `dcqcn`, `cnp_interval`, `cnp_dscp`,
//! `rpg_*`, `dce_tcp_g`, `dce_tcp_rtt`, `rate_reduce_monitor_period`, `initial_alpha_value`,
//! `rate_to_set_on_first_cnp`, `clamp_tgt_rate`, `pace`), plus `line_rate` (bits/s, decimal
//! `k`/`m`/`g` suffixes) and `burst` (the pacer's depth in bytes, binary `k`/`m`). Switches take
//! `on`/`off` (or `yes`/`no`, `1`/`0`); durations take `ns`, `us` or `ms` (a bare number is
//! microseconds, as the NIC parameters are given); rates in Mb/s are plain numbers as in
//! mlx5's `cc_params`.

use super::CcConfig;
use crate::bottleneck::parse_scaled;
use crate::time::Duration;
use std::fmt;
use std::str::FromStr;

/// Why a congestion-control text was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CcParseError {
    /// A key that is not a [`CcConfig`] parameter.
    UnknownKey(String),
    /// `key` without `=value`.
    MissingValue(String),
    /// A value the key cannot take; `want` says what it takes.
    BadValue { key: String, value: String, want: &'static str },
    /// A mode word (`on`, `off`, `connectx`) after keys: it would reset them.
    ModeNotFirst(String),
}

impl fmt::Display for CcParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CcParseError::UnknownKey(k) => write!(f, "unknown congestion-control key '{k}' (known: on, off, connectx, {})", KEYS.join(", ")),
            CcParseError::MissingValue(k) => write!(f, "congestion-control key '{k}' needs a value, e.g. {k}=..."),
            CcParseError::BadValue { key, value, want } => write!(f, "congestion-control key '{key}': '{value}' is not {want}"),
            CcParseError::ModeNotFirst(m) => {
                write!(f, "congestion-control mode '{m}' after keys would reset them: put it first, e.g. {m},line_rate=10g")
            }
        }
    }
}

impl std::error::Error for CcParseError {}

const KEYS: [&str; 23] = [
    "ecn",
    "np",
    "dcqcn",
    "cnp_interval",
    "cnp_dscp",
    "line_rate",
    "pace",
    "burst",
    "rpg_time_reset",
    "rpg_byte_reset",
    "rpg_threshold",
    "rpg_ai_rate",
    "rpg_hai_rate",
    "rpg_gd",
    "rpg_min_dec_fac",
    "rpg_min_rate",
    "rpg_max_rate",
    "dce_tcp_g",
    "dce_tcp_rtt",
    "rate_reduce_monitor_period",
    "initial_alpha_value",
    "rate_to_set_on_first_cnp",
    "clamp_tgt_rate",
];

fn switch(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "on" | "yes" | "1" | "true" => Some(true),
        "off" | "no" | "0" | "false" => Some(false),
        _ => None,
    }
}

fn duration(v: &str) -> Option<Duration> {
    let (num, mul) = if let Some(n) = v.strip_suffix("ns") {
        (n, 1)
    } else if let Some(n) = v.strip_suffix("us") {
        (n, 1_000)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1_000_000)
    } else {
        (v, 1_000)
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul).map(Duration::from_nanos)
}

impl FromStr for CcConfig {
    type Err = CcParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut c = CcConfig::default();
        let mut keys_seen = false;
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                let word = item.to_ascii_lowercase();
                if keys_seen && matches!(word.as_str(), "on" | "off" | "connectx") {
                    return Err(CcParseError::ModeNotFirst(item.into()));
                }
                match word.as_str() {
                    "on" => c = CcConfig::default(),
                    "off" => c = CcConfig::off(),
                    "connectx" => c = CcConfig::connectx(),
                    k if KEYS.contains(&k) => return Err(CcParseError::MissingValue(item.into())),
                    _ => return Err(CcParseError::UnknownKey(item.into())),
                }
                continue;
            };
            keys_seen = true;
            let (key, value) = (key.trim(), value.trim());
            let bad = |want: &'static str| CcParseError::BadValue { key: key.into(), value: value.into(), want };
            let on = || switch(value).ok_or_else(|| bad("on or off"));
            let time = || duration(value).ok_or_else(|| bad("a duration (e.g. 50us, 2ms)"));
            let int = || value.parse::<u64>().map_err(|_| bad("a whole number"));
            let small = |max: u64| value.parse::<u64>().ok().filter(|v| *v <= max).map(|v| v as u32).ok_or_else(|| bad("a whole number in range"));
            match key {
                "ecn" => c.ecn = on()?,
                "np" => c.np = on()?,
                "dcqcn" => c.dcqcn = on()?,
                "clamp_tgt_rate" => c.clamp_tgt_rate = on()?,
                "pace" => c.pace = on()?,
                "cnp_interval" => c.cnp_interval = time()?,
                "rpg_time_reset" => c.rpg_time_reset = time()?,
                "dce_tcp_rtt" => c.dce_tcp_rtt = time()?,
                "rate_reduce_monitor_period" => c.rate_reduce_monitor_period = time()?,
                "cnp_dscp" => c.cnp_dscp = small(63)? as u8,
                "line_rate" => {
                    c.line_rate_bps = parse_scaled(value, 1000, Some(1_000_000_000)).filter(|r| *r > 0).ok_or_else(|| bad("a rate in bits/s above 0 (e.g. 10g)"))?
                }
                "burst" => {
                    c.pacer_burst_bytes = parse_scaled(value, 1024, None)
                        .and_then(|b| u32::try_from(b).ok())
                        .filter(|b| *b > 0)
                        .ok_or_else(|| bad("a size in bytes above 0 (e.g. 16k)"))?
                }
                "rpg_byte_reset" => c.rpg_byte_reset = int()?,
                "rpg_ai_rate" => c.rpg_ai_rate = int()?,
                "rpg_hai_rate" => c.rpg_hai_rate = int()?,
                "rpg_min_rate" => {
                    c.rpg_min_rate = Some(int()?).filter(|r| *r > 0).ok_or_else(|| bad("a rate in Mb/s above 0 (at 0 a QP's rate could fall to nothing)"))?
                }
                "rpg_max_rate" => c.rpg_max_rate = int()?,
                "rate_to_set_on_first_cnp" => c.rate_to_set_on_first_cnp = int()?,
                "rpg_threshold" => c.rpg_threshold = small(u32::MAX as u64)?,
                "rpg_gd" => c.rpg_gd = small(20)?,
                "rpg_min_dec_fac" => c.rpg_min_dec_fac = small(100)?,
                "dce_tcp_g" => c.dce_tcp_g = small(1024)?,
                "initial_alpha_value" => c.initial_alpha_value = small(1024)?,
                _ => return Err(CcParseError::UnknownKey(key.into())),
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_defaults() {
        assert_eq!("on".parse::<CcConfig>().unwrap(), CcConfig::default());
        assert_eq!("".parse::<CcConfig>().unwrap(), CcConfig::default());
        assert_eq!("off".parse::<CcConfig>().unwrap(), CcConfig::off());
        assert_eq!("connectx".parse::<CcConfig>().unwrap(), CcConfig::connectx());
        let c: CcConfig = "dce_tcp_rtt=1,rpg_time_reset=300,rpg_byte_reset=32767,dce_tcp_g=1019".parse().unwrap();
        assert_eq!(c, CcConfig::connectx(), "the doc's recipe for the firmware defaults");
        let c: CcConfig = "off,ecn=on".parse().unwrap();
        assert!(c.ecn && !c.np && !c.dcqcn);
        let c: CcConfig = "dcqcn=no".parse().unwrap();
        assert!(c.ecn && c.np && !c.dcqcn);
        assert!(!CcConfig::default().pace && !CcConfig::connectx().pace);
        let c: CcConfig = "line_rate=1g,pace=on".parse().unwrap();
        assert!(c.pace && c.line_rate_bps == 1_000_000_000);
    }

    #[test]
    fn every_kind_of_value() {
        let c: CcConfig = "line_rate=25g,burst=32k,cnp_interval=20us,rpg_time_reset=1ms,dce_tcp_rtt=500ns,\
                           rate_reduce_monitor_period=8,rpg_ai_rate=10,rpg_hai_rate=100,rpg_gd=9,rpg_min_dec_fac=25,\
                           rpg_min_rate=2,rpg_max_rate=20000,dce_tcp_g=1000,initial_alpha_value=512,\
                           rate_to_set_on_first_cnp=1000,clamp_tgt_rate=on,cnp_dscp=46,rpg_threshold=5,rpg_byte_reset=65536"
            .parse()
            .unwrap();
        assert_eq!(c.line_rate_bps, 25_000_000_000);
        assert_eq!(c.pacer_burst_bytes, 32 * 1024);
        assert_eq!(c.cnp_interval, Duration::from_micros(20));
        assert_eq!(c.rpg_time_reset, Duration::from_millis(1));
        assert_eq!(c.dce_tcp_rtt, Duration::from_nanos(500));
        assert_eq!(c.rate_reduce_monitor_period, Duration::from_micros(8));
        assert_eq!((c.rpg_ai_rate, c.rpg_hai_rate, c.rpg_gd, c.rpg_min_dec_fac), (10, 100, 9, 25));
        assert_eq!((c.rpg_min_rate, c.rpg_max_rate, c.dce_tcp_g, c.initial_alpha_value), (2, 20000, 1000, 512));
        assert_eq!((c.rate_to_set_on_first_cnp, c.clamp_tgt_rate, c.cnp_dscp), (1000, true, 46));
        assert_eq!((c.rpg_threshold, c.rpg_byte_reset), (5, 65536));
    }

    #[test]
    fn errors_name_the_key_and_what_it_takes() {
        let e = |s: &str| s.parse::<CcConfig>().unwrap_err().to_string();
        assert!(e("bogus=1").contains("unknown congestion-control key 'bogus'"), "{}", e("bogus=1"));
        assert!(e("maybe").contains("unknown congestion-control key 'maybe'"));
        assert!(e("ecn").contains("needs a value"));
        assert!(e("ecn=perhaps").contains("'perhaps' is not on or off"));
        assert!(e("line_rate=0").contains("a rate in bits/s above 0"));
        assert!(e("cnp_interval=5s").contains("a duration"));
        assert!(e("rpg_min_dec_fac=101").contains("in range"));
        assert!(e("cnp_dscp=64").contains("in range"));
        assert!(e("rpg_ai_rate=-1").contains("a whole number"));
        assert!(e("rpg_min_rate=0").contains("a rate in Mb/s above 0"), "{}", e("rpg_min_rate=0"));
        // a mode word resets every key: after keys it would silently discard them
        assert!(e("line_rate=1g,pace=on,on").contains("mode 'on' after keys would reset them"), "{}", e("line_rate=1g,pace=on,on"));
        assert!(e("ecn=off,connectx").contains("put it first"));
        assert!("connectx,ecn=off".parse::<CcConfig>().is_ok());
    }
}
