//! Congestion control: ECN, the DCQCN notification point and reaction point (Zhu et al.,
//! "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015), per QP.
//!
//! - ECN: RoCE frames leave with ECT(0) in the IP header ([`CcConfig::ecn`]); a switch marks
//!   them CE instead of dropping when its queue grows.
//! - Notification point ([`notify`]): a CE-marked frame for a QP makes the QP send a CNP
//!   (BTH opcode 0x81) to the frame's source QP, at most one per [`CcConfig::cnp_interval`].
//! - Reaction point ([`dcqcn`]): a CNP cuts the QP's rate, which then recovers by timer and
//!   byte counter; [`pacer`] holds the QP's data frames to that rate.
//!
//! A QP that never received a CNP (or recovered to the line rate) has no reaction-point
//! state at all: sending costs it one branch. Parameters carry the names and defaults of
//! NVIDIA ConnectX firmware (mlx5 `cc_params`); `docs/dcqcn.md` lists them with units.

pub mod dcqcn;
pub mod notify;
pub mod pacer;
mod text;

pub use text::CcParseError;

pub use dcqcn::Dcqcn;
pub use pacer::Pacer;

use crate::time::{Duration, Instant};

/// ECN codepoints of the IP header's two low TOS / traffic-class bits (RFC 3168).
pub mod ecn {
    /// Not ECN-capable transport.
    pub const NOT_ECT: u8 = 0b00;
    /// ECN-capable transport, codepoint 0: what DCQCN senders (and droce) set.
    pub const ECT0: u8 = 0b10;
    /// Congestion experienced: set by a switch on an ECT frame instead of dropping it.
    pub const CE: u8 = 0b11;
}

/// Congestion control of a device. [`CcConfig::default`]: ECN, CNPs and DCQCN on with the
/// ConnectX defaults; [`CcConfig::off`]: none of it (frames as rxe sends them, no pacing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CcConfig {
    /// Send RoCE frames (not QP1's MADs) with ECT(0), keeping the DSCP of the address vector.
    pub ecn: bool,
    /// Notification point: answer CE-marked frames with CNPs.
    pub np: bool,
    /// Reaction point: cut and recover a QP's rate on CNPs, and pace its data to it.
    pub dcqcn: bool,
    /// NP: at most one CNP per QP per this interval (the paper's 50 us; mlx5
    /// `min_time_between_cnps`).
    pub cnp_interval: Duration,
    /// NP: DSCP of the CNPs (mlx5 `cnp_dscp`, 48); their ECN field is always Not-ECT.
    pub cnp_dscp: u8,
    /// The rate a QP starts at and recovers to, bits per second: the port's speed. A ceiling
    /// for DCQCN, not a pacer: a QP that no CNP has cut is not paced and sends as fast as the
    /// port takes its frames (a NIC's wire holds it to this rate; memif, ring or veth do not).
    /// `pace` holds every QP to the maximum rate.
    pub line_rate_bps: u64,
    /// Pace every QP's data to the maximum rate ([`CcConfig::max_rate_bps`]) even while no
    /// CNP has cut it: the line rate becomes a cap, as the wire makes it on a NIC. Off by
    /// default (an uncongested QP runs unpaced).
    pub pace: bool,
    /// Bytes a paced QP may send back to back at the line rate (the token bucket's depth).
    pub pacer_burst_bytes: u32,

    /// RP: time between rate-increase events without a CNP (mlx5 `rpg_time_reset`, 300 us).
    pub rpg_time_reset: Duration,
    /// RP: bytes sent between rate-increase events (mlx5 `rpg_byte_reset`, 32767 bytes).
    pub rpg_byte_reset: u64,
    /// RP: increase stages (timer or byte counter) spent in fast recovery before additive
    /// increase; hyper increase when both counters are past it (mlx5 `rpg_threshold`, 1).
    pub rpg_threshold: u32,
    /// RP: additive increase of the target rate per stage, Mb/s (mlx5 `rpg_ai_rate`, 5).
    pub rpg_ai_rate: u64,
    /// RP: hyper increase of the target rate per stage, Mb/s (mlx5 `rpg_hai_rate`, 50).
    pub rpg_hai_rate: u64,
    /// RP: log2 of the divisor of alpha in a cut, Rc *= 1 - alpha / 2^rpg_gd with alpha in
    /// 1/1024 units (mlx5 `rpg_gd`, 11: the paper's Rc *= 1 - alpha/2).
    pub rpg_gd: u32,
    /// RP: a cut leaves at least this percentage of the current rate (mlx5
    /// `rpg_min_dec_fac`, 50).
    pub rpg_min_dec_fac: u32,
    /// RP: the rate never goes below this, Mb/s (mlx5 `rpg_min_rate`, 1); 0 counts as 1, since a
    /// rate of 0 would hold the QP's next frame until its retries ran out.
    pub rpg_min_rate: u64,
    /// RP: the rate never goes above this, Mb/s; 0 is the line rate (mlx5 `rpg_max_rate`).
    pub rpg_max_rate: u64,
    /// RP: alpha gain in 1/1024 units: per `dce_tcp_rtt`, alpha = g*alpha/1024 + (1024-g)
    /// with a CNP in the period, alpha = g*alpha/1024 without (mlx5 `dce_tcp_g`, 1019).
    pub dce_tcp_g: u32,
    /// RP: alpha update period (mlx5 `dce_tcp_rtt`, 1 us).
    pub dce_tcp_rtt: Duration,
    /// RP: at most one cut per this period (mlx5 `rate_reduce_monitor_period`, 4 us).
    pub rate_reduce_monitor_period: Duration,
    /// RP: alpha at a QP's first CNP, 1/1024 units (mlx5 `initial_alpha_value`, 1023).
    pub initial_alpha_value: u32,
    /// RP: current and target rate after the first CNP, Mb/s; 0 cuts by alpha as any CNP
    /// (mlx5 `rate_to_set_on_first_cnp`, 0).
    pub rate_to_set_on_first_cnp: u64,
    /// RP: every cut sets the target rate to the current one; off (mlx5 default), only a
    /// cut after a rate-increase stage does, so back-to-back cuts keep the rate to recover
    /// to (mlx5 `clamp_tgt_rate`, 0).
    pub clamp_tgt_rate: bool,
}

