//! The verbs of the device: protection domains and memory regions, CQs, SRQs, QPs (create,
//! modify, query, destroy) and posting work requests.

use super::*;

impl<M: Memory> Device<M> {
    // ---------------------------------------------------------------- PD / MR

    pub fn alloc_pd(&mut self) -> PdHandle {
        PdHandle(self.pds.insert(ProtectionDomain::default()))
    }

    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), DeallocPdError> {
        let p = self.pds.get(pd.0).ok_or(DeallocPdError::InvalidPd)?;
        if p.users > 0 {
            return Err(DeallocPdError::Busy);
        }
        self.pds.remove(pd.0);
        Ok(())
    }

    /// Register `len` bytes at `va`. The lkey and rkey are `index << 8 | variant` with a
    /// seeded 8-bit variant, as rxe does.
    pub fn reg_mr(&mut self, pd: PdHandle, va: u64, len: u64, access: AccessFlags) -> Result<MemoryRegion, RegMrError> {
        self.pds.get(pd.0).ok_or(RegMrError::InvalidPd)?;
        MemoryRegion::validate_access(access)?;
        va.checked_add(len).ok_or(RegMrError::InvalidRange)?;
        let idx = self.mrs.next_index();
        if idx >= 1 << 24 {
            return Err(RegMrError::NoResources);
        }
        let key = (idx << 8) | (self.rng.next_u32() & 0xff);
        let mr = MemoryRegion { pd, va, len, access, lkey: Lkey(key), rkey: Rkey(key), remote_valid: true };
        let got = self.mrs.insert(mr.clone());
        debug_assert_eq!(got, idx);
        if let Some(p) = self.pds.get_mut(pd.0) {
            p.users += 1;
        }
        Ok(mr)
    }

    pub fn dereg_mr(&mut self, lkey: Lkey) -> Result<(), DeregMrError> {
        lookup_lkey(&self.mrs, lkey).ok_or(DeregMrError::InvalidMr)?;
        let mr = self.mrs.remove(lkey.0 >> 8).ok_or(DeregMrError::InvalidMr)?;
        if let Some(p) = self.pds.get_mut(mr.pd.0) {
            p.users = p.users.saturating_sub(1);
        }
        Ok(())
    }

    pub fn query_mr(&self, lkey: Lkey) -> Option<&MemoryRegion> {
        lookup_lkey(&self.mrs, lkey)
    }

    // ---------------------------------------------------------------- CQ

    pub fn create_cq(&mut self, depth: usize) -> Result<CqHandle, CreateCqError> {
        Ok(CqHandle(self.cqs.insert(CompletionQueue::new(depth)?)))
    }

    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), DestroyCqError> {
        let c = self.cqs.get(cq.0).ok_or(DestroyCqError::InvalidCq)?;
        if c.users > 0 {
            return Err(DestroyCqError::Busy);
        }
        self.cqs.remove(cq.0);
        Ok(())
    }

    /// Pop up to `out.len()` completions into `out`; returns how many.
    pub fn poll_cq(&mut self, cq: CqHandle, out: &mut [WorkCompletion]) -> Result<usize, PollCqError> {
        let c = self.cqs.get_mut(cq.0).ok_or(PollCqError::InvalidCq)?;
        let mut n = 0;
        while n < out.len() {
            match c.pop() {
                Some(wc) => {
                    out[n] = wc;
                    n += 1;
                }
                None => break,
            }
        }
        if n == 0 && c.is_overrun() {
            return Err(PollCqError::Overrun);
        }
        Ok(n)
    }

    /// Pop one completion.
    pub fn poll_cq_one(&mut self, cq: CqHandle) -> Result<Option<WorkCompletion>, PollCqError> {
        let c = self.cqs.get_mut(cq.0).ok_or(PollCqError::InvalidCq)?;
        match c.pop() {
            Some(wc) => Ok(Some(wc)),
            None if c.is_overrun() => Err(PollCqError::Overrun),
            None => Ok(None),
        }
    }

    /// Arm a completion event (ibv_req_notify_cq); `take_cq_event` reports it.
    pub fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> Result<(), NotifyCqError> {
        self.cqs.get_mut(cq.0).ok_or(NotifyCqError::InvalidCq)?.req_notify(solicited_only);
        Ok(())
    }

    /// Whether an armed completion event fired since the last call.
    pub fn take_cq_event(&mut self, cq: CqHandle) -> bool {
        self.cqs.get_mut(cq.0).map(|c| core::mem::take(&mut c.event_pending)).unwrap_or(false)
    }

    pub fn cq(&self, cq: CqHandle) -> Option<&CompletionQueue> {
        self.cqs.get(cq.0)
    }

    // ---------------------------------------------------------------- SRQ

    pub fn create_srq(&mut self, pd: PdHandle, max_wr: usize, max_sge: usize) -> Result<SrqHandle, CreateSrqError> {
        self.pds.get_mut(pd.0).ok_or(CreateSrqError::InvalidPd)?;
        let s = SharedReceiveQueue::new(pd, max_wr, max_sge)?;
        if let Some(p) = self.pds.get_mut(pd.0) {
            p.users += 1;
        }
        Ok(SrqHandle(self.srqs.insert(s)))
    }

    /// Arm the SRQ limit (ibv_modify_srq with IBV_SRQ_LIMIT); 0 disarms.
    pub fn modify_srq(&mut self, srq: SrqHandle, limit: usize) -> Result<(), ModifySrqError> {
        self.srqs.get_mut(srq.0).ok_or(ModifySrqError::InvalidSrq)?.set_limit(limit)
    }

    pub fn srq(&self, srq: SrqHandle) -> Option<&SharedReceiveQueue> {
        self.srqs.get(srq.0)
    }

    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), DestroySrqError> {
        let s = self.srqs.get(srq.0).ok_or(DestroySrqError::InvalidSrq)?;
        if s.users > 0 {
            return Err(DestroySrqError::Busy);
        }
        let s = self.srqs.remove(srq.0).ok_or(DestroySrqError::InvalidSrq)?;
        if let Some(p) = self.pds.get_mut(s.pd.0) {
            p.users = p.users.saturating_sub(1);
        }
        Ok(())
    }

    pub fn post_srq_recv(&mut self, srq: SrqHandle, wr: RecvWr) -> Result<(), PostRecvError> {
        self.post_srq_recv_ref(srq, &wr)
    }

    /// [`post_srq_recv`](Self::post_srq_recv) without giving up the work request: its
    /// scatter list is copied, so one `RecvWr` can be reused and posting allocates nothing.
    pub fn post_srq_recv_ref(&mut self, srq: SrqHandle, wr: &RecvWr) -> Result<(), PostRecvError> {
        let s = self.srqs.get(srq.0).ok_or(PostRecvError::InvalidSrq)?;
        if s.queue.len() >= s.max_wr {
            return Err(PostRecvError::QueueFull);
        }
        if wr.sg_list.len() > s.max_sge {
            return Err(PostRecvError::TooManySges);
        }
        let len = self.check_recv_sges(s.pd, wr)?;
        let wqe = RecvWqe { wr_id: wr.wr_id, sges: SgeList::from_slice(&wr.sg_list), len };
        self.srqs.get_mut(srq.0).ok_or(PostRecvError::InvalidSrq)?.queue.push_back(wqe);
        Ok(())
    }

    pub(super) fn check_recv_sges(&self, pd: PdHandle, wr: &RecvWr) -> Result<u64, PostRecvError> {
        let mut len = 0u64;
        for s in &wr.sg_list {
            if s.length > 0 {
                let mr = lookup_lkey(&self.mrs, s.lkey).ok_or(PostRecvError::InvalidLkey)?;
                mr.check(pd, s.addr, s.length as u64, AccessFlags::LOCAL_WRITE).map_err(|_| PostRecvError::InvalidLkey)?;
            }
            len += s.length as u64;
        }
        Ok(len)
    }

    // ---------------------------------------------------------------- QP

    pub fn create_qp(&mut self, init: QpInitAttr) -> Result<QpHandle, CreateQpError> {
        let mut qpn = self.next_qpn;
        let mut tries = 0;
        while self.qpn_map.contains_key(&qpn) || qpn < 2 {
            qpn = (qpn + 1) & 0xff_ffff;
            tries += 1;
            if tries > 1 << 24 {
                return Err(CreateQpError::NoResources);
            }
        }
        self.next_qpn = (qpn + 1) & 0xff_ffff;
        self.create_qp_with_qpn(init, Qpn::new(qpn))
    }

    /// Create QP1, the GSI QP that carries CM MADs (a UD QP, IBA 13.4.6).
    pub fn create_gsi_qp(&mut self, mut init: QpInitAttr) -> Result<QpHandle, CreateQpError> {
        if self.qpn_map.contains_key(&1) {
            return Err(CreateQpError::QpnInUse);
        }
        init.qp_type = QpType::Ud;
        self.create_qp_with_qpn(init, Qpn::GSI)
    }

    pub(super) fn create_qp_with_qpn(&mut self, init: QpInitAttr, qpn: Qpn) -> Result<QpHandle, CreateQpError> {
        self.pds.get(init.pd.0).ok_or(CreateQpError::InvalidPd)?;
        self.cqs.get(init.send_cq.0).ok_or(CreateQpError::InvalidCq)?;
        self.cqs.get(init.recv_cq.0).ok_or(CreateQpError::InvalidCq)?;
        if let Some(s) = init.srq {
            let srq = self.srqs.get(s.0).ok_or(CreateQpError::InvalidSrq)?;
            if srq.pd != init.pd {
                return Err(CreateQpError::InvalidSrq);
            }
        }
        let c = init.cap;
        if c.max_send_wr == 0 || c.max_send_wr > 1 << 16 || c.max_recv_wr > 1 << 16 || c.max_send_sge > 32 || c.max_recv_sge > 32 {
            return Err(CreateQpError::InvalidCap);
        }
        let idx = self.qps.insert(Qp::new(qpn, init));
        self.qpn_map.insert(qpn.value(), idx);
        if let Some(p) = self.pds.get_mut(init.pd.0) {
            p.users += 1;
        }
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(c) = self.cqs.get_mut(cq.0) {
                c.users += 1;
            }
        }
        if let Some(s) = init.srq.and_then(|s| self.srqs.get_mut(s.0)) {
            s.users += 1;
        }
        Ok(QpHandle(idx))
    }

    pub fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), DestroyQpError> {
        let q = self.qps.remove(qp.0).ok_or(DestroyQpError::InvalidQp)?;
        self.qpn_map.remove(&q.qpn.value());
        if let Some(p) = self.pds.get_mut(q.init.pd.0) {
            p.users = p.users.saturating_sub(1);
        }
        for cq in [q.init.send_cq, q.init.recv_cq] {
            if let Some(c) = self.cqs.get_mut(cq.0) {
                c.users = c.users.saturating_sub(1);
            }
        }
        if let Some(s) = q.init.srq.and_then(|s| self.srqs.get_mut(s.0)) {
            s.users = s.users.saturating_sub(1);
        }
        self.ready.retain(|&i| i != qp.0);
        Ok(())
    }

    pub fn query_qp(&self, qp: QpHandle) -> Result<QpInfo, QueryQpError> {
        let q = self.qps.get(qp.0).ok_or(QueryQpError::InvalidQp)?;
        let mut attr = q.attr;
        attr.qp_state = q.state;
        attr.cur_qp_state = q.state;
        Ok(QpInfo { qp_num: q.qpn, qp_type: q.init.qp_type, attr, cap: q.init.cap, udp_sport: q.udp_sport })
    }

    /// Selective repeat: how many out-of-order packets the QP's responder holds now.
    pub fn sr_held(&self, qp: QpHandle) -> Option<usize> {
        self.qps.get(qp.0).map(|q| q.resp.ooo.len())
    }

    pub fn qp_state(&self, qp: QpHandle) -> Option<QpState> {
        self.qps.get(qp.0).map(|q| q.state)
    }

    /// The QP with number `qpn`.
    pub fn qp_by_qpn(&self, qpn: Qpn) -> Option<QpHandle> {
        self.qpn_map.get(&qpn.value()).map(|&i| QpHandle(i))
    }

    /// ibv_modify_qp: validate the transition and attributes against the IBA table, then
    /// apply them.
    pub fn modify_qp(&mut self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<(), ModifyQpError> {
        let q = self.qps.get(qp.0).ok_or(ModifyQpError::InvalidQp)?;
        let cur = q.state;
        if mask.contains(QpAttrMask::CUR_STATE) && attr.cur_qp_state != cur {
            return Err(ModifyQpError::CurStateMismatch);
        }
        let next = if mask.contains(QpAttrMask::STATE) { attr.qp_state } else { cur };
        let ty = q.init.qp_type;
        if transition(ty, cur, next).is_none() {
            return Err(ModifyQpError::InvalidTransition);
        }
        if !mask_is_ok(ty, cur, next, mask) {
            return Err(ModifyQpError::InvalidAttrMask);
        }
        validate(attr, mask).map_err(ModifyQpError::InvalidAttr)?;
        if mask.contains(QpAttrMask::PKEY_INDEX) && attr.pkey_index as usize >= self.cfg.pkeys.len() {
            return Err(ModifyQpError::InvalidAttr(InvalidAttr::PkeyIndex));
        }
        if mask.contains(QpAttrMask::AV) {
            let sgid = self.cfg.gids.get(attr.ah_attr.sgid_index as usize).ok_or(ModifyQpError::InvalidAttr(InvalidAttr::SgidIndex))?;
            if sgid.is_ipv4_mapped() != attr.ah_attr.dgid.is_ipv4_mapped() {
                return Err(ModifyQpError::InvalidAttr(InvalidAttr::SgidIndex));
            }
        }
        if mask.contains(QpAttrMask::PATH_MTU) && attr.path_mtu > self.port_mtu {
            return Err(ModifyQpError::InvalidAttr(InvalidAttr::PathMtu));
        }
        let pkeys = &self.cfg.pkeys;
        let q = self.qps.get_mut(qp.0).ok_or(ModifyQpError::InvalidQp)?;
        use QpAttrMask as A;
        if mask.contains(A::ACCESS_FLAGS) {
            q.attr.qp_access_flags = attr.qp_access_flags;
        }
        if mask.contains(A::PKEY_INDEX) {
            q.attr.pkey_index = attr.pkey_index;
            q.pkey = PKey(pkeys[attr.pkey_index as usize]);
        }
        if mask.contains(A::QKEY) {
            q.attr.qkey = attr.qkey;
        }
        if mask.contains(A::DEST_QPN) {
            q.attr.dest_qp_num = attr.dest_qp_num;
        }
        if mask.contains(A::AV) {
            q.attr.ah_attr = attr.ah_attr;
            if ty == QpType::Rc {
                q.udp_sport = attr::rc_udp_sport(attr.ah_attr.flow_label, q.qpn, q.attr.dest_qp_num);
            }
        }
        if mask.contains(A::PATH_MTU) {
            q.attr.path_mtu = attr.path_mtu;
        }
        if mask.contains(A::TIMEOUT) {
            q.attr.timeout = attr.timeout;
        }
        if mask.contains(A::RETRY_CNT) {
            q.attr.retry_cnt = attr.retry_cnt;
            q.comp.retry_left = attr.retry_cnt;
        }
        if mask.contains(A::RNR_RETRY) {
            q.attr.rnr_retry = attr.rnr_retry;
            q.comp.rnr_left = attr.rnr_retry;
        }
        if mask.contains(A::RQ_PSN) {
            q.attr.rq_psn = attr.rq_psn;
            q.resp.epsn = attr.rq_psn;
        }
        if mask.contains(A::SQ_PSN) {
            q.attr.sq_psn = attr.sq_psn;
            q.req.set_psn(attr.sq_psn);
            q.comp.psn = attr.sq_psn;
        }
        if mask.contains(A::MAX_QP_RD_ATOMIC) {
            q.attr.max_rd_atomic = attr.max_rd_atomic;
        }
        if mask.contains(A::MAX_DEST_RD_ATOMIC) {
            q.attr.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if mask.contains(A::MIN_RNR_TIMER) {
            q.attr.min_rnr_timer = attr.min_rnr_timer;
        }
        if mask.contains(A::SELECTIVE_REPEAT) {
            q.attr.selective_repeat = attr.selective_repeat;
        }
        if mask.contains(A::EN_SQD_ASYNC_NOTIFY) {
            q.attr.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        if ty == QpType::Ud && q.init.qp_type == QpType::Ud && q.attr.path_mtu > self.port_mtu {
            q.attr.path_mtu = self.port_mtu;
        }
        match next {
            QpState::Reset => {
                q.reset();
            }
            QpState::Err if cur != QpState::Err => {
                self.enter_error(qp.0, None);
            }
            s => {
                q.state = s;
                q.sqd_notify = s == QpState::Sqd && cur != QpState::Sqd && q.attr.en_sqd_async_notify;
                if ty == QpType::Ud && s == QpState::Init {
                    // UD packets never exceed the port MTU.
                    q.attr.path_mtu = self.port_mtu;
                }
            }
        }
        self.check_sq_drained(qp.0);
        self.mark_ready(qp.0);
        Ok(())
    }

    // ---------------------------------------------------------------- post

    pub fn post_send(&mut self, qp: QpHandle, wr: SendWr) -> Result<(), PostSendError> {
        self.post_send_ref(qp, &wr)
    }

    /// [`post_send`](Self::post_send) without giving up the work request: its gather list
    /// is copied into the send queue (inline up to 4 SGEs), so a caller can keep one
    /// `SendWr` per QP, change `wr_id`/addresses and post it again without allocating.
    ///
    /// An INLINE work request has its payload gathered from memory now, into a buffer the
    /// WQE keeps until it retires (recycled: no allocation per post in steady state).
    pub fn post_send_ref(&mut self, qp: QpHandle, wr: &SendWr) -> Result<(), PostSendError> {
        let len = wr.total_len();
        let inline = wr.flags.contains(SendFlags::INLINE);
        let cap = self.check_post_send(qp, wr, len, inline)?;
        // Local key checks (10.6.3.3 / C10-...): a failure completes the WR with LocProtErr.
        let mut local_error = None;
        let mut data = None;
        if inline {
            let q = self.qps.get_mut(qp.0).ok_or(PostSendError::InvalidQp)?;
            let mut v = q.req.take_inline(len as usize, cap);
            let mut off = 0;
            for s in &wr.sg_list {
                let n = s.length as usize;
                if self.mem.read(s.addr, &mut v[off..off + n]).is_err() {
                    local_error = Some(WcStatus::LocProtErr);
                }
                off += n;
            }
            data = Some(v);
        } else {
            let pd = self.qps.get(qp.0).ok_or(PostSendError::InvalidQp)?.init.pd;
            let need = if wr.opcode.is_rd_atomic() { AccessFlags::LOCAL_WRITE } else { AccessFlags::NONE };
            for s in &wr.sg_list {
                if s.length == 0 {
                    continue;
                }
                let ok = lookup_lkey(&self.mrs, s.lkey).is_some_and(|mr| mr.check(pd, s.addr, s.length as u64, need).is_ok());
                if !ok {
                    local_error = Some(WcStatus::LocProtErr);
                }
            }
        }
        self.queue_send(qp, wr, data, len, local_error)
    }

    /// An INLINE send whose `len` payload bytes the caller writes itself: `fill` gets the
    /// WQE's own (recycled) buffer, so the bytes are copied once, from wherever the caller
    /// has them, and the transmit path reads them from there into the frame (and again for
    /// a retransmission). `wr` carries no gather list (else `TooManySges`); its INLINE flag
    /// is implied; `len` is limited by `max_inline_data` as for any INLINE send. `fill`
    /// runs only when the post is accepted.
    pub fn post_send_inline_with(&mut self, qp: QpHandle, wr: &SendWr, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<(), PostSendError> {
        if !wr.sg_list.is_empty() {
            return Err(PostSendError::TooManySges);
        }
        let cap = self.check_post_send(qp, wr, len as u64, true)?;
        let q = self.qps.get_mut(qp.0).ok_or(PostSendError::InvalidQp)?;
        let mut v = q.req.take_inline(len, cap);
        fill(&mut v);
        self.queue_send(qp, wr, Some(v), len as u64, None)
    }

    /// The checks every send post makes (QP state, queue room, SGE count, opcode for the
    /// service, length, inline limits). Returns the QP's `max_inline_data`.
    fn check_post_send(&self, qp: QpHandle, wr: &SendWr, len: u64, inline: bool) -> Result<usize, PostSendError> {
        let q = self.qps.get(qp.0).ok_or(PostSendError::InvalidQp)?;
        if !q.state.can_post_send() {
            return Err(PostSendError::InvalidState);
        }
        if q.req.sq.len() >= q.init.cap.max_send_wr as usize {
            return Err(PostSendError::QueueFull);
        }
        if wr.sg_list.len() > q.init.cap.max_send_sge as usize {
            return Err(PostSendError::TooManySges);
        }
        match q.init.qp_type {
            QpType::Ud => {
                if !matches!(wr.opcode, SendOpcode::Send | SendOpcode::SendImm) || wr.ud.is_none() {
                    return Err(PostSendError::InvalidOpcode);
                }
                if len > q.attr.path_mtu.bytes() as u64 {
                    return Err(PostSendError::MessageTooLong);
                }
            }
            QpType::Rc => {
                if len > 1 << 31 {
                    return Err(PostSendError::MessageTooLong);
                }
                if wr.opcode.is_atomic() && (wr.sg_list.len() != 1 || wr.sg_list[0].length != 8) {
                    return Err(PostSendError::InvalidOpcode);
                }
            }
        }
        if inline && (len > q.init.cap.max_inline_data as u64 || wr.opcode.is_rd_atomic()) {
            return Err(PostSendError::InlineTooLong);
        }
        Ok(q.init.cap.max_inline_data as usize)
    }

    /// Queues a checked send WQE (`inline`: its payload) and lets the QP's state act on it.
    fn queue_send(&mut self, qp: QpHandle, wr: &SendWr, inline: Option<Vec<u8>>, len: u64, local_error: Option<WcStatus>) -> Result<(), PostSendError> {
        let signaled = wr.flags.contains(SendFlags::SIGNALED);
        let q = self.qps.get_mut(qp.0).ok_or(PostSendError::InvalidQp)?;
        let state = q.state;
        q.req.sq.push_back(SendWqe::new(wr, inline, len, local_error, signaled));
        if state == QpState::Err {
            // Posted to a QP in the error state: flushed at once (IBA 10.8.3.1).
            self.enter_error(qp.0, None);
        } else if state == QpState::Sqe {
            self.enter_sq_error(qp.0);
        } else {
            self.check_local_errors(qp.0);
        }
        self.mark_ready(qp.0);
        Ok(())
    }

    pub fn post_recv(&mut self, qp: QpHandle, wr: RecvWr) -> Result<(), PostRecvError> {
        self.post_recv_ref(qp, &wr)
    }

    /// [`post_recv`](Self::post_recv) without giving up the work request (its scatter list
    /// is copied): one reused `RecvWr` makes posting allocation-free.
    pub fn post_recv_ref(&mut self, qp: QpHandle, wr: &RecvWr) -> Result<(), PostRecvError> {
        let q = self.qps.get(qp.0).ok_or(PostRecvError::InvalidQp)?;
        if q.init.srq.is_some() {
            return Err(PostRecvError::QpHasSrq);
        }
        if !q.state.can_post_recv() {
            return Err(PostRecvError::InvalidState);
        }
        if q.rq.len() >= q.init.cap.max_recv_wr as usize {
            return Err(PostRecvError::QueueFull);
        }
        if wr.sg_list.len() > q.init.cap.max_recv_sge as usize {
            return Err(PostRecvError::TooManySges);
        }
        let len = self.check_recv_sges(q.init.pd, wr)?;
        let state = q.state;
        let q = self.qps.get_mut(qp.0).ok_or(PostRecvError::InvalidQp)?;
        q.rq.push_back(RecvWqe { wr_id: wr.wr_id, sges: SgeList::from_slice(&wr.sg_list), len });
        if state == QpState::Err {
            self.enter_error(qp.0, None);
        }
        Ok(())
    }

}
