//! Errors and completions: flushing a QP in error, completion entries into their CQs, the
//! asynchronous events.

use super::*;

impl<M: Memory> Device<M> {
    // ---------------------------------------------------------------- errors, completions

    /// A WQE that failed its local checks completes in error once it is the oldest.
    pub(super) fn check_local_errors(&mut self, idx: u32) {
        let Some(q) = self.qps.get_mut(idx) else { return };
        let Some(st) = q.req.sq.front().and_then(|w| w.local_error) else { return };
        let mut fx = core::mem::take(&mut self.fx);
        completer::complete_front(q, st, &mut fx);
        fx.qp_error = true;
        fx.error_status = Some(st);
        self.apply(idx, &mut fx);
        self.fx = fx;
    }

    /// Move a QP to the error state: every outstanding WQE completes with WrFlushErr
    /// (IBA 10.3.1.8, 11.4.2.1).
    pub(super) fn enter_error(&mut self, idx: u32, cause: Option<WcStatus>) {
        let Some(q) = self.qps.get_mut(idx) else { return };
        let first = q.state != QpState::Err;
        q.state = QpState::Err;
        q.timers.stop_all();
        q.req.rnr_wait = false;
        let mut wcs = Vec::new();
        while let Some(w) = q.req.sq.pop_front() {
            wcs.push((q.init.send_cq, flushed(q, w.wr.wr_id, w.wr.opcode.wc_opcode())));
            q.req.retire(w);
        }
        q.req.next = 0;
        q.req.sent_pkts = 0;
        q.req.rd_atomic_inflight = 0;
        let rq = q.resp.recv.take().map(|r| r.wqe).into_iter().chain(q.rq.drain(..));
        for r in rq.collect::<Vec<_>>() {
            wcs.push((q.init.recv_cq, flushed(q, r.wr_id, WcOpcode::Recv)));
        }
        q.resp.queue.retain(|r| matches!(r, responder::Reply::Ack { .. }));
        if first {
            if let Some(st) = cause {
                self.events.push_back(AsyncEvent::QpFatal(QpHandle(idx), st));
            }
        }
        for (cq, wc) in wcs {
            self.push_wc(cq, wc, false);
        }
    }

    /// UD send queue error (IBA 10.3.1.6): the QP goes to SQE, outstanding sends are
    /// flushed, receives keep working; modify_qp(SQE -> RTS) resumes sending.
    pub(super) fn enter_sq_error(&mut self, idx: u32) {
        let Some(q) = self.qps.get_mut(idx) else { return };
        if q.state == QpState::Err {
            return;
        }
        q.state = QpState::Sqe;
        let mut wcs = Vec::new();
        while let Some(w) = q.req.sq.pop_front() {
            let mut wc = flushed(q, w.wr.wr_id, w.wr.opcode.wc_opcode());
            wc.src_qp = q.qpn;
            wcs.push((q.init.send_cq, wc));
            q.req.retire(w);
        }
        q.req.next = 0;
        for (cq, wc) in wcs {
            self.push_wc(cq, wc, false);
        }
    }

    pub(super) fn push_wc(&mut self, cq: CqHandle, wc: WorkCompletion, solicited: bool) {
        let Some(c) = self.cqs.get_mut(cq.0) else { return };
        let was_overrun = c.is_overrun();
        if c.push(wc, solicited).is_err() && !was_overrun {
            // CQ overrun (11.6.2): async CQ error; the QPs using it go to the error state.
            self.counters.cq_overrun += 1;
            self.events.push_back(AsyncEvent::CqError(cq));
            let victims: Vec<u32> = self
                .qps
                .iter()
                .filter(|(_, q)| (q.init.send_cq == cq || q.init.recv_cq == cq) && q.state != QpState::Err)
                .map(|(i, _)| i)
                .collect();
            for i in victims {
                self.enter_error(i, Some(WcStatus::FatalErr));
            }
        }
    }

    /// Apply the effects a QP handler produced — the one place where handlers' outcomes
    /// reach CQs, events and the QP state.
    pub(super) fn apply(&mut self, idx: u32, fx: &mut Effects) {
        for (cq, wc, sol) in fx.wcs.drain(..) {
            self.push_wc(cq, wc, sol);
        }
        if let Some(s) = fx.srq_limit.take() {
            self.events.push_back(AsyncEvent::SrqLimitReached(s));
        }
        if core::mem::take(&mut fx.qp_error) {
            let st = fx.error_status.take().unwrap_or(WcStatus::GeneralErr);
            let ud = self.qps.get(idx).is_some_and(|q| q.init.qp_type == QpType::Ud);
            if ud {
                self.enter_sq_error(idx);
            } else {
                self.enter_error(idx, Some(st));
            }
        }
        fx.error_status = None;
        self.check_sq_drained(idx);
        self.schedule(idx);
        self.mark_ready(idx);
    }

    /// Report SQ drained once: in SQD, nothing in flight and no started WQE left.
    pub(super) fn check_sq_drained(&mut self, idx: u32) {
        let Some(q) = self.qps.get_mut(idx) else { return };
        if q.state != QpState::Sqd || !q.sqd_notify {
            return;
        }
        let busy = q.req.has_unacked(q.comp.psn) || q.req.sq.iter().any(|w| w.started);
        if !busy {
            q.sqd_notify = false;
            self.events.push_back(AsyncEvent::SqDrained(QpHandle(idx)));
        }
    }

}

/// The completion of a work request of `q` flushed by an error state (status WrFlushErr, no
/// length, no immediate).
fn flushed(q: &Qp, wr_id: u64, opcode: WcOpcode) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status: WcStatus::WrFlushErr,
        opcode,
        byte_len: 0,
        imm_data: 0,
        qp_num: q.qpn,
        src_qp: q.attr.dest_qp_num,
        wc_flags: WcFlags::default(),
        pkey_index: q.attr.pkey_index,
    }
}
