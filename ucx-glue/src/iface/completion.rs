//! Progress: one runtime round, then this interface's completions. Receives become AM events
//! (droce_ud: through the reliability protocol first); send completions finish operations,
//! free slots and drive flush; endpoints to peers the runtime saw go fail.

use super::*;
use super::ud::{IMM_UD_ACK, UD_TIMER_EVERY};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{WcFlags, WorkCompletion};
use std::sync::atomic::{AtomicU64, Ordering};

impl Iface {
    /// Poll the host and this interface's completions.
    pub fn progress(&self) -> Progress {
        let mut out = Progress::default();
        let mut g = lock(&self.inner);
        if g.closed {
            return out;
        }
        let mut ev = std::mem::take(&mut g.ev_spare);
        let mut h = lock(self.host);
        let mut posted = false;
        if self.kind == Kind::Ud {
            // Acknowledgements that found no datagram to ride on since the last call, then due
            // retransmissions; both leave with this call's device poll.
            if g.ud_rx.has_ack_due() {
                self.ud_send_acks(&mut g, &mut h);
                posted = true;
            }
            g.tick = g.tick.wrapping_add(1);
            if g.ud_fast || g.tick % UD_TIMER_EVERY == 0 && g.eps.iter().flatten().any(|e| e.failed.is_none() && e.rel.as_ref().is_some_and(|r| r.needs_timer())) {
                g.ud_fast = false;
                self.ud_timers(&mut g, &mut h, &mut ev);
                posted = true;
            }
        }
        // The device (the CM agent, unused by UCX, only now and then), unless another
        // interface polled it since this one's last call and found nothing: one poll fills
        // every interface's completion queue, so on an idle worker with both droce_rc and
        // droce_ud the first of them in UCX's progress round polls and the second only takes
        // its completions (a second poll right after an empty one finds the ring as that one
        // left it, and still pays for the RX burst, the TX flush and the timer checks).
        let busy = {
            let gi = &mut *g;
            gi.stat_progress[0] += 1;
            let busy = match poll_turn(&mut gi.poll_seen, posted) {
                Turn::Poll => {
                    gi.stat_progress[1] += 1;
                    let b = h.progress_datapath();
                    polled(&mut gi.poll_seen, b);
                    b
                }
                Turn::Skip => false,
            };
            gi.stat_progress[2] += busy as u64;
            busy
        };
        let mut seen = g.lost_seen;
        let lost = h.lost_peers_since(&mut seen).to_vec();
        if !lost.is_empty() {
            g.lost_seen = seen;
            let gids: Vec<[u8; 16]> = lost.iter().map(|ip| gid_of(*ip)).collect();
            self.fail_lost_endpoints(&mut g, &mut h, &mut ev, &gids);
        }
        for _ in 0..POLL_BUDGET {
            let wc = match h.poll_cq_one(g.cq) {
                Ok(Some(wc)) => wc,
                _ => break,
            };
            out.count += 1;
            if (wc.opcode as u32) >= WcOpcode::Recv as u32 {
                self.rx_completion(&mut g, &mut h, &wc, &mut ev);
            } else {
                self.tx_completion(&mut g, &mut h, &wc, &mut ev);
            }
        }
        drop(h);
        g.stat_progress[3] += out.count as u64;
        if !g.iface_waiters.is_empty() && g.free_tx.len() == g.lay.tx_count {
            for comp in std::mem::take(&mut g.iface_waiters) {
                ev.push(Event::Complete { comp, status: UCS_OK });
            }
        }
        out.pending = !g.pending_rr.is_empty();
        // A long idle spell: let another runnable thread have this CPU. Both ends of a pair
        // busy-poll; on a machine with fewer free CPUs than pollers the peer (whose progress
        // sends the reply or the ACK) otherwise waits for the scheduler's timeslice. Once idle
        // for a millisecond, a short sleep instead: a thread that never sleeps can be left
        // unrun for seconds, and then it acknowledges nothing (`droce_dpdk::runtime::idle`).
        let mut give_up = None;
        if busy || out.count > 0 {
            g.idle = 0;
            g.idle_spell.reset();
        } else {
            g.idle = g.idle.saturating_add(1);
            if g.idle > idle_yield() {
                g.idle = 0;
                give_up = Some(g.idle_spell.give_up(std::time::Instant::now()));
            }
        }
        if ev.is_empty() {
            g.ev_spare = ev;
        } else {
            out.events = ev;
        }
        drop(g);
        if let Some(a) = give_up {
            a.act();
        }
        out
    }

