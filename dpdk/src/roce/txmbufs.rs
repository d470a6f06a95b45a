//! The transmit path's mbufs, taken from the pool in bulk. A frame sent zero-copy is three
//! mbufs (headers, the external-buffer segment, pad + ICRC; [`zerocopy`](super::zerocopy)) and
//! a copied frame one. Taken one call at a time they cost two mempool calls per frame, each
//! with its fixed work (the per-lcore cache lookup, the all-or-nothing checks, the reset of
//! each mbuf's fields out of line); one `rte_pktmbuf_alloc_bulk` of [`REFILL`] serves about
//! ten zero-copy frames.
//!
//! The stash keeps up to [`REFILL`] fresh mbufs of the pool while the device lives (they go
//! back when it is dropped, before the pool). When the pool cannot give that many it asks for
//! just what the frame needs, so a nearly empty pool behaves as before: a frame without its
//! two segments is copied, one without a header mbuf waits for the next poll.

use crate::{Mbuf, MbufBatch, Mempool};

/// Mbufs per bulk allocation: a TX burst's worth of copied frames (`RoceConfig::tx_burst`
/// is 32 by default), a third of one in zero-copy frames.
pub(super) const REFILL: usize = 32;

#[derive(Default)]
pub(super) struct TxMbufs {
    free: MbufBatch<REFILL>,
}

impl TxMbufs {
    /// At least `n` (at most [`REFILL`]) fresh mbufs in the stash; false when the pool has not
    /// got them.
    #[inline]
    fn ensure(&mut self, pool: &Mempool, n: usize) -> bool {
        let have = self.free.len();
        if have >= n {
            return true;
        }
        // all or nothing: a full refill, or failing that only the missing ones
        self.free.alloc_bulk(pool, REFILL - have).is_ok() || self.free.alloc_bulk(pool, n - have).is_ok()
    }

    /// A fresh mbuf (`rte_pktmbuf_reset` state), or `None` when the pool is empty.
    #[inline]
    pub(super) fn take(&mut self, pool: &Mempool) -> Option<Mbuf> {
        if !self.ensure(pool, 1) {
            return None;
        }
        self.free.pop()
    }

    /// Two fresh mbufs, or none when the pool has fewer than two.
    #[inline]
    pub(super) fn take2(&mut self, pool: &Mempool) -> Option<(Mbuf, Mbuf)> {
        if !self.ensure(pool, 2) {
            return None;
        }
        let a = self.free.pop()?;
        let b = self.free.pop()?;
        Some((a, b))
    }
}