impl Default for CcConfig {
    /// [`CcConfig::connectx`] with the DCQCN paper's timers: alpha updated and the rate
    /// increased every 55 us, g = 4/1024 (1/256), and the byte counter out of the way (10 MB).
    /// ConnectX's 1 us alpha period suits CNPs at line rate from a NIC; droce's notification
    /// point sends at most one CNP per QP per `cnp_interval` (50 us), and between two of them
    /// a 1 us period decays alpha to about 2 %, so every cut takes about 1 % off the rate. The
    /// incast benchmark (BENCHMARKS.md, "Congestion control") measures both sets.
    fn default() -> Self {
        CcConfig {
            rpg_time_reset: Duration::from_micros(55),
            rpg_byte_reset: 10_000_000,
            dce_tcp_g: 1020,
            dce_tcp_rtt: Duration::from_micros(55),
            ..CcConfig::connectx()
        }
    }
}

impl CcConfig {
    /// The defaults of NVIDIA ConnectX firmware (mlx5 `cc_params`), parameter for parameter
    /// (`cc = dce_tcp_rtt=1,rpg_time_reset=300,rpg_byte_reset=32767,dce_tcp_g=1019` on top of
    /// droce's defaults gives the same).
    pub fn connectx() -> Self {
        CcConfig {
            ecn: true,
            np: true,
            dcqcn: true,
            cnp_interval: Duration::from_micros(50),
            cnp_dscp: 48,
            line_rate_bps: 10_000_000_000,
            pace: false,
            pacer_burst_bytes: 16 * 1024,
            rpg_time_reset: Duration::from_micros(300),
            rpg_byte_reset: 32767,
            rpg_threshold: 1,
            rpg_ai_rate: 5,
            rpg_hai_rate: 50,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate: 1,
            rpg_max_rate: 0,
            dce_tcp_g: 1019,
            dce_tcp_rtt: Duration::from_micros(1),
            rate_reduce_monitor_period: Duration::from_micros(4),
            initial_alpha_value: 1023,
            rate_to_set_on_first_cnp: 0,
            clamp_tgt_rate: false,
        }
    }

