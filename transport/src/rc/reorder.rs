//! Selective repeat, responder side: the out-of-order request packets a QP that negotiated
//! selective repeat keeps until the gap before them is filled (docs/selective-repeat.md).
//!
//! Only a copy of the request is kept; nothing is checked or executed before its turn, so
//! memory placement, receive WQE consumption, READ responses, atomics (executed once) and
//! completions still happen in PSN order through the ordinary check pipeline. The buffer holds at most one packet per PSN of the
//! window `(epsn, epsn + window]`, each at most one path MTU long: its memory is bounded by
//! `window * mtu` per QP.

use super::Request;
use crate::types::Psn;
use std::collections::VecDeque;

/// Out-of-order packets held before the responder tells the requester which PSN is missing:
/// a packet overtaken by fewer than this many later ones is taken for reordered, not lost
/// (TCP's duplicate-ACK threshold, RFC 5681). The ACK coalescing timer NAKs a smaller gap.
pub const REORDER_THRESHOLD: usize = 3;

/// An out-of-order request packet, copied: the request's fields as they came, its payload
/// owned here (the packet's buffer is gone by the time its turn comes).
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// The request, with an empty payload: the bytes are in `payload`.
    head: Request<'static>,
    pub payload: Vec<u8>,
}

impl Held {
    pub fn psn(&self) -> Psn {
        self.head.psn
    }

    pub fn request(&self) -> Request<'_> {
        Request { payload: &self.payload, ..self.head }
    }
}

/// Held packets in PSN order, and spare payload buffers so that a steady stream of
/// recoveries does not allocate.
#[derive(Debug, Default)]
pub(crate) struct ReorderBuffer {
    held: VecDeque<Held>,
    spare: Vec<Vec<u8>>,
}

impl ReorderBuffer {
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Keep a copy of `r`; false when a packet with its PSN is already held (a duplicate,
    /// dropped by the caller).
    pub fn insert(&mut self, r: &Request<'_>) -> bool {
        let at = self.held.iter().position(|h| !h.psn().is_before(r.psn)).unwrap_or(self.held.len());
        if self.held.get(at).is_some_and(|h| h.psn() == r.psn) {
            return false;
        }
        let mut payload = self.spare.pop().unwrap_or_default();
        payload.clear();
        payload.extend_from_slice(r.payload);
        let h = Held { head: Request { payload: &[], ..*r }, payload };
        self.held.insert(at, h);
        true
    }

    /// The held packet with PSN `epsn`, if it is there. Held packets before `epsn` (which a
    /// multi-PSN READ request skipped over: no requester sends those) are discarded.
    pub fn take(&mut self, epsn: Psn) -> Option<Held> {
        while self.held.front().is_some_and(|h| h.psn().is_before(epsn)) {
            let h = self.held.pop_front()?;
            self.recycle(h.payload);
        }
        if self.held.front()?.psn() == epsn {
            self.held.pop_front()
        } else {
            None
        }
    }

    /// Give a payload buffer back for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < 64 {
            self.spare.push(buf);
        }
    }

    pub fn clear(&mut self) {
        while let Some(h) = self.held.pop_front() {
            self.recycle(h.payload);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Rkey;
    use crate::wire::opcode::Opcode;
    use crate::wire::RethRepr;

    fn req(psn: u32, payload: &[u8]) -> Request<'_> {
        Request {
            opcode: Opcode::RcWriteMiddle,
            psn: Psn::new(psn),
            ack_req: false,
            solicited: false,
            reth: None,
            atomic: None,
            immdt: None,
            ieth: None,
            payload,
        }
    }

    #[test]
    fn keeps_psn_order_across_the_wrap_and_refuses_duplicates() {
        let mut b = ReorderBuffer::default();
        for p in [0x00_0001, 0xff_fffe, 0x00_0000, 0xff_ffff] {
            assert!(b.insert(&req(p, &[p as u8])));
        }
        assert!(!b.insert(&req(0x00_0000, b"x")), "a PSN already held is a duplicate");
        assert_eq!(b.len(), 4);
        assert!(b.take(Psn::new(0xff_fffd)).is_none(), "the gap is still open");
        let order: Vec<u32> = [0xff_fffe, 0xff_ffff, 0, 1].iter().map(|&p| b.take(Psn::new(p)).expect("held").psn().value()).collect();
        assert_eq!(order, [0xff_fffe, 0xff_ffff, 0, 1]);
        assert!(b.is_empty());
    }

    #[test]
    fn take_discards_what_the_expected_psn_passed() {
        let mut b = ReorderBuffer::default();
        b.insert(&req(5, b"a"));
        b.insert(&req(9, b"b"));
        assert!(b.take(Psn::new(7)).is_none());
        assert_eq!(b.len(), 1, "PSN 5 is behind the expected PSN and was dropped");
        assert_eq!(b.take(Psn::new(9)).expect("held").payload, b"b");
    }

    #[test]
    fn a_held_packet_gives_back_the_request_it_copied() {
        let mut b = ReorderBuffer::default();
        let payload = [7u8; 40];
        let r = Request {
            opcode: Opcode::RcWriteOnlyImm,
            psn: Psn::new(12),
            ack_req: true,
            solicited: true,
            reth: Some(RethRepr { va: 0x1000, rkey: Rkey(0x55), len: 40 }),
            atomic: None,
            immdt: Some(0xdead_beef),
            ieth: Some(Rkey(9)),
            payload: &payload,
        };
        assert!(b.insert(&r));
        let h = b.take(Psn::new(12)).expect("held");
        assert_eq!(format!("{:?}", h.request()), format!("{r:?}"));
    }
}
