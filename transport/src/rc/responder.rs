//! RC responder (IBA 9.7.5.2, rxe_resp.c): the check pipeline of chapter 9 as small
//! functions chained with `?` — PSN, opcode sequence, opcode validity, resources, length,
//! R_Key — then execution. Each check returns an `Action` on failure; `handle_request`
//! applies actions in one place. Replies (ACK/NAK, READ responses, atomic ACKs) are queued
//! in PSN order and sent by `next_reply`.
//!
//! The bulk of a large WRITE is Middle packets in sequence; `write_continuation` takes those
//! (and the Last), and the Middle packets of a SEND, with only the checks that can fail for
//! them and falls back to the pipeline for anything else, leaving the QP as the pipeline
//! would (unit tests compare the two).

use super::reorder::{ReorderBuffer, REORDER_THRESHOLD};
use super::{packets_for, Effects, Payload, Request, TxPkt};
use crate::counters::Counters;
use crate::memory::{scatter_part, Memory, Message};
use crate::qp::Qp;
use crate::rc::requester::MAX_PKTS_PER_ACK;
use crate::slab::Slab;
use crate::status::{ResponderError, WcOpcode, WcStatus};
use crate::time::{Duration, Instant};
use crate::timer::Timer;
use crate::types::{Msn, Psn};
use crate::verbs::mr::lookup_rkey;
use crate::verbs::{AccessFlags, MemoryRegion, RecvWqe, SharedReceiveQueue, SrqHandle, WcFlags, WorkCompletion};
use crate::wire::opcode::Opcode;
use crate::wire::{AethRepr, AethSyndrome, AtomicAckEthRepr};
use std::collections::VecDeque;

/// AETH credit code 31: unlimited credits, what rxe always advertises (vector A1).
pub const CREDITS_UNLIMITED: u8 = 31;

#[derive(Debug, Clone)]
pub(crate) struct CurRecv {
    pub wqe: RecvWqe,
    pub offset: u64,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteCtx {
    pub va: u64,
    pub total: u64,
    pub done: u64,
}

/// Where in a multi-packet message the responder is (9.7.5.2.2: opcode sequence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum InMessage {
    #[default]
    None,
    Send,
    Write,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum ResourceKind {
    Read { va: u64, len: u64 },
    Atomic { orig: u64 },
}

/// A READ or atomic kept for duplicate replay (9.7.5.2.3, C9-...: results of the last
/// max_dest_rd_atomic requests are saved).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resource {
    pub first_psn: Psn,
    pub npkts: u32,
    pub kind: ResourceKind,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Reply {
    Ack { psn: Psn, syndrome: AethSyndrome, msn: Msn },
    Read { first_psn: Psn, start: u32, next: u32, npkts: u32, va: u64, len: u64, msn: Msn },
    Atomic { psn: Psn, orig: u64, msn: Msn },
}

#[derive(Debug, Default)]
pub(crate) struct Responder {
    /// Expected PSN.
    pub epsn: Psn,
    pub msn: Msn,
    /// A sequence or RNR NAK was sent for the current `epsn` (NAK once per gap, 9.7.5.2.1).
    pub nak_sent: bool,
    /// Selective repeat: reminders sent for the current gap; each doubles the wait before
    /// the next, so a resend stuck behind a deep queue is not asked for every interval.
    pub nak_reminders: u32,
    pub recv: Option<CurRecv>,
    pub write: Option<WriteCtx>,
    pub in_msg: InMessage,
    pub resources: VecDeque<Resource>,
    pub queue: VecDeque<Reply>,
    /// Packets accepted since the last ACK was queued.
    pub unacked: u32,
    /// Selective repeat: out-of-order packets kept until their turn (empty without it).
    pub ooo: ReorderBuffer,
}

/// The outcome of a failed check, applied by `handle_request`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Silently discard (9.7.5.2.1: a second out-of-sequence packet in the same gap).
    Drop,
    /// A duplicate that was answered (re-ACK or replay).
    Duplicate,
    /// PSN sequence error: NAK once.
    SeqNak,
    /// No receive WQE: RNR NAK (9.7.5.2.8).
    Rnr,
    /// A class B/C/D error: NAK, then the QP goes to the error state.
    Nak(ResponderError),
    /// Selective repeat: an out-of-order packet kept for its turn.
    Held,
}

/// Everything the responder reaches outside its QP.
pub(crate) struct RespCtx<'a, M: Memory> {
    pub mem: &'a mut M,
    pub mrs: &'a mut Slab<MemoryRegion>,
    pub srqs: &'a mut Slab<SharedReceiveQueue>,
    pub counters: &'a mut Counters,
    pub pd: crate::verbs::PdHandle,
    pub ack_coalesce: Duration,
    /// Selective repeat: PSNs past the expected one whose packets are kept.
    pub sr_window: u32,
    /// The request's payload is already in memory, at the place [`placement`] named (the
    /// receive path copied it while checking the ICRC): `execute` does not write it again.
    pub placed: bool,
}

/// Where the payload of an in-sequence request goes, known from the QP's state alone.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Placement<'a> {
    /// Into a receive WQE's scatter list from byte `offset`.
    Recv { sges: &'a [crate::verbs::Sge], offset: u64 },
    /// Into the WRITE in progress, at `va`.
    Write { va: u64 },
}