    /// No ECT, no CNPs, no reaction to CNPs, no pacing: droce before congestion control,
    /// and what byte-for-byte comparisons with rxe's frames need.
    pub fn off() -> Self {
        CcConfig { ecn: false, np: false, dcqcn: false, ..CcConfig::default() }
    }

    /// The rate a QP recovers to, bits per second.
    pub fn max_rate_bps(&self) -> u64 {
        match self.rpg_max_rate {
            0 => self.line_rate_bps,
            m => mbps(m).min(self.line_rate_bps),
        }
        .max(1)
    }
}

/// Mb/s to bits per second.
pub(crate) const fn mbps(m: u64) -> u64 {
    m.saturating_mul(1_000_000)
}

/// The congestion-control state of one QP.
#[derive(Debug, Default)]
pub(crate) struct QpCc {
    /// Reaction point: present from the first CNP until the rate is back at the maximum.
    pub rp: Option<Box<RateLimit>>,
    /// Notification point.
    pub np: notify::Notifier,
}

/// A QP whose rate is below the maximum: DCQCN state, its pacer, and the pacer's wake-up.
#[derive(Debug)]
pub(crate) struct RateLimit {
    pub dcqcn: Dcqcn,
    pub pacer: Pacer,
    /// The pacer held a frame back: the QP left the transmit round robin until then.
    pub blocked_until: Option<Instant>,
}

/// What fired among a QP's congestion-control deadlines.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CcFired {
    pub increase: bool,
    pub unblock: bool,
}

impl QpCc {
    /// Whether the QP's data frames are paced.
    #[inline]
    pub fn paced(&self) -> bool {
        self.rp.is_some()
    }

    /// Whether the pacer holds the QP's data frames at `now` (false when not paced).
    #[inline]
    pub fn held(&self, cfg: &CcConfig, now: Instant) -> bool {
        match &self.rp {
            None => false,
            Some(r) => !r.pacer.ready(now, r.dcqcn.rate_bps(), cfg.pacer_burst_bytes),
        }
    }

    /// Whether the pacer took the QP out of the round robin (it has only data to send and
    /// no tokens until its wake-up).
    #[inline]
    pub fn blocked(&self) -> bool {
        self.rp.as_ref().is_some_and(|r| r.blocked_until.is_some())
    }

    /// The pacer held the QP at `now`: leave the round robin until tokens are back.
    pub fn block(&mut self, cfg: &CcConfig, now: Instant) {
        if let Some(r) = self.rp.as_mut() {
            let at = r.pacer.ready_at(r.dcqcn.rate_bps(), cfg.pacer_burst_bytes).max(now + Duration(1));
            r.blocked_until = Some(at);
        }
    }

    /// A paced frame of `len` bytes left at `now`: take its tokens and count its bytes
    /// toward the byte-counter increase. Returns true when the QP is back at the maximum
    /// rate (its reaction-point state is gone).
    pub fn on_sent(&mut self, cfg: &CcConfig, now: Instant, len: usize) -> bool {
        if self.rp.is_none() && cfg.pace {
            // a capped QP's first paced frame: its bucket starts full, at the maximum rate
            self.rp = Some(Box::new(RateLimit { dcqcn: Dcqcn::at_max(cfg), pacer: Pacer::new(Instant(0)), blocked_until: None }));
        }
        let Some(r) = self.rp.as_mut() else { return false };
        r.pacer.on_sent(now, len, r.dcqcn.rate_bps());
        r.dcqcn.on_bytes(cfg, len as u64);
        self.release_if_recovered(cfg)
    }

    /// A CNP arrived at `now`; returns whether the rate was cut.
    pub fn on_cnp(&mut self, cfg: &CcConfig, now: Instant) -> bool {
        match self.rp.as_mut() {
            // a capped QP at the maximum rate: its first CNP as for an unpaced QP
            Some(r) if r.dcqcn.recovered(cfg) => {
                r.dcqcn = Dcqcn::first_cnp(cfg, now);
                true
            }
            Some(r) => r.dcqcn.on_cnp(cfg, now),
            None => {
                let dcqcn = Dcqcn::first_cnp(cfg, now);
                self.rp = Some(Box::new(RateLimit { dcqcn, pacer: Pacer::new(now), blocked_until: None }));
                true
            }
        }
    }