    fn rx_completion(&self, g: &mut Inner, h: &mut Runtime, wc: &WorkCompletion, ev: &mut Vec<Event>) {
        let slot = wc.wr_id as u32;
        if wc.status != WcStatus::Success {
            return; // flushed at destroy
        }
        let skip = if self.kind == Kind::Ud { GRH + UD_HDR } else { 0 };
        let imm = wc.wc_flags.contains(WcFlags::WITH_IMM).then_some(wc.imm_data);
        if (wc.byte_len as usize) < skip || !imm.is_some_and(|i| i <= 0xff || (self.kind == Kind::Ud && i == IMM_UD_ACK)) {
            // not a droce AM: repost the buffer
            let _ = self.post_rx(g, h, slot);
            return;
        }
        if self.kind == Kind::Ud && !self.ud_rx(g, h, wc, slot, ev) {
            let _ = self.post_rx(g, h, slot);
            return;
        }
        ev.push(Event::Am { id: wc.imm_data as u8, addr: Self::rx_addr(g, slot) + skip as u64, len: wc.byte_len as usize - skip, slot });
    }
    /// An operation is over: its completion, its slot (`free`), its endpoint's flush waiters.
    pub(super) fn retire(g: &mut Inner, slot: u32, op: Op, status: Status, free: bool, ev: &mut Vec<Event>) {
        if op.comp != 0 {
            ev.push(Event::Complete { comp: op.comp, status });
        }
        if free {
            g.free_tx.push(slot);
        }
        if op.ep == NO_EP {
            return;
        }
        if let Some(ep) = g.eps[op.ep as usize].as_mut() {
            ep.inflight.remove(&op.seq);
            if !ep.waiters.is_empty() {
                let mut i = 0;
                while i < ep.waiters.len() {
                    if ep.flushed_below(ep.waiters[i].0) {
                        let (_, comp) = ep.waiters.swap_remove(i);
                        ev.push(Event::Complete { comp, status: ep.failed.unwrap_or(UCS_OK) });
                    } else {
                        i += 1;
                    }
                }
            }
        }
    }

    fn tx_completion(&self, g: &mut Inner, h: &mut Runtime, wc: &WorkCompletion, ev: &mut Vec<Event>) {
        let slot = wc.wr_id as u32;
        crate::trace!("{:?} tx completion slot {slot} {:?} {:?}", self.kind, wc.opcode, wc.status);
        let Some(mut op) = g.ops.get_mut(slot as usize).and_then(Option::take) else { return };
        let status = from_wc(wc.status);
        if op.ep == NO_EP {
            // an acknowledgement-only datagram, or an operation of a destroyed endpoint
            g.free_tx.push(slot);
            return;
        }
        if self.kind == Kind::Ud {
            if let Some(rel) = g.eps[op.ep as usize].as_mut().and_then(|e| e.rel.as_mut()) {
                if status == UCS_OK {
                    // Sent; it is over once the peer acknowledged it too.
                    if rel.on_sent(slot) {
                        let st = g.eps[op.ep as usize].as_ref().and_then(|e| e.failed).unwrap_or(UCS_OK);
                        Self::retire(g, slot, op, st, true, ev);
                    } else {
                        g.ops[slot as usize] = Some(op);
                    }
                    return;
                }
                rel.remove(slot);
            }
        }
        let mut free_slot = true;
        if status != UCS_OK {
            if let Some(ep) = g.eps[op.ep as usize].as_mut() {
                if ep.failed.is_none() {
                    let s = if status == UCS_ERR_CANCELED { UCS_ERR_ENDPOINT_TIMEOUT } else { status };
                    ep.failed = Some(s);
                    ev.push(Event::EpFailed { ep_c: ep.c, status: s, peer_gone: false });
                }
            }
            if op.comp != 0 {
                ev.push(Event::Complete { comp: op.comp, status });
            }
        } else {
            match op.kind {
                OpKind::Plain => {
                    if op.comp != 0 {
                        ev.push(Event::Complete { comp: op.comp, status: UCS_OK });
                    }
                }
                OpKind::GetBcopy { cb, arg, len } => {
                    ev.push(Event::Unpack { cb, arg, addr: Self::tx_addr(g, slot), len, slot });
                    if op.comp != 0 {
                        ev.push(Event::Complete { comp: op.comp, status: UCS_OK });
                    }
                    free_slot = false; // freed after the unpack callback ran
                }
                OpKind::Atomic(a) => {
                    if !self.atomic_done(g, h, slot, &mut op, a, ev) {
                        return; // sent again
                    }
                }
            }
        }
        op.comp = 0; // completed above
        Self::retire(g, slot, op, status, free_slot, ev);
    }

    /// After the events ran: repost receive slots, free GET bcopy slots; keeps the buffer.
    pub fn after_events(&self, mut events: Vec<Event>) {
        let mut g = lock(&self.inner);
        if g.closed {
            return;
        }
        let mut h = None;
        for e in &events {
            match *e {
                Event::Am { slot, .. } => {
                    let h = h.get_or_insert_with(|| lock(self.host));
                    let _ = self.post_rx(&mut g, h, slot);
                }
                Event::Unpack { slot, .. } => g.free_tx.push(slot),
                _ => {}
            }
        }
        drop(h);
        if events.capacity() > g.ev_spare.capacity() {
            events.clear();
            g.ev_spare = events;
        }
    }

