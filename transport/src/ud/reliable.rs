//! Reliable, in-order delivery over UD for datagram frontends (the UCX `droce_ud` transport).
//!
//! Every datagram starts with a [`Header`]: the sending endpoint's key, its sequence number, and
//! a cumulative acknowledgement riding along (the key of an endpoint of the receiving side and
//! the last sequence number received in order from it). A [`Receiver`] delivers each sending
//! endpoint's datagrams in sequence order only (a gap or a duplicate is dropped) and owes it an
//! acknowledgement, which the frontend sends with the next datagram to that peer or alone. A
//! [`Sender`] keeps every datagram until acknowledged and sends the unacknowledged ones again
//! (go-back-N) after [`Config::retransmit_timeout`], or at once after two repeated
//! acknowledgements (the peer saw a gap); with no acknowledgement making progress for
//! [`Config::fail_after`] the endpoint fails, as an RC QP does after its retries.
//!
//! Retransmission backs off: after a timeout's go-back-N round goes unanswered, each further
//! timeout doubles (up to [`Config::max_retransmit_timeout`]) and sends only the oldest
//! unacknowledged datagram, as a probe. A peer that does not answer is usually not losing
//! frames but not running (descheduled on a loaded machine, or its application away from
//! progress): resending the whole window every period only piles duplicates into its receive
//! ring, which it must wade through when it is back (a silent peer cost 165 k resends in 4 s
//! with a 256-datagram window). One answered probe is progress, and the timer starts over.
//!
//! Sans-IO: the frontend owns the buffers and the UD QP; a datagram is named by a token of its
//! choice (a send slot), time comes in as `now`, and what to send again, what completed and what
//! failed come back as data. A datagram is done when the peer acknowledged it *and* its last
//! copy left the send queue ([`Sender::on_sent`]): only then may its buffer be reused.

use crate::time::{Duration, Instant};
use crate::types::{Gid, Qpn};
use crate::wire;
use std::collections::{HashMap, VecDeque};

/// Bytes of [`Header`] at the head of every datagram (four little-endian u32).
pub const HEADER_LEN: usize = 16;

mod field {
    use core::ops::Range;
    pub const SRC: Range<usize> = 0..4;
    pub const SEQ: Range<usize> = 4..8;
    pub const ACK_EP: Range<usize> = 8..12;
    pub const ACK_SEQ: Range<usize> = 12..16;
}

/// An endpoint's name in the header: its index in the low 16 bits and a generation in the high
/// 16, so that datagrams and acknowledgements for an endpoint that is gone are not taken for
/// a newer endpoint at the same index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndpointKey(u32);

impl EndpointKey {
    /// No endpoint: the source of an acknowledgement-only datagram, or no acknowledgement.
    pub const NONE: EndpointKey = EndpointKey(u32::MAX);

    pub const fn new(index: u16, generation: u16) -> EndpointKey {
        EndpointKey(index as u32 | (generation as u32) << 16)
    }
    pub const fn from_raw(v: u32) -> EndpointKey {
        EndpointKey(v)
    }
    pub const fn raw(self) -> u32 {
        self.0
    }
    pub const fn index(self) -> usize {
        (self.0 & 0xffff) as usize
    }
}

/// A sender's sequence number: 32 bits, wrapping, compared within half the space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Seq(pub u32);

impl Seq {
    /// `self` is at or before `other`.
    pub fn at_or_before(self, other: Seq) -> bool {
        (other.0.wrapping_sub(self.0) as i32) >= 0
    }
    fn next(self) -> Seq {
        Seq(self.0.wrapping_add(1))
    }
    fn prev(self) -> Seq {
        Seq(self.0.wrapping_sub(1))
    }
}

/// A cumulative acknowledgement: endpoint `ep`'s datagrams up to `seq` arrived in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub ep: EndpointKey,
    pub seq: Seq,
}

/// The reliability header, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The sending endpoint; [`EndpointKey::NONE`] in an acknowledgement-only datagram.
    pub src: EndpointKey,
    pub seq: Seq,
    pub ack: Option<Ack>,
}

fn get(b: &[u8], f: core::ops::Range<usize>) -> u32 {
    u32::from_le_bytes([b[f.start], b[f.start + 1], b[f.start + 2], b[f.start + 3]])
}

impl Header {
    /// An acknowledgement-only datagram's header.
    pub fn ack_only(ack: Ack) -> Header {
        Header { src: EndpointKey::NONE, seq: Seq(0), ack: Some(ack) }
    }

