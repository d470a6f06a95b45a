//! RC completer (IBA 9.7.5.1, rxe_comp.c): ACK/NAK handling, READ responses and atomic
//! ACKs, retransmission on the local ACK timeout and after RNR NAKs, and completions in
//! order. It mutates only the QP it is given and reports completions through `Effects`.

use super::Effects;
use crate::counters::Counters;
use crate::memory::{scatter_part, Memory, Message};
use crate::qp::attr::{ack_timeout_duration, rnr_timer_duration, RNR_RETRY_INFINITE};
use crate::qp::Qp;
use crate::status::{NakCode, WcStatus};
use crate::time::Instant;
use crate::timer::Timer;
use crate::types::Psn;
use crate::verbs::{SendOpcode, WcFlags, WorkCompletion};

#[derive(Debug, Default)]
pub(crate) struct Completer {
    /// Oldest PSN not yet acknowledged: every PSN before it is done.
    pub psn: Psn,
    pub retry_left: u8,
    pub rnr_left: u8,
    /// READ response gap for which a go-back-N was already started.
    pub read_gap: Option<Psn>,
}

/// Selective repeat: after this many sequence NAKs for consecutive PSNs (a lost burst),
/// the requester goes back N.
pub const SR_BURST_NAKS: u32 = 2;

/// A parsed response, as the completer needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Response<'a> {
    Ack { psn: Psn },
    RnrNak { psn: Psn, timer: u8 },
    Nak { psn: Psn, kind: NakCode },
    /// READ response packet; `last` when it ends the response stream.
    Read { psn: Psn, first: bool, last: bool, data: &'a [u8] },
    Atomic { psn: Psn, orig: u64 },
}

impl Completer {
    pub fn reset_counters(&mut self, retry_cnt: u8, rnr_retry: u8) {
        self.retry_left = retry_cnt;
        self.rnr_left = rnr_retry;
    }
}

fn wc_for(qp: &Qp, w: &crate::rc::requester::SendWqe, status: WcStatus) -> WorkCompletion {
    WorkCompletion {
        wr_id: w.wr.wr_id,
        status,
        opcode: w.wr.opcode.wc_opcode(),
        byte_len: if status == WcStatus::Success { w.len as u32 } else { 0 },
        imm_data: 0,
        qp_num: qp.qpn,
        src_qp: qp.attr.dest_qp_num,
        wc_flags: WcFlags::default(),
        pkey_index: qp.attr.pkey_index,
    }
}

/// Complete the oldest send WQE with `status` and remove it.
pub(crate) fn complete_front(qp: &mut Qp, status: WcStatus, fx: &mut Effects) {
    let Some(w) = qp.req.sq.pop_front() else { return };
    qp.req.next = qp.req.next.saturating_sub(1);
    if w.started && w.wr.opcode.is_rd_atomic() {
        qp.req.rd_atomic_inflight = qp.req.rd_atomic_inflight.saturating_sub(1);
    }
    // Error completions are always reported, even for unsignaled WRs (IBA 10.8.3.1).
    if w.signaled || qp.init.sq_sig_all || status != WcStatus::Success {
        fx.wcs.push((qp.init.send_cq, wc_for(qp, &w, status), false));
    }
    qp.req.retire(w);
}

fn progress(qp: &mut Qp, now: Instant) {
    qp.req.on_ack();
    qp.comp.reset_counters(qp.attr.retry_cnt, qp.attr.rnr_retry);
    qp.comp.read_gap = None;
    qp.req.prune_resends(qp.comp.psn);
    qp.req.catch_up(qp.comp.psn);
    restart_retransmit(qp, now);
}

/// (Re)arm the local ACK timer when packets are in flight; stop it otherwise.
pub(crate) fn restart_retransmit(qp: &mut Qp, now: Instant) {
    match ack_timeout_duration(qp.attr.timeout) {
        Some(d) if qp.req.has_unacked(qp.comp.psn) && !qp.req.rnr_wait => qp.timers.set(Timer::Retransmit, now + d),
        _ => qp.timers.stop(Timer::Retransmit),
    }
}

