//! Packet and byte counters droce keeps itself for ports whose PMD loses its own.
//!
//! DPDK 22.11's net_memif reports `rte_eth_stats` by walking the rings of the *current*
//! connection (`pmd->run.num_*_rings`), and a disconnect zeroes that count: once the peer has
//! gone, the port's RX/TX packets and bytes read 0 although its queues still hold the totals.
//! Whichever side of a memif pair prints its statistics after the other has left (the server
//! of an RDMA test, usually) showed `RX-packets: 0`. For such ports the bursts count here and
//! [`Port::stats`](super::Port::stats) reports these figures instead.
//!
//! One slot per port id; a slot is switched on when the port is configured. The counts are
//! atomics because a port's queues may be polled from several threads; each burst adds once
//! (packets and bytes), and only a counted port reads its frames' lengths.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use dpdk_sys as sys;

pub(super) struct Counted {
    on: AtomicBool,
    ipackets: AtomicU64,
    ibytes: AtomicU64,
    opackets: AtomicU64,
    obytes: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const OFF: Counted = Counted {
    on: AtomicBool::new(false),
    ipackets: AtomicU64::new(0),
    ibytes: AtomicU64::new(0),
    opackets: AtomicU64::new(0),
    obytes: AtomicU64::new(0),
};

static PORTS: [Counted; sys::RTE_MAX_ETHPORTS as usize] = [OFF; sys::RTE_MAX_ETHPORTS as usize];

/// The slot of `port` when droce counts it.
#[inline]
pub(super) fn counted(port: u16) -> Option<&'static Counted> {
    PORTS.get(usize::from(port)).filter(|c| c.on.load(Relaxed))
}

/// Whether the PMD named `driver` loses its counters (see the module doc).
pub(super) fn driver_needs_counting(driver: &str) -> bool {
    driver == "net_memif"
}

/// Starts counting `port` from zero (or stops, for a port id now used by another driver).
pub(super) fn set(port: u16, on: bool) {
    if let Some(c) = PORTS.get(usize::from(port)) {
        c.reset();
        c.on.store(on, Relaxed);
    }
}

/// Sum of `pkt_len` over `n` mbufs from `pkts`.
///
/// # Safety
/// `pkts` points to at least `n` valid mbuf pointers this thread owns.
#[inline]
pub(super) unsafe fn bytes(pkts: *const *mut sys::rte_mbuf, n: usize) -> u64 {
    (0..n).map(|i| u64::from((**pkts.add(i)).pkt_len)).sum()
}

impl Counted {
    #[inline]
    pub(super) fn rx(&self, packets: u64, bytes: u64) {
        self.ipackets.fetch_add(packets, Relaxed);
        self.ibytes.fetch_add(bytes, Relaxed);
    }

    #[inline]
    pub(super) fn tx(&self, packets: u64, bytes: u64) {
        self.opackets.fetch_add(packets, Relaxed);
        self.obytes.fetch_add(bytes, Relaxed);
    }

    pub(super) fn reset(&self) {
        for a in [&self.ipackets, &self.ibytes, &self.opackets, &self.obytes] {
            a.store(0, Relaxed);
        }
    }

    /// `s` with droce's packet and byte counts in place of the PMD's.
    pub(super) fn apply(&self, s: &mut super::PortStats) {
        s.ipackets = self.ipackets.load(Relaxed);
        s.ibytes = self.ibytes.load(Relaxed);
        s.opackets = self.opackets.load(Relaxed);
        s.obytes = self.obytes.load(Relaxed);
    }
}