/// The destination of `r`'s payload if the whole check pipeline would accept `r` and the
/// destination does not come from the packet itself: an in-sequence SEND (First/Only into a
/// receive WQE the QP already holds or the head of its own receive queue) or a WRITE Middle or
/// Last, with valid opcode sequence and lengths. `None` for everything else (duplicates,
/// gaps, RETH-addressed WRITE First/Only, SRQ receives not yet taken, a check that fails),
/// which takes the check-then-copy path. Pure: changes nothing.
pub(crate) fn placement<'q>(qp: &'q Qp, r: &Request<'_>) -> Option<Placement<'q>> {
    if r.payload.is_empty() || r.psn != qp.resp.epsn {
        return None;
    }
    check_op_seq(qp, r).ok()?;
    check_op_valid(qp, r).ok()?;
    let n = r.payload.len() as u64;
    let info = r.opcode.info();
    let mtu = qp.mtu() as u64;
    let len_ok = if info.is_first() || info.is_middle() { n == mtu } else { n <= mtu };
    if !len_ok {
        return None;
    }
    if is_send(r.opcode) {
        let (wqe, offset) = match &qp.resp.recv {
            Some(c) => (&c.wqe, c.offset),
            None if starts(r.opcode) && qp.init.srq.is_none() => (qp.rq.front()?, 0),
            None => return None,
        };
        (offset + n <= wqe.len).then_some(Placement::Recv { sges: wqe.sges.as_slice(), offset })
    } else if is_write(r.opcode) && !starts(r.opcode) {
        let w = qp.resp.write?;
        let after = w.done + n;
        let ok = after <= w.total && (!ends(r.opcode) || after == w.total);
        // WRITE Last with Immediate needs a receive WQE too: leave it to the full pipeline.
        (ok && r.opcode != Opcode::RcWriteLastImm).then_some(Placement::Write { va: w.va.wrapping_add(w.done) })
    } else {
        None
    }
}

/// What [`write_continuation`] did, for the device to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Continued {
    /// Not the common case: the request goes through [`handle_request`].
    NotTaken,
    /// Placed and accepted. `ack`: an ACK was queued (or merged into the unsent one at the
    /// tail of the reply queue); `timer`: the ACK coalescing timer was started.
    Done { ack: bool, timer: bool },
}

/// The common packet of a bulk WRITE, without the general pipeline: an in-sequence WRITE
/// Middle or Last (without immediate) of the WRITE in progress, with no out-of-order packet
/// held. It runs every check of the pipeline that can fail for such a packet, in the
/// pipeline's order: PSN equal to the expected one (C9-92), a WRITE in progress (opcode
/// sequence, C9-95), REMOTE_WRITE still enabled (C9-96, `modify_qp` may change it between
/// two packets), the packet's length (a full MTU for a Middle, C9-97) and the message's
/// (inside the RETH's length, ending exactly at it for a Last, C9-98/99). The other two have
/// nothing to check for a continuation: it needs no receive WQE (9.7.5.2.8), and the R_Key,
/// access and bounds of the RETH's whole range were checked at its First packet (9.7.5.2.6).
/// When any check would fail, or for any other packet, it returns [`Continued::NotTaken`]
/// having changed nothing, and [`handle_request`] answers the packet (NAK, drop, duplicate).
/// Otherwise it executes as `execute` does and takes `respond`'s ACK decision, so the QP ends
/// in the same state either way (`write_continuation_matches_the_pipeline` compares the two).
pub(crate) fn write_continuation<M: Memory>(qp: &mut Qp, r: &Request<'_>, ctx: &mut RespCtx<'_, M>, now: Instant) -> Continued {
    let last = match r.opcode {
        Opcode::RcWriteMiddle => false,
        Opcode::RcWriteLast => true,
        Opcode::RcSendMiddle => return send_continuation(qp, r, ctx, now),
        _ => return Continued::NotTaken,
    };
    let n = r.payload.len() as u64;
    let mtu = qp.mtu() as u64;
    let resp = &mut qp.resp;
    if r.psn != resp.epsn
        || resp.in_msg != InMessage::Write
        || !resp.ooo.is_empty()
        || !qp.attr.qp_access_flags.contains(AccessFlags::REMOTE_WRITE)
        || if last { n == 0 || n > mtu } else { n != mtu }
    {
        return Continued::NotTaken;
    }
    let Some(w) = resp.write.as_mut() else { return Continued::NotTaken };
    let after = w.done + n;
    if after > w.total || (last && after != w.total) {
        return Continued::NotTaken;
    }
    if !ctx.placed {
        let msg = Message { start: w.va, len: w.total, first: w.done == 0 };
        if ctx.mem.write_part(w.va.wrapping_add(w.done), r.payload, msg).is_err() {
            // the pipeline's execute answers it (Remote Operational Error)
            return Continued::NotTaken;
        }
    }
    w.done = after;
    if last {
        resp.write = None;
        resp.in_msg = InMessage::None;
        resp.msn = resp.msn.next();
        ctx.counters.rdma_sends += 1;
    }
    accepted(qp, r, ctx, now)
}

/// The SEND Middle of [`write_continuation`]: the checks that can fail for it, in the
/// pipeline's order, are the PSN (C9-92), a SEND in progress (C9-95), the packet length (a
/// full MTU) and room for it in the receive WQE the SEND's First took (C9-114..: Length
/// NAK), then the placement; the opcode needs no access right and no new receive WQE. A Last
/// completes the receive (a completion, maybe an invalidation): the pipeline takes it.
fn send_continuation<M: Memory>(qp: &mut Qp, r: &Request<'_>, ctx: &mut RespCtx<'_, M>, now: Instant) -> Continued {
    let n = r.payload.len() as u64;
    let mtu = qp.mtu() as u64;
    let resp = &mut qp.resp;
    if r.psn != resp.epsn || resp.in_msg != InMessage::Send || !resp.ooo.is_empty() || n != mtu {
        return Continued::NotTaken;
    }
    let Some(rcv) = resp.recv.as_mut() else { return Continued::NotTaken };
    if rcv.offset + n > rcv.wqe.len {
        return Continued::NotTaken;
    }
    if !ctx.placed {
        let start = rcv.wqe.sges.as_slice().first().map_or(0, |s| s.addr);
        let msg = Message { start, len: rcv.offset + n, first: rcv.offset == 0 };
        if scatter_part(ctx.mem, rcv.wqe.sges.as_slice(), rcv.offset, r.payload, msg).is_err() {
            // the pipeline's execute answers it (Remote Operational Error)
            return Continued::NotTaken;
        }
    }
    rcv.offset += n;
    accepted(qp, r, ctx, now)
}

