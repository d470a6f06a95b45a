//! droce_ud reliability, the UCT side: the protocol (`droce_transport::ud::reliable`) decides
//! what is delivered, acknowledged, sent again or given up; this file moves its headers in and
//! out of the interface's registered slots and posts the datagrams it asks for.
//!
//! Every UD datagram starts with the [`UD_HDR`]-byte reliability header (after the GRH on
//! receive). An acknowledgement owed rides on the next datagram to that peer, or goes alone
//! (immediate data [`IMM_UD_ACK`]) at the next progress call. Time for the protocol's timers is
//! read only at a timer check, every [`UD_TIMER_EVERY`] progress calls.

use super::*;
use droce_transport::ud::reliable::{Ack, Delivery, Header, Peer, TimerAction, HEADER_LEN};
use droce_transport::verbs::{AddressVector, SendOpcode, WorkCompletion};
use droce_transport::Instant;

/// Immediate data of an acknowledgement-only datagram (AM ids are below 256).
pub(super) const IMM_UD_ACK: u32 = 0x1ff;
/// Progress calls between retransmission-timer checks.
pub(super) const UD_TIMER_EVERY: u32 = 16;

/// The UD QP an endpoint sends to.
fn peer_of(dest: &UdDest) -> Peer {
    Peer { gid: dest.av.dgid, qpn: dest.remote_qpn }
}

impl Iface {
    /// The protocol's clock.
    fn ud_now(g: &Inner) -> Instant {
        Instant::from_nanos(g.epoch.elapsed().as_nanos().min(u64::MAX as u128) as u64)
    }

    /// Before a datagram of endpoint `id` is posted from `slot`: the reliability header in the
    /// slot's first [`UD_HDR`] bytes (left free by the caller), with an acknowledgement owed to
    /// the same peer riding along; the gather list kept for a retransmission.
    pub(super) fn ud_stamp(&self, g: &mut Inner, h: &mut Runtime, id: u32, slot: u32, wr: &SendWr) -> Result<(), Status> {
        let ep = g.eps[id as usize].as_ref().ok_or(UCS_ERR_INVALID_PARAM)?;
        let (rel, dest) = (ep.rel.as_ref().ok_or(UCS_ERR_IO_ERROR)?, ep.ud.ok_or(UCS_ERR_IO_ERROR)?);
        if rel.is_window_full() {
            return Err(UCS_ERR_NO_RESOURCE);
        }
        let ack = g.ud_rx.take_ack_for(peer_of(&dest));
        let mut hb = [0u8; HEADER_LEN];
        rel.next_header(ack).emit(&mut hb);
        h.write_mem(Self::tx_addr(g, slot), &hb).map_err(|_| UCS_ERR_IO_ERROR)?;
        let v = &mut g.ud_sges[slot as usize];
        v.clear();
        v.extend_from_slice(&wr.sg_list);
        Ok(())
    }

    /// A UD receive: apply the acknowledgement it carries; true if it is the next datagram of
    /// its sender (deliver it), false to drop it (acknowledgement only, duplicate, gap).
    pub(super) fn ud_rx(&self, g: &mut Inner, h: &mut Runtime, wc: &WorkCompletion, slot: u32, ev: &mut Vec<Event>) -> bool {
        let base = Self::rx_addr(g, slot);
        let mut grh = [0u8; GRH + UD_HDR];
        if h.read_mem(base, &mut grh).is_err() {
            return false;
        }
        let Ok(hdr) = Header::parse(&grh[GRH..]) else { return false };
        if let Some(ack) = hdr.ack {
            self.ud_acked(g, ack, ev);
        }
        if wc.imm_data == IMM_UD_ACK {
            return false;
        }
        // the sender's GID from the GRH area, as the transport wrote it
        let Some(gid) = droce_transport::ud::grh_source(&grh[..GRH]) else { return false };
        let next = g.ud_rx.on_datagram(Peer { gid, qpn: wc.src_qp }, hdr.src, hdr.seq) == Delivery::Deliver;
        crate::trace!("ud rx from ep {:#x} seq {} ack {:?} -> {}", hdr.src.raw(), hdr.seq.0, hdr.ack, if next { "deliver" } else { "drop" });
        next
    }

    /// The peer received every datagram of one of our endpoints up to a sequence number.
    fn ud_acked(&self, g: &mut Inner, ack: Ack, ev: &mut Vec<Event>) {
        let Some(rel) = g.eps.get_mut(ack.ep.index()).and_then(Option::as_mut).and_then(|e| e.rel.as_mut()) else { return };
        if rel.key() != ack.ep {
            return; // an endpoint gone since
        }
        let mut done = std::mem::take(&mut g.ud_done);
        done.clear();
        if rel.on_ack(ack.seq, &mut done) {
            // two repeated acknowledgements: the next progress call sends again
            g.ud_fast = true;
        }
        for &slot in &done {
            if let Some(op) = g.ops[slot as usize].take() {
                Self::retire(g, slot, op, UCS_OK, true, ev);
            }
        }
        g.ud_done = done;
    }

