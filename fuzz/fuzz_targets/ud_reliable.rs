//! Reliable UD (`ud::reliable`) driven by arbitrary steps, in three parts:
//!
//! 1. A Sender/Receiver pair in each direction over a link the input controls: sends, the
//!    send queue leaving (each datagram kept or dropped), delivery of any frame in flight
//!    (reordering), with or without keeping a copy (duplication), drops, time jumps, timer
//!    checks, and arbitrary headers from strangers (other peers) into the same receivers.
//!    Every message is delivered at most once and in order, every send completes exactly
//!    once, the window bounds what a sender keeps, and an endpoint gives up only after
//!    `fail_after` without progress. At the end the link either heals (everything is
//!    delivered and completes) or is cut (both senders give up, within `fail_after` and a
//!    few timeouts, and every slot comes back).
//! 2. A Receiver with a small channel bound fed arbitrary headers from a few peers, against
//!    a model of its rules (in order per channel, least recently heard channel forgotten).
//! 3. A Sender fed arbitrary acknowledgements, completions, removals and timer checks: no
//!    token completes twice or before it left the send queue, the counts stay consistent.
#![no_main]

use arbitrary::{Result, Unstructured};
use droce_transport::ud::reliable::{
    Config, Delivery, EndpointKey, Header, Peer, Receiver, Sender, Seq, TimerAction, HEADER_LEN,
};
use droce_transport::{Duration, Gid, Instant, Qpn};
use libfuzzer_sys::fuzz_target;
use std::collections::{HashMap, HashSet, VecDeque};

const RTO: Duration = Duration::from_micros(100);
/// What the retransmission timeout backs off to while the peer does not answer.
const MAX_RTO: Duration = Duration::from_micros(400);
const FAIL_AFTER: Duration = Duration::from_micros(2_000);
const WINDOW: usize = 6;
/// More send slots than the window, so that a full window is reached.
const SLOTS: usize = WINDOW + 2;
const MAX_WIRE: usize = 64;
const STEPS: usize = 512;

fn cfg() -> Config {
    Config { retransmit_timeout: RTO, max_retransmit_timeout: MAX_RTO, fail_after: FAIL_AFTER, window: WINDOW, max_channels: 8 }
}

fn peer(n: u8) -> Peer {
    Peer { gid: Gid([n; 16]), qpn: Qpn::new(0x100 + n as u32) }
}

/// A datagram in flight: the header as emitted and the message number it carries (`None`
/// for an acknowledgement alone).
#[derive(Clone, Copy)]
struct Frame {
    hdr: [u8; HEADER_LEN],
    msg: Option<u64>,
}

struct Node {
    peer: Peer,
    tx: Sender<usize>,
    rx: Receiver,
    slots: [Option<([u8; HEADER_LEN], u64)>; SLOTS],
    /// The send queue: frames posted, not yet on the wire (slot None: an acknowledgement).
    sq: VecDeque<(Option<usize>, Frame)>,
    next_msg: u64,
    completed: u64,
    delivered: u64,
    failed: bool,
    failed_at: Option<Instant>,
    /// When an acknowledgement last made progress (or the first datagram was sent).
    progress_at: Instant,
}

impl Node {
    fn new(n: u8) -> Node {
        Node {
            peer: peer(3 - n),
            tx: Sender::new(EndpointKey::new(n as u16, 1), cfg()),
            rx: Receiver::new(&cfg()),
            slots: [None; SLOTS],
            sq: VecDeque::new(),
            next_msg: 0,
            completed: 0,
            delivered: 0,
            failed: false,
            failed_at: None,
            progress_at: Instant::ZERO,
        }
    }