    /// Peers the runtime found gone ([`Runtime::lost_peers_since`]: the process behind a memif link
    /// that went down; one link per peer on the zero-config mesh), by GID: every endpoint to
    /// one of them fails now with `UCS_ERR_ENDPOINT_TIMEOUT`, as it would after its retries,
    /// and not only those with an operation outstanding (a side waiting for a reply has none
    /// and waited forever); endpoints to other peers go on (an endpoint whose peer is not known
    /// yet fails with any loss). RC: the QP goes to the error state, so what is outstanding
    /// completes with flush errors through the usual path; UD: unacknowledged operations end
    /// here.
    fn fail_lost_endpoints(&self, g: &mut Inner, h: &mut Runtime, ev: &mut Vec<Event>, lost: &[[u8; 16]]) {
        for id in 0..g.eps.len() {
            let Some(e) = g.eps[id].as_mut() else { continue };
            if e.failed.is_some() {
                continue;
            }
            if e.peer_gid.is_some_and(|p| !lost.contains(&p)) {
                continue;
            }
            e.failed = Some(UCS_ERR_ENDPOINT_TIMEOUT);
            ev.push(Event::EpFailed { ep_c: e.c, status: UCS_ERR_ENDPOINT_TIMEOUT, peer_gone: true });
            if let Some(qp) = e.qp {
                let a = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
                let _ = h.modify_qp(qp, &a, QpAttrMask::STATE);
            }
            if let Some(rel) = e.rel.as_mut() {
                let mut over = std::mem::take(&mut g.ud_done);
                over.clear();
                rel.fail(&mut over);
                for &slot in &over {
                    if let Some(op) = g.ops[slot as usize].take() {
                        Self::retire(g, slot, op, UCS_ERR_ENDPOINT_TIMEOUT, true, ev);
                    }
                }
                g.ud_done = over;
            }
        }
    }
}

/// Device polls made by any interface of this process, and how many of them found work; only
/// changed with the host's lock held (the runtime is one per process).
static DEVICE_POLLS: AtomicU64 = AtomicU64::new(0);
static DEVICE_BUSY_POLLS: AtomicU64 = AtomicU64::new(0);

/// What an interface saw of [`DEVICE_POLLS`] and [`DEVICE_BUSY_POLLS`] at its last progress call.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct PollSeen {
    polls: u64,
    busy: u64,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Turn {
    Poll,
    Skip,
}

/// Whether this progress call polls the device. It skips when another interface polled since
/// this one's last call and none of those polls found work: the ring was empty a moment ago.
/// It polls when nobody else did (the other interface stopped progressing), when a poll since
/// found work (a stream: the ring may hold the next burst already, as many frames per round
/// as with a poll per interface), and when this call queued frames of its own (droce_ud's
/// acknowledgements and retransmissions leave with the call's poll). Call [`polled`] after
/// a poll.
pub(super) fn poll_turn(seen: &mut PollSeen, posted: bool) -> Turn {
    let now = PollSeen { polls: DEVICE_POLLS.load(Ordering::Relaxed), busy: DEVICE_BUSY_POLLS.load(Ordering::Relaxed) };
    if posted || now.polls == seen.polls || now.busy != seen.busy {
        return Turn::Poll;
    }
    *seen = now;
    Turn::Skip
}

/// Count a device poll (`busy`: it found work) and remember it as this interface's last sight.
pub(super) fn polled(seen: &mut PollSeen, busy: bool) {
    seen.polls = DEVICE_POLLS.fetch_add(1, Ordering::Relaxed) + 1;
    seen.busy = if busy { DEVICE_BUSY_POLLS.fetch_add(1, Ordering::Relaxed) + 1 } else { DEVICE_BUSY_POLLS.load(Ordering::Relaxed) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two interfaces progressed in turn: while the first one's polls find nothing the second
    /// skips; after a poll that found work it polls too; alone, it polls at every call; a call
    /// that queued its own frames always polls.
    #[test]
    fn one_poll_per_idle_round_of_two_interfaces() {
        let (mut a, mut b) = (PollSeen::default(), PollSeen::default());
        assert_eq!(poll_turn(&mut a, false), Turn::Poll);
        polled(&mut a, false);
        for _ in 0..3 {
            assert_eq!(poll_turn(&mut b, false), Turn::Skip);
            assert_eq!(poll_turn(&mut a, false), Turn::Poll);
            polled(&mut a, false);
        }
        // a found work: b looks too
        assert_eq!(poll_turn(&mut b, false), Turn::Skip);
        assert_eq!(poll_turn(&mut a, false), Turn::Poll);
        polled(&mut a, true);
        assert_eq!(poll_turn(&mut b, false), Turn::Poll);
        polled(&mut b, false);
        // b polled, found nothing: a skips this once
        assert_eq!(poll_turn(&mut a, false), Turn::Skip);
        assert_eq!(poll_turn(&mut b, true), Turn::Poll, "its own acknowledgements leave now");
        polled(&mut b, false);
        // a is gone: b polls at every call
        assert_eq!(poll_turn(&mut b, false), Turn::Poll);
        polled(&mut b, false);
        assert_eq!(poll_turn(&mut b, false), Turn::Poll);
    }
}