    pub fn parse(b: &[u8]) -> wire::Result<Header> {
        if b.len() < HEADER_LEN {
            return Err(wire::Error);
        }
        let ep = EndpointKey(get(b, field::ACK_EP));
        let ack = (ep != EndpointKey::NONE).then(|| Ack { ep, seq: Seq(get(b, field::ACK_SEQ)) });
        Ok(Header { src: EndpointKey(get(b, field::SRC)), seq: Seq(get(b, field::SEQ)), ack })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into `b[..HEADER_LEN]`.
    pub fn emit(&self, b: &mut [u8; HEADER_LEN]) {
        b[field::SRC].copy_from_slice(&self.src.0.to_le_bytes());
        b[field::SEQ].copy_from_slice(&self.seq.0.to_le_bytes());
        Self::emit_ack(self.ack, b);
    }

    /// Writes only the acknowledgement fields (a retransmission carries a fresh one).
    pub fn emit_ack(ack: Option<Ack>, b: &mut [u8; HEADER_LEN]) {
        let (ep, seq) = ack.map_or((EndpointKey::NONE, Seq(0)), |a| (a.ep, a.seq));
        b[field::ACK_EP].copy_from_slice(&ep.0.to_le_bytes());
        b[field::ACK_SEQ].copy_from_slice(&seq.0.to_le_bytes());
    }

    /// Offset and bytes of the acknowledgement fields inside an emitted header.
    pub fn ack_bytes(ack: Ack) -> (usize, [u8; 8]) {
        let mut b = [0u8; HEADER_LEN];
        Self::emit_ack(Some(ack), &mut b);
        let mut out = [0u8; 8];
        out.copy_from_slice(&b[field::ACK_EP.start..field::ACK_SEQ.end]);
        (field::ACK_EP.start, out)
    }
}

/// Timers and bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Unacknowledged datagrams are sent again after this long.
    pub retransmit_timeout: Duration,
    /// The longest the retransmission timeout grows to while the peer does not answer (it
    /// doubles at each unanswered retransmission).
    pub max_retransmit_timeout: Duration,
    /// An endpoint whose datagrams saw no acknowledgement making progress for this long fails.
    pub fail_after: Duration,
    /// Datagrams a sender keeps at most (sent and not done).
    pub window: usize,
    /// Sending endpoints a receiver keeps a sequence number for; beyond it the one heard from
    /// least recently is forgotten.
    pub max_channels: usize,
}

impl Default for Config {
    fn default() -> Config {
        // RC's default gives up after about 4 s (7 retries of 0.54 s); 5 ms is a few hundred
        // round trips of a software RoCE pair, long enough not to resend what is merely late.
        // Backed off up to 160 ms: a peer back from a long stall is probed within 160 ms, and a
        // silent one costs about 25 probes until fail_after rather than a window every 5 ms.
        Config {
            retransmit_timeout: Duration::from_millis(5),
            max_retransmit_timeout: Duration::from_millis(160),
            fail_after: Duration::from_millis(4000),
            window: 4096,
            max_channels: 65536,
        }
    }
}

/// [`Sender::push`] found the window full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowFull;

/// What a timer check asks of the frontend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerAction {
    /// Nothing is due.
    Idle,
    /// Send again the datagrams put in `out` (and report each with [`Sender::requeued`]): every
    /// unacknowledged one, or after an unanswered retransmission only the oldest (a probe).
    Retransmit,
    /// The endpoint failed: the datagrams put in `out` are over; those still in the send queue
    /// end at their [`Sender::on_sent`].
    Fail,
}

#[derive(Debug, Clone, Copy)]
struct Datagram<T> {
    seq: Seq,
    token: T,
    /// A copy is in the send queue (its local completion is due).
    queued: bool,
    /// The peer acknowledged it (or the endpoint failed): it is done at its local completion.
    acked: bool,
}

/// The sending half of one endpoint: its datagrams to one peer endpoint.
#[derive(Debug, Clone)]
pub struct Sender<T> {
    key: EndpointKey,
    cfg: Config,
    next: Seq,
    /// In sequence order; the acknowledged ones (waiting for their local completion) are a
    /// prefix, since acknowledgements are cumulative.
    out: VecDeque<Datagram<T>>,
    unacked: usize,
    /// When the unacknowledged datagrams are sent again (None: armed at the next check).
    retx_at: Option<Instant>,
    /// Since when the endpoint waits for an acknowledgement that makes progress.
    waiting_since: Option<Instant>,
    /// The previous timer check while waiting: a longer gap than a retransmission period
    /// since it is time this sender did not run, which does not count against the peer.
    last_check: Option<Instant>,
    /// Acknowledgements in a row that repeated the last one.
    dup_acks: u8,
    /// A fast retransmission is due at the next check.
    fast_due: bool,
    /// A fast retransmission was made since the last acknowledgement making progress (at most
    /// one per timeout period).
    fast_done: bool,
    /// Timer retransmissions since the last acknowledgement making progress: the next timeout
    /// is `retransmit_timeout << backoff` (capped), and from the first on only a probe goes.
    backoff: u8,
    failed: bool,
}