/// A continuation was executed: `respond`'s bookkeeping and ACK decision for it.
fn accepted<M: Memory>(qp: &mut Qp, r: &Request<'_>, ctx: &mut RespCtx<'_, M>, now: Instant) -> Continued {
    let resp = &mut qp.resp;
    resp.epsn = r.psn + 1;
    resp.nak_sent = false;
    resp.nak_reminders = 0;
    // respond's decision for an executed request (9.7.5.1.1)
    resp.unacked += 1;
    if r.ack_req || resp.unacked >= MAX_PKTS_PER_ACK {
        queue_ack(qp, r.psn);
        return Continued::Done { ack: true, timer: false };
    }
    ctx.counters.ack_deferred += 1;
    if qp.timers.is_set(Timer::AckCoalesce) {
        return Continued::Done { ack: false, timer: false };
    }
    qp.timers.set(Timer::AckCoalesce, now + ctx.ack_coalesce);
    Continued::Done { ack: false, timer: true }
}

type Check<T> = Result<T, Action>;

fn is_send(op: Opcode) -> bool {
    use Opcode::*;
    matches!(op, RcSendFirst | RcSendMiddle | RcSendLast | RcSendLastImm | RcSendOnly | RcSendOnlyImm | RcSendLastInv | RcSendOnlyInv)
}
fn is_write(op: Opcode) -> bool {
    use Opcode::*;
    matches!(op, RcWriteFirst | RcWriteMiddle | RcWriteLast | RcWriteLastImm | RcWriteOnly | RcWriteOnlyImm)
}
fn is_atomic(op: Opcode) -> bool {
    matches!(op, Opcode::RcCompareSwap | Opcode::RcFetchAdd)
}
fn starts(op: Opcode) -> bool {
    op.info().starts_message()
}
fn ends(op: Opcode) -> bool {
    op.info().ends_message()
}

/// 9.7.5.2.1 (C9-92..C9-94): PSN check. Duplicates are answered here.
fn check_psn(qp: &mut Qp, r: &Request<'_>, ctx: &mut RespCtx<'_, impl Memory>) -> Check<()> {
    let d = r.psn.distance(qp.resp.epsn);
    if d > 0 {
        ctx.counters.out_of_seq_request += 1;
        if qp.attr.selective_repeat && d as u32 <= ctx.sr_window && r.payload.len() <= qp.mtu() as usize {
            if qp.resp.ooo.insert(r) {
                ctx.counters.sr_held += 1;
                return Err(Action::Held);
            }
            ctx.counters.sr_held_duplicate += 1;
            return Err(Action::Drop);
        }
        if qp.resp.nak_sent {
            return Err(Action::Drop);
        }
        return Err(Action::SeqNak);
    }
    if d < 0 {
        ctx.counters.duplicate_request += 1;
        duplicate(qp, r);
        return Err(Action::Duplicate);
    }
    Ok(())
}

/// 9.7.5.2.3: duplicate requests. SEND/WRITE are re-acknowledged (C9-104), READs replayed
/// from memory (C9-105), atomics answered with the saved result, never re-executed (C9-106).
fn duplicate(qp: &mut Qp, r: &Request<'_>) {
    let msn = qp.resp.msn;
    if r.opcode == Opcode::RcReadRequest {
        let hit = qp.resp.resources.iter().rev().find(|res| {
            matches!(res.kind, ResourceKind::Read { .. }) && r.psn.in_window(res.first_psn, res.npkts)
        });
        if let Some(&Resource { first_psn, npkts, kind: ResourceKind::Read { va, len } }) = hit {
            let start = r.psn.forward_distance(first_psn);
            replay(qp, Reply::Read { first_psn, start, next: start, npkts, va, len, msn });
        }
    } else if is_atomic(r.opcode) {
        let hit = qp.resp.resources.iter().rev().find(|res| res.first_psn == r.psn);
        if let Some(&Resource { kind: ResourceKind::Atomic { orig }, .. }) = hit {
            replay(qp, Reply::Atomic { psn: r.psn, orig, msn });
        }
    } else if r.ack_req || ends(r.opcode) {
        queue_ack(qp, qp.resp.epsn - 1);
    }
}

/// The PSN a reply answers (its first, for a READ response).
fn reply_psn(q: &Reply) -> Psn {
    match *q {
        Reply::Ack { psn, .. } | Reply::Atomic { psn, .. } => psn,
        Reply::Read { first_psn, .. } => first_psn,
    }
}

/// Queue the replay of a READ or atomic for a duplicate request in PSN order: in place of
/// what is still queued of the same request's replies (sent in part or not at all: the new
/// one supersedes it), ahead of the replies to later requests. A requester that goes back
/// N sends its duplicates in PSN order and takes responses only in PSN order: a replay
/// queued behind the replies to later READs made those arrive first, which the requester
/// took for a new gap and went back for again, re-issuing every later READ, whose replays
/// were queued behind the next ones in turn. The replies to later requests stay queued (a
/// requester that re-issued only this one still gets them), and their own duplicates, which
/// a go-back-N requester sends right after this one, restart them in place.
fn replay(qp: &mut Qp, reply: Reply) {
    let psn = reply_psn(&reply);
    let queue = &mut qp.resp.queue;
    queue.retain(|q| !matches!(q, Reply::Read { .. } | Reply::Atomic { .. }) || reply_psn(q) != psn);
    let at = queue.iter().position(|q| reply_psn(q).is_after(psn)).unwrap_or(queue.len());
    queue.insert(at, reply);
}

/// 9.7.5.2.2 (C9-95): opcode sequence inside a multi-packet message.
fn check_op_seq(qp: &Qp, r: &Request<'_>) -> Check<()> {
    use Opcode::*;
    let ok = match qp.resp.in_msg {
        InMessage::Send => matches!(r.opcode, RcSendMiddle | RcSendLast | RcSendLastImm | RcSendLastInv),
        InMessage::Write => matches!(r.opcode, RcWriteMiddle | RcWriteLast | RcWriteLastImm),
        InMessage::None => starts(r.opcode) && (is_send(r.opcode) || is_write(r.opcode) || r.opcode == RcReadRequest || is_atomic(r.opcode)),
    };
    if ok {
        Ok(())
    } else {
        Err(Action::Nak(ResponderError::InvalidRequest))
    }
}

