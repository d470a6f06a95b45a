//! The transmit path: round robin among QPs with work, the ACK-hold policy, frames built
//! from the QP's next packet, CNPs, and pacing to a QP's DCQCN rate. Every frame comes
//! from a [`TxTrain`] (`poll_transmit` is a train of one frame): a run of one QP's frames
//! within a TX step does what is per step once (see `TxTrain`).
//!
//! Pacing covers what a QP sends as data: its requests (retransmissions included) and its
//! READ responses (a READ is congested on the responder's side, and its requester's NP
//! answers CE-marked responses with CNPs to the responder's QP). ACKs, NAKs, atomic
//! responses and CNPs are small control frames and are never held: holding them would
//! stall the peer's send queue, not relieve the network.

use super::*;
use crate::rc::responder::Reply;

/// Which frames a [`Device::poll_transmit_split`] call may produce: those of
/// [`Device::poll_transmit`], [`Device::poll_transmit_data`] or
/// [`Device::poll_transmit_after_rx`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxPass {
    All,
    DataOnly,
    AfterRx,
}

/// A frame from [`Device::poll_transmit_split`]: `len` bytes written into the caller's
/// buffer, and, when the payload was left in registered memory, where it is and what follows
/// it. The frame on the wire is `buf[..len]`, then `payload.len` bytes at `payload.addr`,
/// then `payload.trailer()`: byte for byte what [`Device::poll_transmit`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxFrame {
    pub len: usize,
    pub payload: Option<TxPayload>,
}

/// The payload of a split frame: `len` bytes of registered memory at `addr` (read again by a
/// retransmission, like the copy path), then the pad and the ICRC, computed over the memory
/// through [`Memory::crc32`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxPayload {
    pub addr: u64,
    pub len: usize,
    trailer: [u8; 7],
    trailer_len: u8,
}

impl TxPayload {
    /// Pad (0-3 zero bytes) and ICRC: the frame's last segment.
    pub fn trailer(&self) -> &[u8] {
        &self.trailer[..self.trailer_len as usize]
    }
}

impl<M: Memory> Device<M> {
    // ---------------------------------------------------------------- transmit

    pub(super) fn has_tx_work(&self, idx: u32) -> bool {
        let Some(q) = self.qps.get(idx) else { return false };
        if q.cc.np.pending.is_some() {
            return true;
        }
        let blocked = q.cc.blocked();
        // A READ response is data: a blocked QP keeps it (and what queues behind it).
        let replies_held = blocked && q.state != QpState::Err && front_is_read(q);
        if !q.resp.queue.is_empty() && !replies_held {
            return true;
        }
        if blocked {
            return false;
        }
        match (q.init.qp_type, q.state) {
            (QpType::Ud, QpState::Rts) => !q.req.sq.is_empty(),
            (QpType::Rc, _) => rc_request_ready(q, &self.limits(q)),
            _ => false,
        }
    }

    pub(super) fn limits(&self, q: &Qp) -> ReqLimits {
        ReqLimits {
            mtu: q.mtu(),
            max_rd_atomic: q.attr.max_rd_atomic as u32,
            max_unacked_psns: self.cfg.max_unacked_psns,
            dest_qp: q.attr.dest_qp_num,
            comp_psn: q.comp.psn,
        }
    }

    pub(super) fn mark_ready(&mut self, idx: u32) {
        if self.has_tx_work(idx) {
            if let Some(q) = self.qps.get_mut(idx) {
                if !q.in_ready {
                    q.in_ready = true;
                    self.ready.push_back(idx);
                }
            }
        }
    }