impl<T: Copy + PartialEq> Sender<T> {
    pub fn new(key: EndpointKey, cfg: Config) -> Sender<T> {
        Sender {
            key,
            cfg,
            next: Seq(0),
            out: VecDeque::new(),
            unacked: 0,
            retx_at: None,
            waiting_since: None,
            last_check: None,
            dup_acks: 0,
            fast_due: false,
            fast_done: false,
            backoff: 0,
            failed: false,
        }
    }

    pub fn key(&self) -> EndpointKey {
        self.key
    }

    /// The sequence number the next [`push`](Self::push) takes.
    pub fn next_seq(&self) -> Seq {
        self.next
    }

    /// The header of the next datagram, with `ack` riding along.
    pub fn next_header(&self, ack: Option<Ack>) -> Header {
        Header { src: self.key, seq: self.next, ack }
    }

    /// Records a datagram the frontend just put in the send queue under [`next_seq`](Self::next_seq).
    pub fn push(&mut self, token: T) -> Result<Seq, WindowFull> {
        if self.out.len() >= self.cfg.window {
            return Err(WindowFull);
        }
        let seq = self.next;
        self.out.push_back(Datagram { seq, token, queued: true, acked: false });
        self.unacked += 1;
        self.next = seq.next();
        // no clock read on the send path: the next timer check arms the retransmission
        Ok(seq)
    }

    /// Whether [`push`](Self::push) would refuse a datagram.
    pub fn is_window_full(&self) -> bool {
        self.out.len() >= self.cfg.window
    }

    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// Datagrams sent and not acknowledged.
    pub fn unacked(&self) -> usize {
        self.unacked
    }

    /// Whether a timer check has anything to look at.
    pub fn needs_timer(&self) -> bool {
        self.unacked > 0 && !self.failed
    }

