//! Reliable UD (`droce_transport::ud::reliable`) between two nodes over a seeded link that
//! drops, duplicates and reorders datagrams, with a virtual clock: every message of both
//! directions must be delivered exactly once and in order, and every send must complete.
//! A second run cuts the link for good: both senders must give up after `fail_after`.

use droce_transport::ud::reliable::{Config, Delivery, EndpointKey, Header, Peer, Receiver, Sender, TimerAction, HEADER_LEN};
use droce_transport::{Duration, Gid, Instant, Qpn};
use std::collections::VecDeque;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
}

/// A datagram on the wire: the reliability header and the message number it carries.
#[derive(Clone, Copy)]
struct Frame {
    hdr: [u8; HEADER_LEN],
    msg: u64,
    at: Instant,
}

const SLOTS: usize = 16;
const STEP: Duration = Duration::from_micros(50);

struct Node {
    me: Peer,
    peer: Peer,
    tx: Sender<usize>,
    rx: Receiver,
    /// send slots: the header and message of the datagram each holds
    slots: [Option<([u8; HEADER_LEN], u64)>; SLOTS],
    free: Vec<usize>,
    /// the send queue: slots posted, not yet on the wire (None: an acknowledgement-only datagram)
    sq: VecDeque<(Option<usize>, [u8; HEADER_LEN], u64)>,
    next_msg: u64,
    completed: u64,
    delivered: u64,
    failed: bool,
    fast: bool,
}

impl Node {
    fn new(n: u8, cfg: Config) -> Node {
        let me = Peer { gid: Gid([n; 16]), qpn: Qpn::new(0x100 + n as u32) };
        let peer = Peer { gid: Gid([3 - n; 16]), qpn: Qpn::new(0x100 + (3 - n) as u32) };
        Node {
            me,
            peer,
            tx: Sender::new(EndpointKey::new(n as u16, 1), cfg),
            rx: Receiver::new(&cfg),
            slots: [None; SLOTS],
            free: (0..SLOTS).collect(),
            sq: VecDeque::new(),
            next_msg: 0,
            completed: 0,
            delivered: 0,
            failed: false,
            fast: false,
        }
    }

    /// Posts new messages while slots are free (up to `total`).
    fn send(&mut self, total: u64) {
        while self.next_msg < total && !self.failed {
            let Some(slot) = self.free.pop() else { return };
            let ack = self.rx.take_ack_for(self.peer);
            let mut hdr = [0u8; HEADER_LEN];
            self.tx.next_header(ack).emit(&mut hdr);
            self.slots[slot] = Some((hdr, self.next_msg));
            self.sq.push_back((Some(slot), hdr, self.next_msg));
            self.tx.push(slot).expect("window is larger than the slots");
            self.next_msg += 1;
        }
    }

    fn done(&mut self, slot: usize) {
        self.slots[slot] = None;
        self.free.push(slot);
        self.completed += 1;
    }

    /// The send queue goes on the wire; each datagram's local completion follows.
    fn transmit(&mut self, now: Instant, wire: &mut Vec<Frame>, rng: &mut Rng, cut: bool) {
        while let Some((slot, hdr, msg)) = self.sq.pop_front() {
            if !cut && !rng.chance(100) {
                let at = now + Duration::from_micros(rng.next() % 400);
                wire.push(Frame { hdr, msg, at });
                if rng.chance(50) {
                    wire.push(Frame { hdr, msg, at: at + Duration::from_micros(rng.next() % 400) });
                }
            }
            if let Some(slot) = slot {
                if self.tx.on_sent(slot) {
                    self.done(slot);
                }
            }
        }
    }

    fn receive(&mut self, f: Frame, log: &mut Vec<u64>) {
        let h = Header::parse(&f.hdr).expect("well-formed");
        if let Some(a) = h.ack {
            assert_eq!(a.ep, self.tx.key(), "acknowledgements reach the endpoint they name");
            let mut done = Vec::new();
            self.fast |= self.tx.on_ack(a.seq, &mut done);
            for s in done {
                self.done(s);
            }
        }
        if h.src == EndpointKey::NONE {
            return;
        }
        if self.rx.on_datagram(self.peer, h.src, h.seq) == Delivery::Deliver {
            log.push(f.msg);
            self.delivered += 1;
        }
    }

