//! Timers and the receive path: the timer heap, and a received frame checked (ICRC, BTH,
//! QPN) and handed to the QP's responder or completer; CNPs to the QP's DCQCN reaction
//! point, and CE-marked frames to its notification point.

use super::*;
use crate::cc::notify::CnpTarget;
use crate::MemoryError;

impl<M: Memory> Device<M> {
    // ---------------------------------------------------------------- timers

    pub(super) fn schedule(&mut self, idx: u32) {
        let Some(q) = self.qps.get_mut(idx) else { return };
        // Every handler (RX, timers, TX) ends here: the place to check, in debug builds, the
        // invariant whose breach would hang the QP (completer::retransmit_armed).
        debug_assert!(
            completer::retransmit_armed(q),
            "RC QP {:?}: PSNs unacknowledged, no RNR wait, no Retransmit timer: comp.psn {:?} sent_high {:?} psn {:?} sq {} next {} timers {:?} state {:?}",
            q.qpn, q.comp.psn, q.req.sent_high, q.req.psn, q.req.sq.len(), q.req.next, q.timers, q.state
        );
        let next = match (q.timers.next_timeout(), q.cc.next_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(n) = next {
            #[allow(clippy::unnecessary_map_or)] // is_none_or needs Rust 1.82; MSRV is 1.75
            if q.scheduled.map_or(true, |s| n < s) {
                q.scheduled = Some(n);
                self.timers.push(Reverse((n, idx)));
            }
        }
    }

    /// The next instant `handle_timeout` should be called at.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        while let Some(&Reverse((d, idx))) = self.timers.peek() {
            match self.qps.get(idx) {
                Some(q) if q.scheduled == Some(d) => return Some(d),
                _ => {
                    self.timers.pop();
                }
            }
        }
        None
    }

    /// Fire every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((d, idx))) = self.timers.peek() {
            if d > now {
                break;
            }
            self.timers.pop();
            let Some(q) = self.qps.get_mut(idx) else { continue };
            if q.scheduled != Some(d) {
                continue;
            }
            q.scheduled = None;
            let mut fx = core::mem::take(&mut self.fx);
            let mut fired = [None; 3];
            for (slot, t) in fired.iter_mut().zip(q.timers.expire(now)) {
                *slot = Some(t);
            }
            for t in fired.into_iter().flatten() {
                match t {
                    Timer::Retransmit => completer::on_retransmit_timeout(q, now, &mut self.counters, &mut fx),
                    Timer::RnrRetry => completer::on_rnr_timeout(q, now),
                    Timer::AckCoalesce => responder::on_ack_timeout(q, now, self.cfg.ack_coalesce),
                }
            }
            if q.cc.paced() {
                q.cc.expire(&self.cfg.cc, now);
                if !q.cc.paced() {
                    self.counters.cc_rate_recovered += 1;
                }
            }
            self.apply(idx, &mut fx);
            self.fx = fx;
        }
    }

    // ---------------------------------------------------------------- receive

    /// Feed one received Ethernet frame in. The frame is scratch for the ICRC check
    /// ([`RoceRepr::parse_in_place`]) and is unchanged on return.
    ///
    /// With [`DeviceConfig::fused_rx`], an in-sequence SEND or WRITE continuation whose
    /// destination the QP's state alone gives is checked and placed in one pass
    /// ([`Self::rx_fused`]); every other frame has its ICRC checked before anything else.
    ///
    /// The headers are read once: the common bulk frame through the fixed-offset prediction
    /// ([`RoceRepr::parse_predicted`]), every other one header by header; both give the same
    /// record, so what follows does not depend on which one read it.
    pub fn handle_rx(&mut self, now: Instant, frame: &mut [u8]) {
        let (repr, range) = match RoceRepr::parse_predicted(frame) {
            Some(x) => x,
            None => match RoceRepr::parse_without_icrc(frame) {
                Ok(x) => x,
                Err(wire::Error) => {
                    if icrc_failed(frame) {
                        self.counters.rcvd_icrc_err += 1;
                    } else {
                        self.counters.rcvd_malformed += 1;
                    }
                    return;
                }
            },
        };
        let l3 = wire::eth::HEADER_LEN;
        let ip_end = l3 + repr.ip.header_len() + repr.ip.payload_len();
        let mut placed = false;
        if self.cfg.fused_rx && fusable(repr.bth.opcode) {
            match self.rx_fused(frame, &repr, range.clone(), ip_end) {
                Fused::Rejected => {
                    self.counters.rcvd_icrc_err += 1;
                    return;
                }
                Fused::Placed => placed = true,
                Fused::NotTaken => {}
            }
        }
        if !placed && !icrc::verify_in_place(&mut frame[l3..ip_end]) {
            self.counters.rcvd_icrc_err += 1;
            return;
        }
        self.dispatch(now, frame, &repr, range, placed);
    }

    /// The one-pass receive of a request whose payload destination comes from the QP's state
    /// ([`responder::placement`]: every header check of the pipeline passes; RETH-addressed
    /// WRITE First/Only never come here, since a corrupted VA that still fell inside the MR
    /// would be written where no retransmission rewrites). The ICRC runs over the headers,
    /// then over the payload while it is copied to its destination ([`Memory::write_crc`]),
    /// then over the pad.
    ///
    /// On a mismatch nothing of the QP changes (the PSN is not accepted, no WQE is taken,
    /// no completion, no ACK) and the frame counts as an ICRC error, exactly as on the
    /// check-then-copy path; the only difference is that the payload bytes were written:
    /// they lie in `destination .. destination + payload length`, which is where the
    /// retransmission of this same PSN writes (the responder still expects it there, and a
    /// PSN is only accepted with its own bytes), and no completion has told the application
    /// that range holds data. A memory error while placing falls back to the plain path.
    fn rx_fused(&mut self, frame: &mut [u8], repr: &RoceRepr, range: core::ops::Range<usize>, ip_end: usize) -> Fused {
        let l3 = wire::eth::HEADER_LEN;
        if repr.eth.dst_addr != EthernetAddress(self.cfg.mac) || !self.cfg.gids.contains(&repr.ip.dst_gid()) {
            return Fused::NotTaken;
        }
        let Some(&idx) = self.qpn_map.get(&repr.bth.dest_qp.value()) else { return Fused::NotTaken };
        let Some(q) = self.qps.get(idx) else { return Fused::NotTaken };
        if q.init.qp_type != QpType::Rc
            || !q.state.receives()
            || !repr.bth.pkey.matches(q.pkey)
            || repr.ip.src_gid() != q.attr.ah_attr.dgid
        {
            return Fused::NotTaken;
        }
        let icrc_at = ip_end - wire::icrc::ICRC_LEN;
        if range.end > icrc_at {
            return Fused::NotTaken;
        }
        let (head, rest) = frame.split_at_mut(range.start);
        let payload = &rest[..range.len()];
        let req = request_of(repr, payload);
        let Some(place) = responder::placement(q, &req) else { return Fused::NotTaken };
        let Ok(crc) = icrc::compute_in_place(&mut head[l3..]) else { return Fused::NotTaken };
        let crc = match place {
            responder::Placement::Write { va } => self.mem.write_crc(va, payload, crc),
            responder::Placement::Recv { sges, offset } => scatter_crc(&mut self.mem, sges, offset, payload, crc),
        };
        let Ok(crc) = crc else { return Fused::NotTaken };
        let tail = &rest[range.len()..ip_end - range.start];
        let (pad, icrc) = tail.split_at(tail.len() - wire::icrc::ICRC_LEN);
        if icrc::crc32_update(crc, pad).to_le_bytes() == *icrc {
            Fused::Placed
        } else {
            Fused::Rejected
        }
    }

    /// A frame whose ICRC is good (or was checked while its payload was `placed`).
    fn dispatch(&mut self, now: Instant, frame: &[u8], repr: &RoceRepr, range: core::ops::Range<usize>, placed: bool) {
        let payload = &frame[range];
        if repr.eth.dst_addr != EthernetAddress(self.cfg.mac) || !self.cfg.gids.contains(&repr.ip.dst_gid()) {
            self.counters.rcvd_not_for_us += 1;
            return;
        }
        let Some(idx) = self.rx_qp_index(repr.bth.dest_qp) else {
            self.counters.rcvd_bad_qpn += 1;
            return;
        };
        let Some(q) = self.qps.get_mut(idx) else {
            self.counters.rcvd_bad_qpn += 1;
            return;
        };
        if !q.state.receives() {
            self.counters.rcvd_bad_qpn += 1;
            return;
        }
        // 9.6.1.1 (C9-42..): P_Key check.
        if !repr.bth.pkey.matches(q.pkey) {
            self.counters.pkey_violation += 1;
            return;
        }
        if repr.bth.opcode == Opcode::Cnp {
            // A CNP belongs to no transport; an RC QP only takes it from its peer.
            if q.init.qp_type == QpType::Rc && repr.ip.src_gid() != q.attr.ah_attr.dgid {
                self.counters.rcvd_not_for_us += 1;
                return;
            }
            self.counters.rcvd_pkts += 1;
            self.counters.cnp_rcvd += 1;
            if self.cfg.cc.dcqcn && q.qpn != Qpn::GSI {
                if q.cc.on_cnp(&self.cfg.cc, now) {
                    self.counters.cc_rate_cuts += 1;
                }
                self.schedule(idx);
            }
            return;
        }
        let ce = repr.ip.traffic_class() & 3 == crate::cc::ecn::CE;
        let info = repr.bth.opcode.info();
        let class_ok = matches!(
            (q.init.qp_type, info.class),
            (QpType::Rc, TransportClass::Rc) | (QpType::Ud, TransportClass::Ud)
        );
        if !class_ok {
            self.counters.rcvd_bad_opcode += 1;
            return;
        }
        let mut fx = core::mem::take(&mut self.fx);
        match q.init.qp_type {
            QpType::Rc => {
                // rxe check_addr: an RC QP only accepts packets from its peer.
                if repr.ip.src_gid() != q.attr.ah_attr.dgid {
                    self.counters.rcvd_not_for_us += 1;
                    self.fx = fx;
                    return;
                }
                self.counters.rcvd_pkts += 1;
                if ce {
                    let peer = q.attr.dest_qp_num;
                    self.notify_ce(idx, now, repr, peer);
                }
                let Some(q) = self.qps.get_mut(idx) else { return };
                if info.is_response() {
                    if matches!(q.state, QpState::Rts | QpState::Sqd) {
                        if let Some(r) = response_of(repr, payload) {
                            if let Response::Read { psn, first: false, last, data } = r {
                                let done = completer::read_continuation(q, psn, last, data, &mut self.mem, now, &mut fx);
                                if let completer::ReadContinued::Done { timer, completed: false } = done {
                                    // A READ response Middle completes nothing, cannot fail the
                                    // QP and leaves the head of the send queue a started READ:
                                    // of `apply` and the local-error check only the timer heap
                                    // (a newly armed ACK timer) and the ready list (the window
                                    // moved on; a CNP the CE mark asked for) can have work.
                                    // A QP already on the ready list stays there as it is.
                                    let in_ready = q.in_ready;
                                    self.fx = fx;
                                    if timer {
                                        self.schedule(idx);
                                    }
                                    if !in_ready {
                                        self.mark_ready(idx);
                                    }
                                    return;
                                }
                                if done == completer::ReadContinued::NotTaken {
                                    completer::handle_response(q, r, &mut self.mem, now, &mut self.counters, &mut fx);
                                }
                            } else {
                                completer::handle_response(q, r, &mut self.mem, now, &mut self.counters, &mut fx);
                            }
                        }
                    }
                } else {
                    let req = request_of(repr, payload);
                    let mut ctx = RespCtx {
                        mem: &mut self.mem,
                        mrs: &mut self.mrs,
                        srqs: &mut self.srqs,
                        counters: &mut self.counters,
                        pd: q.init.pd,
                        ack_coalesce: self.cfg.ack_coalesce,
                        sr_window: self.cfg.sr_window,
                        placed,
                    };
                    if let responder::Continued::Done { ack, timer } = responder::write_continuation(q, &req, &mut ctx, now) {
                        // A WRITE or SEND Middle continuation completes nothing, cannot fail
                        // the QP and leaves the send queue alone: of `apply` and the local-error check
                        // only the timer heap (a newly started ACK timer) and the ready list
                        // (a queued ACK, or a CNP the CE mark asked for) can have work.
                        self.fx = fx;
                        if timer {
                            self.schedule(idx);
                        }
                        if ack || ce {
                            self.mark_ready(idx);
                        }
                        return;
                    }
                    responder::handle_request(q, &req, &mut ctx, now, &mut fx);
                }
            }
            QpType::Ud => {
                self.counters.rcvd_pkts += 1;
                if let Some(deth) = repr.ext.deth {
                    if ce {
                        self.notify_ce(idx, now, repr, deth.src_qp);
                    }
                    let Some(q) = self.qps.get_mut(idx) else { return };
                    let ip_hdr = &frame[wire::eth::HEADER_LEN..wire::eth::HEADER_LEN + repr.ip.header_len()];
                    crate::ud::receive(
                        q,
                        deth,
                        repr.ext.immdt,
                        repr.bth.solicited,
                        ip_hdr,
                        payload,
                        &mut self.mem,
                        &mut self.srqs,
                        &mut self.counters,
                        &mut fx,
                    );
                }
            }
        }
        self.apply(idx, &mut fx);
        self.check_local_errors(idx);
        self.fx = fx;
    }

    /// The slab index of the QP numbered `qpn`. Consecutive frames mostly go to one QP (a
    /// burst of a bulk transfer), so the last index comes first: if its slot holds a QP with
    /// this number, that is the QP, since live QPs have distinct numbers (a destroyed QP's
    /// slot is empty or holds a QP with another number, and then the map answers). Needs no
    /// invalidation.
    #[inline]
    fn rx_qp_index(&mut self, qpn: Qpn) -> Option<u32> {
        let last = self.rx_last_qp;
        if self.qps.get(last).is_some_and(|q| q.qpn == qpn) {
            return Some(last);
        }
        let idx = *self.qpn_map.get(&qpn.value())?;
        self.rx_last_qp = idx;
        Some(idx)
    }

    /// The notification point: a CE-marked frame for QP `idx` from `src_qp` arrived.
    fn notify_ce(&mut self, idx: u32, now: Instant, repr: &RoceRepr, src_qp: Qpn) {
        self.counters.ecn_ce_rcvd += 1;
        let Some(q) = self.qps.get_mut(idx) else { return };
        if !self.cfg.cc.np || q.qpn == Qpn::GSI {
            return;
        }
        let target = CnpTarget { dest_qp: src_qp, sgid: repr.ip.dst_gid(), dgid: repr.ip.src_gid(), dmac: repr.eth.src_addr.0 };
        if !q.cc.np.on_ce(now, self.cfg.cc.cnp_interval, target) {
            self.counters.cnp_suppressed += 1;
        }
    }

}

