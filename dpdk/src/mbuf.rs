//! Owning packet buffers and allocation-free bursts of them.

use std::ptr::NonNull;

use dpdk_sys as sys;

use crate::error::Result;

/// An owned `rte_mbuf` (one reference). `Drop` frees it back to its pool
/// (`rte_pktmbuf_free`, whole chain). `#[repr(transparent)]` over a non-null pointer, so a
/// slice of `Mbuf` has the layout of `struct rte_mbuf *[]`.
#[repr(transparent)]
#[derive(Debug)]
pub struct Mbuf {
    raw: NonNull<sys::rte_mbuf>,
}

// SAFETY: an Mbuf is the unique owner of its reference; mbufs may move between lcores.
#[allow(unsafe_code)]
unsafe impl Send for Mbuf {}

#[allow(unsafe_code)]
impl Mbuf {
    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `p` must be a valid, non-NULL mbuf whose reference the caller owns and gives up.
    #[inline]
    pub unsafe fn from_raw(p: *mut sys::rte_mbuf) -> Mbuf {
        debug_assert!(!p.is_null());
        Mbuf { raw: NonNull::new_unchecked(p) }
    }

    /// Gives up ownership (e.g. to hand it to `rte_eth_tx_burst`); it is not freed.
    #[inline]
    pub fn into_raw(self) -> *mut sys::rte_mbuf {
        let p = self.raw.as_ptr();
        std::mem::forget(self);
        p
    }

    /// Raw pointer, ownership kept.
    #[inline]
    pub fn as_ptr(&self) -> *mut sys::rte_mbuf {
        self.raw.as_ptr()
    }

    #[inline]
    fn m(&self) -> &sys::rte_mbuf {
        // SAFETY: we own a valid mbuf for our lifetime.
        unsafe { self.raw.as_ref() }
    }

    #[inline]
    fn m_mut(&mut self) -> &mut sys::rte_mbuf {
        // SAFETY: as above, and &mut self makes the access unique.
        unsafe { self.raw.as_mut() }
    }

    /// Bytes of the first segment (`rte_pktmbuf_mtod`, `data_len`).
    #[inline]
    pub fn data(&self) -> &[u8] {
        let m = self.m();
        // SAFETY: buf_addr + data_off .. + data_len lies inside the mbuf's buffer.
        unsafe { std::slice::from_raw_parts((m.buf_addr as *const u8).add(m.data_off as usize), m.data_len as usize) }
    }

