//! Fault injection — a TEST feature.
//!
//! The host kernel has no netem, so the engine itself can drop, duplicate, reorder and corrupt
//! frames on RX (after the PMD, before demultiplexing) and on TX (after the transport, before
//! the PMD). Every decision comes from a seeded generator: the same seed and the same frame
//! sequence give the same faults. Frames captured with `pcap` are the ones on the wire: TX
//! frames after injection, RX frames before it.
//!
//! Text form (CLI `--faults=`, [`FaultConfig::from_str`]):
//! `rx:drop=0.01,dup=0.01,reorder=0.01,corrupt=0.001;tx:drop=0.01;seed=7`
//! Sections are separated by `;`; `rx:` / `tx:` take `key=probability` pairs (keys `drop`,
//! `dup`, `reorder`, `corrupt`, probabilities in 0..=1), `seed=N` sets the seed (default 1).
//! `both:` applies the same pairs to RX and TX. `frames=N` in a section stops its faults after
//! the direction's first N frames (a clean link from then on: a test that must not lose the
//! last ACK of a teardown that has no retransmission left, e.g. fi_pingpong's); `min_len=N`
//! spares frames shorter than N bytes (ACKs, small messages, CM MADs), so only data frames
//! are hit. Corruption hits RoCE frames only (see
//! [`FaultInjector::decide`]); drop, dup and reorder hit every frame the engine handles
//! (RoCE, ARP, ND on TX; every received frame on RX).

use std::fmt;
use std::str::FromStr;

/// Per-direction probabilities (each frame draws once per kind).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultProbs {
    pub drop: f64,
    pub dup: f64,
    pub reorder: f64,
    pub corrupt: f64,
    /// Faults only among the first this many frames (`frames=N`); `None`: all of them.
    pub frames: Option<u64>,
    /// Faults only on frames of at least this many bytes (`min_len=N`; 0: every frame).
    pub min_len: usize,
}

impl FaultProbs {
    pub fn is_none(&self) -> bool {
        self.drop == 0.0 && self.dup == 0.0 && self.reorder == 0.0 && self.corrupt == 0.0
    }
}

/// Fault injection configuration of a device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig {
    pub seed: u64,
    pub rx: FaultProbs,
    pub tx: FaultProbs,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig { seed: 1, rx: FaultProbs::default(), tx: FaultProbs::default() }
    }
}

/// Why a `--faults` string was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultParseError {
    /// A section that is not `rx:...`, `tx:...`, `both:...` or `seed=N`.
    BadSection(String),
    /// A key other than drop, dup, reorder, corrupt, frames.
    UnknownKey(String),
    /// `key` without `=value`.
    MissingValue(String),
    /// A value that is not a number (or a seed that is not an integer).
    BadNumber { key: String, value: String },
    /// A probability outside 0..=1.
    OutOfRange { key: String, value: f64 },
}

impl fmt::Display for FaultParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultParseError::BadSection(s) => {
                write!(f, "fault section '{s}' is not rx:..., tx:..., both:... or seed=N")
            }
            FaultParseError::UnknownKey(k) => write!(f, "unknown fault '{k}' (expected drop, dup, reorder, corrupt, frames or min_len)"),
            FaultParseError::MissingValue(k) => write!(f, "fault '{k}' needs a value, e.g. {k}=0.01"),
            FaultParseError::BadNumber { key, value } => write!(f, "fault '{key}': '{value}' is not a number"),
            FaultParseError::OutOfRange { key, value } => write!(f, "fault '{key}': probability {value} is not within 0..=1"),
        }
    }
}

impl std::error::Error for FaultParseError {}

fn parse_pairs(body: &str, p: &mut FaultProbs) -> Result<(), FaultParseError> {
    for pair in body.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = pair.split_once('=').ok_or_else(|| FaultParseError::MissingValue(pair.to_string()))?;
        let (k, v) = (k.trim(), v.trim());
        if k == "frames" {
            p.frames = Some(v.parse().map_err(|_| FaultParseError::BadNumber { key: k.to_string(), value: v.to_string() })?);
            continue;
        }
        if k == "min_len" {
            p.min_len = v.parse().map_err(|_| FaultParseError::BadNumber { key: k.to_string(), value: v.to_string() })?;
            continue;
        }
        let slot = match k {
            "drop" | "loss" => &mut p.drop,
            "dup" | "duplicate" => &mut p.dup,
            "reorder" => &mut p.reorder,
            "corrupt" => &mut p.corrupt,
            _ => return Err(FaultParseError::UnknownKey(k.to_string())),
        };
        let x: f64 = v.parse().map_err(|_| FaultParseError::BadNumber { key: k.to_string(), value: v.to_string() })?;
        if !(0.0..=1.0).contains(&x) {
            return Err(FaultParseError::OutOfRange { key: k.to_string(), value: x });
        }
        *slot = x;
    }
    Ok(())
}

