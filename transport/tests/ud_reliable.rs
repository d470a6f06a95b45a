//! Reliable UD (`droce_transport::ud::reliable`) between two nodes over a seeded link that
//! drops, duplicates and reorders datagrams, with a virtual clock: every message of both
//! directions must be delivered exactly once and in order, and every send must complete.
//! A second run cuts the link for good: both senders must give up after `fail_after`.

mod rng;

use droce_transport::ud::reliable::{Config, Delivery, EndpointKey, Header, Peer, Receiver, Sender, TimerAction, HEADER_LEN};
use droce_transport::{Duration, Gid, Instant, Qpn};
use rng::Rng;
use std::collections::VecDeque;

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
    /// Datagrams that left the send queue (first copies and retransmissions; not the
    /// acknowledgement-only ones), lost or not.
    data_frames: u64,
    /// [`Node::data_frames`] sent while the other node was not running.
    data_frames_peer_away: u64,
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
            data_frames: 0,
            data_frames_peer_away: 0,
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
            self.data_frames += slot.is_some() as u64;
            if !cut && !rng.per_mille(100) {
                let at = now + Duration::from_micros(rng.next() % 400);
                wire.push(Frame { hdr, msg, at });
                if rng.per_mille(50) {
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

/// Short timers, so that a test's simulated time is short: 2 ms retransmission (backed off
/// to 16), 200 ms to fail, 64 datagrams in flight.
fn test_cfg() -> Config {
    Config {
        retransmit_timeout: Duration::from_millis(2),
        max_retransmit_timeout: Duration::from_millis(16),
        fail_after: Duration::from_millis(200),
        window: 64,
        max_channels: 8,
    }
}

/// Runs both nodes until both sent and completed `total` messages (or `max_steps`); returns
/// the nodes and what each delivered.
fn run(seed: u64, total: u64, cut_after: Option<u64>, max_steps: u64) -> ([Node; 2], [Vec<u64>; 2], Instant) {
    run_with(test_cfg(), seed, total, cut_after, None, max_steps)
}

/// [`run`] with node 2 not running at all during `pause` (steps: it neither sends, nor checks
/// its timers, nor receives; what reaches it waits, as in a receive ring).
fn run_with(cfg: Config, seed: u64, total: u64, cut_after: Option<u64>, pause: Option<core::ops::Range<u64>>, max_steps: u64) -> ([Node; 2], [Vec<u64>; 2], Instant) {
    let mut nodes = [Node::new(1, cfg), Node::new(2, cfg)];
    let mut wires: [Vec<Frame>; 2] = [Vec::new(), Vec::new()];
    let mut logs: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    let mut rng = Rng(seed);
    let mut now = Instant::ZERO;
    for step in 0..max_steps {
        let cut = cut_after.is_some_and(|c| step >= c);
        let paused = pause.as_ref().is_some_and(|p| p.contains(&step));
        let sent_before = nodes[0].data_frames;
        for i in 0..2 {
            if i == 1 && paused {
                continue;
            }
            let n = &mut nodes[i];
            n.send(total);
            n.timers(now, step % 8 == 0);
            n.lone_acks();
            n.transmit(now, &mut wires[i], &mut rng, cut);
        }
        if paused {
            nodes[0].data_frames_peer_away += nodes[0].data_frames - sent_before;
        }
        now = now + STEP;
        for i in 0..2 {
            if i == 1 && paused {
                continue;
            }
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

/// Node 2 stops running for 150 ms (less than fail_after) in the middle of a stream: node 1
/// sends its window again once, then probes with the oldest datagram at backed-off timeouts
/// (2, 4, 8, 16, 16 ... ms), and the stream completes when node 2 is back. With a fixed
/// timeout it sent its whole window (16 slots) every 2 ms: about 1200 datagrams into a peer
/// that was not reading.
#[test]
fn a_peer_that_stops_running_is_probed_not_flooded() {
    let cfg = test_cfg();
    let total = 2000;
    // 50 us steps: the pause is 10 ms to 160 ms
    let (pause_from, pause_to) = (200, 3200);
    let (nodes, logs, _) = run_with(cfg, 3, total, None, Some(pause_from..pause_to), 2_000_000);
    let during = nodes[0].data_frames_peer_away;
    for (n, log) in nodes.iter().zip(&logs) {
        assert!(!n.failed, "no endpoint fails: the pause is shorter than fail_after");
        assert!(log.iter().copied().eq(0..total), "everything delivered once, in order");
        assert_eq!(n.completed, total);
    }
    // one window (16) again, then probes every 2, 4, 8, 16, 16, ... ms: about 27 in 150 ms
    assert!((16..=16 + 150 / 2).contains(&during), "node 1 sent {during} datagrams to a peer away for 150 ms");
}

/// Reliable UD on two simulated devices (`droce_transport::sim`): the reliability header rides
/// at the head of real UD SENDs between two UD QPs, as the UCX `droce_ud` transport sends it.
/// What the link model above cannot show: frames with a real ICRC whose bit flips the
/// receiving device must drop (a corrupted datagram must never be delivered), receives that
/// run out (a UD datagram with no receive posted is dropped by the device), the sender's
/// address read back from the GRH area, and send completions from the device's own queue.
mod on_sim {
    use droce_transport::qp::QpHandle;
    use droce_transport::sim::{LinkConfig, Node, Pair, MEM_BASE};
    use droce_transport::status::{WcOpcode, WcStatus};
    use droce_transport::ud::reliable::{Config, Delivery, EndpointKey, Header, Peer, Receiver, Sender, TimerAction, HEADER_LEN};
    use droce_transport::ud::{grh_source, GRH_LEN};
    use droce_transport::verbs::{RecvWr, SendOpcode, SendWr, UdDest};
    use droce_transport::{Duration, Instant, Memory, QKey};

    const MEM: usize = 1 << 20;
    const QK: QKey = QKey(0x1111_1111);
    /// Send slots (more than the receives the peer posts, so that receives run out).
    const SLOTS: u64 = 16;
    const SLOT_LEN: u64 = 1024;
    const ACK_BUFS: u64 = 16;
    const ACK_BASE: u64 = MEM_BASE + 0x1_0000;
    const RECVS: u64 = 10;
    const RECV_LEN: u64 = GRH_LEN as u64 + SLOT_LEN;
    const RECV_BASE: u64 = MEM_BASE + 0x2_0000;
    /// Send completions of acknowledgement-only datagrams carry this plus their buffer.
    const ACK_WR: u64 = 1 << 32;

    /// Message `m`: its number and a pattern, 8 to 907 bytes after the header.
    fn body(m: u64) -> Vec<u8> {
        let n = 8 + (m * 37 % 900) as usize;
        let mut b = m.to_le_bytes().to_vec();
        b.extend((8..n).map(|i| (m as u8).wrapping_mul(31) ^ i as u8));
        b
    }

    /// One side's endpoint: what the frontend keeps next to its device.
    struct Ep {
        qp: QpHandle,
        /// The peer's UD QP, as a destination and as the receiver names it.
        dest: UdDest,
        peer: Peer,
        tx: Sender<u64>,
        rx: Receiver,
        /// Message in each send slot (None: free).
        slots: [Option<u64>; SLOTS as usize],
        free_acks: Vec<u64>,
        next_msg: u64,
        completed: u64,
        delivered: u64,
        retransmits: u64,
        lone_acks: u64,
    }

    impl Ep {
        fn new(node: &mut Node, qp: QpHandle, dest: UdDest, key: EndpointKey, cfg: Config) -> Ep {
            let lkey = node.mr.lkey;
            for k in 0..RECVS {
                node.dev.post_recv(qp, RecvWr::new(k).with_sge(RECV_BASE + k * RECV_LEN, RECV_LEN as u32, lkey)).unwrap();
            }
            let peer = Peer { gid: dest.av.dgid, qpn: dest.remote_qpn };
            Ep {
                qp,
                dest,
                peer,
                tx: Sender::new(key, cfg),
                rx: Receiver::new(&cfg),
                slots: [None; SLOTS as usize],
                free_acks: (0..ACK_BUFS).collect(),
                next_msg: 0,
                completed: 0,
                delivered: 0,
                retransmits: 0,
                lone_acks: 0,
            }
        }

        fn post(&self, node: &mut Node, wr_id: u64, addr: u64, len: usize) {
            let wr = SendWr::new(wr_id, SendOpcode::Send).with_sge(addr, len as u32, node.mr.lkey).with_ud(self.dest);
            node.dev.post_send(self.qp, wr).expect("post_send");
        }

        /// New messages while a slot is free and the window allows.
        fn send(&mut self, node: &mut Node, total: u64) {
            while self.next_msg < total && !self.tx.is_window_full() {
                let Some(slot) = self.slots.iter().position(Option::is_none) else { return };
                let mut hdr = [0u8; HEADER_LEN];
                self.tx.next_header(self.rx.take_ack_for(self.peer)).emit(&mut hdr);
                let mut d = hdr.to_vec();
                d.extend(body(self.next_msg));
                let addr = MEM_BASE + slot as u64 * SLOT_LEN;
                node.dev.memory_mut().write(addr, &d).unwrap();
                self.post(node, slot as u64, addr, d.len());
                self.tx.push(slot as u64).expect("window checked");
                self.slots[slot] = Some(self.next_msg);
                self.next_msg += 1;
            }
        }

        fn timers(&mut self, node: &mut Node, now: Instant) {
            if !self.tx.poll_timeout().is_some_and(|t| t <= now) {
                return;
            }
            let mut out = Vec::new();
            match self.tx.handle_timeout(now, &mut out) {
                TimerAction::Idle => {}
                TimerAction::Retransmit => {
                    for slot in out {
                        let m = self.slots[slot as usize].expect("kept until done");
                        let addr = MEM_BASE + slot * SLOT_LEN;
                        // a copy sent again carries a fresh acknowledgement
                        if let Some(a) = self.rx.take_ack_for(self.peer) {
                            let mut hdr = [0u8; HEADER_LEN];
                            hdr.copy_from_slice(node.dev.memory().slice(addr, HEADER_LEN));
                            Header::emit_ack(Some(a), &mut hdr);
                            node.dev.memory_mut().write(addr, &hdr).unwrap();
                        }
                        self.post(node, slot, addr, HEADER_LEN + body(m).len());
                        self.tx.requeued(slot);
                        self.retransmits += 1;
                    }
                }
                TimerAction::Fail => panic!("an endpoint gave up on a link that delivers most frames"),
            }
        }

        /// Acknowledgements that found no datagram to ride on go alone.
        fn lone_acks(&mut self, node: &mut Node) {
            while let Some(&buf) = self.free_acks.last() {
                let Some((to, ack)) = self.rx.pop_ack_due() else { return };
                assert_eq!(to, self.peer, "acknowledgements are owed to the one peer");
                self.free_acks.pop();
                let mut hdr = [0u8; HEADER_LEN];
                Header::ack_only(ack).emit(&mut hdr);
                let addr = ACK_BASE + buf * HEADER_LEN as u64;
                node.dev.memory_mut().write(addr, &hdr).unwrap();
                self.post(node, ACK_WR + buf, addr, HEADER_LEN);
                self.lone_acks += 1;
            }
        }

        /// The device's completions: sends leave the queue, datagrams arrive.
        fn completions(&mut self, node: &mut Node) {
            while let Some(wc) = node.poll() {
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                if wc.opcode == WcOpcode::Send {
                    if wc.wr_id >= ACK_WR {
                        self.free_acks.push(wc.wr_id - ACK_WR);
                    } else if self.tx.on_sent(wc.wr_id) {
                        self.done(wc.wr_id);
                    }
                    continue;
                }
                assert_eq!(wc.opcode, WcOpcode::Recv);
                let buf = RECV_BASE + wc.wr_id * RECV_LEN;
                let d = node.dev.memory().slice(buf, wc.byte_len as usize).to_vec();
                node.dev.post_recv(self.qp, RecvWr::new(wc.wr_id).with_sge(buf, RECV_LEN as u32, node.mr.lkey)).unwrap();
                let from = Peer { gid: grh_source(&d[..GRH_LEN]).expect("the GRH names the sender"), qpn: wc.src_qp };
                assert_eq!(from, self.peer);
                let h = Header::parse(&d[GRH_LEN..]).expect("a datagram starts with the header");
                if let Some(a) = h.ack {
                    assert_eq!(a.ep, self.tx.key());
                    let mut done = Vec::new();
                    self.tx.on_ack(a.seq, &mut done);
                    for slot in done {
                        self.done(slot);
                    }
                }
                if h.src == EndpointKey::NONE {
                    continue;
                }
                if self.rx.on_datagram(from, h.src, h.seq) == Delivery::Deliver {
                    assert_eq!(&d[GRH_LEN + HEADER_LEN..], &body(self.delivered)[..], "message {} arrived intact, in order", self.delivered);
                    self.delivered += 1;
                }
            }
        }

        fn done(&mut self, slot: u64) {
            assert!(self.slots[slot as usize].take().is_some(), "a send completes once");
            self.completed += 1;
        }
    }

    #[test]
    fn reliable_ud_over_two_simulated_devices_delivers_intact_once_in_order() {
        let link = LinkConfig {
            loss: 0.03,
            duplicate: 0.02,
            reorder: 0.05,
            reorder_window: Duration::from_micros(40),
            bit_flip: 0.03,
            delay: Duration::from_micros(2),
        };
        let cfg = Config {
            retransmit_timeout: Duration::from_micros(300),
            max_retransmit_timeout: Duration::from_millis(5),
            fail_after: Duration::from_millis(500),
            window: SLOTS as usize,
            max_channels: 4,
        };
        let total = 3000;
        for seed in [3u64, 0xc0ffee] {
            let mut p = Pair::new(link, seed, MEM);
            let (qa, qb) = p.ud_pair(QK);
            let (da, db) = (p.ud_dest(true, qb, QK), p.ud_dest(false, qa, QK));
            let mut eps = [Ep::new(&mut p.a, qa, da, EndpointKey::new(0, 1), cfg), Ep::new(&mut p.b, qb, db, EndpointKey::new(0, 7), cfg)];
            let mut rounds = 0u64;
            while rounds < 2_000_000 {
                rounds += 1;
                for (ep, node) in eps.iter_mut().zip([&mut p.a, &mut p.b]) {
                    ep.send(node, total);
                    ep.timers(node, p.now);
                    ep.lone_acks(node);
                }
                let timer = eps.iter().filter_map(|e| e.tx.poll_timeout()).min();
                p.step_with_timer(timer);
                for (ep, node) in eps.iter_mut().zip([&mut p.a, &mut p.b]) {
                    ep.completions(node);
                }
                if eps.iter().all(|e| e.delivered == total && e.completed == total && e.tx.unacked() == 0) {
                    break;
                }
            }
            let s = p.stats;
            for e in &eps {
                assert_eq!((e.delivered, e.completed), (total, total), "seed {seed}: after {rounds} rounds, {:?}", p.now);
                assert!(e.slots.iter().all(Option::is_none), "seed {seed}: every slot came back");
                assert!(e.retransmits > 0 && e.lone_acks > 0, "seed {seed}: losses were repaired, acknowledgements went alone");
            }
            // the faults happened: corrupted frames were caught by the ICRC, receives ran out
            let c = [p.a.dev.counters(), p.b.dev.counters()];
            let icrc = c[0].rcvd_icrc_err + c[1].rcvd_icrc_err;
            let no_recv = c[0].ud_no_recv_wqe + c[1].ud_no_recv_wqe;
            assert!(s.dropped > 0 && s.duplicated > 0 && s.reordered > 0 && s.flipped > 0, "seed {seed}: {s:?}");
            assert!(icrc > 0 && no_recv > 0, "seed {seed}: ICRC errors {icrc}, no receive posted {no_recv}");
            assert!(p.now < Instant::ZERO + Duration::from_millis(5_000), "seed {seed}: took {:?}", p.now);
            eprintln!(
                "seed {seed:#x}: {total} messages each way in {:?} (simulated), {} frames sent, {} dropped, {} flipped ({icrc} ICRC errors), {no_recv} with no receive posted, retransmits {}/{}",
                p.now,
                s.sent,
                s.dropped,
                s.flipped,
                eps[0].retransmits,
                eps[1].retransmits
            );
        }
    }
}