    /// Whether `poll_transmit` may have a frame: some QP is marked ready (false means it
    /// certainly has none). Lets a poll loop skip buffer setup when idle.
    #[inline]
    pub fn tx_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Write the next frame to send into `buf` (at least `max_frame_len()` bytes) and
    /// return its length. QPs with work take turns, one frame each.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.tx_train(now, TxPass::All, usize::MAX).next(buf).map(|f| f.len)
    }

    /// A segment train: the frames of `poll_transmit_split(now, .., pass, min_payload)` calls,
    /// one per [`TxTrain::next`], byte for byte and in the same order, for an embedder that
    /// takes several frames in one TX step. While the train lives nothing else reaches the
    /// device (it holds `&mut self`), so what only RX, timers or the application change —
    /// the QP's state, its header template, its limits other than the window, the round
    /// robin's other QPs — is looked at for the first frame of a run of one QP's frames and
    /// not again for the rest (see [`TxTrain`]).
    pub fn tx_train(&mut self, now: Instant, pass: TxPass, min_payload: usize) -> TxTrain<'_, M> {
        self.holding = match pass {
            TxPass::All => false,
            TxPass::DataOnly => true,
            TxPass::AfterRx => self.cfg.hold_acks,
        };
        self.split_min = min_payload.max(1);
        TxTrain { dev: self, now, car: None, run_frames: 0 }
    }

    /// One frame by the round robin: the QP at the front of the ready list that has one sends
    /// it. Returns the QP's index with the frame's length; the QP is not put back on the
    /// ready list (the caller does, or keeps sending its frames: [`TxTrain`]).
    fn transmit_next(&mut self, now: Instant, buf: &mut [u8]) -> Option<(u32, usize)> {
        for _ in 0..self.ready.len() {
            let idx = self.ready.pop_front()?;
            if let Some(q) = self.qps.get_mut(idx) {
                q.in_ready = false;
            } else {
                continue;
            }
            match self.transmit_qp(idx, now, buf) {
                Some(n) => {
                    self.counters.sent_pkts += 1;
                    return Some((idx, n));
                }
                None => self.mark_ready(idx),
            }
        }
        None
    }

    /// Whether QP `idx`, which just sent a frame, may send its next ones as a train
    /// ([`TxTrain`]), and of which kind: no other QP waits for its turn, it is an RC QP in
    /// RTS, unpaced (the pacer and DCQCN then see every frame as before), no CNP to send,
    /// and its next frame is a READ response (the front reply is one) or, with no reply
    /// queued, a request of a started WQE (no RNR wait, no selective resend queued). None of
    /// these changes while the device transmits, except what the train's own frames change
    /// (the reply queue's front, the WQE in progress, the window), which
    /// [`car_frame`](Self::car_frame) checks per frame.
    fn car_run(&self, idx: u32) -> Option<Run> {
        if !self.ready.is_empty() || self.cfg.cc.pace {
            return None;
        }
        let q = self.qps.get(idx)?;
        if q.init.qp_type != QpType::Rc || q.state != QpState::Rts || q.cc.paced() || q.cc.np.pending.is_some() {
            return None;
        }
        match q.resp.queue.front() {
            Some(Reply::Read { .. }) => Some(Run::ReadResponses),
            Some(_) => None,
            None if q.req.rnr_wait || !q.req.resend.is_empty() => None,
            None => Some(Run::Requests(self.limits(q))),
        }
    }

    /// The next frame of a train's QP, as [`transmit_qp`](Self::transmit_qp) would make it
    /// under the conditions [`car_run`](Self::car_run) found (they still hold): no ready
    /// list, limits, state, pacer or CNP checks, no header template check, and the
    /// `schedule` and `mark_ready` of the QP once at the end of its run (`settle`). `None`
    /// when its next frame is not one of the run: the caller settles the QP and goes the
    /// round robin's way.
    fn car_frame(&mut self, car: &Car, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let idx = car.idx;
        let q = self.qps.get_mut(idx)?;
        let pkt = match &car.run {
            Run::ReadResponses => {
                if !front_is_read(q) {
                    return None;
                }
                responder::next_reply(q, false)?
            }
            Run::Requests(lim) => {
                let resend = q.req.psn.is_before(q.req.sent_high);
                let p = q.req.next_started_packet(lim)?;
                // the run may have begun with a reply: its first request arms the timer
                completer::arm_retransmit(q, now);
                if resend {
                    self.counters.retransmitted_pkts += 1;
                }
                p
            }
        };
        let pkey = q.pkey;
        self.emit_framed(idx, &pkt, pkey, buf)
    }

    /// The end of a QP's run in a train: its timers and its place in the round robin, as
    /// after each of its frames without a train.
    fn settle(&mut self, idx: u32) {
        self.schedule(idx);
        self.mark_ready(idx);
    }

    /// [`poll_transmit`](Self::poll_transmit) without the plain ACK/NAK replies (unless a
    /// READ or atomic response waits behind them, or the QP has a request to send: then
    /// all go, in order): they stay queued (and keep merging: one ACK covers what arrives
    /// meanwhile) for the next `poll_transmit`; READ and atomic responses, requests and
    /// retransmissions go.
    ///
    /// For a poll loop that wants acknowledgements off the critical path: a request that
    /// asked for an ACK completes a receive right away; sending the ACK in that round
    /// would cost a TX burst of its own before the application's reply (a ping-pong's
    /// second half). With `poll_transmit_data` right after RX and `poll_transmit` at the
    /// start of the next round (after whatever the application posted), the ACK and the
    /// reply leave in one burst, the ACK first: the peer completes its send before it
    /// receives the answer, as with any NIC. An ACK waits for at most one round.
    pub fn poll_transmit_data(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.tx_train(now, TxPass::DataOnly, usize::MAX).next(buf).map(|f| f.len)
    }

    /// What a poll loop sends right after a round of received frames: with the ACK-hold
    /// policy ([`DeviceConfig::hold_acks`]) [`poll_transmit_data`](Self::poll_transmit_data),
    /// else [`poll_transmit`](Self::poll_transmit). The next round's plain `poll_transmit`
    /// (or a flush before the caller stops polling) sends the held ACKs.
    #[inline]
    pub fn poll_transmit_after_rx(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if self.cfg.hold_acks {
            self.poll_transmit_data(now, buf)
        } else {
            self.poll_transmit(now, buf)
        }
    }

    /// [`poll_transmit`](Self::poll_transmit) (or its `DataOnly` / `AfterRx` forms, `pass`)
    /// for an embedder that can send a frame as a chain of segments: an RC data frame whose
    /// payload is at least `min_payload` bytes of one contiguous range of registered memory
    /// comes back with only its headers in `buf` and the payload as a [`TxPayload`] (address,
    /// length, pad + ICRC), so that the payload is never copied by the transport; every
    /// other frame is written whole, as by `poll_transmit`. UD sends are always written whole:
    /// they complete as they leave, and the application may then reuse the buffer while a
    /// NIC or a ring still holds the frame.
    pub fn poll_transmit_split(&mut self, now: Instant, buf: &mut [u8], pass: TxPass, min_payload: usize) -> Option<TxFrame> {
        self.tx_train(now, pass, min_payload).next(buf)
    }

    /// Turns the ACK-hold policy on or off ([`DeviceConfig::hold_acks`]).
    pub fn set_hold_acks(&mut self, on: bool) {
        self.cfg.hold_acks = on;
    }

    /// Whether ACKs wait for the next round ([`DeviceConfig::hold_acks`]).
    pub fn hold_acks(&self) -> bool {
        self.cfg.hold_acks
    }

    pub(super) fn transmit_qp(&mut self, idx: u32, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let lim = self.limits(self.qps.get(idx)?);
        let q = self.qps.get_mut(idx)?;
        if q.cc.np.pending.is_some() {
            return self.emit_cnp(idx, buf);
        }
        // One branch for a QP that never saw a CNP (unless every QP is capped: `CcConfig::pace`).
        let paced = q.cc.paced() || self.cfg.cc.pace;
        let hold_data = paced && q.cc.held(&self.cfg.cc, now);
        match q.init.qp_type {
            QpType::Rc => {
                let err = q.state == QpState::Err;
                // A held ACK never falls behind a request of its own QP: the peer would
                // see our new message before the ACK for its own, i.e. complete the
                // receive before the send that caused it. No NIC does that, and ofi_rxm's
                // atomics free the request's buffer on the response and reuse it before
                // the late send completion comes (fabtests' ubertest caught it).
                let held = self.holding && (err || (responder::only_acks(q) && !rc_request_ready(q, &lim)));
                let reply = if held || (hold_data && !err && front_is_read(q)) { None } else { responder::next_reply(q, err) };
                let pkt = match reply {
                    Some(p) => Some(p),
                    None if hold_data => None,
                    None if matches!(q.state, QpState::Rts | QpState::Sqd) => {
                        if q.state == QpState::Sqd && q.req.resend.is_empty() && !q.req.sq.get(q.req.next).is_some_and(|w| w.started) {
                            None
                        } else {
                            let selective = !q.req.resend.is_empty();
                            let resend = q.req.psn.is_before(q.req.sent_high) || selective;
                            let p = q.req.next_packet(&lim);
                            if p.is_some() {
                                completer::arm_retransmit(q, now);
                                if resend {
                                    self.counters.retransmitted_pkts += 1;
                                }
                                if selective {
                                    self.counters.sr_resent_pkts += 1;
                                }
                            }
                            p
                        }
                    }
                    None => None,
                };
                let Some(pkt) = pkt else {
                    // Held with data to send (not merely idle while paced).
                    if hold_data && !err && (front_is_read(q) || rc_request_ready(q, &lim)) {
                        self.pacer_stall(idx, now);
                    }
                    return None;
                };
                let av = q.attr.ah_attr;
                let (sport, pkey) = (q.udp_sport, q.pkey);
                let n = self.emit(idx, &pkt, &av, sport, pkey, buf);
                if paced && !matches!(pkt.opcode, Opcode::RcAcknowledge | Opcode::RcAtomicAcknowledge) {
                    // a split frame's payload and trailer go on the wire too: the pacer and
                    // the byte counter take the whole frame, not its headers alone
                    let wire = n.map(|h| h + self.split_out.as_ref().map_or(0, |p| p.len + p.trailer_len as usize));
                    self.paced_sent(idx, now, wire);
                }
                self.schedule(idx);
                n
            }
            QpType::Ud => {
                if q.state != QpState::Rts {
                    return None;
                }
                if hold_data {
                    if !q.req.sq.is_empty() {
                        self.pacer_stall(idx, now);
                    }
                    return None;
                }
                let (pkt, dest) = crate::ud::next_packet(q)?;
                let (sport, pkey) = (q.udp_sport, q.pkey);
                let split = core::mem::replace(&mut self.split_min, usize::MAX);
                let n = self.emit(idx, &pkt, &dest.av, sport, pkey, buf);
                self.split_min = split;
                if paced {
                    self.paced_sent(idx, now, n);
                }
                // UD sends complete when they leave (no acknowledgement, IBA 9.8).
                let q = self.qps.get_mut(idx)?;
                let mut fx = core::mem::take(&mut self.fx);
                completer::complete_front(q, if n.is_some() { WcStatus::Success } else { WcStatus::LocQpOpErr }, &mut fx);
                self.apply(idx, &mut fx);
                self.fx = fx;
                self.check_local_errors(idx);
                n
            }
        }
    }

    /// The pacer holds the QP's data: it leaves the round robin until its tokens are back.
    fn pacer_stall(&mut self, idx: u32, now: Instant) {
        let Some(q) = self.qps.get_mut(idx) else { return };
        q.cc.block(&self.cfg.cc, now);
        self.counters.cc_pacing_stalls += 1;
        self.schedule(idx);
    }

    /// A paced frame of `n` bytes (if any) left the QP.
    fn paced_sent(&mut self, idx: u32, now: Instant, n: Option<usize>) {
        let (Some(n), Some(q)) = (n, self.qps.get_mut(idx)) else { return };
        if q.cc.on_sent(&self.cfg.cc, now, n) {
            self.counters.cc_rate_recovered += 1;
        }
    }

    /// The QP's queued CNP (RoCEv2 annex A17.9.3, as ConnectX sends it): BTH opcode 0x81 with
    /// BECN set, the QP's P_Key, DestQP the source QP of the CE-marked frame, PSN 0, AckReq
    /// 0, then 16 reserved zero bytes and the ICRC. UDP source port of the QP; IP DSCP
    /// `cnp_dscp` and ECN Not-ECT, so that the CNP itself is never marked.
    pub(super) fn emit_cnp(&mut self, idx: u32, buf: &mut [u8]) -> Option<usize> {
        let q = self.qps.get_mut(idx)?;
        let t = q.cc.np.pending.take()?;
        let (sport, pkey) = (q.udp_sport, q.pkey);
        let tc = (self.cfg.cc.cnp_dscp << 2) | cc::ecn::NOT_ECT;
        let mut ip = IpRepr::from_gids(t.sgid, t.dgid, tc, self.cfg.hop_limit, 0).ok()?;
        if let IpRepr::Ipv4(r) = &mut ip {
            r.ident = self.ip_id;
            self.ip_id = self.ip_id.wrapping_add(1);
        }
        let eth = EthernetRepr { src_addr: EthernetAddress(self.cfg.mac), dst_addr: EthernetAddress(t.dmac), ethertype: ip.ethertype() };
        let udp = UdpRepr { src_port: sport, dst_port: ROCE_V2_PORT };
        let bth = BthRepr {
            opcode: Opcode::Cnp,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey,
            fecn: false,
            becn: true,
            dest_qp: t.dest_qp,
            ack_req: false,
            psn: crate::types::Psn::new(0),
        };
        let repr = RoceRepr::new(eth, ip, udp, bth);
        if repr.frame_len(0) > buf.len() {
            return None;
        }
        let n = repr.emit(&[], buf);
        self.counters.cnp_sent += 1;
        Some(n)
    }

    pub(super) fn emit(&mut self, idx: u32, pkt: &TxPkt, av: &AddressVector, sport: u16, pkey: PKey, buf: &mut [u8]) -> Option<usize> {
        self.header_template(idx, av, sport)?;
        self.emit_framed(idx, pkt, pkey, buf)
    }

    /// [`emit`](Self::emit) with the QP's header template as it is (made for this path).
    fn emit_framed(&mut self, idx: u32, pkt: &TxPkt, pkey: PKey, buf: &mut [u8]) -> Option<usize> {
        let tpl = &self.qps.get(idx)?.tx_hdr.as_ref()?.tpl;
        let ident = self.ip_id;
        if tpl.is_ipv4() {
            self.ip_id = self.ip_id.wrapping_add(1);
        }
        let bth = BthRepr {
            opcode: pkt.opcode,
            solicited: pkt.solicited,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey,
            fecn: false,
            becn: false,
            dest_qp: pkt.dest_qp,
            ack_req: pkt.ack_req,
            psn: pkt.psn,
        };
        let plen = match pkt.payload {
            Payload::None => 0,
            Payload::SendWqe { len, .. } | Payload::Memory { len, .. } => len as usize,
        };
        let transport_len = pkt.opcode.info().header_len() + plen + wire::pad_len(plen) + wire::icrc::ICRC_LEN;
        if tpl.len() + transport_len > buf.len() {
            return None;
        }
        let tp = tpl.emit(ident, transport_len, buf);
        let h = tp + wire::emit_transport(&bth, &pkt.ext, plen, &mut buf[tp..]);
        if plen >= self.split_min {
            if let Some(addr) = self.contiguous_payload(idx, &pkt.payload, plen) {
                // The ICRC: the headers' (by delta from the QP's last split frame), then
                // the memory, then the pad.
                let run = &mut buf[wire::eth::HEADER_LEN..h];
                let crc = self.qps.get_mut(idx)?.tx_hdr.as_mut()?.icrc.update(run).ok()?;
                debug_assert_eq!(Ok(crc), icrc::compute_in_place(run));
                if let Ok(crc) = self.mem.crc32(addr, plen, crc) {
                    let pad = wire::pad_len(plen);
                    let crc = icrc::crc32_update(crc, &[0u8; 3][..pad]);
                    let mut trailer = [0u8; 7];
                    trailer[pad..pad + wire::icrc::ICRC_LEN].copy_from_slice(&crc.to_le_bytes());
                    self.split_out = Some(TxPayload { addr, len: plen, trailer, trailer_len: (pad + wire::icrc::ICRC_LEN) as u8 });
                    return Some(h);
                }
                // Memory the embedder cannot reach: the copy path below sends zeros, as ever.
            }
        }
        let out = &mut buf[h..h + plen];
        match pkt.payload {
            Payload::None => {}
            Payload::Memory { va, .. } => {
                if self.mem.read(va, out).is_err() {
                    out.fill(0);
                }
            }
            Payload::SendWqe { wqe, offset, .. } => {
                let q = self.qps.get(idx)?;
                let w = q.req.sq.get(wqe)?;
                match &w.inline {
                    Some(data) => {
                        let o = offset as usize;
                        out.copy_from_slice(&data[o..o + plen]);
                    }
                    None => {
                        if gather(&self.mem, w.sges.as_slice(), offset, out).is_err() {
                            out.fill(0);
                        }
                    }
                }
            }
        }
        Some(wire::finish_frame(buf, plen))
    }

    /// The start of `plen` payload bytes when they are one contiguous range of memory: a READ
    /// response, or a send WQE without inline data whose bytes lie in one SGE.
    fn contiguous_payload(&self, idx: u32, payload: &Payload, plen: usize) -> Option<u64> {
        match *payload {
            Payload::None => None,
            Payload::Memory { va, .. } => Some(va),
            Payload::SendWqe { wqe, offset, .. } => {
                let w = self.qps.get(idx)?.req.sq.get(wqe)?;
                if w.inline.is_some() {
                    return None;
                }
                let mut off = offset;
                for sge in w.sges.as_slice() {
                    let l = sge.length as u64;
                    if off < l {
                        return (off + plen as u64 <= l).then(|| sge.addr.wrapping_add(off));
                    }
                    off -= l;
                }
                None
            }
        }
    }

    /// Make sure the QP's header template is the one for `av` and `sport`: made (from the
    /// GID table) when the QP has none or one for another path. `None` when the source GID
    /// index is out of the table or the two GIDs are not of one IP version.
    pub(super) fn header_template(&mut self, idx: u32, av: &AddressVector, sport: u16) -> Option<()> {
        let q = self.qps.get_mut(idx)?;
        if !q.tx_hdr.as_ref().is_some_and(|h| h.av == *av && h.sport == sport) {
            let sgid = *self.cfg.gids.get(av.sgid_index as usize)?;
            let hop = if av.hop_limit == 0 { self.cfg.hop_limit } else { av.hop_limit };
            // ECT(0) keeps the DSCP the AV asks for. QP1's MADs stay Not-ECT: management
            // traffic is neither paced nor answered with CNPs. The ICRC masks the field, so
            // only the IPv4 header checksum changes with it.
            let tc = if self.cfg.cc.ecn && q.qpn != crate::types::Qpn::GSI { (av.traffic_class & !3) | cc::ecn::ECT0 } else { av.traffic_class };
            let ip = IpRepr::from_gids(sgid, av.dgid, tc, hop, av.flow_label).ok()?;
            let eth = EthernetRepr { src_addr: EthernetAddress(self.cfg.mac), dst_addr: EthernetAddress(av.dmac), ethertype: EtherType::Ipv4 };
            let udp = UdpRepr { src_port: sport, dst_port: ROCE_V2_PORT };
            q.tx_hdr = Some(TxHeader { av: *av, sport, tpl: HeaderTemplate::new(&eth, &ip, &udp), icrc: Default::default() });
        }
        Some(())
    }
}