    /// The deadline of the retransmission timer; [`Instant::ZERO`] when it is to be armed at the
    /// next check (or a fast retransmission is due).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.needs_timer() {
            return None;
        }
        if self.fast_due {
            return Some(Instant::ZERO);
        }
        Some(self.retx_at.unwrap_or(Instant::ZERO))
    }

    /// Whether `token` has a copy in the send queue.
    pub fn is_queued(&self, token: T) -> bool {
        self.out.iter().any(|d| d.token == token && d.queued)
    }

    /// The peer received every datagram up to `ack` in order: the acknowledged datagrams whose
    /// copies left the send queue go to `done`. Returns true when a fast retransmission just
    /// became due (run the timer check now).
    pub fn on_ack(&mut self, ack: Seq, done: &mut Vec<T>) -> bool {
        let mut progressed = false;
        let mut i = 0;
        while i < self.out.len() {
            let d = &mut self.out[i];
            if d.acked {
                i += 1;
                continue;
            }
            if !d.seq.at_or_before(ack) {
                break;
            }
            progressed = true;
            self.unacked -= 1;
            if d.queued {
                d.acked = true;
                i += 1;
            } else {
                done.push(d.token);
                self.out.remove(i);
            }
        }
        if progressed {
            self.waiting_since = None;
            self.retx_at = None;
            self.dup_acks = 0;
            self.fast_done = false;
            self.backoff = 0;
            return false;
        }
        let front = self.out.iter().find(|d| !d.acked).map(|d| d.seq);
        if front.is_some_and(|f| f.prev() == ack) && !self.fast_done {
            // The peer repeats its acknowledgement: it received something past a gap (or a
            // duplicate). Two in a row: the unacknowledged datagrams go again now rather than
            // after the full timeout.
            self.dup_acks = self.dup_acks.saturating_add(1);
            if self.dup_acks >= 2 {
                self.fast_due = true;
                self.fast_done = true;
                self.dup_acks = 0;
                return true;
            }
        }
        false
    }

    /// The last copy of `token` left the send queue. True when the datagram is done (it was
    /// acknowledged, or is not known): its buffer is free.
    pub fn on_sent(&mut self, token: T) -> bool {
        let Some(i) = self.out.iter().position(|d| d.token == token) else { return true };
        let d = &mut self.out[i];
        d.queued = false;
        if d.acked {
            self.out.remove(i);
            true
        } else {
            false
        }
    }

    /// Forgets `token` (its send failed locally; the frontend fails the endpoint).
    pub fn remove(&mut self, token: T) {
        if let Some(i) = self.out.iter().position(|d| d.token == token) {
            if !self.out[i].acked {
                self.unacked -= 1;
            }
            self.out.remove(i);
        }
    }

    /// A copy of `token`, handed out by [`handle_timeout`](Self::handle_timeout), is in the send
    /// queue again.
    pub fn requeued(&mut self, token: T) {
        if let Some(d) = self.out.iter_mut().find(|d| d.token == token) {
            d.queued = true;
        }
    }

    /// The endpoint fails (no acknowledgement for too long, or its peer is known gone): every
    /// unacknowledged datagram is over; those not in the send queue go to `done` now.
    pub fn fail(&mut self, done: &mut Vec<T>) {
        self.failed = true;
        self.retx_at = None;
        self.fast_due = false;
        self.unacked = 0;
        self.out.retain_mut(|d| {
            if d.acked {
                return true;
            }
            if d.queued {
                d.acked = true;
                true
            } else {
                done.push(d.token);
                false
            }
        });
    }

    /// The retransmission timeout after `backoff` unanswered retransmissions.
    fn timeout(&self) -> Duration {
        let base = self.cfg.retransmit_timeout.as_nanos();
        let cap = self.cfg.max_retransmit_timeout.as_nanos().max(base);
        Duration::from_nanos(base.saturating_mul(1 << self.backoff.min(32)).min(cap))
    }

    /// A timer check at `now`. The first check that sees unacknowledged datagrams arms the
    /// timer; a due timer (or a due fast retransmission) puts the unacknowledged datagrams with
    /// no copy in the send queue into `out` to send again (a due timer after an unanswered one:
    /// only the oldest, and the next timeout is twice as long, up to
    /// [`Config::max_retransmit_timeout`]), or fails the endpoint when nothing was
    /// acknowledged for [`Config::fail_after`] of checks. A gap between two checks longer
    /// than [`Config::retransmit_timeout`] is left out of that time: the sender's own thread
    /// did not run (descheduled on a loaded machine, or the application away from progress), so
    /// it neither sent again nor read the acknowledgements waiting for it, and the peer had no
    /// chance to answer. Coming back, it sends again first.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut Vec<T>) -> TimerAction {
        if !self.needs_timer() {
            return TimerAction::Idle;
        }
        let fast = core::mem::take(&mut self.fast_due);
        if let (Some(prev), Some(since)) = (self.last_check, self.waiting_since.as_mut()) {
            let gap = now - prev;
            if gap > self.cfg.retransmit_timeout {
                *since = *since + Duration::from_nanos(gap.as_nanos() - self.cfg.retransmit_timeout.as_nanos());
            }
        }
        self.last_check = Some(now);
        let since = *self.waiting_since.get_or_insert(now);
        if self.retx_at.is_none() && !fast {
            self.retx_at = Some(now + self.cfg.retransmit_timeout);
            return TimerAction::Idle;
        }
        let due = fast || matches!(self.retx_at, Some(t) if t <= now);
        if !due {
            return TimerAction::Idle;
        }
        if now - since >= self.cfg.fail_after {
            self.fail(out);
            return TimerAction::Fail;
        }
        if fast || self.backoff == 0 {
            // go-back-N: the peer answers (a fast retransmission: it saw a gap), or this is
            // the first timeout since it last did (a lost datagram, or its acknowledgement)
            out.extend(self.out.iter().filter(|d| !d.acked && !d.queued).map(|d| d.token));
        } else {
            // the previous round went unanswered: the peer is more likely away than losing
            // every frame; the oldest datagram alone asks whether it is back (its answer is
            // progress, and the rest goes at the next, un-backed-off timeout)
            out.extend(self.out.iter().find(|d| !d.acked).filter(|d| !d.queued).map(|d| d.token));
        }
        if !fast {
            self.backoff = self.backoff.saturating_add(1);
        }
        self.retx_at = Some(now + self.timeout());
        TimerAction::Retransmit
    }
}

/// Where a datagram came from: the sending UD QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peer {
    pub gid: Gid,
    pub qpn: Qpn,
}

/// What to do with a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The next datagram of its sender: hand it to the application.
    Deliver,
    /// A duplicate or a datagram past a gap (the sender will send it again).
    Drop,
}

#[derive(Debug, Clone, Copy)]
struct Channel {
    expected: Seq,
    /// Receiver-wide datagram count at the last datagram (recency, for eviction).
    last_heard: u64,
}