    fn timers(&mut self, now: Instant, every: bool) {
        if !(every || std::mem::take(&mut self.fast)) {
            return;
        }
        let mut out = Vec::new();
        match self.tx.handle_timeout(now, &mut out) {
            TimerAction::Idle => {}
            TimerAction::Retransmit => {
                for slot in out {
                    let (mut hdr, msg) = self.slots[slot].expect("kept until done");
                    if let Some(a) = self.rx.take_ack_for(self.peer) {
                        Header::emit_ack(Some(a), &mut hdr);
                    }
                    self.sq.push_back((Some(slot), hdr, msg));
                    self.tx.requeued(slot);
                }
            }
            TimerAction::Fail => {
                self.failed = true;
                for slot in out {
                    self.done(slot);
                }
            }
        }
    }

    /// Acknowledgements that found no datagram to ride on go alone.
    fn lone_acks(&mut self) {
        while let Some((to, ack)) = self.rx.pop_ack_due() {
            assert_eq!(to, self.peer);
            let mut hdr = [0u8; HEADER_LEN];
            Header::ack_only(ack).emit(&mut hdr);
            self.sq.push_back((None, hdr, u64::MAX));
        }
    }
}

/// Runs both nodes until both sent and completed `total` messages (or `max_steps`); returns
/// the nodes and what each delivered.
fn run(seed: u64, total: u64, cut_after: Option<u64>, max_steps: u64) -> ([Node; 2], [Vec<u64>; 2], Instant) {
    let cfg = Config { retransmit_timeout: Duration::from_millis(2), fail_after: Duration::from_millis(200), window: 64, max_channels: 8 };
    let mut nodes = [Node::new(1, cfg), Node::new(2, cfg)];
    let mut wires: [Vec<Frame>; 2] = [Vec::new(), Vec::new()];
    let mut logs: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    let mut rng = Rng(seed);
    let mut now = Instant::ZERO;
    for step in 0..max_steps {
        let cut = cut_after.is_some_and(|c| step >= c);
        for i in 0..2 {
            let n = &mut nodes[i];
            n.send(total);
            n.timers(now, step % 8 == 0);
            n.lone_acks();
            n.transmit(now, &mut wires[i], &mut rng, cut);
        }
        now = now + STEP;
        for i in 0..2 {
            // frames due by now, in arrival order (the random delays reorder them)
            let w = &mut wires[1 - i];
            w.sort_by_key(|f| std::cmp::Reverse(f.at));
            while w.last().is_some_and(|f| f.at <= now) {
                let f = w.pop().expect("checked");
                nodes[i].receive(f, &mut logs[i]);
            }
        }
        let finished = nodes.iter().all(|n| n.failed || (n.completed == total && n.delivered == total));
        if finished {
            break;
        }
    }
    for n in &nodes {
        assert_eq!(n.me.gid.0[0] + n.peer.gid.0[0], 3);
    }
    (nodes, logs, now)
}

#[test]
fn lossy_duplicating_reordering_link_delivers_everything_once_in_order() {
    for seed in [1u64, 0xfeed, 0x1234_5678_9abc] {
        let total = 3000;
        let (nodes, logs, now) = run(seed, total, None, 2_000_000);
        for (n, log) in nodes.iter().zip(&logs) {
            assert!(!n.failed, "seed {seed}: no endpoint fails on a link that delivers 90%");
            assert_eq!(n.completed, total, "seed {seed}: every send completed");
            assert_eq!(log.len() as u64, total, "seed {seed}: every message delivered");
            assert!(log.iter().copied().eq(0..total), "seed {seed}: exactly once, in order");
            assert_eq!(n.free.len(), SLOTS, "seed {seed}: every slot returned");
        }
        assert!(now < Instant::ZERO + Duration::from_millis(60_000), "seed {seed}: took {now:?}");
    }
}

#[test]
fn a_cut_link_fails_both_senders_after_fail_after() {
    let (nodes, logs, now) = run(7, 1_000_000, Some(200), 100_000);
    for (n, log) in nodes.iter().zip(&logs) {
        assert!(n.failed, "the sender gave up");
        assert_eq!(n.free.len(), SLOTS, "its slots came back");
        assert!(log.iter().copied().eq(0..log.len() as u64), "what arrived arrived in order");
    }
    // the cut is at 10 ms; giving up takes 200 ms without progress, checked every 2 ms timer
    let t = now.as_nanos() / 1_000_000;
    assert!((200..260).contains(&t), "gave up at {t} ms");
}
