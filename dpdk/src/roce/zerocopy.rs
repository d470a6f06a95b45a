//! Zero-copy transmit: a data frame goes to the PMD as three segments, the headers the
//! transport wrote into an mbuf, an external-buffer mbuf over the payload in registered memory
//! (`rte_pktmbuf_attach_extbuf`) and a small mbuf with the pad and the ICRC. The ICRC comes
//! last on the wire and the header mbuf's tailroom sits before the payload, so it needs a
//! segment of its own.
//!
//! Lifetime. Every registered range has one `rte_mbuf_ext_shared_info` whose reference count
//! is 1 (the registration) plus one per frame whose segment points into the range: taken
//! when the segment is attached, dropped by DPDK when whoever holds the frame last (our TX
//! queue, the PMD, a ring's consumer, on any thread) frees it. A range is only forgotten once
//! its count is back to 1, so the shared info outlives every frame that uses it, and
//! [`RoceDevice::dereg_mr`](super::RoceDevice::dereg_mr) refuses (after a bounded wait) to
//! deregister a range a frame still points into: the verbs contract (`docs/design.md`, "Where
//! the payload is copied").

use super::txmbufs::TxMbufs;
use crate::{sys, Mbuf, Mempool};
use std::ptr::NonNull;

/// One registered range and the count of frames that point into it.
struct ExtRange {
    start: u64,
    end: u64,
    shinfo: NonNull<sys::rte_mbuf_ext_shared_info>,
}

// SAFETY: the shared info is heap memory owned by this entry; other threads only touch it
// through DPDK's atomic reference count when they free a frame.
unsafe impl Send for ExtRange {}

impl ExtRange {
    fn new(start: u64, end: u64) -> ExtRange {
        let p = Box::into_raw(Box::<sys::rte_mbuf_ext_shared_info>::default());
        // SAFETY: `p` is a fresh, valid allocation that nothing else references yet.
        unsafe { sys::droce_ext_shinfo_init(p) };
        // SAFETY: from `Box::into_raw`, never null.
        ExtRange { start, end, shinfo: unsafe { NonNull::new_unchecked(p) } }
    }

    /// Frames in flight over the range.
    fn in_flight(&self) -> u32 {
        // SAFETY: the shared info lives as long as `self`.
        (unsafe { sys::droce_ext_shinfo_refcnt(self.shinfo.as_ptr()) } as u32).saturating_sub(1)
    }
}

impl Drop for ExtRange {
    fn drop(&mut self) {
        if self.in_flight() == 0 {
            // SAFETY: from `Box::into_raw` in `new`; no frame references it (count 1: only
            // the registration), and no new one can, as this entry is going away.
            drop(unsafe { Box::from_raw(self.shinfo.as_ptr()) });
        } else {
            // A frame still points at the shared info (a device dropped while the PMD held
            // frames): leaking it is the only safe choice.
            log::warn!("zero-copy: range {:#x}..{:#x} dropped with {} frames in flight; its counter is leaked", self.start, self.end, self.in_flight());
        }
    }
}

/// The counted ranges of one device, kept in step with its registered memory.
#[derive(Default)]
pub(super) struct ExtRanges {
    ranges: Vec<ExtRange>,
}

/// The count is a u16 in DPDK: past this many frames in flight over one range, frames are
/// copied instead.
const MAX_IN_FLIGHT: u32 = 60_000;

impl ExtRanges {
    pub(super) fn add(&mut self, addr: u64, len: u64) {
        self.ranges.push(ExtRange::new(addr, addr.saturating_add(len)));
    }

    /// Frames in flight over the registration `addr..addr + len` (0 if unknown).
    pub(super) fn in_flight(&self, addr: u64, len: u64) -> u32 {
        let end = addr.saturating_add(len);
        self.ranges.iter().filter(|r| r.start == addr && r.end == end).map(ExtRange::in_flight).min().unwrap_or(0)
    }

    /// Frames in flight over every range.
    pub(super) fn total_in_flight(&self) -> u64 {
        self.ranges.iter().map(|r| r.in_flight() as u64).sum()
    }

    /// Forget one registration of `addr..addr + len`, one without frames in flight. `false`
    /// when every matching registration still has frames in flight (nothing removed).
    pub(super) fn remove(&mut self, addr: u64, len: u64) -> bool {
        let end = addr.saturating_add(len);
        match self.ranges.iter().position(|r| r.start == addr && r.end == end && r.in_flight() == 0) {
            Some(i) => {
                self.ranges.swap_remove(i);
                true
            }
            None => !self.ranges.iter().any(|r| r.start == addr && r.end == end),
        }
    }

    /// Chain `len` bytes at `addr` (inside a registered range) and `trailer` behind the
    /// headers in `hdr`, in two mbufs from `segs`. `false` (and `hdr` unchanged) when no range
    /// holds the bytes, the range's count is full or the pool is empty: the caller copies
    /// instead.
    pub(super) fn attach(&mut self, pool: &Mempool, segs: &mut TxMbufs, hdr: &mut Mbuf, addr: u64, len: usize, trailer: &[u8]) -> bool {
        let Ok(len16) = u16::try_from(len) else { return false };
        let end = addr.saturating_add(len as u64);
        let Some(r) = self.ranges.iter().find(|r| r.start <= addr && end <= r.end && r.in_flight() < MAX_IN_FLIGHT) else {
            return false;
        };
        let Some((ext, tail)) = segs.take2(pool) else { return false };
        // SAFETY: `hdr` is an mbuf we own with one segment; `ext` and `tail` are fresh mbufs we
        // own, whose ownership passes to `hdr`'s chain (freed with it); `addr..addr + len` lies
        // in a range the application registered (valid until deregistered, and deregistration
        // waits for this frame through the count the call takes); `trailer` is at most 7 bytes
        // and the pool's data room holds a whole frame.
        unsafe {
            sys::droce_tx_chain_extbuf(
                hdr.as_ptr(),
                ext.into_raw(),
                tail.into_raw(),
                addr as *mut std::ffi::c_void,
                len16,
                r.shinfo.as_ptr(),
                trailer.as_ptr(),
                trailer.len() as u16,
            )
        };
        true
    }
}