/// Whether the responder's next reply is a READ response (paced, unlike ACKs).
fn front_is_read(q: &Qp) -> bool {
    matches!(q.resp.queue.front(), Some(Reply::Read { .. }))
}

/// A segment train ([`Device::tx_train`]): the device's frames of one TX step. A run of one
/// QP's frames (the next message's segments, or READ responses) is made with what is per
/// step looked at once: the round robin keeps the QP while no other QP waits (which is
/// where it would put it again), and the QP's own checks and bookkeeping happen for the
/// run's first frame and at its end; per frame remain the packet (PSN, opcode, payload
/// offset, the window), the headers written from the template and the ICRC. Paced QPs,
/// CNPs, ACKs, UD and every other case go frame by frame as in `poll_transmit`. Dropping
/// the train ends the run (the QP's timers and its place in the round robin).
pub struct TxTrain<'a, M: Memory> {
    dev: &'a mut Device<M>,
    now: Instant,
    /// The QP of the last frame while its run goes on: its `settle` is owed.
    car: Option<Car>,
    /// Frames made as the continuation of a run (without the round robin and QP checks).
    run_frames: u64,
}

/// A QP whose frames a train is sending, and what kind of run.
#[derive(Debug, Clone, Copy)]
struct Car {
    idx: u32,
    run: Run,
}

