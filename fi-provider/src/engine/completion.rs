//! Work completions into libfabric completions: the CQ entry (or error entry) and the counter
//! each operation kind updates, multi-receive buffers reported at their offsets, UD
//! receives copied out of their bounce area, and CQ reads.

use super::*;
use crate::ffi::sys as fi;
use crate::info;
use crate::queue::{CqEntry, CqError, ADDR_NOTAVAIL};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::WcFlags;

/// Positive FI_E* value for a work completion status.
pub fn wc_errno(s: WcStatus) -> Errno {
    match s {
        WcStatus::Success => 0,
        WcStatus::WrFlushErr => fi::FI_ECANCELED,
        WcStatus::LocLenErr => fi::FI_ETRUNC,
        WcStatus::RemAccessErr | WcStatus::LocProtErr | WcStatus::LocAccessErr => fi::FI_EACCES,
        WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr | WcStatus::RespTimeoutErr => fi::FI_ETIMEDOUT,
        WcStatus::RemInvReqErr | WcStatus::RemInvRdReqErr => fi::FI_EINVAL,
        _ => fi::FI_EIO,
    }
}

pub fn wc_status_str(v: i32) -> &'static str {
    match u8::try_from(v).ok().and_then(WcStatus::from_value) {
        Some(WcStatus::Success) => "success",
        Some(WcStatus::LocLenErr) => "local length error (receive buffer too small)",
        Some(WcStatus::LocQpOpErr) => "local QP operation error",
        Some(WcStatus::LocProtErr) => "local protection error (bad lkey/descriptor)",
        Some(WcStatus::WrFlushErr) => "work request flushed (endpoint in error or shut down)",
        Some(WcStatus::RemAccessErr) => "remote access error (bad rkey, bounds or rights)",
        Some(WcStatus::RemInvReqErr) => "remote invalid request",
        Some(WcStatus::RemOpErr) => "remote operational error",
        Some(WcStatus::RetryExcErr) => "transport retry counter exceeded (peer unreachable)",
        Some(WcStatus::RnrRetryExcErr) => "RNR retry counter exceeded (no receive posted at the peer)",
        Some(WcStatus::RespTimeoutErr) => "response timeout",
        Some(s) => s.name(),
        None => "unknown droce error",
    }
}

trait StatusName {
    fn name(self) -> &'static str;
}
impl StatusName for WcStatus {
    fn name(self) -> &'static str {
        match self {
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::MwBindErr => "memory window bind error",
            WcStatus::BadRespErr => "bad response (unexpected transport opcode or length from the peer)",
            WcStatus::LocRddViolErr => "local RDD violation",
            WcStatus::RemAbortErr => "remote aborted error",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::GeneralErr => "general error",
            _ => "work completion error",
        }
    }
}

impl Engine {
    pub(super) fn bump(&mut self, c: Option<Id>, ok: bool) {
        if let Some(c) = c.and_then(|c| self.cntrs.get_mut(&c)) {
            if ok {
                c.value += 1;
            } else {
                c.err += 1;
            }
        }
    }