/// The receiving half of an interface: the next expected sequence number of every sending
/// endpoint heard from, and the acknowledgements owed.
#[derive(Debug, Clone)]
pub struct Receiver {
    max_channels: usize,
    chans: HashMap<(Peer, EndpointKey), Channel>,
    ack_due: Vec<(Peer, EndpointKey)>,
    heard: u64,
}

impl Receiver {
    pub fn new(cfg: &Config) -> Receiver {
        Receiver { max_channels: cfg.max_channels.max(1), chans: HashMap::new(), ack_due: Vec::new(), heard: 0 }
    }

    /// A datagram from endpoint `src` of `from` with sequence number `seq` (the frontend has
    /// applied its acknowledgement already). Either way an acknowledgement is now owed: for a
    /// duplicate it tells the sender what did arrive.
    pub fn on_datagram(&mut self, from: Peer, src: EndpointKey, seq: Seq) -> Delivery {
        self.heard += 1;
        let key = (from, src);
        // (the length test first: no second hash per datagram below the bound)
        if self.chans.len() >= self.max_channels && !self.chans.contains_key(&key) {
            self.evict_one();
        }
        let ch = self.chans.entry(key).or_insert(Channel { expected: Seq(0), last_heard: 0 });
        ch.last_heard = self.heard;
        let next = seq == ch.expected;
        if next {
            ch.expected = seq.next();
        }
        if !self.ack_due.contains(&key) {
            self.ack_due.push(key);
        }
        if next {
            Delivery::Deliver
        } else {
            Delivery::Drop
        }
    }

    fn evict_one(&mut self) {
        let Some(old) = self.chans.iter().min_by_key(|(_, c)| c.last_heard).map(|(k, _)| *k) else { return };
        self.chans.remove(&old);
        self.ack_due.retain(|k| *k != old);
    }

    fn ack_of(&self, key: &(Peer, EndpointKey)) -> Ack {
        Ack { ep: key.1, seq: self.chans.get(key).map_or(Seq(0), |c| c.expected.prev()) }
    }

    /// The acknowledgement owed to an endpoint of `to`, if any, to ride on a datagram to it.
    pub fn take_ack_for(&mut self, to: Peer) -> Option<Ack> {
        let i = self.ack_due.iter().position(|k| k.0 == to)?;
        let key = self.ack_due.swap_remove(i);
        Some(self.ack_of(&key))
    }

    pub fn has_ack_due(&self) -> bool {
        !self.ack_due.is_empty()
    }

    /// An acknowledgement owed, to send alone (none found a datagram to ride on).
    pub fn pop_ack_due(&mut self) -> Option<(Peer, Ack)> {
        let key = self.ack_due.pop()?;
        Some((key.0, self.ack_of(&key)))
    }