/// 9.7.5.2.4 (C9-96): the QP must be enabled for the remote operation (rxe answers an
/// operation the QP does not allow with an Invalid Request NAK).
fn check_op_valid(qp: &Qp, r: &Request<'_>) -> Check<()> {
    let acc = qp.attr.qp_access_flags;
    let need = if is_write(r.opcode) {
        AccessFlags::REMOTE_WRITE
    } else if r.opcode == Opcode::RcReadRequest {
        AccessFlags::REMOTE_READ
    } else if is_atomic(r.opcode) {
        AccessFlags::REMOTE_ATOMIC
    } else {
        AccessFlags::NONE
    };
    if acc.contains(need) {
        Ok(())
    } else {
        Err(Action::Nak(ResponderError::InvalidRequest))
    }
}

/// 9.7.5.2.8 (C9-...): a SEND needs a receive WQE, and so does the end of a WRITE with
/// immediate; without one the responder answers RNR NAK.
fn check_resources(qp: &mut Qp, r: &Request<'_>, ctx: &mut RespCtx<'_, impl Memory>, fx: &mut Effects) -> Check<()> {
    let needs_wqe = (is_send(r.opcode) && starts(r.opcode)) || matches!(r.opcode, Opcode::RcWriteLastImm | Opcode::RcWriteOnlyImm);
    if !needs_wqe || qp.resp.recv.is_some() {
        return Ok(());
    }
    let wqe = match qp.init.srq {
        Some(h) => {
            let srq = ctx.srqs.get_mut(h.0).ok_or(Action::Rnr)?;
            let (w, fired) = srq.take().ok_or(Action::Rnr)?;
            if fired {
                fx.srq_limit = Some(SrqHandle(h.0));
            }
            w
        }
        None => qp.rq.pop_front().ok_or(Action::Rnr)?,
    };
    qp.resp.recv = Some(CurRecv { wqe, offset: 0 });
    Ok(())
}

/// 9.7.5.2.5 (C9-97..C9-99): packet and message lengths.
fn check_length(qp: &Qp, r: &Request<'_>) -> Check<()> {
    let mtu = qp.mtu() as usize;
    let n = r.payload.len();
    let info = r.opcode.info();
    let bad = ResponderError::InvalidRequest;
    if info.has_payload() {
        let ok = if info.is_first() || info.is_middle() { n == mtu } else if info.is_last() { (1..=mtu).contains(&n) } else { n <= mtu };
        if !ok {
            return Err(Action::Nak(bad));
        }
    }
    if is_send(r.opcode) {
        let rcv = qp.resp.recv.as_ref().ok_or(Action::Nak(bad))?;
        if rcv.offset + n as u64 > rcv.wqe.len {
            return Err(Action::Nak(ResponderError::Length));
        }
    } else if is_write(r.opcode) {
        let (total, done) = if starts(r.opcode) {
            let reth = r.reth.ok_or(Action::Nak(bad))?;
            (reth.len as u64, 0)
        } else {
            let w = qp.resp.write.ok_or(Action::Nak(bad))?;
            (w.total, w.done)
        };
        let after = done + n as u64;
        if after > total || (ends(r.opcode) && after != total) {
            return Err(Action::Nak(bad));
        }
    } else if r.opcode == Opcode::RcReadRequest {
        let reth = r.reth.ok_or(Action::Nak(bad))?;
        if reth.len > 1 << 31 {
            return Err(Action::Nak(bad));
        }
    }
    Ok(())
}

/// 9.7.5.2.6 / 10.6.7.2 (C9-88..C9-90, o10-...): R_Key, bounds, PD and access rights.
fn check_rkey(r: &Request<'_>, ctx: &RespCtx<'_, impl Memory>) -> Check<()> {
    let (rkey, va, len, need) = if is_write(r.opcode) && starts(r.opcode) {
        let reth = r.reth.ok_or(Action::Nak(ResponderError::InvalidRequest))?;
        (reth.rkey, reth.va, reth.len as u64, AccessFlags::REMOTE_WRITE)
    } else if r.opcode == Opcode::RcReadRequest {
        let reth = r.reth.ok_or(Action::Nak(ResponderError::InvalidRequest))?;
        (reth.rkey, reth.va, reth.len as u64, AccessFlags::REMOTE_READ)
    } else if is_atomic(r.opcode) {
        let a = r.atomic.ok_or(Action::Nak(ResponderError::InvalidRequest))?;
        // C9-...: the atomic VA must be 8-byte aligned.
        if a.va % 8 != 0 {
            return Err(Action::Nak(ResponderError::InvalidRequest));
        }
        (a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC)
    } else {
        return Ok(());
    };
    // A zero-length RDMA operation does not check the R_Key (9.7.5.2.6).
    if len == 0 {
        return Ok(());
    }
    let mr = lookup_rkey(ctx.mrs, rkey).ok_or(Action::Nak(ResponderError::RemoteAccess))?;
    mr.check(ctx.pd, va, len, need).map_err(|_| Action::Nak(ResponderError::RemoteAccess))
}