/// Outcome of [`Device::rx_fused`].
enum Fused {
    /// Not a frame for the one-pass path: check the ICRC, then the pipeline as usual.
    NotTaken,
    /// Payload in place and ICRC good: run the pipeline without writing the payload again.
    Placed,
    /// ICRC bad: drop and count, QP untouched.
    Rejected,
}

/// RC request opcodes that may carry their payload to a destination the QP's state gives.
fn fusable(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        RcSendFirst | RcSendMiddle | RcSendLast | RcSendLastImm | RcSendLastInv | RcSendOnly | RcSendOnlyImm | RcSendOnlyInv | RcWriteMiddle | RcWriteLast
    )
}

fn request_of<'a>(repr: &RoceRepr, payload: &'a [u8]) -> crate::rc::Request<'a> {
    crate::rc::Request {
        opcode: repr.bth.opcode,
        psn: repr.bth.psn,
        ack_req: repr.bth.ack_req,
        solicited: repr.bth.solicited,
        reth: repr.ext.reth,
        atomic: repr.ext.atomic,
        immdt: repr.ext.immdt,
        ieth: repr.ext.ieth,
        payload,
    }
}

/// [`scatter`](crate::memory::scatter) with [`Memory::write_crc`]: `data` into a scatter list from byte
/// `offset`, continuing CRC `crc` over it.
fn scatter_crc<M: Memory>(mem: &mut M, sges: &[Sge], offset: u64, data: &[u8], mut crc: u32) -> Result<u32, MemoryError> {
    let placed = crate::memory::scatter_with(sges, offset, data, |addr, chunk| {
        crc = mem.write_crc(addr, chunk, crc)?;
        Ok(())
    })?;
    if placed {
        Ok(crc)
    } else {
        Err(MemoryError)
    }
}