    /// The earliest congestion-control deadline of the QP.
    pub fn next_timeout(&self) -> Option<Instant> {
        let r = self.rp.as_ref()?;
        let increase = Some(r.dcqcn.increase_at()).filter(|t| *t != Instant::NEVER);
        match (r.blocked_until, increase) {
            (Some(b), Some(i)) => Some(b.min(i)),
            (b, i) => b.or(i),
        }
    }

    /// Run the deadlines due at `now`.
    pub fn expire(&mut self, cfg: &CcConfig, now: Instant) -> CcFired {
        let mut fired = CcFired::default();
        let Some(r) = self.rp.as_mut() else { return fired };
        if r.blocked_until.is_some_and(|b| b <= now) {
            r.blocked_until = None;
            fired.unblock = true;
        }
        if r.dcqcn.increase_at() <= now {
            r.dcqcn.on_timer(cfg, now);
            fired.increase = true;
            if self.release_if_recovered(cfg) {
                fired.unblock = true;
            }
        }
        fired
    }

    fn release_if_recovered(&mut self, cfg: &CcConfig) -> bool {
        match self.rp.as_mut() {
            Some(r) if r.dcqcn.recovered(cfg) && r.dcqcn.increase_at() != Instant::NEVER => {
                if cfg.pace {
                    // stays paced at the maximum rate, with no increase timer
                    r.dcqcn = Dcqcn::at_max(cfg);
                } else {
                    self.rp = None;
                }
                true
            }
            _ => false,
        }
    }

    /// The QP's current rate, bits per second.
    pub fn rate_bps(&self, cfg: &CcConfig) -> u64 {
        self.rp.as_ref().map_or(cfg.max_rate_bps(), |r| r.dcqcn.rate_bps())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_turns_everything_off_and_keeps_the_parameters() {
        let off = CcConfig::off();
        assert!(!off.ecn && !off.np && !off.dcqcn);
        assert_eq!(off.rpg_time_reset, CcConfig::default().rpg_time_reset);
    }

    #[test]
    fn max_rate_is_the_line_rate_unless_capped_below_it() {
        let mut c = CcConfig { line_rate_bps: 10_000_000_000, ..CcConfig::default() };
        assert_eq!(c.max_rate_bps(), 10_000_000_000);
        c.rpg_max_rate = 4000;
        assert_eq!(c.max_rate_bps(), 4_000_000_000);
        c.rpg_max_rate = 40_000;
        assert_eq!(c.max_rate_bps(), 10_000_000_000);
    }

    #[test]
    fn a_qp_without_cnps_has_no_state_and_no_deadline() {
        let cfg = CcConfig::default();
        let mut q = QpCc::default();
        assert!(!q.paced() && !q.held(&cfg, Instant(0)) && !q.blocked());
        assert_eq!(q.next_timeout(), None);
        assert!(!q.on_sent(&cfg, Instant(0), 1500));
        assert_eq!(q.rate_bps(&cfg), cfg.line_rate_bps);
        assert!(q.on_cnp(&cfg, Instant(1000)));
        assert!(q.paced());
        assert_eq!(q.next_timeout(), Some(Instant(1000) + cfg.rpg_time_reset));
    }

    #[test]
    fn recovery_to_the_line_rate_drops_the_state() {
        let cfg = CcConfig { rpg_ai_rate: 10_000, rpg_hai_rate: 10_000, ..CcConfig::default() };
        let mut q = QpCc::default();
        q.on_cnp(&cfg, Instant(0));
        let mut t = Instant(0);
        for _ in 0..100 {
            let Some(d) = q.next_timeout() else { break };
            t = d;
            q.expire(&cfg, t);
        }
        assert!(!q.paced(), "still limited at {t:?}: {:?}", q.rp);
        assert_eq!(q.rate_bps(&cfg), cfg.line_rate_bps);
        assert_eq!(q.next_timeout(), None);
    }
}