/// The invariant of loss recovery: an RC QP that can send (RTS, SQD) with PSNs in flight and
/// no RNR wait has its local ACK timer set (when the QP has one: timeout 0 is infinite).
/// Without it nothing would ever resend a lost packet whose loss no NAK reported: the QP
/// hangs with its data unacknowledged (and an MPI job with it).
pub(crate) fn retransmit_armed(qp: &Qp) -> bool {
    use crate::qp::{QpState, QpType};
    qp.init.qp_type != QpType::Rc
        || !matches!(qp.state, QpState::Rts | QpState::Sqd)
        || !qp.req.has_unacked(qp.comp.psn)
        || qp.req.rnr_wait
        || ack_timeout_duration(qp.attr.timeout).is_none()
        || qp.timers.is_set(Timer::Retransmit)
}

/// Arm the local ACK timer if it is not running (called after transmitting a request).
pub(crate) fn arm_retransmit(qp: &mut Qp, now: Instant) {
    if !qp.timers.is_set(Timer::Retransmit) {
        if let Some(d) = ack_timeout_duration(qp.attr.timeout) {
            qp.timers.set(Timer::Retransmit, now + d);
        }
    }
}

/// Everything up to and including `psn` has been received by the responder (an explicit or
/// implied ACK, 9.7.5.1.2 / C9-...: coalesced ACKs acknowledge every earlier PSN).
/// Returns false when an outstanding READ/atomic before `psn` lost its response: the
/// requester has then been rewound to re-issue it (implied NAK, 9.7.5.1.4).
fn ack_through(qp: &mut Qp, psn: Psn, fx: &mut Effects) -> bool {
    while let Some(w) = qp.req.sq.front() {
        if !w.started || w.local_error.is_some() {
            break;
        }
        if w.wr.opcode.is_rd_atomic() {
            let resume = w.first_psn + w.read_rcvd;
            if psn.is_before(w.first_psn) {
                break;
            }
            // The responder got the request but its response never arrived.
            qp.comp.psn = resume;
            // the packets it resends are counted as they leave (`retransmitted_pkts`)
            qp.req.rewind(resume);
            return false;
        }
        if psn.is_before(w.last_psn()) {
            // Partially acknowledged multi-packet message.
            if (psn + 1).is_after(qp.comp.psn) {
                qp.comp.psn = psn + 1;
            }
            return true;
        }
        qp.comp.psn = w.last_psn() + 1;
        complete_front(qp, WcStatus::Success, fx);
    }
    true
}

/// Is `psn` a PSN this requester has sent and not yet seen acknowledged?
fn in_flight(qp: &Qp, psn: Psn) -> bool {
    psn.in_window(qp.comp.psn, qp.req.sent_high.forward_distance(qp.comp.psn))
}