impl FromStr for FaultConfig {
    type Err = FaultParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut c = FaultConfig::default();
        for sec in s.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            if let Some(body) = sec.strip_prefix("rx:") {
                parse_pairs(body, &mut c.rx)?;
            } else if let Some(body) = sec.strip_prefix("tx:") {
                parse_pairs(body, &mut c.tx)?;
            } else if let Some(body) = sec.strip_prefix("both:") {
                parse_pairs(body, &mut c.rx)?;
                parse_pairs(body, &mut c.tx)?;
            } else if let Some(v) = sec.strip_prefix("seed=") {
                c.seed = v.trim().parse().map_err(|_| FaultParseError::BadNumber { key: "seed".into(), value: v.trim().to_string() })?;
            } else {
                return Err(FaultParseError::BadSection(sec.to_string()));
            }
        }
        Ok(c)
    }
}

impl fmt::Display for FaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = |p: &FaultProbs| {
            let mut n = p.frames.map(|n| format!(",frames={n}")).unwrap_or_default();
            if p.min_len > 0 {
                n += &format!(",min_len={}", p.min_len);
            }
            format!("drop={},dup={},reorder={},corrupt={}{n}", p.drop, p.dup, p.reorder, p.corrupt)
        };
        write!(f, "rx:{};tx:{};seed={}", p(&self.rx), p(&self.tx), self.seed)
    }
}

/// SplitMix64: small, seedable, good enough for test faults.
#[derive(Debug, Clone)]
pub struct FaultRng(u64);

impl FaultRng {
    pub fn new(seed: u64) -> Self {
        FaultRng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What to do with one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultAction {
    pub drop: bool,
    pub dup: bool,
    /// Hold the frame and let the next one overtake it.
    pub reorder: bool,
    /// Flip bit `bit` of byte `byte` (already reduced modulo the frame length).
    pub corrupt: Option<(usize, u8)>,
}

/// Counts per direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounters {
    pub dropped: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
}

/// One direction's injector.
#[derive(Debug, Clone)]
pub struct FaultInjector {
    probs: FaultProbs,
    /// Frames decided so far (for `FaultProbs::frames`).
    seen: u64,
    rng: FaultRng,
    pub counters: FaultCounters,
}

impl FaultInjector {
    pub fn new(probs: FaultProbs, seed: u64) -> Self {
        FaultInjector { probs, seen: 0, rng: FaultRng::new(seed), counters: FaultCounters::default() }
    }

    pub fn is_active(&self) -> bool {
        !self.probs.is_none()
    }