    /// Mutable bytes of the first segment.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let m = self.m_mut();
        // SAFETY: as in `data`; unique access through &mut self.
        unsafe { std::slice::from_raw_parts_mut((m.buf_addr as *mut u8).add(m.data_off as usize), m.data_len as usize) }
    }

    /// Total packet length over all segments (`pkt_len`).
    #[inline]
    pub fn pkt_len(&self) -> u32 {
        self.m().pkt_len
    }

    /// Length of the first segment (`data_len`).
    #[inline]
    pub fn data_len(&self) -> u16 {
        self.m().data_len
    }

    /// Same as [`Mbuf::pkt_len`] as usize.
    #[inline]
    pub fn len(&self) -> usize {
        self.m().pkt_len as usize
    }

    /// True when the packet holds no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.m().pkt_len == 0
    }

    /// Number of segments.
    #[inline]
    pub fn nb_segs(&self) -> u16 {
        self.m().nb_segs
    }

    /// Free bytes before the data.
    #[inline]
    pub fn headroom(&self) -> u16 {
        self.m().data_off
    }

    /// Free bytes after the data of the (single) segment.
    #[inline]
    pub fn tailroom(&self) -> u16 {
        let m = self.m();
        m.buf_len - m.data_off - m.data_len
    }

    /// Sets the length of a single-segment packet to `len` (contents of new bytes unspecified:
    /// whatever the buffer held). Fast path for building frames in place; fails (`None`) on a
    /// chained mbuf or if `len` exceeds the room after the headroom.
    #[inline]
    pub fn set_len(&mut self, len: u16) -> Option<&mut [u8]> {
        let m = self.m_mut();
        if m.nb_segs != 1 || len as u32 + m.data_off as u32 > m.buf_len as u32 {
            return None;
        }
        m.data_len = len;
        m.pkt_len = len as u32;
        Some(self.data_mut())
    }

    /// Appends `len` bytes at the end (`rte_pktmbuf_append`) and returns them, or `None` if the
    /// last segment lacks tailroom.
    #[inline]
    pub fn append(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: valid owned mbuf; NULL on failure, else a pointer to `len` bytes in it.
        let p = unsafe { sys::droce_rte_pktmbuf_append(self.raw.as_ptr(), len) };
        // SAFETY: len bytes at p belong to this mbuf and are exclusively ours.
        (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len as usize) })
    }

    /// Prepends `len` bytes (`rte_pktmbuf_prepend`) and returns them, or `None` without headroom.
    #[inline]
    pub fn prepend(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: as in `append`.
        let p = unsafe { sys::droce_rte_pktmbuf_prepend(self.raw.as_ptr(), len) };
        // SAFETY: as in `append`.
        (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len as usize) })
    }

    /// Removes `len` bytes from the front (`rte_pktmbuf_adj`); `None` if the first segment is
    /// shorter.
    #[inline]
    pub fn adj(&mut self, len: u16) -> Option<()> {
        // SAFETY: valid owned mbuf.
        let p = unsafe { sys::droce_rte_pktmbuf_adj(self.raw.as_ptr(), len) };
        (!p.is_null()).then_some(())
    }

    /// Removes `len` bytes from the end (`rte_pktmbuf_trim`); `None` if the last segment is
    /// shorter.
    #[inline]
    pub fn trim(&mut self, len: u16) -> Option<()> {
        // SAFETY: valid owned mbuf.
        let r = unsafe { sys::droce_rte_pktmbuf_trim(self.raw.as_ptr(), len) };
        (r == 0).then_some(())
    }

    /// Reference count (1 for a buffer owned only by this `Mbuf`).
    #[inline]
    pub fn refcnt(&self) -> u16 {
        // SAFETY: valid owned mbuf; atomic read in the shim.
        unsafe { sys::droce_rte_mbuf_refcnt_read(self.raw.as_ptr()) }
    }

    /// Input port recorded by the PMD on receive.
    #[inline]
    pub fn port(&self) -> u16 {
        self.m().port
    }

    /// Offload flags (`ol_flags`: `RTE_MBUF_F_*`).
    #[inline]
    pub fn ol_flags(&self) -> u64 {
        self.m().ol_flags
    }

    /// Packet type set by the PMD (`RTE_PTYPE_*`).
    #[inline]
    pub fn packet_type(&self) -> u32 {
        // SAFETY: reading the packet_type view of a plain-data union.
        unsafe { self.m().__bindgen_anon_1.packet_type }
    }

    /// RSS hash, valid when `ol_flags` has `RTE_MBUF_F_RX_RSS_HASH`.
    #[inline]
    pub fn rss_hash(&self) -> u32 {
        // SAFETY: reading the rss view of a plain-data union.
        unsafe { self.m().__bindgen_anon_2.hash.rss }
    }

    /// Receive-side IP checksum verdict from the PMD.
    #[inline]
    pub fn rx_ip_cksum(&self) -> CksumStatus {
        CksumStatus::from_flags(
            self.ol_flags() & sys::RTE_MBUF_F_RX_IP_CKSUM_MASK as u64,
            sys::RTE_MBUF_F_RX_IP_CKSUM_GOOD as u64,
            sys::RTE_MBUF_F_RX_IP_CKSUM_BAD as u64,
        )
    }

    /// Receive-side L4 (UDP/TCP) checksum verdict from the PMD.
    #[inline]
    pub fn rx_l4_cksum(&self) -> CksumStatus {
        CksumStatus::from_flags(
            self.ol_flags() & sys::RTE_MBUF_F_RX_L4_CKSUM_MASK as u64,
            sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD as u64,
            sys::RTE_MBUF_F_RX_L4_CKSUM_BAD as u64,
        )
    }

    /// Asks the NIC to fill the IPv4 header checksum and/or the UDP checksum of an
    /// Ethernet/IPv4/UDP frame on transmit (the port must have been configured with the
    /// matching TX offload, see [`crate::PortConfig::checksum_offload`]). For UDP the checksum
    /// field must hold the pseudo-header checksum, as DPDK requires.
    #[inline]
    pub fn set_tx_ipv4_cksum_offload(&mut self, l2_len: u8, l3_len: u16, ip_cksum: bool, udp_cksum: bool) {
        let m = self.m_mut();
        let mut f = sys::RTE_MBUF_F_TX_IPV4;
        if ip_cksum {
            f |= sys::RTE_MBUF_F_TX_IP_CKSUM;
        }
        if udp_cksum {
            f |= sys::RTE_MBUF_F_TX_UDP_CKSUM;
        }
        m.ol_flags |= f;
        // SAFETY: writing the bit-field view of the tx_offload union; all bit patterns valid.
        unsafe {
            m.__bindgen_anon_3.__bindgen_anon_1.set_l2_len(l2_len as u64);
            m.__bindgen_anon_3.__bindgen_anon_1.set_l3_len(l3_len as u64);
        }
    }

    /// Copies the whole packet (all segments) into a `Vec`.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        let mut seg: *const sys::rte_mbuf = self.raw.as_ptr();
        while !seg.is_null() {
            // SAFETY: the chain starting at our mbuf is valid and owned by us.
            let s = unsafe { &*seg };
            // SAFETY: each segment's data range lies in its buffer.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts((s.buf_addr as *const u8).add(s.data_off as usize), s.data_len as usize)
            });
            seg = s.next;
        }
        out
    }
}

