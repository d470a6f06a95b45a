//! Timers as data (quinn-proto `TimerTable`): each QP owns a small table of deadlines; the
//! device keeps a min-heap of wake-up hints `(deadline, qp)` and drops stale hints lazily.

use crate::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Requester: local ACK timeout (IBA 9.7.6.1.3, retry_cnt).
    Retransmit = 0,
    /// Requester: waiting out the peer's RNR NAK timer (9.7.5.2.8, rnr_retry).
    RnrRetry = 1,
    /// Responder: send a coalesced ACK for packets received without AckReq.
    AckCoalesce = 2,
}

impl Timer {
    pub const ALL: [Timer; 3] = [Timer::Retransmit, Timer::RnrRetry, Timer::AckCoalesce];
}

#[derive(Debug, Clone, Default)]
pub struct TimerTable {
    data: [Option<Instant>; 3],
}

impl TimerTable {
    pub fn set(&mut self, t: Timer, at: Instant) {
        self.data[t as usize] = Some(at);
    }
    pub fn get(&self, t: Timer) -> Option<Instant> {
        self.data[t as usize]
    }
    pub fn stop(&mut self, t: Timer) {
        self.data[t as usize] = None;
    }
    pub fn is_set(&self, t: Timer) -> bool {
        self.data[t as usize].is_some()
    }
    pub fn stop_all(&mut self) {
        self.data = [None; 3];
    }
    /// The earliest deadline of the table.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.data.iter().flatten().min().copied()
    }
    /// Stop and return the timers that expired at `now`.
    pub fn expire(&mut self, now: Instant) -> impl Iterator<Item = Timer> {
        let mut fired = [None; 3];
        for t in Timer::ALL {
            if matches!(self.data[t as usize], Some(d) if d <= now) {
                self.data[t as usize] = None;
                fired[t as usize] = Some(t);
            }
        }
        fired.into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let mut t = TimerTable::default();
        assert_eq!(t.next_timeout(), None);
        t.set(Timer::AckCoalesce, Instant(50));
        t.set(Timer::Retransmit, Instant(10));
        assert_eq!(t.next_timeout(), Some(Instant(10)));
        assert_eq!(t.expire(Instant(9)).count(), 0);
        assert_eq!(t.expire(Instant(10)).collect::<Vec<_>>(), vec![Timer::Retransmit]);
        assert_eq!(t.next_timeout(), Some(Instant(50)));
    }
}
