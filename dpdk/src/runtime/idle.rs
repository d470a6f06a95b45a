//! How an application thread that busy-polls droce gives up its CPU when it keeps finding
//! nothing to do (the UCX module's progress, the libfabric provider's CQ reads).
//!
//! Both ends of a connection usually busy-poll on the same few CPUs, and each side's ACKs and
//! replies come only from its own progress: spinning on through a scheduler slice keeps the
//! peer, which has the work, off the CPU. So an idle poller yields. But a thread that only ever
//! spins and yields can be left runnable and unrun for seconds when pollers outnumber CPUs
//! (seen under Linux 6.6+'s EEVDF scheduler: four debug-build MPI ranks on two loaded CPUs, a
//! rank's progress stopped for up to 4.3 s with its scheduler counters frozen, its peers gave
//! it up as dead; a standalone poller on the same load stalled 3.4 s yielding, 0.12 s when it
//! slept every 1 ms). A thread that sleeps is placed again on waking and keeps its share. A
//! sleep costs a wake-up of ~55 us (the kernel's timer slack), which would sit in every short
//! wait if every give-up slept (MPICH 8 B half round trip 1.4 -> 19.7 us), so the poller sleeps
//! only once it has been idle for [`SLEEP_AFTER`]: at most one late wake-up per millisecond
//! of waiting.

use std::time::{Duration, Instant};

/// Continuous idleness after which a give-up is a sleep rather than a yield.
pub const SLEEP_AFTER: Duration = Duration::from_millis(1);
/// The sleep asked for (the kernel's timer slack makes it ~50-60 us).
pub const SLEEP: Duration = Duration::from_micros(1);

/// One poller's current idle spell: call [`give_up`](Self::give_up) where it would give up
/// its CPU, [`reset`](Self::reset) when it found work.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdleSpell {
    /// When the spell was first seen at a give-up (`None`: it has just begun).
    since: Option<Instant>,
}

/// What a give-up does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleAction {
    Yield,
    Sleep,
}

impl IdleSpell {
    /// The poller found work: the next idle spell starts with yields.
    #[inline]
    pub fn reset(&mut self) {
        self.since = None;
    }

    /// What to do at a give-up point at time `now`: yield, or sleep once the spell has lasted
    /// [`SLEEP_AFTER`] since its start or its last sleep.
    pub fn give_up(&mut self, now: Instant) -> IdleAction {
        match self.since {
            Some(t) if now.duration_since(t) >= SLEEP_AFTER => {
                self.since = Some(now + SLEEP);
                IdleAction::Sleep
            }
            Some(_) => IdleAction::Yield,
            None => {
                self.since = Some(now);
                IdleAction::Yield
            }
        }
    }
}

impl IdleAction {
    /// Gives up the CPU (call it without holding any lock the peer's progress needs).
    pub fn act(self) {
        match self {
            IdleAction::Yield => std::thread::yield_now(),
            IdleAction::Sleep => std::thread::sleep(SLEEP),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_poller_yields_and_sleeps_only_once_idle_for_a_millisecond() {
        let t0 = Instant::now();
        let mut s = IdleSpell::default();
        assert_eq!(s.give_up(t0), IdleAction::Yield);
        assert_eq!(s.give_up(t0 + Duration::from_micros(999)), IdleAction::Yield);
        assert_eq!(s.give_up(t0 + SLEEP_AFTER), IdleAction::Sleep);
        // the next sleep is a millisecond later, not at the next give-up
        assert_eq!(s.give_up(t0 + SLEEP_AFTER + Duration::from_micros(5)), IdleAction::Yield);
        assert_eq!(s.give_up(t0 + 2 * SLEEP_AFTER + SLEEP), IdleAction::Sleep);
        // work ends the spell: the next one starts with yields again
        s.reset();
        assert_eq!(s.give_up(t0 + Duration::from_secs(5)), IdleAction::Yield);
    }
}