    /// Acknowledgement-only datagrams for the senders still owed one (send slots permitting).
    pub(super) fn ud_send_acks(&self, g: &mut Inner, h: &mut Runtime) {
        while g.ud_rx.has_ack_due() {
            let Some(qp) = g.ud_qp else { return };
            let Some(slot) = g.free_tx.pop() else { return };
            let Some((peer, ack)) = g.ud_rx.pop_ack_due() else {
                g.free_tx.push(slot);
                return;
            };
            let mut hb = [0u8; HEADER_LEN];
            Header::ack_only(ack).emit(&mut hb);
            let addr = Self::tx_addr(g, slot);
            let av = AddressVector { dgid: peer.gid, sgid_index: g.sgid_index, hop_limit: 64, ..Default::default() };
            let dest = UdDest { av, remote_qpn: peer.qpn, remote_qkey: UD_QKEY };
            let mut wr = Self::new_wr(g, SendOpcode::SendImm).with_imm(IMM_UD_ACK).with_sge(addr, UD_HDR as u32, g.lkey).with_ud(dest);
            wr.wr_id = slot as u64;
            let ok = h.write_mem(addr, &hb).is_ok() && h.post_send_ref(qp, &wr).is_ok();
            g.wr_spare = Some(wr);
            if ok {
                g.ops[slot as usize] = Some(Op { ep: NO_EP, seq: 0, comp: 0, kind: OpKind::Plain, am: 0 });
            } else {
                g.free_tx.push(slot);
                return;
            }
        }
    }

    /// The protocol's timer check for every endpoint: send again what it asks for, fail the
    /// endpoints it gives up.
    pub(super) fn ud_timers(&self, g: &mut Inner, h: &mut Runtime, ev: &mut Vec<Event>) {
        let Some(qp) = g.ud_qp else { return };
        let now = Self::ud_now(g);
        let mut list = std::mem::take(&mut g.ud_done);
        for id in 0..g.eps.len() {
            let Some(e) = g.eps[id].as_mut() else { continue };
            let Some(rel) = e.rel.as_mut() else { continue };
            if e.failed.is_some() {
                continue;
            }
            list.clear();
            let action = rel.handle_timeout(now, &mut list);
            if action != TimerAction::Idle {
                crate::trace!("ud timer: ep {id} {:?}, {} unacked", action, rel.unacked());
            }
            match action {
                TimerAction::Idle => {}
                TimerAction::Fail => {
                    e.failed = Some(UCS_ERR_ENDPOINT_TIMEOUT);
                    ev.push(Event::EpFailed { ep_c: e.c, status: UCS_ERR_ENDPOINT_TIMEOUT, peer_gone: false });
                    for &slot in &list {
                        if let Some(op) = g.ops[slot as usize].take() {
                            Self::retire(g, slot, op, UCS_ERR_ENDPOINT_TIMEOUT, true, ev);
                        }
                    }
                }
                TimerAction::Retransmit => {
                    let Some(dest) = e.ud else { continue };
                    for &slot in &list {
                        let Some(op) = g.ops[slot as usize] else { continue };
                        // A fresh acknowledgement rides along (the header's old one may be long
                        // stale): when every slot of both ends holds an unacknowledged datagram,
                        // no acknowledgement-only datagram can be sent (it needs a free slot)
                        // and retransmissions are the only datagrams left to carry one.
                        if let Some(ack) = g.ud_rx.take_ack_for(peer_of(&dest)) {
                            let (off, ab) = Header::ack_bytes(ack);
                            let _ = h.write_mem(Self::tx_addr(g, slot) + off as u64, &ab);
                        }
                        let mut wr = Self::new_wr(g, SendOpcode::SendImm).with_imm(op.am as u32).with_ud(dest);
                        wr.sg_list.extend_from_slice(&g.ud_sges[slot as usize]);
                        wr.wr_id = slot as u64;
                        let ok = h.post_send_ref(qp, &wr).is_ok();
                        g.wr_spare = Some(wr);
                        if !ok {
                            break; // send queue full: the next timer round
                        }
                        g.retransmits += 1;
                        if let Some(rel) = g.eps[id].as_mut().and_then(|e| e.rel.as_mut()) {
                            rel.requeued(slot);
                        }
                    }
                }
            }
        }
        g.ud_done = list;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use droce_transport::Qpn;

    #[test]
    fn peer_of_names_the_destination_qp() {
        let av = AddressVector { dgid: Gid([7; 16]), ..Default::default() };
        let dest = UdDest { av, remote_qpn: Qpn::new(0x42), remote_qkey: UD_QKEY };
        assert_eq!(peer_of(&dest), Peer { gid: Gid([7; 16]), qpn: Qpn::new(0x42) });
    }
}
