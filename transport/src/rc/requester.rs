//! RC requester (IBA 9.7.2..9.7.4, rxe_req.c): turns send WQEs into request packets —
//! segmentation by path MTU, opcode sequences, PSNs, AckReq, limits on outstanding
//! READ/atomic requests, fencing — and rewinds for go-back-N retransmission.

use super::{packets_for, Payload, TxPkt};
use crate::status::WcStatus;
use crate::types::{Psn, Qpn};
use crate::verbs::{SendFlags, SendOpcode, SendWr, SgeList};
use crate::wire::opcode::Opcode;
use crate::wire::{AtomicEthRepr, RethRepr};
use std::collections::VecDeque;

/// rxe sets AckReq on the last packet of a message, and on a packet after more than this
/// many packets without one (RXE_MAX_PKT_PER_ACK): vector B1 has 64-packet WRITEs with
/// AckReq only on LAST.
pub const MAX_PKTS_PER_ACK: u32 = 64;

/// Floor of the loss-adaptive send window: rxe's fixed RXE_MAX_UNACKED_PSNS.
pub const MIN_WINDOW: u32 = 128;
/// PSNs the window grows by per acknowledgement that advances, after a loss shrank it.
pub const WINDOW_GROWTH: u32 = 8;

/// A posted send WQE and its progress.
#[derive(Debug, Clone)]
pub(crate) struct SendWqe {
    /// The work request without its gather list (`sg_list` is empty: see `sges`).
    pub wr: SendWr,
    pub sges: SgeList,
    /// The payload of an INLINE send, copied in at post time and kept until the WQE retires
    /// (a retransmission reads it again). The buffer comes from, and goes back to, the
    /// requester's [`inline_pool`](Requester::inline_pool).
    pub inline: Option<Vec<u8>>,
    pub len: u64,
    /// Set at post time when an SGE fails the lkey check: completes with this status.
    pub local_error: Option<WcStatus>,
    pub started: bool,
    pub first_psn: Psn,
    pub npkts: u32,
    /// READ response packets received so far.
    pub read_rcvd: u32,
    pub signaled: bool,
}

impl SendWqe {
    /// `wr`'s gather list is copied into the WQE, the rest of `wr` is kept without it.
    pub fn new(wr: &SendWr, inline: Option<Vec<u8>>, len: u64, local_error: Option<WcStatus>, signaled: bool) -> Self {
        SendWqe {
            wr: wr.without_sges(),
            sges: SgeList::from_slice(&wr.sg_list),
            inline,
            len,
            local_error,
            started: false,
            first_psn: Psn::ZERO,
            npkts: 0,
            read_rcvd: 0,
            signaled,
        }
    }
    pub fn last_psn(&self) -> Psn {
        self.first_psn + (self.npkts.max(1) - 1)
    }
    pub fn contains(&self, psn: Psn) -> bool {
        self.started && psn.in_window(self.first_psn, self.npkts.max(1))
    }
}

/// Limits from the QP attributes the requester obeys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReqLimits {
    pub mtu: u32,
    pub max_rd_atomic: u32,
    pub max_unacked_psns: u32,
    pub dest_qp: Qpn,
    /// The oldest PSN not yet acknowledged (completer's view).
    pub comp_psn: Psn,
}

