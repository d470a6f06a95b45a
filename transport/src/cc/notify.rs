//! The notification point: a QP that receives a CE-marked frame sends a CNP to the frame's
//! source QP, at most one per `cnp_interval` (what ConnectX's NP does per QP). The CNP is
//! queued here and leaves ahead of the QP's other frames in the next `poll_transmit`.

use crate::time::{Duration, Instant};
use crate::types::{Gid, Qpn};

/// Where a CNP goes: the source of the CE-marked frame (its source QP, IP and MAC) and the
/// local GID it was sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CnpTarget {
    pub dest_qp: Qpn,
    pub sgid: Gid,
    pub dgid: Gid,
    pub dmac: [u8; 6],
}

#[derive(Debug, Default)]
pub(crate) struct Notifier {
    last: Option<Instant>,
    pub pending: Option<CnpTarget>,
}

impl Notifier {
    /// A CE-marked frame from `target` arrived at `now`: returns whether a CNP was queued
    /// (false inside the interval of the last one).
    pub fn on_ce(&mut self, now: Instant, interval: Duration, target: CnpTarget) -> bool {
        if self.last.is_some_and(|l| now < l + interval) {
            return false;
        }
        self.last = Some(now);
        self.pending = Some(target);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(q: u32) -> CnpTarget {
        CnpTarget { dest_qp: Qpn::new(q), sgid: Gid::from_ipv4([10, 0, 0, 1].into()), dgid: Gid::from_ipv4([10, 0, 0, 2].into()), dmac: [2, 0, 0, 0, 0, 2] }
    }

    #[test]
    fn one_cnp_per_interval() {
        let mut n = Notifier::default();
        let iv = Duration::from_micros(50);
        assert!(n.on_ce(Instant(1_000), iv, target(0x11)));
        for t in [1_000, 20_000, 50_999] {
            assert!(!n.on_ce(Instant(t), iv, target(0x11)), "at {t}");
        }
        assert_eq!(n.pending.take(), Some(target(0x11)));
        assert!(n.on_ce(Instant(51_000), iv, target(0x12)));
        assert_eq!(n.pending, Some(target(0x12)));
    }
}
