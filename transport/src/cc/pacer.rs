//! Pacing a QP to its DCQCN rate: a token bucket kept as a virtual clock (the generic cell
//! rate algorithm, equivalent to a bucket of `burst` bytes refilled at the rate). `tat` is
//! when the bucket would be full again; a frame may leave while `tat` is at most one
//! bucket's worth of time ahead of now, and pushes `tat` on by its own transmission time.
//! The check is made before a frame is built, so a frame may overdraw the bucket by less
//! than one frame, paid back before the next.

use crate::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pacer {
    tat: Instant,
}

/// Time `bytes` take at `rate_bps`, rounded up.
pub fn tx_time(bytes: u64, rate_bps: u64) -> Duration {
    let r = rate_bps.max(1) as u128;
    Duration((((bytes as u128) * 8 * 1_000_000_000).div_ceil(r)).min(u64::MAX as u128) as u64)
}

impl Pacer {
    /// A pacer with an empty bucket at `now` (no burst credit: the QP was just cut).
    pub fn new(now: Instant) -> Pacer {
        Pacer { tat: now }
    }

    /// Whether a frame may leave at `now`.
    #[inline]
    pub fn ready(&self, now: Instant, rate_bps: u64, burst: u32) -> bool {
        self.tat <= now + tx_time(burst as u64, rate_bps)
    }

    /// When a frame may leave next.
    pub fn ready_at(&self, rate_bps: u64, burst: u32) -> Instant {
        Instant(self.tat.0.saturating_sub(tx_time(burst as u64, rate_bps).0))
    }

    /// A frame of `len` bytes left at `now`.
    pub fn on_sent(&mut self, now: Instant, len: usize, rate_bps: u64) {
        self.tat = self.tat.max(now) + tx_time(len as u64, rate_bps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transmission_time() {
        assert_eq!(tx_time(1250, 10_000_000_000), Duration(1_000));
        assert_eq!(tx_time(1, 3), Duration(2_666_666_667));
    }

    #[test]
    fn a_burst_leaves_then_the_rate_holds() {
        // 1 Gb/s, 4000-byte bucket, 1000-byte frames: 8 us per frame, 32 us of burst.
        let (rate, burst) = (1_000_000_000, 4000);
        let mut p = Pacer::new(Instant(0));
        let mut sent = 0;
        while p.ready(Instant(0), rate, burst) && sent < 100 {
            p.on_sent(Instant(0), 1000, rate);
            sent += 1;
        }
        // tat 0, 8, 16, 24, 32 us are all <= 0 + 32 us: five frames (the fifth overdraws).
        assert_eq!(sent, 5);
        assert_eq!(p.ready_at(rate, burst), Instant(8_000));
        assert!(!p.ready(Instant(7_999), rate, burst));
        assert!(p.ready(Instant(8_000), rate, burst));
        // Sustained: over 1 ms at most 1 ms * rate + one bucket + one frame leave.
        let mut now = Instant(8_000);
        let mut n = 0u64;
        while now < Instant(1_008_000) {
            if p.ready(now, rate, burst) {
                p.on_sent(now, 1000, rate);
                n += 1;
            } else {
                now = p.ready_at(rate, burst);
            }
        }
        assert_eq!(n, 125, "1 ms at 1 Gb/s is 125 frames of 1000 bytes");
    }

    #[test]
    fn idle_time_does_not_build_more_than_one_bucket() {
        let (rate, burst) = (1_000_000_000, 2000);
        let mut p = Pacer::new(Instant(0));
        let now = Instant(1_000_000_000);
        let mut sent = 0;
        while p.ready(now, rate, burst) && sent < 100 {
            p.on_sent(now, 1000, rate);
            sent += 1;
        }
        assert_eq!(sent, 3);
    }
}