    fn in_use(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    fn check(&self) {
        assert!(self.tx.unacked() <= self.in_use(), "unacknowledged datagrams hold a slot");
        assert!(self.in_use() <= WINDOW, "the window bounds what is kept");
        assert_eq!(self.tx.is_window_full(), self.in_use() >= WINDOW, "the sender keeps exactly the datagrams not done");
        assert!(self.rx.channels() <= cfg().max_channels);
        assert_eq!(self.tx.poll_timeout().is_some(), self.tx.needs_timer());
        if self.failed {
            assert!(self.tx.is_failed() && !self.tx.needs_timer());
        }
    }

    /// Posts one message if a slot is free and the window allows.
    fn send(&mut self, now: Instant) {
        if self.failed {
            return;
        }
        let Some(slot) = self.slots.iter().position(|s| s.is_none()) else { return };
        if self.tx.is_window_full() {
            return;
        }
        let ack = self.rx.take_ack_for(self.peer);
        let mut hdr = [0u8; HEADER_LEN];
        self.tx.next_header(ack).emit(&mut hdr);
        if self.tx.unacked() == 0 {
            self.progress_at = now;
        }
        assert_eq!(self.tx.push(slot).map(|s| s.0 as u64), Ok(self.next_msg));
        self.slots[slot] = Some((hdr, self.next_msg));
        self.sq.push_back((Some(slot), Frame { hdr, msg: Some(self.next_msg) }));
        self.next_msg += 1;
    }

    fn done(&mut self, slot: usize) {
        assert!(self.slots[slot].take().is_some(), "a slot completes once");
        assert!(!self.sq.iter().any(|(s, _)| *s == Some(slot)), "done while still in the send queue");
        self.completed += 1;
    }

    /// The send queue leaves; `keep` says which frames the link carries.
    fn transmit(&mut self, wire: &mut Vec<Frame>, mut keep: impl FnMut() -> bool) {
        while let Some((slot, f)) = self.sq.pop_front() {
            if keep() {
                if wire.len() >= MAX_WIRE {
                    wire.remove(0);
                }
                wire.push(f);
            }
            if let Some(slot) = slot {
                if !self.sq.iter().any(|(s, _)| *s == Some(slot)) && self.tx.on_sent(slot) {
                    self.done(slot);
                }
            }
        }
    }

    fn receive(&mut self, now: Instant, f: Frame) -> bool {
        let h = Header::parse(&f.hdr).expect("an emitted header parses");
        let mut fast = false;
        if let Some(a) = h.ack {
            assert_eq!(a.ep, self.tx.key(), "acknowledgements reach the endpoint they name");
            let before = self.tx.unacked();
            let mut done = Vec::new();
            fast = self.tx.on_ack(a.seq, &mut done);
            // (a channel that saw nothing in order acknowledges Seq(0) - 1)
            assert!(a.seq.0.wrapping_add(1) as u64 <= self.next_msg, "nothing is acknowledged before it was sent");
            if self.tx.unacked() < before {
                self.progress_at = now;
            }
            for s in done {
                self.done(s);
            }
        }
        if h.src == EndpointKey::NONE {
            assert!(f.msg.is_none());
            return fast;
        }
        let msg = f.msg.expect("a datagram carries a message");
        assert_eq!(h.seq.0 as u64, msg, "sequence numbers follow the messages");
        if self.rx.on_datagram(self.peer, h.src, h.seq) == Delivery::Deliver {
            assert_eq!(msg, self.delivered, "delivered once and in order");
            self.delivered += 1;
        }
        fast
    }

    fn timers(&mut self, now: Instant) {
        let mut out = Vec::new();
        let had = self.tx.needs_timer();
        match self.tx.handle_timeout(now, &mut out) {
            TimerAction::Idle => assert!(out.is_empty()),
            TimerAction::Retransmit => {
                assert!(had);
                for slot in out {
                    let (mut hdr, msg) = self.slots[slot].expect("kept until done");
                    assert!(!self.sq.iter().any(|(s, _)| *s == Some(slot)), "only what left the send queue goes again");
                    if let Some(a) = self.rx.take_ack_for(self.peer) {
                        Header::emit_ack(Some(a), &mut hdr);
                    }
                    self.sq.push_back((Some(slot), Frame { hdr, msg: Some(msg) }));
                    self.tx.requeued(slot);
                    assert!(self.tx.is_queued(slot));
                }
            }
            TimerAction::Fail => {
                assert!(had);
                assert!(now - self.progress_at >= FAIL_AFTER, "gave up {:?} after progress", now - self.progress_at);
                self.failed = true;
                self.failed_at = Some(now);
                for slot in out {
                    self.done(slot);
                }
            }
        }
    }

    /// Acknowledgements that found no datagram to ride on go alone (those owed to strangers
    /// are dropped).
    fn lone_acks(&mut self) {
        while let Some((to, ack)) = self.rx.pop_ack_due() {
            if to != self.peer {
                continue;
            }
            let mut hdr = [0u8; HEADER_LEN];
            Header::ack_only(ack).emit(&mut hdr);
            self.sq.push_back((None, Frame { hdr, msg: None }));
        }
    }
}

fn pair(u: &mut Unstructured) -> Result<()> {
    let mut nodes = [Node::new(1), Node::new(2)];
    let mut wires: [Vec<Frame>; 2] = [Vec::new(), Vec::new()];
    let mut now = Instant::ZERO;
    for _ in 0..STEPS {
        if u.is_empty() {
            break;
        }
        let i = u.choose_index(2)?;
        let n = &mut nodes[i];
        match u.int_in_range(0..=9u8)? {
            0 | 1 => n.send(now),
            2 => {
                let mut keep = Vec::new();
                for _ in 0..n.sq.len() {
                    keep.push(u.ratio(7u8, 8)?);
                }
                let mut k = keep.into_iter();
                n.transmit(&mut wires[i], || k.next().unwrap_or(true));
            }
            3 | 4 => {
                let w = &mut wires[1 - i];
                if !w.is_empty() {
                    let at = u.choose_index(w.len())?;
                    let f = if u.ratio(1u8, 8)? { w[at] } else { w.remove(at) };
                    if nodes[i].receive(now, f) && u.arbitrary()? {
                        nodes[i].timers(now);
                    }
                }
            }
            5 => {
                let w = &mut wires[1 - i];
                if !w.is_empty() {
                    let at = u.choose_index(w.len())?;
                    w.remove(at);
                }
            }
            6 => n.timers(now),
            7 => n.lone_acks(),
            8 => {
                now = match u.int_in_range(0..=2u8)? {
                    0 => now + Duration::from_micros(u.int_in_range(0..=50)?),
                    1 => now + Duration::from_micros(u.int_in_range(0..=3_000)?),
                    _ => n.tx.poll_timeout().map_or(now, |t| t.max(now)),
                };
            }
            _ => {
                // a stranger's datagram: any header from one of three other peers, its
                // endpoint one of two, so that the channels stay within the bound
                let mut hdr = [0u8; HEADER_LEN];
                u.fill_buffer(&mut hdr)?;
                if let Ok(h) = Header::parse(&hdr) {
                    let from = peer(10 + u.int_in_range(0..=2u8)?);
                    if h.src != EndpointKey::NONE {
                        let src = EndpointKey::from_raw(h.src.raw() & 1);
                        let _ = n.rx.on_datagram(from, src, h.seq);
                    }
                }
            }
        }
        for n in &nodes {
            n.check();
        }
    }
    let sent = [nodes[0].next_msg, nodes[1].next_msg];
    if u.arbitrary().unwrap_or(true) {
        // the link heals: what is in flight arrives, then everything is sent again until done
        for i in 0..2 {
            for f in std::mem::take(&mut wires[1 - i]) {
                nodes[i].receive(now, f);
            }
        }
        for _ in 0..10_000 {
            for i in 0..2 {
                let n = &mut nodes[i];
                n.timers(now);
                n.lone_acks();
                n.transmit(&mut wires[i], || true);
            }
            now = now + Duration::from_micros(10);
            for i in 0..2 {
                for f in std::mem::take(&mut wires[1 - i]) {
                    nodes[i].receive(now, f);
                }
                nodes[i].check();
            }
            let settled = |n: &Node| n.failed || (n.completed == n.next_msg && n.tx.unacked() == 0);
            if nodes.iter().all(settled) && nodes.iter().all(|n| !n.rx.has_ack_due()) {
                break;
            }
        }
        for i in 0..2 {
            let (n, p) = (&nodes[i], &nodes[1 - i]);
            assert_eq!(n.completed, sent[i], "every send completed");
            assert_eq!(n.in_use(), 0, "every slot came back");
            assert!(p.delivered <= sent[i]);
            if !n.failed {
                assert_eq!(p.delivered, sent[i], "everything sent by a live endpoint arrived");
            }
        }
    } else {
        // the link is cut: both senders give up in time and every slot comes back
        let cut = now;
        for _ in 0..10_000 {
            for n in nodes.iter_mut() {
                n.timers(now);
                n.lone_acks();
                n.transmit(&mut Vec::new(), || false);
            }
            if nodes.iter().all(|n| n.failed || n.in_use() == 0) {
                break;
            }
            now = now + Duration::from_micros(10);
        }
        for n in &nodes {
            assert_eq!(n.in_use(), 0, "every slot came back");
            assert_eq!(n.tx.unacked(), 0);
            if let Some(t) = n.failed_at.filter(|t| *t >= cut) {
                // checked every 10 us; armed one RTO after the first check, then due every
                // RTO, backed off up to MAX_RTO
                let limit = cut.max(n.progress_at) + FAIL_AFTER + RTO + MAX_RTO;
                assert!(t <= limit, "gave up at {t:?}, by {limit:?} at the latest");
            }
        }
    }
    Ok(())
}

/// Part 2: a Receiver with two channels at most, against a model of its rules.
fn receiver(u: &mut Unstructured) -> Result<()> {
    let cfg = Config { max_channels: 2, ..cfg() };
    let mut r = Receiver::new(&cfg);
    // (peer, key) -> (expected, last heard)
    let mut model: HashMap<(u8, u32), (u32, u64)> = HashMap::new();
    let mut heard = 0u64;
    for _ in 0..STEPS {
        if u.is_empty() {
            break;
        }
        let mut hdr = [0u8; HEADER_LEN];
        let len = u.int_in_range(0..=HEADER_LEN)?;
        u.fill_buffer(&mut hdr[..len])?;
        let Ok(h) = Header::parse(&hdr[..len]) else { continue };
        let p = u.int_in_range(0..=3u8)?;
        let key = EndpointKey::from_raw(h.src.raw() % 3);
        let seq = Seq(h.seq.0 % 4);
        heard += 1;
        if model.len() >= cfg.max_channels && !model.contains_key(&(p, key.raw())) {
            let old = *model.iter().min_by_key(|(_, v)| v.1).map(|(k, _)| k).unwrap();
            model.remove(&old);
        }
        let ch = model.entry((p, key.raw())).or_insert((0, 0));
        ch.1 = heard;
        let expect = if seq.0 == ch.0 {
            ch.0 += 1;
            Delivery::Deliver
        } else {
            Delivery::Drop
        };
        assert_eq!(r.on_datagram(peer(p), key, seq), expect);
        assert_eq!(r.channels(), model.len());
        if u.ratio(1u8, 4)? {
            let to = u.int_in_range(0..=3u8)?;
            if let Some(a) = r.take_ack_for(peer(to)) {
                let ch = model.get(&(to, a.ep.raw())).expect("acknowledgements are owed to known channels");
                assert_eq!(a.seq, Seq(ch.0.wrapping_sub(1)));
            }
        }
        if u.ratio(1u8, 8)? {
            let mut n = 0;
            while let Some((to, a)) = r.pop_ack_due() {
                let pn = to.gid.0[0];
                assert!(model.contains_key(&(pn, a.ep.raw())), "no acknowledgement for a forgotten channel");
                n += 1;
            }
            assert!(n <= cfg.max_channels, "one acknowledgement owed per channel");
            assert!(!r.has_ack_due());
        }
    }
    Ok(())
}

fn finish(t: u32, live: &mut HashSet<u32>, queued: &HashSet<u32>) {
    assert!(live.remove(&t), "token {t} completes once, and only a pushed one");
    assert!(!queued.contains(&t), "token {t} done while in the send queue");
}

/// Part 3: a Sender fed arbitrary acknowledgements and local events.
fn sender(u: &mut Unstructured) -> Result<()> {
    let mut s: Sender<u32> = Sender::new(EndpointKey::new(1, 1), cfg());
    let mut now = Instant::ZERO;
    let mut pushed = 0u32;
    let mut queued: HashSet<u32> = HashSet::new();
    let mut live: HashSet<u32> = HashSet::new();
    for _ in 0..STEPS {
        if u.is_empty() {
            break;
        }
        match u.int_in_range(0..=6u8)? {
            0 => {
                let full = s.is_window_full();
                match s.push(pushed) {
                    Ok(seq) => {
                        assert!(!full);
                        assert_eq!(seq, Seq(pushed));
                        queued.insert(pushed);
                        live.insert(pushed);
                        pushed += 1;
                    }
                    Err(_) => assert!(full),
                }
            }
            1 => {
                let seq = if u.arbitrary()? { Seq(u.arbitrary()?) } else { Seq(pushed.wrapping_sub(u.int_in_range(0..=3)?)) };
                let mut done = Vec::new();
                s.on_ack(seq, &mut done);
                for t in done {
                    finish(t, &mut live, &queued);
                }
            }
            2 => {
                let mut q: Vec<u32> = queued.iter().copied().collect();
                if !q.is_empty() {
                    q.sort_unstable();
                    let t = q[u.choose_index(q.len())?];
                    queued.remove(&t);
                    if s.on_sent(t) {
                        finish(t, &mut live, &queued);
                    }
                }
            }
            3 => {
                let mut out = Vec::new();
                match s.handle_timeout(now, &mut out) {
                    TimerAction::Idle => assert!(out.is_empty()),
                    TimerAction::Retransmit => {
                        for t in out {
                            assert!(live.contains(&t) && !queued.contains(&t), "only what left the send queue goes again");
                            s.requeued(t);
                            queued.insert(t);
                        }
                    }
                    TimerAction::Fail => {
                        for t in out {
                            finish(t, &mut live, &queued);
                        }
                        assert!(s.is_failed());
                    }
                }
            }
            4 => now = now + Duration::from_micros(u.int_in_range(0..=2_500)?),
            5 => {
                let mut l: Vec<u32> = live.iter().copied().collect();
                if !l.is_empty() {
                    l.sort_unstable();
                    let t = l[u.choose_index(l.len())?];
                    {
                        s.remove(t);
                        live.remove(&t);
                        queued.remove(&t);
                    }
                }
            }
            _ => {
                if u.ratio(1u8, 16)? {
                    let mut done = Vec::new();
                    s.fail(&mut done);
                    for t in done {
                        finish(t, &mut live, &queued);
                    }
                    assert!(!s.needs_timer() && s.poll_timeout().is_none());
                }
            }
        }
        assert!(s.unacked() <= live.len());
        assert_eq!(s.is_window_full(), live.len() >= WINDOW, "the sender keeps exactly the tokens not done");
        assert_eq!(s.poll_timeout().is_some(), s.needs_timer());
        for &t in &live {
            assert_eq!(s.is_queued(t), queued.contains(&t));
        }
    }
    // everything leaves the send queue and is acknowledged: every token is done
    for t in queued.drain().collect::<Vec<_>>() {
        if s.on_sent(t) {
            finish(t, &mut live, &queued);
        }
    }
    let mut done = Vec::new();
    s.on_ack(Seq(pushed.wrapping_sub(1)), &mut done);
    for t in done {
        finish(t, &mut live, &queued);
    }
    assert!(live.is_empty(), "tokens never done: {live:?}");
    assert_eq!(s.unacked(), 0);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let mut u = Unstructured::new(rest);
    let _ = match which % 3 {
        0 => pair(&mut u),
        1 => receiver(&mut u),
        _ => sender(&mut u),
    };
});
