//! The neighbour table: IP → MAC entries (learned with a lifetime, or static) and the frames
//! waiting per unresolved destination, with their request retry timers.

use crate::time::{Duration, Instant};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// Timing and size limits of neighbour resolution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NeighConfig {
    /// Time between two ARP requests / solicitations for one destination (ns).
    pub retry_ns: u64,
    /// Requests sent before the held frames are dropped (counted as unresolved).
    pub max_tries: u32,
    /// Lifetime of a learned entry (ns); static entries never expire.
    pub ttl_ns: u64,
    /// Frames held per unresolved destination; more are dropped (counted).
    pub max_held: usize,
    /// Destinations resolved at once; frames to more are dropped (counted).
    pub max_pending: usize,
}

impl Default for NeighConfig {
    fn default() -> Self {
        NeighConfig { retry_ns: 200_000_000, max_tries: 5, ttl_ns: 300_000_000_000, max_held: 256, max_pending: 64 }
    }
}

impl NeighConfig {
    fn retry(&self) -> Duration {
        Duration(self.retry_ns)
    }
    fn ttl(&self) -> Duration {
        Duration(self.ttl_ns)
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    mac: [u8; 6],
    /// `None`: static.
    expires: Option<Instant>,
}

#[derive(Debug)]
struct Pending<T> {
    held: VecDeque<T>,
    tries: u32,
    next_try: Instant,
}

/// What [`NeighTable::hold`] did with a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum HoldResult<T> {
    /// Held; send a request / solicitation now (first frame for this destination).
    HeldSendRequest,
    /// Held behind an outstanding request.
    Held,
    /// The queue for this destination (or the pending table) is full: the frame is given back.
    Full(T),
}

/// The neighbour table with the frames waiting for resolution (`T`: an mbuf in the engine,
/// a `Vec<u8>` in the simulator).
#[derive(Debug)]
pub struct NeighTable<T> {
    cfg: NeighConfig,
    entries: HashMap<IpAddr, Entry>,
    pending: HashMap<IpAddr, Pending<T>>,
    /// The last entry looked up: most traffic goes to one peer, so this skips the hash.
    last: Option<(IpAddr, Entry)>,
}

impl<T> NeighTable<T> {
    pub fn new(cfg: NeighConfig) -> Self {
        NeighTable { cfg, entries: HashMap::new(), pending: HashMap::new(), last: None }
    }

    pub fn config(&self) -> &NeighConfig {
        &self.cfg
    }

    /// A static entry (from the configuration): never expires, never replaced by learning.
    pub fn add_static(&mut self, ip: IpAddr, mac: [u8; 6]) {
        self.last = None;
        self.entries.insert(ip, Entry { mac, expires: None });
    }

    /// The MAC of `ip` if known and fresh at `now`; an expired entry is removed.
    #[inline]
    pub fn lookup(&mut self, ip: IpAddr, now: Instant) -> Option<[u8; 6]> {
        let e = match self.last {
            Some((lip, e)) if lip == ip => e,
            _ => *self.entries.get(&ip)?,
        };
        match e.expires {
            Some(t) if t <= now => {
                self.entries.remove(&ip);
                self.last = None;
                None
            }
            _ => {
                self.last = Some((ip, e));
                Some(e.mac)
            }
        }
    }

    /// Whether a request for `ip` is outstanding.
    pub fn is_pending(&self, ip: IpAddr) -> bool {
        self.pending.contains_key(&ip)
    }

    /// Whether `ip` is in the table (fresh or not).
    pub fn knows(&self, ip: IpAddr) -> bool {
        self.entries.contains_key(&ip)
    }

    /// Learn `ip` → `mac`. Static entries win. Returns the frames that were waiting for it,
    /// in order.
    pub fn learn(&mut self, ip: IpAddr, mac: [u8; 6], now: Instant) -> Vec<T> {
        self.last = None;
        match self.entries.get_mut(&ip) {
            Some(e) if e.expires.is_none() => {}
            _ => {
                self.entries.insert(ip, Entry { mac, expires: Some(now + self.cfg.ttl()) });
            }
        }
        self.pending.remove(&ip).map(|p| p.held.into_iter().collect()).unwrap_or_default()
    }

    /// Hold a frame for an unresolved `ip`.
    pub fn hold(&mut self, ip: IpAddr, frame: T, now: Instant) -> HoldResult<T> {
        if let Some(p) = self.pending.get_mut(&ip) {
            if p.held.len() >= self.cfg.max_held {
                return HoldResult::Full(frame);
            }
            p.held.push_back(frame);
            return HoldResult::Held;
        }
        if self.pending.len() >= self.cfg.max_pending {
            return HoldResult::Full(frame);
        }
        let mut held = VecDeque::new();
        held.push_back(frame);
        self.pending.insert(ip, Pending { held, tries: 1, next_try: now + self.cfg.retry() });
        HoldResult::HeldSendRequest
    }