/// Carry out a request that passed every check.
fn execute(qp: &mut Qp, r: &Request<'_>, ctx: &mut RespCtx<'_, impl Memory>, fx: &mut Effects) -> Check<()> {
    let op_err = Action::Nak(ResponderError::RemoteOperational);
    let mut npkts = 1;
    if is_send(r.opcode) {
        let rcv = qp.resp.recv.as_mut().ok_or(op_err)?;
        if !ctx.placed {
            let start = rcv.wqe.sges.as_slice().first().map_or(0, |s| s.addr);
            let msg = Message { start, len: rcv.offset + r.payload.len() as u64, first: rcv.offset == 0 };
            scatter_part(ctx.mem, rcv.wqe.sges.as_slice(), rcv.offset, r.payload, msg).map_err(|_| op_err)?;
        }
        rcv.offset += r.payload.len() as u64;
        if ends(r.opcode) {
            let rcv = qp.resp.recv.take().ok_or(op_err)?;
            let mut wc = recv_wc(qp, &rcv.wqe, WcStatus::Success, WcOpcode::Recv, rcv.offset as u32);
            if let Some(imm) = r.immdt {
                wc.imm_data = imm;
                wc.wc_flags.0 |= WcFlags::WITH_IMM.0;
            }
            if let Some(rkey) = r.ieth {
                wc.imm_data = rkey.0;
                wc.wc_flags.0 |= WcFlags::WITH_INV.0;
                // 10.6.7.2.2: a SEND with Invalidate invalidates the named region of this PD.
                let idx = rkey.0 >> 8;
                if let Some(mr) = ctx.mrs.get_mut(idx) {
                    if mr.rkey == rkey && mr.pd == ctx.pd {
                        mr.remote_valid = false;
                    }
                }
            }
            fx.wcs.push((qp.init.recv_cq, wc, r.solicited));
            ctx.counters.rdma_recvs += 1;
            qp.resp.msn = qp.resp.msn.next();
            qp.resp.in_msg = InMessage::None;
        } else {
            qp.resp.in_msg = InMessage::Send;
        }
    } else if is_write(r.opcode) {
        if starts(r.opcode) {
            let reth = r.reth.ok_or(op_err)?;
            qp.resp.write = Some(WriteCtx { va: reth.va, total: reth.len as u64, done: 0 });
        }
        let w = qp.resp.write.as_mut().ok_or(op_err)?;
        if !r.payload.is_empty() && !ctx.placed {
            let msg = Message { start: w.va, len: w.total, first: w.done == 0 };
            ctx.mem.write_part(w.va.wrapping_add(w.done), r.payload, msg).map_err(|_| op_err)?;
        }
        w.done += r.payload.len() as u64;
        let total = w.total;
        if ends(r.opcode) {
            qp.resp.write = None;
            qp.resp.in_msg = InMessage::None;
            ctx.counters.rdma_sends += 1;
            qp.resp.msn = qp.resp.msn.next();
            if let Some(imm) = r.immdt {
                let rcv = qp.resp.recv.take().ok_or(op_err)?;
                let mut wc = recv_wc(qp, &rcv.wqe, WcStatus::Success, WcOpcode::RecvRdmaWithImm, total as u32);
                wc.imm_data = imm;
                wc.wc_flags.0 |= WcFlags::WITH_IMM.0;
                fx.wcs.push((qp.init.recv_cq, wc, r.solicited));
            }
        } else {
            qp.resp.in_msg = InMessage::Write;
        }
    } else if r.opcode == Opcode::RcReadRequest {
        let reth = r.reth.ok_or(op_err)?;
        let len = reth.len as u64;
        npkts = packets_for(len, qp.mtu());
        qp.resp.msn = qp.resp.msn.next();
        ctx.counters.rdma_sends += 1;
        save_resource(qp, Resource { first_psn: r.psn, npkts, kind: ResourceKind::Read { va: reth.va, len } });
        let msn = qp.resp.msn;
        qp.resp.queue.push_back(Reply::Read { first_psn: r.psn, start: 0, next: 0, npkts, va: reth.va, len, msn });
    } else if is_atomic(r.opcode) {
        let a = r.atomic.ok_or(op_err)?;
        let orig = if r.opcode == Opcode::RcCompareSwap {
            ctx.mem.cmp_swap(a.va, a.compare, a.swap_add)
        } else {
            ctx.mem.fetch_add(a.va, a.swap_add)
        }
        .map_err(|_| op_err)?;
        qp.resp.msn = qp.resp.msn.next();
        ctx.counters.rdma_sends += 1;
        save_resource(qp, Resource { first_psn: r.psn, npkts: 1, kind: ResourceKind::Atomic { orig } });
        let msn = qp.resp.msn;
        qp.resp.queue.push_back(Reply::Atomic { psn: r.psn, orig, msn });
    }
    qp.resp.epsn = r.psn + npkts;
    qp.resp.nak_sent = false;
    qp.resp.nak_reminders = 0;
    Ok(())
}

fn save_resource(qp: &mut Qp, res: Resource) {
    let cap = (qp.attr.max_dest_rd_atomic as usize).max(1);
    while qp.resp.resources.len() >= cap {
        qp.resp.resources.pop_front();
    }
    qp.resp.resources.push_back(res);
    // A READ/atomic reply acknowledges everything before it.
    qp.resp.unacked = 0;
}

fn recv_wc(qp: &Qp, wqe: &RecvWqe, status: WcStatus, opcode: WcOpcode, byte_len: u32) -> WorkCompletion {
    WorkCompletion {
        wr_id: wqe.wr_id,
        status,
        opcode,
        byte_len,
        imm_data: 0,
        qp_num: qp.qpn,
        src_qp: qp.attr.dest_qp_num,
        wc_flags: WcFlags::default(),
        pkey_index: qp.attr.pkey_index,
    }
}

/// Queue an ACK for everything up to `psn`, merging with an unsent ACK at the tail.
fn queue_ack(qp: &mut Qp, psn: Psn) {
    let msn = qp.resp.msn;
    qp.resp.unacked = 0;
    qp.timers.stop(Timer::AckCoalesce);
    let syndrome = AethSyndrome::Ack { credits: CREDITS_UNLIMITED };
    if let Some(Reply::Ack { psn: p, syndrome: AethSyndrome::Ack { .. }, msn: m }) = qp.resp.queue.back_mut() {
        *p = psn;
        *m = msn;
        return;
    }
    qp.resp.queue.push_back(Reply::Ack { psn, syndrome, msn });
}

/// Handle one request packet for an RC QP in RTR/RTS/SQD. With selective repeat, packets
/// held out of order run after it once their turn has come.
pub(crate) fn handle_request<M: Memory>(
    qp: &mut Qp,
    r: &Request<'_>,
    ctx: &mut RespCtx<'_, M>,
    now: Instant,
    fx: &mut Effects,
) {
    respond(qp, r, ctx, now, fx);
    ctx.placed = false;
    if !qp.resp.ooo.is_empty() {
        drain_held(qp, ctx, now, fx);
    }
}