/// The frame's bytes (first segment), so that code generic over frames can hold mbufs: the
/// transport's sans-IO bottleneck model (`droce_transport::bottleneck::Bottleneck<T: AsMut<[u8]>>`)
/// queues them as they are and CE-marks their IP header in place.
impl AsMut<[u8]> for Mbuf {
    #[inline]
    fn as_mut(&mut self) -> &mut [u8] {
        self.data_mut()
    }
}

impl AsRef<[u8]> for Mbuf {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.data()
    }
}

impl Drop for Mbuf {
    #[allow(unsafe_code)]
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own one reference to a valid mbuf.
        unsafe { sys::droce_rte_pktmbuf_free(self.raw.as_ptr()) }
    }
}

/// RX checksum verdict from `ol_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CksumStatus {
    /// No information (PMD does not check).
    Unknown,
    Good,
    Bad,
    /// Checksum not correct in the packet but integrity verified (e.g. offload pending).
    None,
}

impl CksumStatus {
    #[inline]
    fn from_flags(v: u64, good: u64, bad: u64) -> CksumStatus {
        if v == 0 {
            CksumStatus::Unknown
        } else if v == good {
            CksumStatus::Good
        } else if v == bad {
            CksumStatus::Bad
        } else {
            CksumStatus::None
        }
    }
}

/// Default burst size, as in dpdk-testpmd.
pub const DEFAULT_BURST: usize = 32;

/// A fixed-capacity burst of owned mbufs, stored as a plain `struct rte_mbuf *[N]` so that
/// `rx_burst`/`tx_burst`/bulk alloc/bulk free hand it to DPDK directly: no allocation and no
/// per-packet work in the wrapper. Everything left in it is freed (bulk) on `Drop` or `clear`.
pub struct MbufBatch<const N: usize = DEFAULT_BURST> {
    pkts: [*mut sys::rte_mbuf; N],
    len: usize,
}

