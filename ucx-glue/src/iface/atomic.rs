//! UCT atomics over RC: 64-bit fetch-add and compare-swap are native IB atomics; 64-bit swap
//! and every 32-bit operation run as a compare-swap loop on the enclosing aligned 8-byte word
//! (guessing the word from the last value seen, retrying with the value a lost race returned).

use super::{lock, Event, Iface, Inner, Kind, Op, OpKind};
use crate::status::*;
use droce_dpdk::runtime::Runtime;
use droce_transport::verbs::{SendFlags, SendOpcode, SendWr};
use droce_transport::Rkey;


#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicKind {
    Add,
    Swap,
    Cswap,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct AtomicOp {
    pub(super) kind: AtomicKind,
    pub(super) width: u8,
    pub(super) value: u64,
    pub(super) compare: u64,
    /// The 8-byte word the operation targets.
    pub(super) word: u64,
    pub(super) rkey: Rkey,
    /// Bit offset of a 32-bit operand in its word (little endian).
    pub(super) shift: u32,
    pub(super) result: usize,
    /// Compare value of the compare-swap in flight (emulated operations).
    pub(super) expected: u64,
    pub(super) native: bool,
}

impl AtomicOp {
    /// The new word for an old word `w` (emulated ops), or None when nothing is to be written.
    pub(super) fn apply(&self, w: u64) -> u64 {
        let (mask, cur) = if self.width == 4 {
            (0xffff_ffffu64 << self.shift, (w >> self.shift) & 0xffff_ffff)
        } else {
            (u64::MAX, w)
        };
        let new = match self.kind {
            AtomicKind::Add => {
                if self.width == 4 {
                    (cur as u32).wrapping_add(self.value as u32) as u64
                } else {
                    cur.wrapping_add(self.value)
                }
            }
            AtomicKind::Swap => self.value,
            AtomicKind::Cswap => {
                if cur == self.compare {
                    self.value
                } else {
                    cur
                }
            }
        };
        if self.width == 4 {
            (w & !mask) | ((new & 0xffff_ffff) << self.shift)
        } else {
            new
        }
    }
    pub(super) fn fetched(&self, w: u64) -> u64 {
        if self.width == 4 {
            (w >> self.shift) & 0xffff_ffff
        } else {
            w
        }
    }
}

impl Iface {
    /// An atomic: 64-bit add and cswap natively; swap and 32-bit ops as a compare-swap loop.
    /// `result` 0: no fetch (post).
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(&self, id: u32, kind: AtomicKind, width: u8, value: u64, compare: u64, remote: u64, rkey: Rkey, result: usize, comp: usize) -> Result<(), Status> {
        if self.kind != Kind::Rc {
            return Err(UCS_ERR_UNSUPPORTED);
        }
        if !(width == 8 && remote % 8 == 0 || width == 4 && remote % 4 == 0) {
            return Err(UCS_ERR_INVALID_PARAM);
        }
        let mut g = lock(&self.inner);
        let word = remote & !7;
        let native = width == 8 && kind != AtomicKind::Swap;
        let guess = g.eps.get(id as usize).and_then(Option::as_ref).and_then(|e| e.word_cache).filter(|&(a, _)| a == word).map_or(0, |(_, v)| v);
        let mut op = AtomicOp { kind, width, value, compare, word, rkey, shift: ((remote & 7) * 8) as u32, result, expected: guess, native };
        let slot = Self::reserve(&mut g, id)?;
        let wr = Self::atomic_wr(&g, slot, &mut op);
        let mut h = lock(self.host);
        self.post(&mut g, &mut h, id, slot, wr, comp, OpKind::Atomic(op))
    }

    pub(super) fn atomic_wr(g: &Inner, slot: u32, op: &mut AtomicOp) -> SendWr {
        let sge_addr = Self::tx_addr(g, slot);
        let (opcode, a, b) = if op.native {
            match op.kind {
                AtomicKind::Add => (SendOpcode::FetchAdd, op.value, 0),
                _ => (SendOpcode::CmpSwap, op.compare, op.value),
            }
        } else {
            (SendOpcode::CmpSwap, op.expected, op.apply(op.expected))
        };
        SendWr::new(0, opcode).with_remote(op.word, op.rkey).with_atomic(a, b).with_sge(sge_addr, 8, g.lkey)
    }

    /// The completion of an atomic's compare-swap or fetch-add (its old word is in the slot):
    /// the result, or, for an emulated operation that lost the race for the word, the next
    /// compare-swap. True when the operation is over (retire it), false when it went again.
    pub(super) fn atomic_done(&self, g: &mut Inner, h: &mut Runtime, slot: u32, op: &mut Op, mut a: AtomicOp, ev: &mut Vec<Event>) -> bool {
        let mut b = [0u8; 8];
        let _ = h.read_mem(Self::tx_addr(g, slot), &mut b);
        let old = u64::from_le_bytes(b);
        let done = a.native || old == a.expected || a.apply(old) == old;
        if let Some(ep) = g.eps[op.ep as usize].as_mut() {
            if !a.native {
                let now = if old == a.expected { a.apply(old) } else { old };
                ep.word_cache = Some((a.word, now));
            }
        }
        if done {
            if a.result != 0 {
                ev.push(Event::AtomicResult { result: a.result, width: a.width, value: a.fetched(old) });
            }
            if op.comp != 0 {
                ev.push(Event::Complete { comp: op.comp, status: UCS_OK });
            }
            return true;
        }
        // Lost the race for the word: retry with the value just read.
        a.expected = old;
        let mut wr = Self::atomic_wr(g, slot, &mut a);
        wr.wr_id = slot as u64;
        wr.flags = SendFlags::SIGNALED;
        op.kind = OpKind::Atomic(a);
        let qp = g.eps[op.ep as usize].as_ref().and_then(|e| e.qp);
        if let Some(qp) = qp {
            if h.post_send(qp, wr).is_ok() {
                g.ops[slot as usize] = Some(*op);
                return false;
            }
        }
        if op.comp != 0 {
            ev.push(Event::Complete { comp: op.comp, status: UCS_ERR_IO_ERROR });
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: AtomicKind, width: u8, value: u64, compare: u64, shift: u32) -> AtomicOp {
        AtomicOp { kind, width, value, compare, word: 0, rkey: Rkey(0), shift, result: 0, expected: 0, native: false }
    }

    #[test]
    fn emulated_32_bit_ops_touch_only_their_half() {
        let w = 0x1111_2222_3333_4444u64;
        assert_eq!(op(AtomicKind::Add, 4, 1, 0, 0).apply(w), 0x1111_2222_3333_4445);
        assert_eq!(op(AtomicKind::Add, 4, 1, 0, 32).apply(w), 0x1111_2223_3333_4444);
        assert_eq!(op(AtomicKind::Add, 4, 1, 0, 0).apply(0xffff_ffff), 0, "wraps inside 32 bits");
        assert_eq!(op(AtomicKind::Swap, 4, 7, 0, 32).apply(w), 0x0000_0007_3333_4444);
        assert_eq!(op(AtomicKind::Cswap, 4, 9, 0x3333_4444, 0).apply(w), 0x1111_2222_0000_0009);
        assert_eq!(op(AtomicKind::Cswap, 4, 9, 5, 0).apply(w), w, "compare mismatch writes nothing");
        assert_eq!(op(AtomicKind::Swap, 8, 5, 0, 0).apply(w), 5);
        assert_eq!(op(AtomicKind::Add, 4, 0, 0, 32).fetched(w), 0x1111_2222);
    }
}