/// Run the held packets whose turn has come, in PSN order, each through the whole check
/// pipeline; then, if a gap is left, tell the requester about it.
fn drain_held<M: Memory>(qp: &mut Qp, ctx: &mut RespCtx<'_, M>, now: Instant, fx: &mut Effects) {
    let start = qp.resp.epsn;
    while let Some(h) = qp.resp.ooo.take(qp.resp.epsn) {
        let before = qp.resp.epsn;
        respond(qp, &h.request(), ctx, now, fx);
        qp.resp.ooo.recycle(h.payload);
        if fx.qp_error {
            qp.resp.ooo.clear();
            return;
        }
        if qp.resp.epsn == before {
            // Not executed (RNR): the requester goes back to this PSN and resends from it.
            break;
        }
    }
    // The requester's window waits on this gap: say at once how far it is filled.
    if qp.resp.epsn != start && qp.resp.unacked > 0 {
        queue_ack(qp, qp.resp.epsn - 1);
    }
    if !qp.resp.ooo.is_empty() {
        held_gap(qp, ctx, now);
    }
}

/// A gap before held packets: NAK its first PSN once enough later packets arrived that the
/// missing one is taken for lost. The ACK coalescing timer NAKs a gap that stays open (a
/// smaller one, or one whose NAK or resend was lost) again every `ack_coalesce`.
fn held_gap<M: Memory>(qp: &mut Qp, ctx: &mut RespCtx<'_, M>, now: Instant) {
    if !qp.resp.nak_sent && qp.resp.ooo.len() >= REORDER_THRESHOLD {
        queue_seq_nak(qp);
        // The reminder comes one interval after the NAK, not earlier.
        qp.timers.set(Timer::AckCoalesce, now + ctx.ack_coalesce);
    } else if !qp.timers.is_set(Timer::AckCoalesce) {
        qp.timers.set(Timer::AckCoalesce, now + ctx.ack_coalesce);
    }
}

fn queue_seq_nak(qp: &mut Qp) {
    qp.resp.nak_sent = true;
    let (psn, msn) = (qp.resp.epsn, qp.resp.msn);
    qp.resp.queue.push_back(Reply::Ack { psn, syndrome: AethSyndrome::Nak(ResponderError::PsnSequence.nak_code()), msn });
}

fn respond<M: Memory>(qp: &mut Qp, r: &Request<'_>, ctx: &mut RespCtx<'_, M>, now: Instant, fx: &mut Effects) {
    let result = check_psn(qp, r, ctx)
        .and_then(|()| check_op_seq(qp, r))
        .and_then(|()| check_op_valid(qp, r))
        .and_then(|()| check_resources(qp, r, ctx, fx))
        .and_then(|()| check_length(qp, r))
        .and_then(|()| check_rkey(r, ctx))
        .and_then(|()| execute(qp, r, ctx, fx));
    match result {
        Ok(()) => {
            if matches!(r.opcode, Opcode::RcReadRequest | Opcode::RcCompareSwap | Opcode::RcFetchAdd) {
                return;
            }
            // 9.7.5.1.1: ACK when asked; otherwise coalesce (C9-...: an ACK may cover
            // several requests), bounded by a packet count and a timer.
            qp.resp.unacked += 1;
            if r.ack_req || qp.resp.unacked >= MAX_PKTS_PER_ACK {
                queue_ack(qp, r.psn);
            } else {
                ctx.counters.ack_deferred += 1;
                if !qp.timers.is_set(Timer::AckCoalesce) {
                    qp.timers.set(Timer::AckCoalesce, now + ctx.ack_coalesce);
                }
            }
        }
        Err(Action::Drop) | Err(Action::Duplicate) => {}
        Err(Action::Held) => held_gap(qp, ctx, now),
        Err(Action::SeqNak) => queue_seq_nak(qp),
        Err(Action::Rnr) => {
            ctx.counters.send_rnr_err += 1;
            qp.resp.nak_sent = true;
            let (psn, msn) = (qp.resp.epsn, qp.resp.msn);
            qp.resp.queue.push_back(Reply::Ack { psn, syndrome: AethSyndrome::RnrNak { timer: qp.attr.min_rnr_timer }, msn });
        }
        Err(Action::Nak(e)) => {
            ctx.counters.send_nak += 1;
            let (psn, msn) = (qp.resp.epsn, qp.resp.msn);
            qp.resp.queue.push_back(Reply::Ack { psn, syndrome: AethSyndrome::Nak(e.nak_code()), msn });
            if let Some(rcv) = qp.resp.recv.take() {
                let wc = recv_wc(qp, &rcv.wqe, e.responder_status(), WcOpcode::Recv, 0);
                fx.wcs.push((qp.init.recv_cq, wc, false));
            }
            // Class B/C/D errors put the responder QP in the error state (9.9.2).
            qp.resp.ooo.clear();
            fx.qp_error = true;
            fx.error_status = Some(e.responder_status());
        }
    }
}

/// Reminders for one gap back off up to `ack_coalesce` x 2^this (20 us x 1024 ≈ 20 ms).
const MAX_REMINDER_SHIFT: u32 = 10;

/// The ACK coalescing timer fired: acknowledge what was received; with selective repeat,
/// NAK (again) a gap that held packets have waited behind for this long, and keep watching it
/// with a doubled interval.
pub(crate) fn on_ack_timeout(qp: &mut Qp, now: Instant, ack_coalesce: Duration) {
    if qp.resp.unacked > 0 {
        queue_ack(qp, qp.resp.epsn - 1);
    }
    if !qp.resp.ooo.is_empty() {
        queue_seq_nak(qp);
        qp.resp.nak_reminders = (qp.resp.nak_reminders + 1).min(MAX_REMINDER_SHIFT);
        qp.timers.set(Timer::AckCoalesce, now + Duration::from_nanos(ack_coalesce.as_nanos() << qp.resp.nak_reminders));
    }
}

/// Whether every queued reply is a plain ACK or NAK (no READ or atomic response, which
/// would otherwise wait behind them).
pub(crate) fn only_acks(qp: &Qp) -> bool {
    qp.resp.queue.iter().all(|r| matches!(r, Reply::Ack { .. }))
}