#[derive(Debug, Default)]
pub(crate) struct Requester {
    pub sq: VecDeque<SendWqe>,
    /// Index into `sq` of the WQE being transmitted.
    pub next: usize,
    /// Packets of `sq[next]` already sent in this pass.
    pub sent_pkts: u32,
    /// Next PSN to put on the wire.
    pub psn: Psn,
    /// READ/atomic WQEs started and not yet completed.
    pub rd_atomic_inflight: u32,
    pub noack_pkts: u32,
    /// Paused while waiting for an RNR timer.
    pub rnr_wait: bool,
    /// The PSN after the highest one ever sent.
    pub sent_high: Psn,
    /// Loss-adaptive window (PSNs in flight): 0 means the configured `max_unacked_psns`.
    /// A go-back-N event halves it (not below [`MIN_WINDOW`]), every ACK that advances grows
    /// it by [`WINDOW_GROWTH`] back to the maximum: a large configured window keeps a
    /// shared-memory or fast link busy while the peer is briefly descheduled, without
    /// resending a whole large window again and again to a peer that drops bursts.
    pub cwnd: u32,
    /// The configured maximum seen at the last transmission.
    pub max_window: u32,
    /// Selective repeat: PSNs of request packets the responder reported missing, to be
    /// resent alone, ahead of new packets, in this order.
    pub resend: VecDeque<Psn>,
    /// Selective repeat: the PSN of the last sequence NAK, and how many NAKs before it were
    /// for the PSNs right before it.
    pub last_nak: Option<Psn>,
    pub nak_run: u32,
    /// Buffers of retired INLINE WQEs, for the next INLINE posts: posting allocates only
    /// until as many INLINE WQEs were outstanding at once as ever will be (at most
    /// `max_send_wr`, each buffer `max_inline_data` bytes).
    pub inline_pool: Vec<Vec<u8>>,
}

/// Why the requester cannot send right now (used for tests and scheduling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocked {
    Idle,
    Window,
    Fence,
    RdAtomicLimit,
    Rnr,
    LocalError,
}

impl Requester {
    /// A buffer of `len` zero bytes for an INLINE WQE, with room for `cap` (`max_inline_data`):
    /// a recycled one when there is one.
    pub fn take_inline(&mut self, len: usize, cap: usize) -> Vec<u8> {
        let mut v = self.inline_pool.pop().unwrap_or_else(|| Vec::with_capacity(cap.max(len)));
        v.clear();
        v.resize(len, 0);
        v
    }

    /// A WQE leaves the send queue: its inline buffer goes back to the pool.
    pub fn retire(&mut self, w: SendWqe) {
        if let Some(v) = w.inline {
            self.inline_pool.push(v);
        }
    }

    /// Whether a packet could be produced now.
    pub fn can_send(&self, lim: &ReqLimits) -> Result<(), Blocked> {
        if self.rnr_wait {
            return Err(Blocked::Rnr);
        }
        // Resends lie inside the window already.
        if !self.resend.is_empty() {
            return Ok(());
        }
        let Some(w) = self.sq.get(self.next) else { return Err(Blocked::Idle) };
        if w.local_error.is_some() {
            return Err(Blocked::LocalError);
        }
        // Do not run further ahead of the oldest unacknowledged PSN than the window.
        if self.psn.forward_distance(lim.comp_psn) >= self.window(lim.max_unacked_psns) {
            return Err(Blocked::Window);
        }
        if !w.started {
            // IBA 10.8.3.3 (fence): wait until every earlier READ/atomic has completed.
            if w.wr.flags.contains(SendFlags::FENCE) && self.rd_atomic_inflight > 0 {
                return Err(Blocked::Fence);
            }
            // C9-150 ..: never more outstanding READ/atomic requests than max_rd_atomic
            // (the responder's max_dest_rd_atomic).
            if w.wr.opcode.is_rd_atomic() && self.rd_atomic_inflight >= lim.max_rd_atomic {
                return Err(Blocked::RdAtomicLimit);
            }
        }
        Ok(())
    }

    /// The send window under the configured maximum `max`.
    pub fn window(&self, max: u32) -> u32 {
        if self.cwnd == 0 {
            max
        } else {
            self.cwnd.min(max)
        }
    }

    /// A loss was detected (sequence NAK or ACK timeout): halve the window.
    pub fn on_loss(&mut self) {
        let cur = self.window(self.max_window);
        let half = (cur / 2).max(MIN_WINDOW);
        self.cwnd = if half >= self.max_window { 0 } else { half };
    }

    /// An acknowledgement advanced: grow a shrunken window back.
    pub fn on_ack(&mut self) {
        if self.cwnd != 0 {
            self.cwnd = self.cwnd.saturating_add(WINDOW_GROWTH);
            if self.cwnd >= self.max_window {
                self.cwnd = 0;
            }
        }
    }

