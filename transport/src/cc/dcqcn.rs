//! The DCQCN reaction point of one QP (Zhu et al., SIGCOMM 2015, section 3.1, with the
//! fixed-point arithmetic and parameters of ConnectX firmware).
//!
//! - Cut, on a CNP, at most once per `rate_reduce_monitor_period`: Rt = Rc (always on the
//!   first CNP and with `clamp_tgt_rate`, else only if the rate increased since the last
//!   cut), then Rc = Rc * (1 - alpha / 2^rpg_gd), no lower than `rpg_min_dec_fac` % of Rc
//!   nor `rpg_min_rate`. The increase counters restart.
//! - Alpha, in 1/1024 units, is updated once per `dce_tcp_rtt`: alpha = g*alpha/1024 +
//!   (1024 - g) if a CNP arrived in that period, alpha = g*alpha/1024 if not. The periods
//!   are evaluated when the state is next touched (a CNP), not by a 1 us timer: the result
//!   is the same, at no cost while no CNP comes.
//! - Increase, once per `rpg_time_reset` (timer stage T) and once per `rpg_byte_reset` bytes
//!   sent (byte stage BC): fast recovery Rc = (Rt + Rc) / 2 while max(T, BC) <= F
//!   (`rpg_threshold`); hyper increase Rt += `rpg_hai_rate` once both are past F; additive
//!   increase Rt += `rpg_ai_rate` in between, each followed by Rc = (Rt + Rc) / 2 (rounded
//!   up, so that Rc reaches Rt). Rt and Rc never exceed the maximum rate.

use super::{mbps, CcConfig};
use crate::time::Instant;

/// Alpha is a fraction in 1/1024 units.
pub const ALPHA_ONE: u32 = 1024;

/// Beyond this many alpha periods without a CNP, alpha is 0 for any `dce_tcp_g` below 1024
/// (1023/1024 to the 8192th power is below 1/1024): the lazy update stops there.
const MAX_ALPHA_PERIODS: u64 = 8192;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dcqcn {
    /// Current rate Rc, bits per second.
    rc: u64,
    /// Target rate Rt, bits per second.
    rt: u64,
    alpha: u32,
    /// Start of the current alpha period.
    alpha_at: Instant,
    /// A CNP arrived in the current alpha period.
    cnp_in_period: bool,
    last_cut: Instant,
    /// Timer stages T and byte stages BC since the last cut.
    t: u32,
    bc: u32,
    /// Bytes sent since the last byte stage.
    bytes: u64,
    /// Next timer stage.
    increase_at: Instant,
}

/// The rate a cut never goes below: `rpg_min_rate`, at least 1 Mb/s (a rate of 0, which
/// `rpg_min_rate = 0` with `rpg_min_dec_fac = 0` reaches, would hold the QP's next frame
/// for hours: its retries run out and it ends in error), at most the max rate.
fn min_rate_bps(cfg: &CcConfig) -> u64 {
    mbps(cfg.rpg_min_rate.max(1)).min(cfg.max_rate_bps())
}

impl Dcqcn {
    /// The state a QP at the maximum rate enters on its first CNP: alpha starts at
    /// `initial_alpha_value` and the rate is cut (or set to `rate_to_set_on_first_cnp`).
    pub fn first_cnp(cfg: &CcConfig, now: Instant) -> Dcqcn {
        let max = cfg.max_rate_bps();
        let mut d = Dcqcn {
            rc: max,
            rt: max,
            alpha: cfg.initial_alpha_value.min(ALPHA_ONE),
            alpha_at: now,
            cnp_in_period: false,
            last_cut: now,
            t: 0,
            bc: 0,
            bytes: 0,
            increase_at: now,
        };
        if cfg.rate_to_set_on_first_cnp != 0 {
            let r = mbps(cfg.rate_to_set_on_first_cnp).clamp(min_rate_bps(cfg), max);
            d.rc = r;
            d.rt = r;
            d.restart_increase(cfg, now);
        } else {
            d.cut(cfg, now, true);
        }
        d
    }

    /// A QP at the maximum rate that no CNP has cut (`CcConfig::pace`): no increase timer.
    pub fn at_max(cfg: &CcConfig) -> Dcqcn {
        let max = cfg.max_rate_bps();
        Dcqcn {
            rc: max,
            rt: max,
            alpha: cfg.initial_alpha_value.min(ALPHA_ONE),
            alpha_at: Instant(0),
            cnp_in_period: false,
            last_cut: Instant(0),
            t: 0,
            bc: 0,
            bytes: 0,
            increase_at: Instant::NEVER,
        }
    }

