//! The receive path of the RoCE device: a frame classified and handed to the transport, ARP
//! or ND, kept in order behind the ACKs of its burst (RxOrder), captured.

use super::*;

impl RoceDevice {
    // ------------------------------------------------------------------ receive

    /// One received frame; its mbuf stays the caller's (an RX burst frees the mbufs of the
    /// frames it handled in one bulk call).
    pub(super) fn rx_mbuf(&mut self, now: Instant, m: &mut Mbuf) {
        self.counters.rx_frames += 1;
        if m.nb_segs() == 1 && self.fault_rx.is_none() {
            // The common path: parse in the mbuf, no copy before the transport.
            self.rx_frame_with_mbuf(now, m);
            return;
        }
        let mut frame = core::mem::take(&mut self.scratch);
        frame.clear();
        frame.extend_from_slice(&m.to_vec());
        if self.pcap.is_some() && is_captured(&frame) {
            let copy = frame.clone();
            self.capture(now.0, &copy);
        }
        let len = frame.len();
        let roce = is_roce(&frame);
        match self.fault_rx.as_mut().map(|f| f.decide(len, roce)) {
            Some(a) => {
                self.sync_fault_total();
                if !a.drop {
                    apply_corruption(&mut frame, &a);
                    if a.reorder && self.held_rx.is_none() {
                        self.held_rx = Some(HeldRx { frame: frame.clone(), since: now.0 });
                    } else {
                        self.demux(now, &mut frame, None);
                        if a.dup {
                            self.demux(now, &mut frame, None);
                        }
                        if let Some(mut h) = self.held_rx.take() {
                            self.demux(now, &mut h.frame, None);
                        }
                    }
                }
            }
            None => self.demux(now, &mut frame, None),
        }
        self.scratch = frame;
    }

    pub(super) fn rx_frame_with_mbuf(&mut self, now: Instant, m: &mut Mbuf) {
        if self.pcap.is_some() && is_captured(m.data()) {
            self.capture(now.0, m.data());
        }
        let ip_ok = if self.rx_ip_offload { Some(m.rx_ip_cksum()) } else { None };
        self.demux(now, m.data_mut(), ip_ok);
    }

    /// A frame released from the RX reorder hold.
    pub(super) fn rx_frame(&mut self, now: Instant, frame: &mut [u8]) {
        self.demux(now, frame, None);
    }

    /// `f` is scratch for the transport's ICRC check ([`Device::handle_rx`]): unchanged
    /// on return.
    pub(super) fn demux(&mut self, now: Instant, f: &mut [u8], ip_cksum: Option<crate::CksumStatus>) {
        match classify(f) {
            FrameKind::RoceV2 { ipv6, len, .. } => {
                // The IPv4 header checksum: the ICRC masks it, so it is checked here.
                let ok = ipv6
                    || match ip_cksum {
                        Some(crate::CksumStatus::Good) => true,
                        Some(crate::CksumStatus::Bad) => false,
                        _ => Ipv4Packet::new_unchecked(&f[eth::HEADER_LEN..len]).verify_checksum(),
                    };
                if !ok {
                    self.counters.bad_ip_cksum += 1;
                    return;
                }
                self.counters.rx_roce += 1;
                self.dev.handle_rx(now, &mut f[..len]);
            }
            FrameKind::Arp => self.rx_arp(now.0, f),
            FrameKind::Icmpv6 { .. } => self.rx_nd(now.0, f),
            FrameKind::Truncated => self.counters.truncated += 1,
            FrameKind::Other => self.counters.non_roce_drops += 1,
        }
    }
}

/// BTH opcodes of the RC responses: RDMA READ Response First (0x0d) .. Atomic Acknowledge (0x12).
pub(super) const OPCODE_RC_FIRST_RESPONSE: u8 = 0x0d;
pub(super) const OPCODE_RC_LAST_RESPONSE: u8 = 0x12;
/// Whether a BTH opcode is an RC response (READ response, ACK/NAK, atomic ACK).
#[inline]
pub(super) fn is_rc_response(op: u8) -> bool {
    (OPCODE_RC_FIRST_RESPONSE..=OPCODE_RC_LAST_RESPONSE).contains(&op)
}

/// BTH opcode of the RC Acknowledge (ACK/NAK, no payload).
pub(super) const OPCODE_RC_ACK: u8 = 0x11;
/// The first opcode past the RC range (UC starts at 0x20; UD is 0x64, CNP 0x81).
pub(super) const OPCODE_UC_FIRST: u8 = 0x20;

/// Which frames of one RX burst wait for the next round. A plain ACK behind a request waits
/// (the request's completion, a ping-pong's receive, reaches the application first), and
/// once one waits every later frame of the burst waits too: responses, so the response
/// stream keeps its order, and requests, which the peer may have sent as its answer to the
/// message that ACK acknowledges (their receive must not complete before our send: ofi_rxm's
/// atomics free a request's buffer on the answer). Frames are fed in burst order.
#[derive(Debug, Default)]
pub(super) struct RxOrder {
    request_seen: bool,
    deferring: bool,
    hold_all: bool,
}

