//! Opening and closing what the fids stand for: CQs, EQs, memory registrations, endpoints
//! (with their QPs: RC in INIT until connected, UD straight to RTS) and shared receive
//! contexts.

use super::*;
use crate::ffi::sys as fi;
use crate::info::{self, EpType};
use crate::queue::{Queue, Signal};
use droce_dpdk::roce::cm::ConnId;
use droce_transport::device::DestroySrqError;
use droce_transport::qp::{QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType};
use droce_transport::{Psn, QKey, Qpn};
use crate::addr::EpAddr;

impl Engine {
    pub fn open_cq(&mut self, want_fd: bool) -> Result<Id, Errno> {
        let dev = self.host().create_cq(DEV_CQ_DEPTH).map_err(|_| fi::FI_ENOMEM)?;
        let mut q = Queue::default();
        if want_fd {
            q.signal = Some(Signal::new().map_err(|_| fi::FI_ENOMEM)?);
        }
        let id = self.fresh_id();
        self.cqs.insert(id, Cq { dev: Some(dev), q });
        self.rebuild_cq_list();
        Ok(id)
    }

    pub fn close_cq(&mut self, id: Id) -> Result<(), Errno> {
        if self.eps.values().any(|e| e.tx_cq == Some(id) || e.rx_cq == Some(id)) {
            return Err(fi::FI_EBUSY);
        }
        if let Some(cq) = self.cqs.remove(&id) {
            if let Some(d) = cq.dev {
                let _ = self.host().destroy_cq(d);
            }
        }
        self.rebuild_cq_list();
        Ok(())
    }

    pub(super) fn rebuild_cq_list(&mut self) {
        self.cq_list.clear();
        self.cq_list.extend(self.cqs.iter().filter_map(|(id, c)| c.dev.map(|d| (Some(*id), d))));
        self.cq_list.push((None, self.discard_cq));
    }

    pub fn open_eq(&mut self, want_fd: bool) -> Result<Id, Errno> {
        let mut q = Queue::default();
        if want_fd {
            q.signal = Some(Signal::new().map_err(|_| fi::FI_ENOMEM)?);
        }
        let id = self.fresh_id();
        self.eqs.insert(id, q);
        Ok(id)
    }

    pub fn add_mr(&mut self, mr: Mr) {
        self.mrs.insert(mr);
    }

    /// Deregisters the MR (application or temporary) with this lkey.
    pub fn remove_mr(&mut self, lkey: Lkey) -> Option<Mr> {
        let mr = self.mrs.remove(lkey)?;
        if let Err(e) = self.host().dereg_mr(mr.lkey) {
            // InUse: zero-copy frames over the region are still held by the PMD; the region
            // stays registered in the device (the application's buffer must outlive them).
            crate::ffi::log_warn(&format!("droce: fi_close(mr) {:#x}+{}: deregistration failed: {e:?}", mr.va, mr.len));
        }
        Some(mr)
    }

    /// The lkey of an application MR covering `addr..addr+len` (temporary ones are not lent).
    pub fn find_mr(&self, addr: u64, len: u64) -> Option<Lkey> {
        self.mrs.find(addr, len)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new_ep(&mut self, ty: EpType, fid: usize, context: usize, src: EpAddr, peer: Option<EpAddr>, v6: bool, conn: Option<ConnId>) -> Id {
        let id = self.fresh_id();
        let state = if conn.is_some() { ConnState::Accepting } else { ConnState::Idle };
        self.eps.insert(
            id,
            Ep {
                ty,
                fid,
                context,
                qp: None,
                tx_cq: None,
                rx_cq: None,
                tx_selective: false,
                rx_selective: false,
                eq: None,
                av: None,
                cntrs: EpCntrs::default(),
                conn,
                state,
                src,
                peer,
                v6,
                tx_op_flags: 0,
                rx_op_flags: 0,
                prefix: true,
                cm_done: false,
                min_multi_recv: MIN_MULTI_RECV,
                sidr_service: None,
                srx: None,
                qpn: None,
            },
        );
        id
    }

    pub(super) fn dev_cq(&self, cq: Option<Id>) -> CqHandle {
        cq.and_then(|c| self.cqs.get(&c)).and_then(|c| c.dev).unwrap_or(self.discard_cq)
    }

    /// fi_enable: the QP exists (RC: in INIT so that receives can be posted; UD: in RTS).
    pub fn enable_ep(&mut self, id: Id) -> Result<(), Errno> {
        let ep = self.eps.get(&id).ok_or(fi::FI_EINVAL)?;
        if ep.qp.is_some() {
            return Ok(());
        }
        let (ty, send_cq, recv_cq) = (ep.ty, self.dev_cq(ep.tx_cq), self.dev_cq(ep.rx_cq));
        if ty == EpType::Dgram && ep.av.is_none() {
            return Err(fi::FI_ENOAV);
        }
        let pd = self.pd;
        let srq = match ep.srx {
            Some(s) if ty == EpType::Msg => Some(self.srxs.get(&s).ok_or(fi::FI_EINVAL)?.srq),
            Some(_) => return Err(fi::FI_ENOSYS),
            None => None,
        };
        let mut h = self.host();
        let cap = QpCap {
            max_send_wr: info::TX_SIZE as u32,
            max_recv_wr: info::RX_SIZE as u32,
            max_send_sge: info::IOV_LIMIT as u32,
            max_recv_sge: info::IOV_LIMIT as u32,
            max_inline_data: info::INJECT_SIZE as u32,
        };
        let qp_type = if ty == EpType::Msg { QpType::Rc } else { QpType::Ud };
        let qp = h
            .create_qp(QpInitAttr { qp_type, pd, send_cq, recv_cq, srq, cap, sq_sig_all: false })
            .map_err(|_| fi::FI_ENOMEM)?;
        let res = match ty {
            EpType::Msg => h.qp_to_init(qp).map_err(|_| fi::FI_EIO),
            EpType::Dgram => {
                let a = QpAttr { qp_state: QpState::Init, pkey_index: 0, port_num: 1, qkey: QKey(UD_QKEY), ..QpAttr::default() };
                let steps = [
                    (a, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY),
                    (QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() }, QpAttrMask::STATE),
                    (QpAttr { qp_state: QpState::Rts, sq_psn: Psn::new(0), ..QpAttr::default() }, QpAttrMask::STATE | QpAttrMask::SQ_PSN),
                ];
                steps.iter().try_for_each(|(a, m)| h.modify_qp(qp, a, *m).map_err(|_| fi::FI_EIO))
            }
        };
        if let Err(e) = res {
            let _ = h.destroy_qp(qp);
            return Err(e);
        }
        let qpn = h.query_qp(qp).map(|i| i.qp_num.value()).unwrap_or(0);
        let port = self.eps.get(&id).map_or(0, |e| e.src.sa.port());
        // A DGRAM endpoint bound to a port answers SIDR for it: peers that know only the IP
        // and port (node/service) learn its QPN from our CM.
        let sidr_service = (ty == EpType::Dgram && port != 0).then(|| h.sidr_register(port, Qpn::new(qpn), QKey(UD_QKEY)));
        drop(h);
        let ep = self.eps.get_mut(&id).ok_or(fi::FI_EINVAL)?;
        ep.qp = Some(qp);
        ep.sidr_service = sidr_service;
        ep.qpn = Some(qpn);
        if ty == EpType::Dgram {
            ep.src.qpn = Some(qpn);
        }
        Ok(())
    }