    /// Sending endpoints known.
    pub fn channels(&self) -> usize {
        self.chans.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn cfg() -> Config {
        Config {
            retransmit_timeout: Duration::from_millis(5),
            max_retransmit_timeout: Duration::from_millis(20),
            fail_after: Duration::from_millis(40),
            window: 8,
            max_channels: 4,
        }
    }
    fn peer(n: u8) -> Peer {
        Peer { gid: Gid([n; 16]), qpn: Qpn::new(0x11 + n as u32) }
    }
    fn sender() -> Sender<u32> {
        Sender::new(EndpointKey::new(3, 1), cfg())
    }

    #[test]
    fn header_round_trips_in_golden_bytes() {
        let h = Header { src: EndpointKey::new(2, 7), seq: Seq(0x0102_0304), ack: Some(Ack { ep: EndpointKey::new(5, 1), seq: Seq(9) }) };
        let mut b = [0u8; HEADER_LEN];
        h.emit(&mut b);
        assert_eq!(b, [2, 0, 7, 0, 4, 3, 2, 1, 5, 0, 1, 0, 9, 0, 0, 0]);
        assert_eq!(Header::parse(&b), Ok(h));
        let a = Header::ack_only(Ack { ep: EndpointKey::new(1, 0), seq: Seq(3) });
        a.emit(&mut b);
        assert_eq!(b, [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0]);
        let none = Header { src: EndpointKey::new(1, 1), seq: Seq(1), ack: None };
        none.emit(&mut b);
        assert_eq!(&b[8..], &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        assert_eq!(Header::parse(&b).unwrap().ack, None);
        assert_eq!(Header::parse(&b[..15]), Err(wire::Error));
        let (off, ab) = Header::ack_bytes(Ack { ep: EndpointKey::new(5, 1), seq: Seq(9) });
        assert_eq!((off, ab), (8, [5, 0, 1, 0, 9, 0, 0, 0]));
    }

    #[test]
    fn sequence_numbers_compare_across_the_wrap() {
        assert!(Seq(u32::MAX).at_or_before(Seq(0)));
        assert!(Seq(5).at_or_before(Seq(5)));
        assert!(!Seq(1).at_or_before(Seq(u32::MAX)));
    }

    #[test]
    fn receiver_delivers_in_order_and_drops_gaps_and_duplicates() {
        let mut r = Receiver::new(&cfg());
        let (p, k) = (peer(1), EndpointKey::new(0, 1));
        assert_eq!(r.on_datagram(p, k, Seq(0)), Delivery::Deliver);
        assert_eq!(r.on_datagram(p, k, Seq(2)), Delivery::Drop, "gap");
        assert_eq!(r.on_datagram(p, k, Seq(0)), Delivery::Drop, "duplicate");
        assert_eq!(r.on_datagram(p, k, Seq(1)), Delivery::Deliver);
        assert_eq!(r.on_datagram(p, k, Seq(2)), Delivery::Deliver);
        // another endpoint of the same peer, and the same key from another peer, are channels of their own
        assert_eq!(r.on_datagram(p, EndpointKey::new(1, 1), Seq(0)), Delivery::Deliver);
        assert_eq!(r.on_datagram(peer(2), k, Seq(0)), Delivery::Deliver);
        assert_eq!(r.channels(), 3);
    }

    #[test]
    fn acknowledgements_are_cumulative_coalesced_and_addressed() {
        let mut r = Receiver::new(&cfg());
        let (p, k) = (peer(1), EndpointKey::new(0, 1));
        for s in 0..3 {
            r.on_datagram(p, k, Seq(s));
        }
        // three datagrams, one acknowledgement owed: the last in-order one
        assert_eq!(r.take_ack_for(peer(2)), None, "nothing owed to another peer");
        assert_eq!(r.take_ack_for(p), Some(Ack { ep: k, seq: Seq(2) }));
        assert_eq!(r.take_ack_for(p), None, "taken once");
        assert!(!r.has_ack_due());
        // a duplicate is acknowledged again (the sender learns what arrived)
        r.on_datagram(p, k, Seq(1));
        assert_eq!(r.pop_ack_due(), Some((p, Ack { ep: k, seq: Seq(2) })));
        assert_eq!(r.pop_ack_due(), None);
    }

    #[test]
    fn receiver_forgets_the_least_recently_heard_channel_at_its_bound() {
        let mut r = Receiver::new(&cfg());
        for n in 0..4 {
            r.on_datagram(peer(n), EndpointKey::new(0, 0), Seq(0));
        }
        r.on_datagram(peer(0), EndpointKey::new(0, 0), Seq(1));
        r.on_datagram(peer(9), EndpointKey::new(0, 0), Seq(0));
        assert_eq!(r.channels(), 4);
        // peer 1 was heard from least recently: its channel starts over
        assert_eq!(r.on_datagram(peer(2), EndpointKey::new(0, 0), Seq(1)), Delivery::Deliver);
        assert_eq!(r.on_datagram(peer(1), EndpointKey::new(0, 0), Seq(1)), Delivery::Drop);
        assert!(r.ack_due.len() <= 4);
    }

    #[test]
    fn a_datagram_is_done_when_acknowledged_and_sent() {
        let mut s = sender();
        let mut done = Vec::new();
        assert_eq!(s.push(10), Ok(Seq(0)));
        assert_eq!(s.push(11), Ok(Seq(1)));
        assert_eq!(s.next_header(None).seq, Seq(2));
        // acknowledged while still queued: done at its local completion
        s.on_ack(Seq(0), &mut done);
        assert!(done.is_empty());
        assert!(s.on_sent(10));
        // sent first, acknowledged later
        assert!(!s.on_sent(11));
        assert_eq!(s.unacked(), 1);
        s.on_ack(Seq(1), &mut done);
        assert_eq!(done, [11]);
        assert_eq!(s.unacked(), 0);
        assert!(!s.needs_timer());
    }

    #[test]
    fn window_bounds_what_a_sender_keeps() {
        let mut s = sender();
        for t in 0..8 {
            s.push(t).unwrap();
        }
        assert!(s.is_window_full());
        assert_eq!(s.push(8), Err(WindowFull));
        let mut done = Vec::new();
        for t in 0..4 {
            s.on_sent(t);
        }
        s.on_ack(Seq(3), &mut done);
        assert_eq!(done, [0, 1, 2, 3]);
        assert!(!s.is_window_full());
        assert_eq!(s.push(8), Ok(Seq(8)));
    }

    #[test]
    fn retransmit_timer_arms_at_the_first_check_and_resends_only_what_left_the_queue() {
        let mut s = sender();
        let mut out = Vec::new();
        s.push(1).unwrap();
        s.push(2).unwrap();
        s.on_sent(1);
        assert_eq!(s.poll_timeout(), Some(Instant::ZERO), "to be armed");
        assert_eq!(s.handle_timeout(Instant(MS), &mut out), TimerAction::Idle);
        assert_eq!(s.poll_timeout(), Some(Instant(6 * MS)));
        assert_eq!(s.handle_timeout(Instant(5 * MS), &mut out), TimerAction::Idle);
        assert_eq!(s.handle_timeout(Instant(6 * MS), &mut out), TimerAction::Retransmit);
        assert_eq!(out, [1], "2 is still in the send queue");
        s.requeued(1);
        assert!(s.is_queued(1));
        assert_eq!(s.poll_timeout(), Some(Instant(16 * MS)), "unanswered: the next timeout is twice as long");
        // an acknowledgement making progress disarms it
        s.on_sent(1);
        s.on_sent(2);
        s.on_ack(Seq(0), &mut out);
        assert_eq!(s.handle_timeout(Instant(11 * MS), &mut Vec::new()), TimerAction::Idle, "re-armed from scratch");
        assert_eq!(s.poll_timeout(), Some(Instant(16 * MS)), "and no longer backed off");
    }

    #[test]
    fn two_repeated_acknowledgements_make_one_fast_retransmission() {
        let mut s = sender();
        let mut done = Vec::new();
        for t in 0..4 {
            s.push(t).unwrap();
            s.on_sent(t);
        }
        assert!(!s.on_ack(Seq(0), &mut done), "progress");
        assert!(!s.on_ack(Seq(0), &mut done));
        assert!(s.on_ack(Seq(0), &mut done), "second repeat");
        let mut out = Vec::new();
        assert_eq!(s.handle_timeout(Instant(MS), &mut out), TimerAction::Retransmit, "no need to wait for the timer");
        assert_eq!(out, [1, 2, 3]);
        for t in 1..4 {
            s.requeued(t);
            s.on_sent(t);
        }
        // at most one per timeout period
        assert!(!s.on_ack(Seq(0), &mut done));
        assert!(!s.on_ack(Seq(0), &mut done));
        assert!(!s.on_ack(Seq(0), &mut done));
        // progress allows the next one
        s.on_ack(Seq(1), &mut done);
        s.on_ack(Seq(1), &mut done);
        assert!(s.on_ack(Seq(1), &mut done));
    }

    #[test]
    fn a_sender_gives_up_after_fail_after_without_progress() {
        let mut s = sender();
        let mut out = Vec::new();
        s.push(1).unwrap();
        s.push(2).unwrap();
        s.on_sent(1);
        let mut t = 0;
        let mut action = TimerAction::Idle;
        for _ in 0..100 {
            out.clear();
            action = s.handle_timeout(Instant(t), &mut out);
            if action == TimerAction::Fail {
                break;
            }
            for &tok in &out {
                s.requeued(tok);
                s.on_sent(tok);
            }
            t += MS;
        }
        assert_eq!(action, TimerAction::Fail);
        // at the first due timer past fail_after: at most one backed-off period (20 ms) later
        assert!((40 * MS..=60 * MS).contains(&t), "gave up at {t}");
        assert_eq!(out, [1], "over now; 2 ends at its local completion");
        assert!(s.is_failed() && !s.needs_timer());
        assert!(s.on_sent(2));
        assert_eq!(s.push(3), Ok(Seq(2)), "no longer counted against the window");
    }

    #[test]
    fn time_the_sender_did_not_run_does_not_count_against_the_peer() {
        let mut s = sender();
        let mut out = Vec::new();
        s.push(1).unwrap();
        s.on_sent(1);
        assert_eq!(s.handle_timeout(Instant(0), &mut out), TimerAction::Idle, "armed");
        assert_eq!(s.handle_timeout(Instant(5 * MS), &mut out), TimerAction::Retransmit);
        s.requeued(1);
        s.on_sent(1);
        // the sender's thread does not run for 10 s (far past fail_after, 40 ms): back, it
        // sends again rather than giving up before the peer had a chance to answer
        out.clear();
        let back = 10_000 * MS;
        assert_eq!(s.handle_timeout(Instant(back), &mut out), TimerAction::Retransmit);
        assert_eq!(out, [1]);
        s.requeued(1);
        s.on_sent(1);
        // an acknowledgement that came meanwhile is progress as usual
        let mut probe = s.clone();
        let mut done = Vec::new();
        probe.on_ack(Seq(0), &mut done);
        assert_eq!(done, [1]);
        // still no answer while it runs: it fails after fail_after of checks, counted from the
        // wait's start less the 10 s away
        let mut t = back;
        let action = loop {
            t += MS;
            out.clear();
            let a = s.handle_timeout(Instant(t), &mut out);
            for &tok in &out {
                s.requeued(tok);
                s.on_sent(tok);
            }
            if a == TimerAction::Fail || t > back + 100 * MS {
                break a;
            }
        };
        assert_eq!(action, TimerAction::Fail);
        assert!((back + 30 * MS..back + 45 * MS).contains(&t), "gave up {} ms after coming back", (t - back) / MS);
    }

    /// A peer that does not answer for a long time (descheduled, or its application away from
    /// progress) gets the window once, then one probe per backed-off timeout: 8 + 101
    /// datagrams in 2 s here (with a fixed timeout: the whole window every 5 ms, 3200).
    #[test]
    fn a_silent_peer_gets_one_window_then_backed_off_probes() {
        let mut s = Sender::new(EndpointKey::new(3, 1), Config { fail_after: Duration::from_millis(4000), ..cfg() });
        for t in 0..8 {
            s.push(t).unwrap();
            s.on_sent(t);
        }
        let mut out = Vec::new();
        let (mut resent, mut rounds, mut last_round) = (0, Vec::new(), 0);
        for ms in 0..=2000 {
            out.clear();
            let a = s.handle_timeout(Instant(ms * MS), &mut out);
            assert_ne!(a, TimerAction::Fail, "2 s is short of fail_after");
            if a == TimerAction::Retransmit {
                rounds.push((ms - last_round, out.len()));
                last_round = ms;
            }
            resent += out.len();
            for &tok in &out {
                s.requeued(tok);
                s.on_sent(tok);
            }
        }
        assert_eq!(rounds[0], (5, 8), "the first timeout resends the whole window");
        assert_eq!(rounds[1..5], [(10, 1), (20, 1), (20, 1), (20, 1)], "then the oldest alone, backed off up to 20 ms");
        assert!(rounds.iter().all(|r| r.0 <= 20), "never longer than max_retransmit_timeout: {rounds:?}");
        assert!(resent <= 8 + 2000 / 20 + 1, "{resent} datagrams sent again to a silent peer in 2 s");
        assert_eq!(out, [], "the last check sent nothing");
        // the peer answers the probe: the timer starts over, and the first timeout resends all
        // that is still unacknowledged
        let mut done = Vec::new();
        s.on_ack(Seq(0), &mut done);
        assert_eq!(done, [0]);
        assert_eq!(s.handle_timeout(Instant(2001 * MS), &mut out), TimerAction::Idle, "armed");
        assert_eq!(s.handle_timeout(Instant(2006 * MS), &mut out), TimerAction::Retransmit);
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7]);
    }