impl RxOrder {
    /// `op`: `None` for a multi-segment frame (not classified), `Some(None)` for a frame
    /// that is not RC, `Some(Some(opcode))` for an RC frame. True: it waits.
    pub(super) fn later(&mut self, op: Option<Option<u8>>) -> bool {
        if self.hold_all {
            return true;
        }
        match op {
            Some(Some(op)) if is_rc_response(op) => {
                let wait = self.deferring || (op == OPCODE_RC_ACK && self.request_seen);
                self.deferring |= wait;
                wait
            }
            // behind a held response nothing overtakes: not a request, not a CM MAD (a DREQ
            // would move the QP to error before the ACK it follows completes our send), not
            // a frame the fixed-offset read could not classify
            _ if self.deferring => {
                self.hold_all = true;
                true
            }
            // only an RC request (opcodes below 0x20) lets a later ACK wait
            Some(Some(op)) if op < OPCODE_UC_FIRST => {
                self.request_seen = true;
                false
            }
            _ => false,
        }
    }
}

/// The BTH opcode of a RoCEv2 frame, for scheduling only: the transport parses.
#[inline]
pub(super) fn rc_bth_opcode(f: &[u8]) -> Option<u8> {
    f.get(classify(f).bth_offset()?).copied()
}

/// Whether a frame is RoCEv2 (IPv4 or IPv6, UDP to 4791).
pub(super) fn is_roce(f: &[u8]) -> bool {
    matches!(classify(f), FrameKind::RoceV2 { .. })
}

/// Whether a frame is one the capture keeps: ARP, ICMPv6, RoCEv2.
pub(super) fn is_captured(f: &[u8]) -> bool {
    classify(f).is_engine_frame()
}

/// The IPv4 header length of an IPv4 frame (for TX checksum offload).
pub(super) fn ipv4_header_len(f: &[u8]) -> Option<u16> {
    let frame = EthernetFrame::new_checked(f).ok()?;
    if frame.ethertype() != EtherType::Ipv4 {
        return None;
    }
    let l3 = frame.payload();
    (l3.len() >= ipv4::HEADER_LEN).then(|| Ipv4Packet::new_unchecked(l3).header_len() as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds one burst of opcodes (None: a multi-segment frame; Some(None): not RC) and
    /// returns which frames waited for the next round.
    fn waits(burst: &[Option<Option<u8>>]) -> Vec<bool> {
        let mut o = RxOrder::default();
        burst.iter().map(|&op| o.later(op)).collect()
    }

    #[test]
    fn rx_order_keeps_requests_behind_a_held_ack() {
        const SEND: Option<Option<u8>> = Some(Some(0x04)); // RC SEND Only
        const ACK: Option<Option<u8>> = Some(Some(OPCODE_RC_ACK));
        const READ_RESP: Option<Option<u8>> = Some(Some(0x10)); // RDMA READ Response Only
        const UD: Option<Option<u8>> = Some(Some(0x64)); // UD SEND Only: CM MADs (a DREQ) too
        const OTHER: Option<Option<u8>> = Some(None); // not classified (ARP, IP options, ...)
        const MULTI: Option<Option<u8>> = None; // multi-segment
        // an ACK in front of the request it answers goes first, in order
        assert_eq!(waits(&[ACK, SEND]), [false, false]);
        // an ACK behind a request waits; so does every response behind it
        assert_eq!(waits(&[SEND, ACK, READ_RESP]), [false, true, true]);
        // a request behind a held ACK waits too: the peer's answer to what the ACK covers
        // must not complete before our send (this was processed at once before)
        assert_eq!(waits(&[SEND, ACK, SEND, ACK]), [false, true, true, true]);
        assert_eq!(waits(&[SEND, ACK, MULTI, SEND]), [false, true, true, true]);
        // nothing overtakes a held ACK: a DREQ behind it, an unclassified frame
        assert_eq!(waits(&[SEND, ACK, UD]), [false, true, true]);
        assert_eq!(waits(&[SEND, ACK, OTHER]), [false, true, true]);
        // a UD frame (a DREQ) is not a request that lets the ACK behind it wait: that ACK
        // completes our last send before the DREQ moves the QP to error
        assert_eq!(waits(&[UD, ACK, SEND]), [false, false, false]);
        assert_eq!(waits(&[OTHER, UD, MULTI, ACK]), [false, false, false, false]);
    }

    #[test]
    fn ns_clock_matches_the_division() {
        for hz in [1_000_000_000u64, 2_100_000_000, 2_994_374_000, 3_700_000_123] {
            let tsc = Tsc::with_hz(hz);
            let c = NsClock { start: 1000, mult: NsClock::new(&tsc).mult };
            for cycles in [0u64, 1, 999, 123_456_789, 3_600 * hz, 86_400 * hz] {
                let exact = tsc.cycles_to_ns(cycles);
                let got = c.elapsed_ns(1000 + cycles);
                // 32 fractional bits: off by at most one part in 2^31 (plus rounding)
                assert!(exact.abs_diff(got) <= exact / (1 << 31) + 1, "hz {hz} cycles {cycles}: {got} vs {exact}");
            }
            assert_eq!(c.elapsed_ns(10), 0, "a reading before the start is time 0");
        }
    }
}