// SAFETY: the batch uniquely owns the mbufs it holds, like a Vec<Mbuf>.
#[allow(unsafe_code)]
unsafe impl<const N: usize> Send for MbufBatch<N> {}

impl<const N: usize> Default for MbufBatch<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> std::fmt::Debug for MbufBatch<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MbufBatch").field("len", &self.len).field("capacity", &N).finish()
    }
}

#[allow(unsafe_code)]
impl<const N: usize> MbufBatch<N> {
    /// Empty batch. `N` must fit in u16 (DPDK burst sizes are u16).
    #[inline]
    pub const fn new() -> Self {
        assert!(N > 0 && N <= u16::MAX as usize, "MbufBatch capacity must be 1..=65535");
        MbufBatch { pkts: [std::ptr::null_mut(); N], len: 0 }
    }

    /// Mbufs held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds nothing.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Capacity `N`.
    #[inline]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Free slots.
    #[inline]
    pub fn free_slots(&self) -> usize {
        N - self.len
    }

    /// True when no slot is free.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == N
    }

    /// The mbufs as a slice of owners (read access, or swap/replace through `as_mut_slice`).
    #[inline]
    pub fn as_slice(&self) -> &[Mbuf] {
        // SAFETY: Mbuf is repr(transparent) over NonNull<rte_mbuf>, and the first `len` slots
        // hold valid non-NULL mbufs owned by the batch.
        unsafe { std::slice::from_raw_parts(self.pkts.as_ptr() as *const Mbuf, self.len) }
    }

    /// Mutable access to the held mbufs (edit data, lengths, offload flags in place).
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Mbuf] {
        // SAFETY: as in `as_slice`; `&mut self` makes the access unique. Swapping elements
        // keeps every slot an owned, valid mbuf.
        unsafe { std::slice::from_raw_parts_mut(self.pkts.as_mut_ptr() as *mut Mbuf, self.len) }
    }

    /// Iterates over the held mbufs.
    #[inline]
    pub fn iter(&self) -> std::slice::Iter<'_, Mbuf> {
        self.as_slice().iter()
    }

    /// Iterates mutably over the held mbufs.
    #[inline]
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Mbuf> {
        self.as_mut_slice().iter_mut()
    }

    /// Adds an mbuf at the end; gives it back if full.
    #[inline]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.len == N {
            return Err(m);
        }
        self.pkts[self.len] = m.into_raw();
        self.len += 1;
        Ok(())
    }

    /// Moves mbufs from the front of `queue` to the end of the batch until it is full or
    /// the queue is empty (order kept): a TX step topping up its next burst.
    #[inline]
    pub fn fill_from(&mut self, queue: &mut std::collections::VecDeque<Mbuf>) {
        while self.len < N {
            let Some(m) = queue.pop_front() else { break };
            self.pkts[self.len] = m.into_raw();
            self.len += 1;
        }
    }

    /// Removes the last mbuf.
    #[inline]
    pub fn pop(&mut self) -> Option<Mbuf> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: slot `len` held an owned valid mbuf, now moved out.
        Some(unsafe { Mbuf::from_raw(self.pkts[self.len]) })
    }

    /// Moves all mbufs out, in order, leaving the batch empty. Mbufs the iterator does not
    /// yield (it is dropped early) are freed.
    pub fn drain(&mut self) -> Drain<'_> {
        let n = self.len;
        // Ownership moves to the Drain first, so nothing is freed twice even if it leaks.
        self.len = 0;
        Drain { pkts: &self.pkts[..n], next: 0 }
    }

    /// Keeps the mbufs for which `keep` is true (order kept), frees the others in one bulk call.
    /// Returns how many were freed.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut Mbuf) -> bool) -> usize {
        let mut drop_list: [*mut sys::rte_mbuf; N] = [std::ptr::null_mut(); N];
        let (mut kept, mut dropped) = (0usize, 0usize);
        let n = self.len;
        // If `keep` panics the batch is empty and the mbufs leak: never freed twice.
        self.len = 0;
        for i in 0..n {
            let p = self.pkts[i];
            // SAFETY: repr(transparent) view of an owned valid mbuf for the closure's duration.
            let keep_it = keep(unsafe { &mut *(&mut self.pkts[i] as *mut *mut sys::rte_mbuf as *mut Mbuf) });
            if keep_it {
                self.pkts[kept] = p;
                kept += 1;
            } else {
                drop_list[dropped] = p;
                dropped += 1;
            }
        }
        self.len = kept;
        if dropped > 0 {
            // SAFETY: every pointer in drop_list[..dropped] is an owned valid mbuf no longer in the batch.
            unsafe { sys::rte_pktmbuf_free_bulk(drop_list.as_mut_ptr(), dropped as u32) };
        }
        dropped
    }

    /// Frees every mbuf held (one `rte_pktmbuf_free_bulk`); returns how many.
    #[inline]
    pub fn clear(&mut self) -> usize {
        let n = self.len;
        if n > 0 {
            self.len = 0;
            // SAFETY: the first n slots are owned valid mbufs, removed from the batch first.
            unsafe { sys::rte_pktmbuf_free_bulk(self.pkts.as_mut_ptr(), n as u32) };
        }
        n
    }

    /// Raw pointer to slot 0 and the free tail, for the burst calls.
    #[inline]
    pub(crate) fn raw_parts(&mut self) -> (*mut *mut sys::rte_mbuf, usize) {
        (self.pkts.as_mut_ptr(), self.len)
    }

    /// Marks `n` more slots (just filled by DPDK) as held.
    #[inline]
    pub(crate) fn grow(&mut self, n: usize) {
        debug_assert!(self.len + n <= N);
        self.len += n;
    }

    /// Forgets the first `n` mbufs (ownership went to DPDK) and moves the rest to the front.
    #[inline]
    pub(crate) fn consume_front(&mut self, n: usize) {
        debug_assert!(n <= self.len);
        if n == self.len {
            self.len = 0;
        } else if n > 0 {
            self.pkts.copy_within(n..self.len, 0);
            self.len -= n;
        }
    }
}

