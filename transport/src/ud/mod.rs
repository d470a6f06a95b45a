//! Unreliable Datagram service (IBA 9.8, 10.2.5): SEND/SEND_IMM with a DETH, Q_Key rules,
//! and the 40-byte GRH at the head of the receive buffer. [`reliable`]: in-order, acknowledged
//! delivery on top, for frontends that need it.

pub mod reliable;

use crate::rc::{Effects, Payload, TxPkt};
use crate::counters::Counters;
use crate::memory::Memory;
use crate::qp::Qp;
use crate::slab::Slab;
use crate::status::{WcOpcode, WcStatus};
use crate::types::{Gid, QKey, Qpn};
use crate::verbs::{SendOpcode, SharedReceiveQueue, SrqHandle, WcFlags, WorkCompletion};
use crate::wire::opcode::Opcode;
use crate::wire::{DethRepr, Ipv4Packet, Ipv6Packet};

/// Bytes of GRH a UD receive buffer starts with (IBA 11.4.1.2, ibv_post_recv on UD QPs).
pub const GRH_LEN: usize = 40;

/// The sender's GID from the GRH area of a UD receive (IBA 11.4.1.2; RoCEv2 per A17.4.5.1:
/// IPv4 puts the IP header in the last 20 bytes, IPv6 fills all 40).
pub fn grh_source(grh: &[u8]) -> Option<Gid> {
    let grh = grh.get(..GRH_LEN)?;
    let v6 = Ipv6Packet::new_unchecked(grh);
    let v4 = Ipv4Packet::new_unchecked(&grh[GRH_LEN - 20..]);
    if v6.version() == 6 {
        Some(Gid::from_ipv6(v6.src_addr()))
    } else if v4.version() == 4 {
        Some(Gid::from_ipv4(v4.src_addr()))
    } else {
        None
    }
}

/// The Q_Key a UD send carries: C10-15 — a work request Q_Key with the high bit set means
/// "use the QP's own Q_Key" (so that applications cannot forge controlled Q_Keys).
pub fn effective_qkey(wr_qkey: QKey, qp_qkey: QKey) -> QKey {
    if wr_qkey.is_controlled() {
        qp_qkey
    } else {
        wr_qkey
    }
}

/// The next UD packet of the send queue (the WQE stays queued until the device completes it).
pub(crate) fn next_packet(qp: &mut Qp) -> Option<(TxPkt, crate::verbs::UdDest)> {
    let w = qp.req.sq.front()?;
    if w.local_error.is_some() {
        return None;
    }
    let dest = w.wr.ud?;
    let op = if w.wr.opcode == SendOpcode::SendImm { Opcode::UdSendOnlyImm } else { Opcode::UdSendOnly };
    let mut p = TxPkt::new(op, qp.req.psn, dest.remote_qpn);
    p.ext.deth = Some(DethRepr { qkey: effective_qkey(dest.remote_qkey, qp.attr.qkey), src_qp: qp.qpn });
    if op == Opcode::UdSendOnlyImm {
        p.ext.immdt = Some(w.wr.imm_data);
    }
    p.solicited = w.wr.flags.contains(crate::verbs::SendFlags::SOLICITED);
    p.payload = Payload::SendWqe { wqe: 0, offset: 0, len: w.len as u32 };
    qp.req.psn += 1;
    Some((p, dest))
}

/// Deliver a UD datagram: Q_Key check, receive WQE, GRH + payload, completion.
#[allow(clippy::too_many_arguments)]
pub(crate) fn receive<M: Memory>(
    qp: &mut Qp,
    deth: DethRepr,
    imm: Option<u32>,
    solicited: bool,
    ip_header: &[u8],
    payload: &[u8],
    mem: &mut M,
    srqs: &mut Slab<SharedReceiveQueue>,
    c: &mut Counters,
    fx: &mut Effects,
) {
    // 10.2.5 (C10-16): a datagram whose Q_Key differs from the QP's is silently dropped.
    if deth.qkey != qp.attr.qkey {
        c.qkey_violation += 1;
        return;
    }
    let wqe = match qp.init.srq {
        Some(h) => match srqs.get_mut(h.0).and_then(|s| s.take()) {
            Some((w, fired)) => {
                if fired {
                    fx.srq_limit = Some(SrqHandle(h.0));
                }
                w
            }
            None => {
                c.ud_no_recv_wqe += 1;
                return;
            }
        },
        None => match qp.rq.pop_front() {
            Some(w) => w,
            None => {
                c.ud_no_recv_wqe += 1;
                return;
            }
        },
    };
    let total = GRH_LEN + payload.len();
    let mut wc = WorkCompletion {
        wr_id: wqe.wr_id,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: total as u32,
        imm_data: 0,
        qp_num: qp.qpn,
        src_qp: Qpn::new(deth.src_qp.value()),
        wc_flags: WcFlags::GRH,
        pkey_index: qp.attr.pkey_index,
    };
    if let Some(v) = imm {
        wc.imm_data = v;
        wc.wc_flags.0 |= WcFlags::WITH_IMM.0;
    }
    if total as u64 > wqe.len {
        // byte_len is undefined on error in verbs; the message's length (GRH included) lets
        // a consumer say how much did not fit
        wc.status = WcStatus::LocLenErr;
    } else {
        // The GRH as rxe writes it: for IPv4 the 20-byte IP header fills the last 20 bytes.
        let mut grh = [0u8; GRH_LEN];
        let n = ip_header.len().min(GRH_LEN);
        grh[GRH_LEN - n..].copy_from_slice(&ip_header[..n]);
        let r = crate::memory::scatter(mem, wqe.sges.as_slice(), 0, &grh)
            .and_then(|()| crate::memory::scatter(mem, wqe.sges.as_slice(), GRH_LEN as u64, payload));
        if let Err(st) = r {
            wc.status = st;
        }
    }
    c.rdma_recvs += 1;
    fx.wcs.push((qp.init.recv_cq, wc, solicited));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn grh_sources() {
        let mut g = [0u8; GRH_LEN];
        g[20] = 0x45;
        g[32..36].copy_from_slice(&[192, 168, 77, 10]);
        assert_eq!(grh_source(&g), Some(Gid::from_ipv4(Ipv4Addr::new(192, 168, 77, 10))));
        let mut g = [0u8; GRH_LEN];
        g[0] = 0x60;
        let a: Ipv6Addr = "fd00::1".parse().unwrap();
        g[8..24].copy_from_slice(&a.octets());
        assert_eq!(grh_source(&g), Some(Gid::from_ipv6(a)));
        assert_eq!(grh_source(&[0u8; GRH_LEN]), None);
        assert_eq!(grh_source(&[0x60; GRH_LEN - 1]), None, "short GRH area");
    }


    #[test]
    fn controlled_qkey_rule() {
        assert_eq!(effective_qkey(QKey(0x8000_0000), QKey(0x1111_1111)), QKey(0x1111_1111));
        assert_eq!(effective_qkey(QKey(0x8001_0000), QKey(0x1111_1111)), QKey(0x1111_1111));
        assert_eq!(effective_qkey(QKey(0x1234), QKey(0x1111_1111)), QKey(0x1234));
    }
}