    pub(super) fn completion(&mut self, cq: Option<Id>, wc: WorkCompletion, grh_src: Option<IpAddr>) {
        if debug() {
            eprintln!("droce-fi: wc {:?} {:?} len {} cq {cq:?} op {:?}", wc.status, wc.opcode, wc.byte_len, self.ops.get(&wc.wr_id).map(|o| (o.ep, o.kind, o.context)));
        }
        let Some(mut op) = self.ops.remove(&wc.wr_id) else { return };
        // A multi-receive buffer: this message is reported at its offset; the rest of the
        // buffer is posted again, or the buffer is released (FI_MULTI_RECV on this entry).
        if let Some(mut m) = self.multi.remove(&wc.wr_id) {
            op.buf = m.base + m.off;
            let ok = wc.status == WcStatus::Success;
            if ok {
                m.off += wc.byte_len as u64;
            }
            let left = m.len.saturating_sub(m.off);
            let min = self.eps.get(&op.ep).map(|e| e.min_multi_recv).unwrap_or(MIN_MULTI_RECV).max(1);
            let mut again = None;
            if ok && left >= min {
                let next = Op { buf: m.base + m.off, len: left, tmp_mrs: Vec::new(), ..op.clone() };
                if let Ok(w) = self.post_recv_id(op.ep, &[Seg { addr: m.base + m.off, len: left, lkey: m.lkey }], next) {
                    // the buffer's registrations stay until it is released
                    if let Some(n) = self.ops.get_mut(&w) {
                        n.tmp_mrs = std::mem::take(&mut op.tmp_mrs);
                    }
                    again = Some(w);
                }
            }
            match again {
                Some(w) => {
                    self.multi.insert(w, m);
                    self.multi_rnr_fast(op.ep);
                }
                None => {
                    op.flags |= fi::FI_MULTI_RECV as u64;
                    if ok {
                        self.next_multi_recv(op.ep);
                    }
                }
            }
        }
        let mut bounce_len = None;
        if let (Some(b), WcStatus::Success, OpKind::Recv) = (&op.bounce, wc.status, op.kind) {
            // GRH first, then the datagram: copy the datagram into the application's buffers
            // (registered ranges, so the device's memory accessors reach them).
            let n = (wc.byte_len as usize).min(b.area.len());
            let data = &b.area[info::UD_PREFIX as usize..n.max(info::UD_PREFIX as usize)];
            let mut off = 0;
            let mut h = self.host();
            for &(a, l) in &b.user {
                let k = (l as usize).min(data.len() - off);
                if k > 0 {
                    let _ = h.write_mem(a, &data[off..off + k]);
                }
                off += k;
            }
            bounce_len = Some(data.len() as u64);
        }
        for l in &op.tmp_mrs {
            self.remove_mr(*l);
        }
        // A receive of a shared context completes for the endpoint whose QP took it.
        let ep_id = if self.srxs.contains_key(&op.ep) {
            self.eps.iter().find(|(_, e)| e.qpn == Some(wc.qp_num.value())).map(|(k, _)| *k).unwrap_or(op.ep)
        } else {
            op.ep
        };
        let Some(ep) = self.eps.get(&ep_id) else {
            // a shared context's receive whose endpoint is gone: the CQ entry still counts
            if self.srxs.contains_key(&op.ep) {
                if let Some(cq) = cq.and_then(|c| self.cqs.get_mut(&c)) {
                    let entry = CqEntry { op_context: op.context, flags: op.flags, len: wc.byte_len as u64, buf: op.buf, data: 0, src: ADDR_NOTAVAIL };
                    if wc.status == WcStatus::Success {
                        cq.q.push(entry);
                    } else {
                        cq.q.push_error(CqError { entry: CqEntry { len: 0, ..entry }, err: wc_errno(wc.status), prov_errno: wc.status.value() as i32, olen: 0 });
                    }
                }
            }
            return;
        };
        let ok = wc.status == WcStatus::Success;
        let mut flags = op.flags;
        let mut len = op.len;
        let mut data = 0;
        let mut src = ADDR_NOTAVAIL;
        let cntr = match op.kind {
            OpKind::Send => ep.cntrs.send,
            OpKind::Recv => {
                len = bounce_len.unwrap_or(wc.byte_len as u64);
                if wc.wc_flags.contains(WcFlags::WITH_IMM) {
                    flags |= fi::FI_REMOTE_CQ_DATA as u64;
                    data = wc.imm_data as u64;
                }
                if wc.opcode == WcOpcode::RecvRdmaWithImm {
                    flags = fi::FI_RMA as u64 | fi::FI_REMOTE_WRITE as u64 | fi::FI_REMOTE_CQ_DATA as u64;
                    len = 0;
                }
                if let (Some(ip), Some(av)) = (grh_src, ep.av.and_then(|a| self.avs.get(&a))) {
                    src = av.reverse(ip, wc.src_qp.value());
                }
                ep.cntrs.recv
            }
            // fi_endpoint(3): base atomics count as writes, fetching and compare atomics as reads
            OpKind::Atomic if op.flags & fi::FI_WRITE as u64 != 0 => ep.cntrs.write,
            OpKind::Read | OpKind::Atomic => ep.cntrs.read,
            OpKind::Write => ep.cntrs.write,
        };
        self.bump(cntr, ok);
        let Some(cq) = cq.and_then(|c| self.cqs.get_mut(&c)) else { return };
        let entry = CqEntry { op_context: op.context, flags, len, buf: if op.kind == OpKind::Recv { op.buf } else { 0 }, data, src };
        if ok {
            // remote CQ data always reaches the CQ: a receive that asked for no completion
            // (selective) still carries the peer's data
            if op.report || flags & fi::FI_REMOTE_CQ_DATA as u64 != 0 {
                cq.q.push(entry);
            }
        } else if !op.report && op.context == 0 {
            // An inject (or an unsignalled send without a context) that failed: nothing can
            // name it in an error entry, and ofi_rxm dereferences every error entry's
            // op_context (rxm_handle_comp_error: a NULL one was a SIGSEGV in the survivor of an
            // rdm pair whose peer died). The verbs provider drops these too (VERBS_NO_COMP_FLAG);
            // the endpoint's failure still shows in the flushed receives, counters and the EQ.
            if debug() {
                eprintln!("droce-fi: error {:?} of an operation without completion or context: not reported", wc.status);
            }
        } else {
            // bytes that did not fit: the message's length (a UD one counts the GRH, which a
            // receive without FI_MSG_PREFIX took into its bounce area, not the application's
            // buffer) beyond the buffer
            let grh = if op.kind == OpKind::Recv && op.bounce.is_some() { info::UD_PREFIX } else { 0 };
            let olen = if wc.status == WcStatus::LocLenErr { (wc.byte_len as u64).saturating_sub(grh).saturating_sub(op.len) } else { 0 };
            cq.q.push_error(CqError { entry: CqEntry { len: 0, ..entry }, err: wc_errno(wc.status), prov_errno: wc.status.value() as i32, olen });
        }
    }