/// The next reply packet, if any. In the error state only ACK/NAKs still go out (the
/// NAK that caused the error must reach the requester).
pub(crate) fn next_reply(qp: &mut Qp, error_state: bool) -> Option<TxPkt> {
    let mtu = qp.mtu() as u64;
    let dest = qp.attr.dest_qp_num;
    loop {
        let front = qp.resp.queue.front_mut()?;
        match front {
            Reply::Ack { psn, syndrome, msn } => {
                let mut p = TxPkt::new(Opcode::RcAcknowledge, *psn, dest);
                p.ext.aeth = Some(AethRepr { syndrome: *syndrome, msn: *msn });
                qp.resp.queue.pop_front();
                return Some(p);
            }
            _ if error_state => {
                qp.resp.queue.pop_front();
            }
            Reply::Atomic { psn, orig, msn } => {
                let mut p = TxPkt::new(Opcode::RcAtomicAcknowledge, *psn, dest);
                p.ext.aeth = Some(AethRepr { syndrome: AethSyndrome::Ack { credits: CREDITS_UNLIMITED }, msn: *msn });
                p.ext.atomic_ack = Some(AtomicAckEthRepr { orig: *orig });
                qp.resp.queue.pop_front();
                return Some(p);
            }
            Reply::Read { first_psn, start, next, npkts, va, len, msn } => {
                let i = *next;
                let last = i + 1 >= *npkts;
                let op = match (i == *start, last) {
                    (true, true) => Opcode::RcReadResponseOnly,
                    (true, false) => Opcode::RcReadResponseFirst,
                    (false, true) => Opcode::RcReadResponseLast,
                    (false, false) => Opcode::RcReadResponseMiddle,
                };
                let mut p = TxPkt::new(op, *first_psn + i, dest);
                if op != Opcode::RcReadResponseMiddle {
                    p.ext.aeth = Some(AethRepr { syndrome: AethSyndrome::Ack { credits: CREDITS_UNLIMITED }, msn: *msn });
                }
                let off = i as u64 * mtu;
                let n = (*len - off.min(*len)).min(mtu) as u32;
                p.payload = Payload::Memory { va: va.wrapping_add(off), len: n };
                *next += 1;
                if last {
                    qp.resp.queue.pop_front();
                }
                return Some(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::VecMemory;
    use crate::qp::{PathMtu, QpCap, QpInitAttr, QpState, QpType};
    use crate::rng::SplitMix64;
    use crate::types::Qpn;
    use crate::verbs::{CqHandle, PdHandle, Sge};

    const BASE: u64 = 0x10_0000;
    const MEM: usize = 1 << 15;
    const MTU: u64 = 256;

    /// One responder QP and everything its pipeline reaches.
    struct Side {
        qp: Qp,
        mem: VecMemory,
        mrs: Slab<MemoryRegion>,
        srqs: Slab<SharedReceiveQueue>,
        counters: Counters,
        fx: Effects,
        /// Packets [`write_continuation`] took.
        taken: u32,
    }

    impl Side {
        fn new() -> Side {
            let init = QpInitAttr { qp_type: QpType::Rc, pd: PdHandle(0), send_cq: CqHandle(0), recv_cq: CqHandle(0), srq: None, cap: QpCap::default(), sq_sig_all: false };
            let mut qp = Qp::new(Qpn::new(0x11), init);
            qp.state = QpState::Rts;
            qp.attr.path_mtu = PathMtu::Mtu256;
            qp.attr.qp_access_flags = AccessFlags::ALL;
            qp.attr.selective_repeat = true;
            // wraps during the run
            qp.resp.epsn = Psn::new(0xff_f000);
            Side { qp, mem: VecMemory::new(BASE, MEM), mrs: Slab::default(), srqs: Slab::default(), counters: Counters::default(), fx: Effects::default(), taken: 0 }
        }

        /// What the device does with a request: the continuation first if `fast`.
        fn rx(&mut self, r: &Request<'_>, now: Instant, fast: bool) {
            let mut ctx = RespCtx {
                mem: &mut self.mem,
                mrs: &mut self.mrs,
                srqs: &mut self.srqs,
                counters: &mut self.counters,
                pd: PdHandle(0),
                ack_coalesce: Duration::from_micros(20),
                sr_window: 8,
                placed: false,
            };
            if fast && write_continuation(&mut self.qp, r, &mut ctx, now) != Continued::NotTaken {
                self.taken += 1;
                return;
            }
            handle_request(&mut self.qp, r, &mut ctx, now, &mut self.fx);
        }

        fn state(&self) -> String {
            format!("{:?} {:?} {:?} {:?}", self.qp.resp, self.qp.timers, self.counters, self.fx)
        }

        fn memory(&self) -> Vec<u8> {
            let mut m = vec![0; MEM];
            self.mem.read(BASE, &mut m).unwrap();
            m
        }
    }

    /// One packet of a comparison stream, fed to both sides: `opcode` with `n` payload bytes,
    /// now and then with its PSN a few ahead or one behind and its length off by one, an
    /// AckReq, an immediate on `imm_opcode`; ACK timers fire and replies leave now and then.
    /// The two sides must end in the same state. Returns the payload length sent and whether
    /// the packet moved the expected PSN.
    #[allow(clippy::too_many_arguments)]
    fn feed_both(fast: &mut Side, full: &mut Side, rng: &mut SplitMix64, now: &mut Instant, payload: &mut [u8], step: u32, opcode: Opcode, n: usize, imm_opcode: Opcode) -> (usize, bool) {
        let mut psn = fast.qp.resp.epsn;
        if rng.chance(0.03) {
            psn = psn + (1 + rng.below(3) as u32);
        } else if rng.chance(0.02) {
            psn = psn - 1;
        }
        let mut n = n;
        if rng.chance(0.03) {
            n = [0, n.saturating_sub(1), n + 1][rng.below(3) as usize];
        }
        for (i, b) in payload.iter_mut().enumerate() {
            *b = (step as usize * 31 + i) as u8;
        }
        let r = Request {
            opcode,
            psn,
            ack_req: rng.chance(0.1),
            solicited: false,
            reth: None,
            atomic: None,
            immdt: (opcode == imm_opcode).then_some(5),
            ieth: None,
            payload: &payload[..n],
        };
        *now = *now + Duration::from_nanos(rng.below(10_000));
        let send = rng.chance(0.2);
        let before = fast.qp.resp.epsn;
        for (s, f) in [(&mut *fast, true), (&mut *full, false)] {
            s.fx = Effects::default();
            s.rx(&r, *now, f);
            if s.qp.timers.get(Timer::AckCoalesce).is_some_and(|t| t <= *now) {
                s.qp.timers.stop(Timer::AckCoalesce);
                on_ack_timeout(&mut s.qp, *now, Duration::from_micros(20));
            }
            if send {
                while next_reply(&mut s.qp, false).is_some() {}
            }
        }
        assert_eq!(fast.state(), full.state(), "step {step}: {r:?}");
        (n, fast.qp.resp.epsn != before)
    }

    /// The continuation shortcut and the whole pipeline leave the QP, the memory and the
    /// counters in the same state, packet after packet, over a stream of WRITEs where a
    /// share of the packets is wrong in one way the pipeline checks (PSN ahead or behind,
    /// opcode out of sequence, lengths off by one, REMOTE_WRITE revoked, packets held out of
    /// order) and replies leave and ACK timers fire in between.
    #[test]
    fn write_continuation_matches_the_pipeline() {
        let (mut fast, mut full) = (Side::new(), Side::new());
        let mut rng = SplitMix64::new(7);
        let mut now = Instant::from_nanos(1_000_000);
        let mut payload = vec![0u8; MTU as usize + 1];
        for step in 0..20_000u32 {
            let q = &fast.qp;
            if q.resp.in_msg == InMessage::None && !rng.chance(0.05) {
                // a new WRITE, as if its First had been accepted
                let total = 1 + rng.below(6 * MTU);
                let va = BASE + rng.below(MEM as u64 - total);
                for s in [&mut fast, &mut full] {
                    s.qp.resp.write = Some(WriteCtx { va, total, done: 0 });
                    s.qp.resp.in_msg = InMessage::Write;
                }
            }
            let q = &fast.qp;
            let left = q.resp.write.map_or(MTU, |w| w.total - w.done);
            let mut opcode = if left > MTU { Opcode::RcWriteMiddle } else { Opcode::RcWriteLast };
            if rng.chance(0.05) {
                let ops = [Opcode::RcWriteMiddle, Opcode::RcWriteLast, Opcode::RcWriteLastImm, Opcode::RcWriteFirst, Opcode::RcSendMiddle, Opcode::RcWriteOnly];
                opcode = ops[rng.below(ops.len() as u64) as usize];
            }
            if rng.chance(0.01) {
                for s in [&mut fast, &mut full] {
                    s.qp.attr.qp_access_flags.0 ^= AccessFlags::REMOTE_WRITE.0;
                }
            }
            feed_both(&mut fast, &mut full, &mut rng, &mut now, &mut payload, step, opcode, left.min(MTU) as usize, Opcode::RcWriteLastImm);
            if step % 1000 == 0 {
                assert!(fast.memory() == full.memory(), "step {step}: memory differs");
            }
        }
        assert!(fast.memory() == full.memory(), "memory differs");
        // the shortcut carried a good share of the stream (8188 packets with seed 7), so the
        // comparison covers it
        assert!(fast.taken > 5_000, "taken {}", fast.taken);
        assert_eq!(full.taken, 0);
    }

    /// As `write_continuation_matches_the_pipeline`, over a stream of SENDs into receive WQEs
    /// (some too short for their message, some with a scatter list partly outside memory),
    /// with packets wrong in the ways the pipeline checks.
    #[test]
    fn send_continuation_matches_the_pipeline() {
        let (mut fast, mut full) = (Side::new(), Side::new());
        let mut rng = SplitMix64::new(9);
        let mut now = Instant::from_nanos(1_000_000);
        let mut payload = vec![0u8; MTU as usize + 1];
        let mut left = 0;
        for step in 0..20_000u32 {
            let q = &fast.qp;
            if q.resp.in_msg == InMessage::None && !rng.chance(0.05) {
                // a new SEND, as if its First had been accepted into a receive WQE
                left = 1 + rng.below(6 * MTU);
                let wqe_len = if rng.chance(0.05) { rng.below(left + 1) } else { left + rng.below(MTU) };
                let addr = BASE + rng.below(MEM as u64 - wqe_len);
                let a = rng.below(wqe_len + 1);
                // now and then the second SGE lies past the end of memory
                let b = if rng.chance(0.02) { BASE + MEM as u64 } else { addr + a };
                let sges = [Sge { addr, length: a as u32, lkey: crate::Lkey(1) }, Sge { addr: b, length: (wqe_len - a) as u32, lkey: crate::Lkey(1) }];
                let wqe = RecvWqe { wr_id: u64::from(step), sges: crate::verbs::SgeList::from_slice(&sges), len: wqe_len };
                for s in [&mut fast, &mut full] {
                    s.qp.resp.recv = Some(CurRecv { wqe: wqe.clone(), offset: 0 });
                    s.qp.resp.in_msg = InMessage::Send;
                }
            }
            let mut opcode = if left > MTU { Opcode::RcSendMiddle } else { Opcode::RcSendLast };
            if rng.chance(0.05) {
                let ops = [Opcode::RcSendMiddle, Opcode::RcSendLast, Opcode::RcSendLastImm, Opcode::RcSendFirst, Opcode::RcWriteMiddle, Opcode::RcSendOnly];
                opcode = ops[rng.below(ops.len() as u64) as usize];
            }
            let (n, advanced) = feed_both(&mut fast, &mut full, &mut rng, &mut now, &mut payload, step, opcode, left.clamp(1, MTU) as usize, Opcode::RcSendLastImm);
            if advanced {
                left = left.saturating_sub(n as u64);
            }
            if fast.fx.qp_error || fast.fx.wcs.iter().any(|w| w.1.status != WcStatus::Success) || fast.qp.resp.in_msg == InMessage::None {
                // the message ended (or the QP would be flushed): the next one starts afresh
                for s in [&mut fast, &mut full] {
                    s.qp.resp.in_msg = InMessage::None;
                    s.qp.resp.recv = None;
                }
            }
            if step % 1000 == 0 {
                assert!(fast.memory() == full.memory(), "step {step}: memory differs");
            }
        }
        assert!(fast.memory() == full.memory(), "memory differs");
        assert!(fast.taken > 5_000, "taken {}", fast.taken);
        assert_eq!(full.taken, 0);
    }
}