    /// Current rate, bits per second.
    pub fn rate_bps(&self) -> u64 {
        self.rc
    }
    /// Target rate, bits per second.
    pub fn target_bps(&self) -> u64 {
        self.rt
    }
    /// Alpha in 1/1024 units, as of the last event (periods since then not yet applied).
    pub fn alpha(&self) -> u32 {
        self.alpha
    }
    /// Timer and byte stages since the last cut.
    pub fn stages(&self) -> (u32, u32) {
        (self.t, self.bc)
    }
    /// When the next timer stage is due.
    pub fn increase_at(&self) -> Instant {
        self.increase_at
    }
    /// Whether the rate is back at the maximum (the QP no longer needs pacing).
    pub fn recovered(&self, cfg: &CcConfig) -> bool {
        let max = cfg.max_rate_bps();
        self.rc >= max && self.rt >= max
    }

    /// A CNP arrived at `now`. Returns whether it cut the rate (false inside the
    /// `rate_reduce_monitor_period` of the previous cut).
    pub fn on_cnp(&mut self, cfg: &CcConfig, now: Instant) -> bool {
        self.update_alpha(cfg, now);
        self.cnp_in_period = true;
        if now < self.last_cut + cfg.rate_reduce_monitor_period {
            return false;
        }
        let clamp = cfg.clamp_tgt_rate || self.t > 0 || self.bc > 0;
        self.cut(cfg, now, clamp);
        true
    }

    /// The rate-increase timer fired at `now` (at or after [`increase_at`](Self::increase_at)).
    pub fn on_timer(&mut self, cfg: &CcConfig, now: Instant) {
        self.t = self.t.saturating_add(1);
        self.increase(cfg);
        let period = cfg.rpg_time_reset.max(crate::time::Duration(1));
        self.increase_at = self.increase_at + period;
        if self.increase_at <= now {
            // A late call (the embedder slept): one stage per call, the next one period on.
            self.increase_at = now + period;
        }
    }

    /// `n` bytes were sent at the current rate.
    pub fn on_bytes(&mut self, cfg: &CcConfig, n: u64) {
        let reset = cfg.rpg_byte_reset.max(1);
        self.bytes = self.bytes.saturating_add(n);
        // A frame is shorter than any sensible byte_reset; the bound keeps a tiny one cheap.
        for _ in 0..16 {
            if self.bytes < reset {
                break;
            }
            self.bytes -= reset;
            self.bc = self.bc.saturating_add(1);
            self.increase(cfg);
        }
    }

    fn cut(&mut self, cfg: &CcConfig, now: Instant, clamp: bool) {
        if clamp {
            self.rt = self.rc;
        }
        let dec = ((self.rc as u128 * self.alpha as u128) >> cfg.rpg_gd.min(64)) as u64;
        let floor = ((self.rc as u128 * cfg.rpg_min_dec_fac.min(100) as u128) / 100) as u64;
        let min = min_rate_bps(cfg);
        self.rc = self.rc.saturating_sub(dec).max(floor).max(min);
        self.last_cut = now;
        self.restart_increase(cfg, now);
    }

    fn restart_increase(&mut self, cfg: &CcConfig, now: Instant) {
        self.t = 0;
        self.bc = 0;
        self.bytes = 0;
        self.increase_at = now + cfg.rpg_time_reset.max(crate::time::Duration(1));
    }

    fn increase(&mut self, cfg: &CcConfig) {
        let f = cfg.rpg_threshold;
        let max = cfg.max_rate_bps();
        if self.t.max(self.bc) <= f {
            // fast recovery: towards the rate before the cut
        } else if self.t.min(self.bc) > f {
            self.rt = self.rt.saturating_add(mbps(cfg.rpg_hai_rate));
        } else {
            self.rt = self.rt.saturating_add(mbps(cfg.rpg_ai_rate));
        }
        self.rt = self.rt.min(max);
        self.rc = (self.rt as u128 + self.rc as u128).div_ceil(2) as u64;
        self.rc = self.rc.min(max);
    }

    /// Apply the alpha periods that ended by `now`.
    fn update_alpha(&mut self, cfg: &CcConfig, now: Instant) {
        let rtt = cfg.dce_tcp_rtt.as_nanos().max(1);
        let periods = now.saturating_duration_since(self.alpha_at).as_nanos() / rtt;
        if periods == 0 {
            return;
        }
        let g = cfg.dce_tcp_g.min(ALPHA_ONE);
        // The first period ending may have seen a CNP; the others did not.
        self.alpha = if self.cnp_in_period { (g * self.alpha) / ALPHA_ONE + (ALPHA_ONE - g) } else { (g * self.alpha) / ALPHA_ONE };
        for _ in 1..periods.min(MAX_ALPHA_PERIODS) {
            if self.alpha == 0 {
                break;
            }
            self.alpha = (g * self.alpha) / ALPHA_ONE;
        }
        if periods >= MAX_ALPHA_PERIODS {
            self.alpha = 0;
        }
        self.cnp_in_period = false;
        self.alpha_at = self.alpha_at + crate::time::Duration(periods * rtt);
    }
}