    /// Up to `max` entries of CQ `id`, each handed to `out(index, entry)`; progresses only
    /// when the queue is empty. The number read, `FI_EAVAIL` (an error entry is first) or
    /// `FI_EAGAIN`.
    pub fn cq_read_with(&mut self, id: Id, max: usize, mut out: impl FnMut(usize, &CqEntry)) -> Result<usize, Errno> {
        if self.cqs.get(&id).ok_or(fi::FI_EINVAL)?.q.is_empty() {
            self.progress_datapath();
        }
        let cq = self.cqs.get_mut(&id).ok_or(fi::FI_EINVAL)?;
        if cq.q.has_error() {
            return Err(fi::FI_EAVAIL);
        }
        let mut n = 0;
        while n < max {
            let Some(c) = cq.q.pop() else { break };
            out(n, &c);
            n += 1;
        }
        if n == 0 {
            Err(fi::FI_EAGAIN)
        } else {
            Ok(n)
        }
    }
}

/// The sender of a UD receive from its GRH area (the transport reads it: IPv4 in the last 20
/// bytes, as rxe writes it; IPv6 the whole 40), as the provider names addresses.
pub fn grh_source(grh: &[u8; 40]) -> Option<IpAddr> {
    droce_transport::ud::grh_source(grh).map(|g| addr::canon(IpAddr::V6(g.to_ipv6())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grh_sources() {
        let mut g = [0u8; 40];
        g[20] = 0x45;
        g[32..36].copy_from_slice(&[10, 77, 0, 2]);
        assert_eq!(grh_source(&g), Some("10.77.0.2".parse().unwrap()));
        let mut g6 = [0u8; 40];
        g6[0] = 0x60;
        g6[8..24].copy_from_slice(&"fd00::7".parse::<std::net::Ipv6Addr>().unwrap().octets());
        assert_eq!(grh_source(&g6), Some("fd00::7".parse().unwrap()));
        assert_eq!(grh_source(&[0u8; 40]), None);
    }

    #[test]
    fn status_mapping() {
        assert_eq!(wc_errno(WcStatus::WrFlushErr), fi::FI_ECANCELED);
        assert_eq!(wc_errno(WcStatus::LocLenErr), fi::FI_ETRUNC);
        assert_eq!(wc_errno(WcStatus::RemAccessErr), fi::FI_EACCES);
        assert!(wc_status_str(WcStatus::RnrRetryExcErr.value() as i32).contains("RNR"));
    }
}