    pub fn close_ep(&mut self, id: Id) {
        let Some(ep) = self.eps.remove(&id) else { return };
        let mut h = self.host();
        if let Some(s) = ep.sidr_service {
            h.sidr_unregister(s);
        }
        if let (Some(c), ConnState::Connected | ConnState::Connecting | ConnState::Accepting) = (ep.conn, ep.state) {
            let _ = h.disconnect(c);
        }
        // Acknowledgements the device holds for the next round (and the DREQ) leave now: an
        // application that closes right after its last receive completion may exit next, and
        // the peer's send would otherwise wait for an ACK that never comes.
        for _ in 0..4 {
            h.progress();
        }
        match (ep.qp, ep.conn) {
            (Some(qp), Some(c)) if !ep.cm_done => {
                // keep it out of the way (ERROR) until the agent lets go of it
                let a = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
                let _ = h.modify_qp(qp, &a, QpAttrMask::STATE);
                self.zombies.insert(c, qp);
            }
            (Some(qp), _) => {
                let _ = h.destroy_qp(qp);
            }
            _ => {}
        }
        drop(h);
        if let Some(c) = ep.conn {
            self.conns.remove(&c);
        }
        let dead: Vec<u64> = self.ops.iter().filter(|(_, o)| o.ep == id).map(|(k, _)| *k).collect();
        for k in dead {
            if let Some(o) = self.ops.remove(&k) {
                for l in o.tmp_mrs {
                    self.remove_mr(l);
                }
            }
        }
        if let Some(q) = self.multi_q.remove(&id) {
            for (_, o) in q.waiting {
                for l in o.tmp_mrs {
                    self.remove_mr(l);
                }
            }
        }
        let ops = &self.ops;
        self.multi.retain(|w, _| ops.contains_key(w));
    }

    /// A shared receive context: an SRQ of `size` receives.
    pub fn open_srx(&mut self, fid: usize, context: usize, size: usize) -> Result<Id, Errno> {
        let pd = self.pd;
        let srq = self.host().create_srq(pd, size.clamp(1, info::RX_SIZE as usize), info::IOV_LIMIT as usize).map_err(|_| fi::FI_ENOMEM)?;
        let id = self.fresh_id();
        self.srxs.insert(id, Srx { fid, context, srq });
        Ok(id)
    }

    /// Closes a shared receive context: its posted receives are dropped; the SRQ goes once
    /// no QP uses it (closed endpoints' QPs can linger until their disconnect completes).
    pub fn close_srx(&mut self, id: Id) {
        let Some(s) = self.srxs.remove(&id) else { return };
        let dead: Vec<u64> = self.ops.iter().filter(|(_, o)| o.ep == id).map(|(k, _)| *k).collect();
        for k in dead {
            if let Some(o) = self.ops.remove(&k) {
                for l in o.tmp_mrs {
                    self.remove_mr(l);
                }
            }
        }
        self.orphan_srqs.push(s.srq);
        self.reap_srqs();
    }

    /// Destroys the SRQs of closed shared contexts that no QP uses any more.
    pub(super) fn reap_srqs(&mut self) {
        if self.orphan_srqs.is_empty() {
            return;
        }
        let mut h = self.host();
        // kept while a QP still uses it (an unknown handle is already gone)
        self.orphan_srqs.retain(|s| matches!(h.destroy_srq(*s), Err(DestroySrqError::Busy)));
    }
}
