//! Timers and the receive path: the timer heap, and a received frame checked (ICRC, BTH,
//! QPN) and handed to the QP's responder or completer; CNPs to the QP's DCQCN reaction
//! point, and CE-marked frames to its notification point.

use super::*;
use crate::cc::notify::CnpTarget;

impl<M: Memory> Device<M> {
    // ---------------------------------------------------------------- timers

    pub(super) fn schedule(&mut self, idx: u32) {
        let Some(q) = self.qps.get_mut(idx) else { return };
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
                    Timer::AckCoalesce => responder::on_ack_timeout(q),
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
    pub fn handle_rx(&mut self, now: Instant, frame: &mut [u8]) {
        let (repr, range) = match RoceRepr::parse_in_place(frame) {
            Ok(x) => x,
            Err(wire::Error) => {
                if icrc_failed(frame) {
                    self.counters.rcvd_icrc_err += 1;
                } else {
                    self.counters.rcvd_malformed += 1;
                }
                return;
            }
        };
        let payload = &frame[range];
        if repr.eth.dst_addr != EthernetAddress(self.cfg.mac) || !self.cfg.gids.contains(&repr.ip.dst_gid()) {
            self.counters.rcvd_not_for_us += 1;
            return;
        }
        let Some(&idx) = self.qpn_map.get(&repr.bth.dest_qp.value()) else {
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
                    self.notify_ce(idx, now, &repr, peer);
                }
                let Some(q) = self.qps.get_mut(idx) else { return };
                if info.is_response() {
                    if matches!(q.state, QpState::Rts | QpState::Sqd) {
                        if let Some(r) = response_of(&repr, payload) {
                            completer::handle_response(q, r, &mut self.mem, now, &mut self.counters, &mut fx);
                        }
                    }
                } else {
                    let req = responder::Request {
                        opcode: repr.bth.opcode,
                        psn: repr.bth.psn,
                        ack_req: repr.bth.ack_req,
                        solicited: repr.bth.solicited,
                        reth: repr.ext.reth,
                        atomic: repr.ext.atomic,
                        immdt: repr.ext.immdt,
                        ieth: repr.ext.ieth,
                        payload,
                    };
                    let mut ctx = RespCtx {
                        mem: &mut self.mem,
                        mrs: &mut self.mrs,
                        srqs: &mut self.srqs,
                        counters: &mut self.counters,
                        pd: q.init.pd,
                        ack_coalesce: self.cfg.ack_coalesce,
                    };
                    responder::handle_request(q, &req, &mut ctx, now, &mut fx);
                }
            }
            QpType::Ud => {
                self.counters.rcvd_pkts += 1;
                if let Some(deth) = repr.ext.deth {
                    if ce {
                        self.notify_ce(idx, now, &repr, deth.src_qp);
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