#[derive(Debug, Clone, Copy)]
enum Run {
    /// The requests of started WQEs, under these limits (fixed while the device transmits).
    Requests(ReqLimits),
    /// READ responses from the front of the reply queue.
    ReadResponses,
}

impl<M: Memory> TxTrain<'_, M> {
    /// The next frame into `buf` (at least `max_frame_len()` bytes): what
    /// [`Device::poll_transmit_split`] would return now.
    #[cfg_attr(feature = "frame-profile", inline(never))]
    pub fn next(&mut self, buf: &mut [u8]) -> Option<TxFrame> {
        let d = &mut *self.dev;
        if buf.len() < d.max_frame_len() {
            return None;
        }
        d.split_out = None;
        if let Some(car) = self.car {
            if let Some(len) = d.car_frame(&car, self.now, buf) {
                d.counters.sent_pkts += 1;
                self.run_frames += 1;
                return Some(TxFrame { len, payload: d.split_out.take() });
            }
            self.car = None;
            d.settle(car.idx);
        }
        let (idx, len) = d.transmit_next(self.now, buf)?;
        match d.car_run(idx) {
            Some(run) => self.car = Some(Car { idx, run }),
            None => d.mark_ready(idx),
        }
        Some(TxFrame { len, payload: d.split_out.take() })
    }

    /// How many of the train's frames were made as the continuation of a QP's run (the
    /// others went the round robin's way): for tests and profiles.
    pub fn run_frames(&self) -> u64 {
        self.run_frames
    }

    /// The device's memory (a frame's payload left there is read from it).
    pub fn memory(&self) -> &M {
        &self.dev.mem
    }

    /// Ends the QP's run, if one is going on (also when the train is dropped).
    #[cfg_attr(feature = "frame-profile", inline(never))]
    pub fn finish(&mut self) {
        if let Some(car) = self.car.take() {
            self.dev.settle(car.idx);
        }
    }
}

impl<M: Memory> Drop for TxTrain<'_, M> {
    fn drop(&mut self) {
        self.finish();
        self.dev.holding = false;
        self.dev.split_min = usize::MAX;
    }
}