#[cfg(test)]
#[allow(clippy::manual_div_ceil)] // (a + b + 1) / 2 spelled as computed by hand
mod tests {
    use super::*;
    use crate::time::Duration;

    const G: u64 = 1_000_000_000;

    fn cfg() -> CcConfig {
        CcConfig { line_rate_bps: 10 * G, ..CcConfig::connectx() }
    }

    #[test]
    fn first_cnp_cuts_by_the_initial_alpha() {
        let c = cfg();
        let d = Dcqcn::first_cnp(&c, Instant(0));
        // 10e9 * 1023 / 2048 = 4_995_117_187.5 -> dec 4_995_117_187; Rc = 5_004_882_813.
        assert_eq!(d.rate_bps(), 5_004_882_813);
        assert_eq!(d.target_bps(), 10 * G);
        assert_eq!(d.alpha(), 1023);
        assert_eq!(d.increase_at(), Instant(300_000));
    }

    #[test]
    fn rate_to_set_on_first_cnp_sets_both_rates() {
        let c = CcConfig { rate_to_set_on_first_cnp: 2000, ..cfg() };
        let d = Dcqcn::first_cnp(&c, Instant(0));
        assert_eq!((d.rate_bps(), d.target_bps()), (2 * G, 2 * G));
    }

    #[test]
    fn alpha_rises_with_a_cnp_in_the_period_and_decays_without() {
        let c = cfg();
        let mut d = Dcqcn::first_cnp(&c, Instant(0));
        // CNP inside the monitor period: no cut, but the period [0, 1us) saw a CNP.
        assert!(!d.on_cnp(&c, Instant(500)));
        assert_eq!(d.rate_bps(), 5_004_882_813);
        // At 10 us: period 1 had the CNP: 1019*1023/1024 + 5 = 1018 + 5 = 1023 (integer
        // division: 1042437/1024 = 1018); then 9 periods without: 1023 -> 1018 -> 1013 ->
        // 1008 -> 1003 -> 998 -> 993 -> 988 -> 983 -> 978.
        assert!(d.on_cnp(&c, Instant(10_000)));
        assert_eq!(d.alpha(), 978);
        // The cut used alpha 978 and kept Rt at 10 G (no increase since the last cut).
        // dec = 5_004_882_813 * 978 >> 11 = 2_390_027_046 (floor of 2390027046.44)
        assert_eq!(d.rate_bps(), 5_004_882_813 - 2_390_027_046);
        assert_eq!(d.target_bps(), 10 * G);
        // A long quiet spell takes alpha to 0, in bounded work.
        d.on_cnp(&c, Instant(10_000 + 1_000_000_000));
        assert_eq!(d.alpha(), 0);
    }

    #[test]
    fn monitor_period_allows_one_cut() {
        let c = cfg();
        let mut d = Dcqcn::first_cnp(&c, Instant(0));
        let r = d.rate_bps();
        assert!(!d.on_cnp(&c, Instant(3_999)));
        assert_eq!(d.rate_bps(), r);
        assert!(d.on_cnp(&c, Instant(4_000)));
        assert!(d.rate_bps() < r);
    }

    #[test]
    fn recovery_stages_fast_then_additive_then_hyper() {
        // threshold 2: stages 1 and 2 fast recovery, then additive, hyper once both
        // counters are past 2.
        let c = CcConfig { rpg_threshold: 2, rpg_byte_reset: 10_000, ..cfg() };
        let mut d = Dcqcn::first_cnp(&c, Instant(0));
        let rc0 = d.rate_bps(); // 5_004_882_813
        let rt = 10 * G;
        // T=1: fast recovery.
        d.on_timer(&c, Instant(300_000));
        let rc1 = (rt + rc0 + 1) / 2;
        assert_eq!((d.rate_bps(), d.target_bps()), (rc1, rt));
        assert_eq!(d.increase_at(), Instant(600_000));
        // T=2: fast recovery.
        d.on_timer(&c, Instant(600_000));
        let rc2 = (rt + rc1 + 1) / 2;
        assert_eq!(d.rate_bps(), rc2);
        // T=3, BC=0: additive: Rt += 5 Mb/s, but Rt is clamped at the line rate.
        d.on_timer(&c, Instant(900_000));
        let rc3 = (rt + rc2 + 1) / 2;
        assert_eq!((d.rate_bps(), d.target_bps()), (rc3, rt));
        assert_eq!(d.stages(), (3, 0));
    }