    /// Start resolving `ip` without a frame to hold (an address handle made ahead of its
    /// sends). True when a request is to be sent now: `ip` is neither known and fresh nor
    /// already pending, and the pending table has room.
    pub fn start_request(&mut self, ip: IpAddr, now: Instant) -> bool {
        if self.lookup(ip, now).is_some() || self.pending.contains_key(&ip) || self.pending.len() >= self.cfg.max_pending {
            return false;
        }
        self.pending.insert(ip, Pending { held: VecDeque::new(), tries: 1, next_try: now + self.cfg.retry() });
        true
    }

    /// Earliest retry deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.next_try).min()
    }

    /// Run the retry timers: returns the destinations to send another request to, and the
    /// frames of destinations that gave up after `max_tries` requests (to be dropped).
    pub fn on_timer(&mut self, now: Instant) -> (Vec<IpAddr>, Vec<T>) {
        let mut retry = Vec::new();
        let mut give_up = Vec::new();
        for (ip, p) in self.pending.iter_mut() {
            if p.next_try > now {
                continue;
            }
            if p.tries >= self.cfg.max_tries {
                give_up.push(*ip);
            } else {
                p.tries += 1;
                p.next_try = now + self.cfg.retry();
                retry.push(*ip);
            }
        }
        let mut dropped = Vec::new();
        for ip in give_up {
            if let Some(p) = self.pending.remove(&ip) {
                dropped.extend(p.held);
            }
        }
        (retry, dropped)
    }

    /// `(ip, mac, is_static)` of every entry, sorted, for display.
    pub fn entries(&self) -> Vec<(IpAddr, [u8; 6], bool)> {
        let mut v: Vec<_> = self.entries.iter().map(|(ip, e)| (*ip, e.mac, e.expires.is_none())).collect();
        v.sort();
        v
    }

    /// Frames currently held, all destinations.
    pub fn held_frames(&self) -> usize {
        self.pending.values().map(|p| p.held.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));

    fn table() -> NeighTable<u32> {
        NeighTable::new(NeighConfig { retry_ns: 10, max_tries: 3, ttl_ns: 1000, max_held: 2, max_pending: 1 })
    }

    #[test]
    fn defaults_unchanged() {
        assert_eq!(
            NeighConfig::default(),
            NeighConfig { retry_ns: 200_000_000, max_tries: 5, ttl_ns: 300_000_000_000, max_held: 256, max_pending: 64 }
        );
    }

    #[test]
    fn hold_is_bounded_per_destination_and_in_destinations() {
        let mut t = table();
        assert_eq!(t.lookup(A, Instant(0)), None);
        assert_eq!(t.hold(A, 1, Instant(0)), HoldResult::HeldSendRequest);
        assert_eq!(t.hold(A, 2, Instant(0)), HoldResult::Held);
        assert_eq!(t.hold(A, 3, Instant(0)), HoldResult::Full(3));
        assert_eq!(t.hold(B, 4, Instant(0)), HoldResult::Full(4), "pending table full");
        assert_eq!(t.held_frames(), 2);
        assert!(t.is_pending(A) && !t.is_pending(B));
    }

    #[test]
    fn retries_then_gives_up() {
        let mut t = table();
        t.hold(A, 1, Instant(0));
        t.hold(A, 2, Instant(0));
        assert_eq!(t.next_deadline(), Some(Instant(10)));
        assert_eq!(t.on_timer(Instant(5)), (vec![], vec![]));
        assert_eq!(t.on_timer(Instant(10)), (vec![A], vec![]));
        assert_eq!(t.on_timer(Instant(20)), (vec![A], vec![]));
        assert_eq!(t.on_timer(Instant(30)), (vec![], vec![1, 2]), "gave up after 3 tries");
        assert!(!t.is_pending(A));
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn learn_releases_in_order_and_entries_expire() {
        let mut t = table();
        t.hold(A, 7, Instant(40));
        t.hold(A, 8, Instant(40));
        assert_eq!(t.learn(A, [1; 6], Instant(50)), vec![7, 8]);
        assert!(!t.is_pending(A) && t.knows(A));
        assert_eq!(t.lookup(A, Instant(1049)), Some([1; 6]));
        assert_eq!(t.lookup(A, Instant(1050)), None);
        assert!(!t.knows(A), "an expired entry is removed");
    }

    #[test]
    fn static_entries_win_and_never_expire() {
        let mut t = table();
        t.add_static(B, [9; 6]);
        assert!(t.learn(B, [8; 6], Instant(0)).is_empty());
        assert_eq!(t.lookup(B, Instant(u64::MAX)), Some([9; 6]));
        t.learn(A, [1; 6], Instant(0));
        assert_eq!(t.entries(), vec![(A, [1; 6], false), (B, [9; 6], true)]);
    }

    #[test]
    fn the_last_lookup_cache_sees_relearning() {
        let mut t = table();
        t.learn(A, [1; 6], Instant(0));
        assert_eq!(t.lookup(A, Instant(1)), Some([1; 6]));
        t.learn(A, [2; 6], Instant(2));
        assert_eq!(t.lookup(A, Instant(3)), Some([2; 6]));
        assert_eq!(t.lookup(A, Instant(1001)), Some([2; 6]), "the lifetime restarted");
    }
}