/// Handle one response packet.
pub(crate) fn handle_response<M: Memory>(
    qp: &mut Qp,
    resp: Response<'_>,
    mem: &mut M,
    now: Instant,
    c: &mut Counters,
    fx: &mut Effects,
) {
    match resp {
        Response::Ack { psn } => {
            // An ACK may repeat the last acknowledged PSN (comp.psn - 1): nothing new.
            if !in_flight(qp, psn) {
                c.rcvd_ghost_response += 1;
                return;
            }
            ack_through(qp, psn, fx);
            progress(qp, now);
        }
        Response::Nak { psn, kind: NakCode::PsnSequenceError } => {
            c.rcvd_seq_err += 1;
            if !in_flight(qp, psn) {
                return;
            }
            let advanced = psn != qp.comp.psn;
            if advanced && !ack_through(qp, psn - 1, fx) {
                progress(qp, now);
                return;
            }
            if advanced {
                progress(qp, now);
            }
            // Selective repeat: the responder kept what came after the gap, so only the
            // missing packet goes again. A NAK repeating the last one is the responder's
            // reminder that the gap is still open (the resend or the NAK was lost): not a
            // retry of its own, nor progress; the retransmit timer bounds the attempts.
            // NAKs for consecutive PSNs mean a burst was lost: the responder finds its
            // holes one round trip each, so from the third on go back N at once (the
            // responder drops the copies of what it holds). Two adjacent random losses
            // are common enough at a few percent that the second does not go back N.
            if qp.attr.selective_repeat {
                if qp.req.last_nak == Some(psn) {
                    // A reminder: resend the packet alone if it already went out again (a
                    // rewind that has not reached it yet will send it anyway). Never a retry:
                    // behind a deep switch queue the resend can take far longer than the
                    // reminder interval, and counting reminders would end the QP in
                    // RETRY_EXC_ERR while its data is still on the way.
                    if qp.req.queue_resend(psn) {
                        c.sr_reminders += 1;
                    }
                    return;
                }
                match qp.req.last_nak {
                    Some(last) if last + 1 == psn => qp.req.nak_run += 1,
                    _ => qp.req.nak_run = 0,
                }
                qp.req.last_nak = Some(psn);
                if qp.req.nak_run < SR_BURST_NAKS && qp.req.queue_resend(psn) {
                    qp.req.on_loss();
                    return;
                }
            }
            if !advanced {
                if qp.comp.retry_left == 0 {
                    retry_exceeded(qp, WcStatus::RetryExcErr, fx, c);
                    return;
                }
                qp.comp.retry_left -= 1;
            }
            // 9.7.5.2.1: resend starting with the PSN the responder expects.
            qp.req.rewind(psn);
            qp.req.on_loss();
            restart_retransmit(qp, now);
        }
        Response::RnrNak { psn, timer } => {
            c.rcvd_rnr_err += 1;
            if !in_flight(qp, psn) {
                return;
            }
            if psn != qp.comp.psn && !ack_through(qp, psn - 1, fx) {
                progress(qp, now);
                return;
            }
            if psn != qp.comp.psn {
                return;
            }
            // 9.7.5.2.8: retry after the responder's timer; rnr_retry 7 means forever.
            if qp.attr.rnr_retry != RNR_RETRY_INFINITE {
                if qp.comp.rnr_left == 0 {
                    c.retry_rnr_exceeded_err += 1;
                    complete_front(qp, WcStatus::RnrRetryExcErr, fx);
                    fx.qp_error = true;
                    fx.error_status = Some(WcStatus::RnrRetryExcErr);
                    return;
                }
                qp.comp.rnr_left -= 1;
            }
            qp.req.rnr_wait = true;
            qp.req.rewind(psn);
            qp.timers.stop(Timer::Retransmit);
            qp.timers.set(Timer::RnrRetry, now + rnr_timer_duration(timer));
        }
        Response::Nak { psn, kind } => {
            c.rcvd_nak += 1;
            if !in_flight(qp, psn) {
                return;
            }
            if psn != qp.comp.psn && !ack_through(qp, psn - 1, fx) {
                progress(qp, now);
                return;
            }
            let status = kind.requester_status().unwrap_or(WcStatus::BadRespErr);
            // C9-...: the NAKed WQE completes in error and the QP goes to the error state.
            complete_front(qp, status, fx);
            fx.qp_error = true;
            fx.error_status = Some(status);
        }
        Response::Read { psn, first, last, data } => read_response(qp, psn, first, last, data, mem, now, c, fx),
        Response::Atomic { psn, orig } => {
            if !in_flight(qp, psn) {
                c.rcvd_ghost_response += 1;
                return;
            }
            if psn != qp.comp.psn && !ack_through(qp, psn - 1, fx) {
                progress(qp, now);
                return;
            }
            let Some(w) = qp.req.sq.front() else { return };
            if !w.wr.opcode.is_atomic() || w.first_psn != psn {
                c.rcvd_ghost_response += 1;
                return;
            }
            let status = match w.sges.as_slice().first() {
                Some(sge) if sge.length >= 8 => match mem.write(sge.addr, &orig.to_ne_bytes()) {
                    Ok(()) => WcStatus::Success,
                    Err(_) => WcStatus::LocProtErr,
                },
                _ => WcStatus::LocLenErr,
            };
            qp.comp.psn = psn + 1;
            complete_front(qp, status, fx);
            if status != WcStatus::Success {
                fx.qp_error = true;
            }
            progress(qp, now);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn read_response<M: Memory>(
    qp: &mut Qp,
    psn: Psn,
    first: bool,
    last: bool,
    data: &[u8],
    mem: &mut M,
    now: Instant,
    c: &mut Counters,
    fx: &mut Effects,
) {
    if !in_flight(qp, psn) {
        c.rcvd_ghost_response += 1;
        return;
    }
    // A READ response implicitly acknowledges every earlier request (9.7.5.1.2).
    if psn != qp.comp.psn {
        if !ack_through(qp, psn - 1, fx) {
            // The READ this belongs to is missing earlier responses: go back once per gap.
            let expect = qp.comp.psn;
            if qp.comp.read_gap != Some(expect) {
                qp.comp.read_gap = Some(expect);
                qp.req.rewind(expect);
            }
            return;
        }
        progress(qp, now);
    }
    let mtu = qp.mtu() as u64;
    let Some(w) = qp.req.sq.front() else { return };
    if w.wr.opcode != SendOpcode::Read || !w.contains(psn) || psn != w.first_psn + w.read_rcvd {
        c.rcvd_ghost_response += 1;
        return;
    }
    let idx = psn.forward_distance(w.first_psn);
    let offset = idx as u64 * mtu;
    let expect_last = idx + 1 == w.npkts;
    let expect_len = if expect_last { w.len - offset.min(w.len) } else { mtu };
    // Opcode position and length must fit the request (C9-...: otherwise a bad response).
    if last != expect_last || (first && !last && idx + 1 >= w.npkts) || data.len() as u64 != expect_len {
        c.rcvd_ghost_response += 1;
        return;
    }
    let msg = Message { start: w.sges.as_slice().first().map_or(0, |s| s.addr), len: w.len, first: idx == 0 };
    let status = scatter_part(mem, w.sges.as_slice(), offset, data, msg);
    qp.comp.psn = psn + 1;
    let w = &mut qp.req.sq[0];
    w.read_rcvd += 1;
    if let Err(st) = status {
        complete_front(qp, st, fx);
        fx.qp_error = true;
        return;
    }
    if last {
        complete_front(qp, WcStatus::Success, fx);
    }
    progress(qp, now);
}

/// What [`read_continuation`] did, for the device to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadContinued {
    /// Not the common case: the response goes through [`handle_response`].
    NotTaken,
    /// Placed and accepted. `timer`: the local ACK timer was started (it was not set);
    /// `completed`: the READ completed (a Last), its completion is in the effects.
    Done { timer: bool, completed: bool },
}

/// The common packet of a bulk READ at the requester, without the general response path: a
/// READ response Middle or Last (`last`) whose PSN is the oldest unacknowledged one, for the
/// READ at the head of the send queue at the packet it expects next. Such a response
/// acknowledges nothing before itself, so [`handle_response`]'s ghost check (`in_flight`,
/// which for this PSN is "something is in flight") and implied-ACK branch have nothing to do;
/// what can fail is checked as `read_response` checks it: the head WQE a started READ
/// expecting this PSN, the opcode's position (a Last only for the READ's last packet) and
/// the payload length, then the placement. When any of these fails, or the head WQE carries
/// a local error, it returns [`ReadContinued::NotTaken`] having changed nothing (a failed
/// placement is written again, identically, by the pipeline, which completes it in error).
/// Otherwise it does what `read_response` does, so the QP ends in the same state either way
/// (`read_continuation_matches_the_pipeline` compares the two). The caller has checked the
/// QP state (RTS or SQD) and, for a Last, that its AETH is an ACK, as for the pipeline.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_continuation<M: Memory>(
    qp: &mut Qp,
    psn: Psn,
    last: bool,
    data: &[u8],
    mem: &mut M,
    now: Instant,
    fx: &mut Effects,
) -> ReadContinued {
    if psn != qp.comp.psn || !qp.req.has_unacked(psn) {
        return ReadContinued::NotTaken;
    }
    let mtu = qp.mtu() as u64;
    let Some(w) = qp.req.sq.front() else { return ReadContinued::NotTaken };
    if w.wr.opcode != SendOpcode::Read || !w.contains(psn) || psn != w.first_psn + w.read_rcvd || w.local_error.is_some() {
        return ReadContinued::NotTaken;
    }
    let idx = psn.forward_distance(w.first_psn);
    let offset = idx as u64 * mtu;
    let expect_last = idx + 1 == w.npkts;
    let expect_len = if expect_last { w.len - offset.min(w.len) } else { mtu };
    if last != expect_last || data.len() as u64 != expect_len {
        return ReadContinued::NotTaken;
    }
    let msg = Message { start: w.sges.as_slice().first().map_or(0, |s| s.addr), len: w.len, first: idx == 0 };
    if scatter_part(mem, w.sges.as_slice(), offset, data, msg).is_err() {
        return ReadContinued::NotTaken;
    }
    qp.comp.psn = psn + 1;
    qp.req.sq[0].read_rcvd += 1;
    if last {
        complete_front(qp, WcStatus::Success, fx);
    }
    let armed = qp.timers.is_set(Timer::Retransmit);
    progress(qp, now);
    ReadContinued::Done { timer: !armed && qp.timers.is_set(Timer::Retransmit), completed: last }
}

/// The local ACK timer expired (9.7.6.1.3): go back to the oldest unacknowledged PSN, or
/// give up after retry_cnt retries.
pub(crate) fn on_retransmit_timeout(qp: &mut Qp, now: Instant, c: &mut Counters, fx: &mut Effects) {
    if !qp.req.has_unacked(qp.comp.psn) {
        return;
    }
    if qp.comp.retry_left == 0 {
        retry_exceeded(qp, WcStatus::RetryExcErr, fx, c);
        return;
    }
    qp.comp.retry_left -= 1;
    c.completer_retry_err += 1;
    let psn = qp.comp.psn;
    qp.req.rewind(psn);
    qp.req.on_loss();
    if let Some(d) = ack_timeout_duration(qp.attr.timeout) {
        qp.timers.set(Timer::Retransmit, now + d);
    }
}

/// The RNR timer expired: resend from the NAKed PSN.
pub(crate) fn on_rnr_timeout(qp: &mut Qp, now: Instant) {
    qp.req.rnr_wait = false;
    let psn = qp.comp.psn;
    qp.req.rewind(psn);
    restart_retransmit(qp, now);
}

fn retry_exceeded(qp: &mut Qp, status: WcStatus, fx: &mut Effects, c: &mut Counters) {
    c.retry_exceeded_err += 1;
    complete_front(qp, status, fx);
    fx.qp_error = true;
    fx.error_status = Some(status);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::VecMemory;
    use crate::qp::{PathMtu, QpCap, QpInitAttr, QpState, QpType};
    use crate::rc::requester::{ReqLimits, SendWqe};
    use crate::rng::SplitMix64;
    use crate::time::Duration;
    use crate::types::Qpn;
    use crate::verbs::{CqHandle, PdHandle, SendWr, Sge};
    use crate::Lkey;

    const BASE: u64 = 0x10_0000;
    const MEM: usize = 1 << 15;
    const MTU: u64 = 256;
    const START: u32 = 0xff_ff00;

    /// One requester QP and what its completer reaches.
    struct Side {
        qp: Qp,
        mem: VecMemory,
        counters: Counters,
        fx: Effects,
        /// Responses [`read_continuation`] took.
        taken: u32,
    }

    fn new_qp() -> Qp {
        let init = QpInitAttr { qp_type: QpType::Rc, pd: PdHandle(0), send_cq: CqHandle(0), recv_cq: CqHandle(0), srq: None, cap: QpCap::default(), sq_sig_all: false };
        let mut qp = Qp::new(Qpn::new(0x11), init);
        qp.state = QpState::Rts;
        qp.attr.path_mtu = PathMtu::Mtu256;
        qp.attr.timeout = 8; // ~1 ms: a few hundred steps of the stream below
        qp.attr.retry_cnt = 7;
        qp.attr.max_rd_atomic = 4;
        // wraps during the run
        qp.req.set_psn(Psn::new(START));
        qp.comp.psn = Psn::new(START);
        qp.comp.reset_counters(7, 7);
        qp
    }

    impl Side {
        fn new() -> Side {
            Side { qp: new_qp(), mem: VecMemory::new(BASE, MEM), counters: Counters::default(), fx: Effects::default(), taken: 0 }
        }

        /// What the device's transmit path does with the requester: every packet it may send.
        fn send(&mut self, now: Instant) {
            let lim = ReqLimits { mtu: MTU as u32, max_rd_atomic: 4, max_unacked_psns: 1 << 12, dest_qp: Qpn::new(0x22), comp_psn: self.qp.comp.psn };
            let mut sent = false;
            while self.qp.req.next_packet(&lim).is_some() {
                sent = true;
            }
            if sent {
                arm_retransmit(&mut self.qp, now);
            }
        }

        /// What the device does with a response: the continuation first if `fast`.
        fn rx(&mut self, r: Response<'_>, now: Instant, fast: bool) {
            if let (true, Response::Read { psn, first: false, last, data }) = (fast, r) {
                if read_continuation(&mut self.qp, psn, last, data, &mut self.mem, now, &mut self.fx) != ReadContinued::NotTaken {
                    self.taken += 1;
                    return;
                }
            }
            handle_response(&mut self.qp, r, &mut self.mem, now, &mut self.counters, &mut self.fx);
        }

        fn state(&self) -> String {
            format!("{:?} {:?} {:?} {:?} {:?}", self.qp.req, self.qp.comp, self.qp.timers, self.counters, self.fx)
        }

        fn memory(&self) -> Vec<u8> {
            let mut m = vec![0; MEM];
            self.mem.read(BASE, &mut m).unwrap();
            m
        }
    }

    /// The continuation shortcut and the whole completer leave the QP, the memory, the
    /// counters and the completions in the same state, response after response, over a stream
    /// of READs (and WRITEs between them) where a share of the responses is wrong in one way
    /// the completer checks (PSN ahead or behind, First/Last out of place, length off by one,
    /// a scatter list too short for the data) or is an ACK or a sequence NAK, and ACK
    /// timeouts rewind the requester in between.
    #[test]
    fn read_continuation_matches_the_pipeline() {
        let (mut fast, mut full) = (Side::new(), Side::new());
        let mut rng = SplitMix64::new(11);
        let mut now = Instant::from_nanos(1_000_000);
        let mut payload = vec![0u8; MTU as usize + 1];
        let mut wr_id = 0;
        for step in 0..20_000u32 {
            if fast.qp.req.sq.len() < 3 && rng.chance(0.3) {
                wr_id += 1;
                let len = 1 + rng.below(6 * MTU);
                let addr = BASE + rng.below(MEM as u64 - len);
                let opcode = if rng.chance(0.2) { SendOpcode::Write } else { SendOpcode::Read };
                let mut wr = SendWr::new(wr_id, opcode);
                // two SGEs, now and then one byte short of the message
                let short = u64::from(rng.chance(0.01));
                let a = rng.below(len + 1);
                wr.sg_list = vec![Sge { addr, length: a as u32, lkey: Lkey(1) }, Sge { addr: addr + a, length: (len - a - short) as u32, lkey: Lkey(1) }];
                let signaled = rng.chance(0.5);
                for s in [&mut fast, &mut full] {
                    s.qp.req.sq.push_back(SendWqe::new(&wr, None, len, None, signaled));
                }
            }
            if rng.chance(0.5) {
                for s in [&mut fast, &mut full] {
                    s.send(now);
                }
            }
            let q = &fast.qp;
            let Some(w) = q.req.sq.front().filter(|w| w.started) else { continue };
            let mut resp = if w.wr.opcode == SendOpcode::Read {
                let idx = w.read_rcvd;
                let n = (w.len - (idx as u64 * MTU).min(w.len)).min(MTU) as usize;
                (w.first_psn + idx, idx == 0, idx + 1 == w.npkts, n, true)
            } else {
                (w.last_psn(), false, false, 0, false)
            };
            if rng.chance(0.03) {
                resp.0 = resp.0 + (1 + rng.below(3) as u32);
            } else if rng.chance(0.02) {
                resp.0 = resp.0 - 1;
            }
            if rng.chance(0.04) {
                (resp.1, resp.2) = (rng.chance(0.5), rng.chance(0.5));
            }
            if rng.chance(0.03) {
                resp.3 = [0, resp.3.saturating_sub(1), resp.3 + 1][rng.below(3) as usize];
            }
            for (i, b) in payload.iter_mut().enumerate() {
                *b = (step as usize * 31 + i) as u8;
            }
            let (psn, first, last, n, read) = resp;
            let r = if rng.chance(0.02) {
                Response::Nak { psn, kind: NakCode::PsnSequenceError }
            } else if read && !rng.chance(0.02) {
                Response::Read { psn, first, last, data: &payload[..n] }
            } else {
                Response::Ack { psn }
            };
            now = now + Duration::from_nanos(rng.below(10_000));
            // now and then the ACK timer runs out before the response arrives
            let expire = rng.chance(0.005);
            for (s, f) in [(&mut fast, true), (&mut full, false)] {
                s.fx = Effects::default();
                s.rx(r, now, f);
                if expire || s.qp.timers.get(Timer::Retransmit).is_some_and(|t| t <= now) {
                    s.qp.timers.stop(Timer::Retransmit);
                    on_retransmit_timeout(&mut s.qp, now, &mut s.counters, &mut s.fx);
                }
            }
            assert_eq!(fast.state(), full.state(), "step {step}: {r:?}");
            if step % 1000 == 0 {
                assert!(fast.memory() == full.memory(), "step {step}: memory differs");
            }
            if fast.fx.qp_error {
                // the device would flush the QP: start again on a new one
                for s in [&mut fast, &mut full] {
                    s.qp = new_qp();
                }
            }
        }
        assert!(fast.memory() == full.memory(), "memory differs");
        // the shortcut carried a good share of the stream, so the comparison covers it
        assert!(fast.taken > 5_000, "taken {}", fast.taken);
        assert_eq!(full.taken, 0);
    }
}