    /// Produce the next request packet: a selective resend if one is queued, else the next
    /// new packet (advancing PSN and WQE progress).
    pub fn next_packet(&mut self, lim: &ReqLimits) -> Option<TxPkt> {
        // With resends queued, `can_send` passes without looking at the new packet's limits:
        // those are checked again once the queue turned out to hold nothing to resend.
        let resends = !self.resend.is_empty();
        self.can_send(lim).ok()?;
        if resends {
            while let Some(psn) = self.resend.pop_front() {
                if let Some(p) = self.resend_packet(psn, lim) {
                    return Some(p);
                }
            }
            self.can_send(lim).ok()?;
        }
        Some(self.advance(lim))
    }

    /// The next packet of the WQE in progress, for a segment train (`device::transmit`):
    /// `next_packet` when the caller knows that nothing but the window can hold it back — no
    /// RNR wait, no resend queued (neither changes while a device transmits) — and the WQE at
    /// `next` was started (so its fence and READ/atomic limits were passed when it began).
    /// `None` when the WQE at `next` is not a started one or the window is full.
    pub fn next_started_packet(&mut self, lim: &ReqLimits) -> Option<TxPkt> {
        debug_assert!(!self.rnr_wait && self.resend.is_empty());
        let w = self.sq.get(self.next)?;
        if !w.started || w.local_error.is_some() || self.psn.forward_distance(lim.comp_psn) >= self.window(lim.max_unacked_psns) {
            return None;
        }
        // A Middle packet of a SEND or WRITE, most of a long message's, is made here as
        // `build` and `advance` make it (no extension header, a full MTU of payload, no
        // AckReq before MAX_PKTS_PER_ACK), without going through their general match and
        // moving the packet twice on the way out.
        let idx = self.psn.forward_distance(w.first_psn);
        let middle = match w.wr.opcode {
            SendOpcode::Send | SendOpcode::SendImm | SendOpcode::SendInv => Opcode::RcSendMiddle,
            SendOpcode::Write | SendOpcode::WriteImm => Opcode::RcWriteMiddle,
            _ => return Some(self.advance(lim)),
        };
        if idx == 0 || idx + 1 >= w.npkts || self.noack_pkts >= MAX_PKTS_PER_ACK {
            return Some(self.advance(lim));
        }
        let mut pkt = TxPkt::new(middle, self.psn, lim.dest_qp);
        pkt.payload = Payload::SendWqe { wqe: self.next, offset: idx as u64 * lim.mtu as u64, len: lim.mtu };
        debug_assert_eq!(pkt, self.build(self.next, self.psn, lim).0);
        self.max_window = lim.max_unacked_psns;
        self.noack_pkts += 1;
        self.psn = self.psn + 1;
        if self.psn.is_after(self.sent_high) {
            self.sent_high = self.psn;
        }
        self.sent_pkts = idx + 1;
        Some(pkt)
    }

    /// The next new packet (its limits checked by the caller), advancing PSN and WQE progress.
    #[inline]
    fn advance(&mut self, lim: &ReqLimits) -> TxPkt {
        self.max_window = lim.max_unacked_psns;
        let (mut pkt, consumed, ends) = self.build(self.next, self.psn, lim);
        let psn = self.psn;
        self.noack_pkts += 1;
        pkt.ack_req = ends || self.noack_pkts > MAX_PKTS_PER_ACK;
        if pkt.ack_req {
            self.noack_pkts = 0;
        }
        self.psn = psn + consumed;
        if self.psn.is_after(self.sent_high) {
            self.sent_high = self.psn;
        }
        if ends {
            self.next += 1;
            self.sent_pkts = 0;
        } else {
            self.sent_pkts = psn.forward_distance(self.sq[self.next].first_psn) + 1;
        }
        pkt
    }

    /// Selective repeat: queue PSN `psn` (sent, not acknowledged) to be resent alone. False
    /// when it is not a packet already sent in this pass, or a PSN inside a READ's response
    /// range: the caller then goes back N instead.
    pub fn queue_resend(&mut self, psn: Psn) -> bool {
        if !psn.is_before(self.psn) {
            return false;
        }
        let Some(w) = self.sq.iter().find(|w| w.contains(psn)) else { return false };
        if w.wr.opcode.is_rd_atomic() && (psn != w.first_psn || w.read_rcvd != 0) {
            return false;
        }
        if !self.resend.contains(&psn) {
            self.resend.push_back(psn);
        }
        true
    }