    #[test]
    fn additive_and_hyper_increase_raise_the_target() {
        // Start at 8 G on a 10 G line (rate_to_set_on_first_cnp) so that Rt can grow.
        let c = CcConfig { rpg_threshold: 1, rpg_byte_reset: 1000, rate_to_set_on_first_cnp: 8000, ..cfg() };
        let mut d = Dcqcn::first_cnp(&c, Instant(0));
        assert_eq!((d.rate_bps(), d.target_bps()), (8 * G, 8 * G));
        // BC=1: max(T, BC) = 1 <= F: fast recovery, Rc = (8G + 8G + 1) / 2 = 8G.
        d.on_bytes(&c, 1000);
        assert_eq!((d.rate_bps(), d.target_bps(), d.stages()), (8 * G, 8 * G, (0, 1)));
        // BC=2, T=0: past F on one counter only: additive, Rt = 8G + 5M.
        d.on_bytes(&c, 1000);
        let rt1 = 8 * G + 5_000_000;
        let rc1 = (rt1 + 8 * G + 1) / 2;
        assert_eq!((d.rate_bps(), d.target_bps()), (rc1, rt1));
        // T=1, BC=2: min(T, BC) = 1 is not past F: additive again.
        d.on_timer(&c, Instant(300_000));
        let rt2 = rt1 + 5_000_000;
        let rc2 = (rt2 + rc1 + 1) / 2;
        assert_eq!((d.rate_bps(), d.target_bps()), (rc2, rt2));
        // T=2, BC=2: both past F: hyper, Rt += 50 Mb/s.
        d.on_timer(&c, Instant(600_000));
        let rt3 = rt2 + 50_000_000;
        assert_eq!((d.rate_bps(), d.target_bps()), ((rt3 + rc2 + 1) / 2, rt3));
        // 999 more bytes are not a stage; one more is.
        d.on_bytes(&c, 999);
        assert_eq!(d.stages(), (2, 2));
        d.on_bytes(&c, 1);
        assert_eq!(d.stages(), (2, 3));
    }

    #[test]
    fn cut_respects_min_rate_and_min_dec_fac() {
        // alpha 1024 with rpg_gd 10 would take the whole rate: min_dec_fac keeps 50 %.
        let c = CcConfig { rpg_gd: 10, initial_alpha_value: 1024, ..cfg() };
        let d = Dcqcn::first_cnp(&c, Instant(0));
        assert_eq!(d.rate_bps(), 5 * G);
        // min_dec_fac 0 and a line rate of 1.5 Mb/s: the cut stops at rpg_min_rate (1 Mb/s).
        let c = CcConfig { rpg_gd: 10, initial_alpha_value: 1024, rpg_min_dec_fac: 0, line_rate_bps: 1_500_000, ..cfg() };
        let d = Dcqcn::first_cnp(&c, Instant(0));
        assert_eq!(d.rate_bps(), 1_000_000);
        // rpg_min_rate 0 with nothing else in the way would cut to 0 (a pacer at 1 bit/s):
        // the floor stays 1 Mb/s, after a first cut as after many.
        let c = CcConfig { rpg_gd: 0, rpg_min_dec_fac: 0, rpg_min_rate: 0, ..cfg() };
        let mut d = Dcqcn::first_cnp(&c, Instant(0));
        assert_eq!(d.rate_bps(), 1_000_000);
        for i in 1..20 {
            d.on_cnp(&c, Instant(i * 10_000));
        }
        assert_eq!(d.rate_bps(), 1_000_000);
        let c = CcConfig { rpg_min_rate: 0, rpg_min_dec_fac: 0, initial_alpha_value: 1024, rpg_gd: 10, ..cfg() };
        assert_eq!(Dcqcn::first_cnp(&c, Instant(0)).rate_bps(), 1_000_000);
    }

    #[test]
    fn target_rate_clamps_only_after_an_increase_unless_clamp_tgt_rate() {
        let c = cfg();
        let mut d = Dcqcn::first_cnp(&c, Instant(0));
        d.on_cnp(&c, Instant(10_000));
        assert_eq!(d.target_bps(), 10 * G, "back-to-back cuts keep Rt");
        d.on_timer(&c, d.increase_at());
        let rc = d.rate_bps();
        let t = d.increase_at();
        d.on_cnp(&c, t);
        assert_eq!(d.target_bps(), rc, "a cut after an increase stage sets Rt = Rc");
        let c = CcConfig { clamp_tgt_rate: true, ..cfg() };
        let mut d = Dcqcn::first_cnp(&c, Instant(0));
        let rc = d.rate_bps();
        d.on_cnp(&c, Instant(10_000));
        assert_eq!(d.target_bps(), rc);
    }

    #[test]
    fn late_timer_call_moves_the_next_stage_past_now() {
        let c = cfg();
        let mut d = Dcqcn::first_cnp(&c, Instant(0));
        d.on_timer(&c, Instant(5_000_000));
        assert_eq!(d.increase_at(), Instant(5_000_000) + Duration::from_micros(300));
        assert_eq!(d.stages(), (1, 0));
    }
}