/// Iterator returned by [`MbufBatch::drain`]; owns the mbufs it has not yielded yet and
/// frees them when dropped.
pub struct Drain<'a> {
    pkts: &'a [*mut sys::rte_mbuf],
    next: usize,
}

impl std::fmt::Debug for Drain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drain").field("remaining", &(self.pkts.len() - self.next)).finish()
    }
}

impl Iterator for Drain<'_> {
    type Item = Mbuf;

    #[inline]
    fn next(&mut self) -> Option<Mbuf> {
        let p = *self.pkts.get(self.next)?;
        self.next += 1;
        // SAFETY: each slot is yielded once; the Drain owns the mbufs it has not yielded.
        Some(unsafe { Mbuf::from_raw(p) })
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let r = self.pkts.len() - self.next;
        (r, Some(r))
    }
}

impl ExactSizeIterator for Drain<'_> {}

impl Drop for Drain<'_> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        let rest = &self.pkts[self.next..];
        if !rest.is_empty() {
            // SAFETY: the slots not yet yielded are owned valid mbufs; free_bulk only reads the
            // array of pointers (the cast to *mut is for its C signature).
            unsafe { sys::rte_pktmbuf_free_bulk(rest.as_ptr() as *mut *mut sys::rte_mbuf, rest.len() as u32) };
        }
        self.next = self.pkts.len();
    }
}

impl<const N: usize> Drop for MbufBatch<N> {
    #[inline]
    fn drop(&mut self) {
        self.clear();
    }
}