    /// Drop queued resends that an acknowledgement up to `comp_psn` made pointless.
    pub fn prune_resends(&mut self, comp_psn: Psn) {
        self.resend.retain(|p| !p.is_before(comp_psn));
    }

    /// The packet with PSN `psn` again, as it was first sent, asking for an ACK so that the
    /// responder reports at once how far it got with the gap filled.
    fn resend_packet(&mut self, psn: Psn, lim: &ReqLimits) -> Option<TxPkt> {
        if !psn.is_before(self.psn) || psn.is_before(lim.comp_psn) {
            return None;
        }
        let i = self.sq.iter().position(|w| w.contains(psn))?;
        let w = &self.sq[i];
        if w.wr.opcode.is_rd_atomic() && (psn != w.first_psn || w.read_rcvd != 0) {
            return None;
        }
        let (mut pkt, _, _) = self.build(i, psn, lim);
        pkt.ack_req = true;
        Some(pkt)
    }

    /// The request packet with PSN `psn` of WQE `i` (started here if it was not), and how
    /// many PSNs it takes and whether it ends the message.
    fn build(&mut self, i: usize, psn: Psn, lim: &ReqLimits) -> (TxPkt, u32, bool) {
        let mtu = lim.mtu;
        let w = &mut self.sq[i];
        if !w.started {
            w.started = true;
            w.first_psn = psn;
            w.npkts = match w.wr.opcode {
                SendOpcode::CmpSwap | SendOpcode::FetchAdd => 1,
                _ => packets_for(w.len, mtu),
            };
            if w.wr.opcode.is_rd_atomic() {
                self.rd_atomic_inflight += 1;
            }
        }
        let idx = psn.forward_distance(w.first_psn);
        let offset = idx as u64 * mtu as u64;
        let first = idx == 0;
        let last = idx + 1 >= w.npkts;
        let wr = &w.wr;
        let mut pkt;
        let mut consumed = 1;
        match wr.opcode {
            SendOpcode::Send | SendOpcode::SendImm | SendOpcode::SendInv => {
                use SendOpcode::*;
                let op = match (first, last, wr.opcode) {
                    (true, true, Send) => Opcode::RcSendOnly,
                    (true, true, SendImm) => Opcode::RcSendOnlyImm,
                    (true, true, _) => Opcode::RcSendOnlyInv,
                    (true, false, _) => Opcode::RcSendFirst,
                    (false, false, _) => Opcode::RcSendMiddle,
                    (false, true, Send) => Opcode::RcSendLast,
                    (false, true, SendImm) => Opcode::RcSendLastImm,
                    (false, true, _) => Opcode::RcSendLastInv,
                };
                pkt = TxPkt::new(op, psn, lim.dest_qp);
                if last && wr.opcode == SendImm {
                    pkt.ext.immdt = Some(wr.imm_data);
                }
                if last && wr.opcode == SendInv {
                    pkt.ext.ieth = Some(crate::types::Rkey(wr.imm_data));
                }
                pkt.solicited = last && wr.flags.contains(SendFlags::SOLICITED);
                let len = (w.len - offset.min(w.len)).min(mtu as u64) as u32;
                pkt.payload = Payload::SendWqe { wqe: i, offset, len };
            }
            SendOpcode::Write | SendOpcode::WriteImm => {
                let imm = wr.opcode == SendOpcode::WriteImm;
                let op = match (first, last, imm) {
                    (true, true, false) => Opcode::RcWriteOnly,
                    (true, true, true) => Opcode::RcWriteOnlyImm,
                    (true, false, _) => Opcode::RcWriteFirst,
                    (false, false, _) => Opcode::RcWriteMiddle,
                    (false, true, false) => Opcode::RcWriteLast,
                    (false, true, true) => Opcode::RcWriteLastImm,
                };
                pkt = TxPkt::new(op, psn, lim.dest_qp);
                if first {
                    pkt.ext.reth = Some(RethRepr { va: wr.remote_addr, rkey: wr.rkey, len: w.len as u32 });
                }
                if last && imm {
                    pkt.ext.immdt = Some(wr.imm_data);
                    pkt.solicited = wr.flags.contains(SendFlags::SOLICITED);
                }
                let len = (w.len - offset.min(w.len)).min(mtu as u64) as u32;
                pkt.payload = Payload::SendWqe { wqe: i, offset, len };
            }
            SendOpcode::Read => {
                // A re-issued READ asks only for the part not yet received (9.7.4.1.4).
                let off = offset.min(w.len);
                pkt = TxPkt::new(Opcode::RcReadRequest, psn, lim.dest_qp);
                pkt.ext.reth = Some(RethRepr { va: wr.remote_addr.wrapping_add(off), rkey: wr.rkey, len: (w.len - off) as u32 });
                consumed = w.npkts - idx;
            }
            SendOpcode::CmpSwap | SendOpcode::FetchAdd => {
                let op = if wr.opcode == SendOpcode::CmpSwap { Opcode::RcCompareSwap } else { Opcode::RcFetchAdd };
                pkt = TxPkt::new(op, psn, lim.dest_qp);
                let (swap_add, compare) = if wr.opcode == SendOpcode::CmpSwap {
                    (wr.swap, wr.compare_add)
                } else {
                    (wr.compare_add, 0)
                };
                pkt.ext.atomic = Some(AtomicEthRepr { va: wr.remote_addr, rkey: wr.rkey, swap_add, compare });
            }
        }
        let ends = last || matches!(wr.opcode, SendOpcode::Read);
        (pkt, consumed, ends)
    }