    /// A fast retransmission (the peer answers: it saw a gap) is go-back-N and does not back
    /// the timer off, even after unanswered timeouts.
    #[test]
    fn fast_retransmission_resends_everything_without_backing_off() {
        let mut s = sender();
        for t in 0..4 {
            s.push(t).unwrap();
            s.on_sent(t);
        }
        let mut out = Vec::new();
        s.handle_timeout(Instant(0), &mut out);
        assert_eq!(s.handle_timeout(Instant(5 * MS), &mut out), TimerAction::Retransmit);
        for &t in &out {
            s.requeued(t);
            s.on_sent(t);
        }
        out.clear();
        assert_eq!(s.poll_timeout(), Some(Instant(15 * MS)));
        let mut done = Vec::new();
        s.on_ack(Seq(0), &mut done);
        s.on_ack(Seq(0), &mut done);
        assert!(s.on_ack(Seq(0), &mut done));
        assert_eq!(s.handle_timeout(Instant(6 * MS), &mut out), TimerAction::Retransmit);
        assert_eq!(out, [1, 2, 3]);
        assert_eq!(s.poll_timeout(), Some(Instant(11 * MS)), "progress reset the back-off; the fast round kept it");
    }

    #[test]
    fn a_failed_send_is_forgotten() {
        let mut s = sender();
        s.push(1).unwrap();
        s.remove(1);
        assert_eq!(s.unacked(), 0);
        assert!(!s.is_queued(1));
    }
}