    /// Decide the fate of a frame of `len` bytes. Always draws the same number of random
    /// values per frame, so decisions for frame N depend only on the seed and N.
    /// `corruptible`: whether the frame may be corrupted. The engine passes `true` for RoCE
    /// frames only: their ICRC catches a flipped bit; ARP and ND have no check of their own
    /// (on a real wire the Ethernet FCS drops a damaged frame), so a flipped ARP sender MAC
    /// would poison the neighbour table, which is not the fault being tested.
    pub fn decide(&mut self, len: usize, corruptible: bool) -> FaultAction {
        self.seen += 1;
        if self.probs.frames.is_some_and(|n| self.seen > n) || len < self.probs.min_len {
            return FaultAction::default();
        }
        let (d, u, r, c) = (self.rng.unit(), self.rng.unit(), self.rng.unit(), self.rng.unit());
        let pos = self.rng.next_u64();
        let mut a = FaultAction::default();
        if d < self.probs.drop {
            a.drop = true;
            self.counters.dropped += 1;
            return a;
        }
        if u < self.probs.dup {
            a.dup = true;
            self.counters.duplicated += 1;
        }
        if r < self.probs.reorder {
            a.reorder = true;
            self.counters.reordered += 1;
        }
        if corruptible && c < self.probs.corrupt && len > 0 {
            a.corrupt = Some(((pos >> 8) as usize % len, (pos & 7) as u8));
            self.counters.corrupted += 1;
        }
        a
    }
}

/// Flip the bit an action names.
pub fn apply_corruption(frame: &mut [u8], a: &FaultAction) {
    if let Some((byte, bit)) = a.corrupt {
        if let Some(b) = frame.get_mut(byte) {
            *b ^= 1 << bit;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_full_and_errors() {
        let c: FaultConfig = "rx:drop=0.01,dup=0.02,reorder=0.03,corrupt=0.001;tx:drop=0.5;seed=42".parse().unwrap();
        assert_eq!(c.seed, 42);
        assert_eq!(c.rx, FaultProbs { drop: 0.01, dup: 0.02, reorder: 0.03, corrupt: 0.001, frames: None, min_len: 0 });
        assert_eq!(c.tx, FaultProbs { drop: 0.5, ..Default::default() });
        let b: FaultConfig = "both:drop=0.1".parse().unwrap();
        assert_eq!(b.rx.drop, 0.1);
        assert_eq!(b.tx.drop, 0.1);
        assert_eq!("".parse::<FaultConfig>().unwrap(), FaultConfig::default());
        assert_eq!("rx:los=1".parse::<FaultConfig>(), Err(FaultParseError::UnknownKey("los".into())));
        assert_eq!("rx:drop".parse::<FaultConfig>(), Err(FaultParseError::MissingValue("drop".into())));
        assert!(matches!("rx:drop=x".parse::<FaultConfig>(), Err(FaultParseError::BadNumber { .. })));
        assert!(matches!("tx:drop=1.5".parse::<FaultConfig>(), Err(FaultParseError::OutOfRange { .. })));
        assert!(matches!("up:drop=0.1".parse::<FaultConfig>(), Err(FaultParseError::BadSection(_))));
        assert!(matches!("seed=-1".parse::<FaultConfig>(), Err(FaultParseError::BadNumber { .. })));
        let e = "rx:drop=2".parse::<FaultConfig>().unwrap_err().to_string();
        assert!(e.contains("not within 0..=1"), "{e}");
        // Display round-trips
        assert_eq!(c.to_string().parse::<FaultConfig>().unwrap(), c);
    }

    #[test]
    fn frames_limits_the_faults_to_the_first_n() {
        let c: FaultConfig = "rx:drop=1,frames=3;seed=2".parse().unwrap();
        assert_eq!(c.rx.frames, Some(3));
        assert_eq!(c.to_string().parse::<FaultConfig>().unwrap(), c, "Display round-trips");
        let mut f = FaultInjector::new(c.rx, c.seed);
        let drops: Vec<bool> = (0..6).map(|_| f.decide(100, true).drop).collect();
        assert_eq!(drops, [true, true, true, false, false, false]);
        assert_eq!(f.counters.dropped, 3);
        assert!(matches!("rx:frames=x".parse::<FaultConfig>(), Err(FaultParseError::BadNumber { .. })));
        let c: FaultConfig = "rx:drop=1,min_len=200".parse().unwrap();
        assert_eq!(c.to_string().parse::<FaultConfig>().unwrap(), c);
        let mut f = FaultInjector::new(c.rx, c.seed);
        assert!(!f.decide(199, true).drop && f.decide(200, true).drop && !f.decide(60, false).drop);
    }

    #[test]
    fn deterministic_and_rates() {
        let p = FaultProbs { drop: 0.1, dup: 0.05, reorder: 0.02, corrupt: 0.01, frames: None, min_len: 0 };
        let mut a = FaultInjector::new(p, 9);
        let mut b = FaultInjector::new(p, 9);
        let va: Vec<_> = (0..10_000).map(|_| a.decide(100, true)).collect();
        let vb: Vec<_> = (0..10_000).map(|_| b.decide(100, true)).collect();
        assert_eq!(va, vb, "same seed, same faults");
        let c = a.counters;
        assert!((800..1200).contains(&c.dropped), "{c:?}");
        assert!((300..650).contains(&c.duplicated), "{c:?}");
        assert!((100..320).contains(&c.reordered), "{c:?}");
        assert!((40..170).contains(&c.corrupted), "{c:?}");
        assert!(va.iter().all(|x| x.corrupt.iter().all(|&(i, bit)| i < 100 && bit < 8)));
        let mut other = FaultInjector::new(p, 10);
        let vo: Vec<_> = (0..1000).map(|_| other.decide(100, true)).collect();
        assert_ne!(vo, va[..1000].to_vec(), "another seed, other faults");
        let mut none = FaultInjector::new(FaultProbs::default(), 1);
        assert!(!none.is_active());
        assert!((0..1000).all(|_| none.decide(60, true) == FaultAction::default()));
    }
}