    /// Go back to `psn` (go-back-N, IBA 9.7.4.1.4): the next packets are resent from the
    /// WQE that contains it. Returns false when no started WQE contains `psn`.
    pub fn rewind(&mut self, psn: Psn) -> bool {
        let Some(i) = self.sq.iter().position(|w| w.contains(psn)) else { return false };
        let w = &self.sq[i];
        self.next = i;
        self.sent_pkts = psn.forward_distance(w.first_psn);
        self.psn = psn;
        self.noack_pkts = 0;
        self.resend.clear();
        true
    }

    /// Whether PSNs are in flight (sent, not acknowledged).
    pub fn has_unacked(&self, comp_psn: Psn) -> bool {
        self.sent_high != comp_psn
    }

    /// After acknowledgements overtook a rewind, continue from `comp_psn`.
    pub fn catch_up(&mut self, comp_psn: Psn) {
        if self.psn.is_before(comp_psn) && !self.rewind(comp_psn) {
            self.next = self.sq.iter().position(|w| !w.started).unwrap_or(self.sq.len());
            self.sent_pkts = 0;
            self.psn = comp_psn;
        }
    }

    /// Set the starting PSN (RTR->RTS with SQ_PSN).
    pub fn set_psn(&mut self, psn: Psn) {
        self.psn = psn;
        self.sent_high = psn;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_halves_on_loss_and_grows_back() {
        let mut r = Requester { max_window: 1024, ..Requester::default() };
        assert_eq!(r.window(1024), 1024);
        r.on_loss();
        assert_eq!(r.window(1024), 512);
        r.on_loss();
        r.on_loss();
        assert_eq!(r.window(1024), MIN_WINDOW);
        r.on_loss();
        assert_eq!(r.window(1024), MIN_WINDOW, "never below the floor");
        r.on_ack();
        assert_eq!(r.window(1024), MIN_WINDOW + WINDOW_GROWTH);
        for _ in 0..1000 {
            r.on_ack();
        }
        assert_eq!((r.cwnd, r.window(1024)), (0, 1024), "back to the configured maximum");
        // a configured window at or below the floor never changes
        let mut s = Requester { max_window: 128, ..Requester::default() };
        s.on_loss();
        assert_eq!((s.cwnd, s.window(128)), (0, 128));
    }
}
