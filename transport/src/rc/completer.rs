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
fn ack_through(qp: &mut Qp, psn: Psn, fx: &mut Effects, c: &mut Counters) -> bool {
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
            if qp.req.rewind(resume) {
                c.retransmitted_pkts += 1;
            }
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
            ack_through(qp, psn, fx, c);
            progress(qp, now);
        }
        Response::Nak { psn, kind: NakCode::PsnSequenceError } => {
            c.rcvd_seq_err += 1;
            if !in_flight(qp, psn) {
                return;
            }
            let advanced = psn != qp.comp.psn;
            if advanced && !ack_through(qp, psn - 1, fx, c) {
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
            if qp.req.rewind(psn) {
                c.retransmitted_pkts += 1;
            }
            qp.req.on_loss();
            restart_retransmit(qp, now);
        }
        Response::RnrNak { psn, timer } => {
            c.rcvd_rnr_err += 1;
            if !in_flight(qp, psn) {
                return;
            }
            if psn != qp.comp.psn && !ack_through(qp, psn - 1, fx, c) {
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
            if psn != qp.comp.psn && !ack_through(qp, psn - 1, fx, c) {
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
            if psn != qp.comp.psn && !ack_through(qp, psn - 1, fx, c) {
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
        if !ack_through(qp, psn - 1, fx, c) {
            // The READ this belongs to is missing earlier responses: go back once per gap.
            let expect = qp.comp.psn;
            if qp.comp.read_gap != Some(expect) {
                qp.comp.read_gap = Some(expect);
                qp.req.rewind(expect);
                c.retransmitted_pkts += 1;
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
    c.retransmitted_pkts += 1;
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
