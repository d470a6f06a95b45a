//! Process memory for the transport: the only `unsafe` of the RoCE engine.
//!
//! The transport never dereferences addresses itself; it calls [`Memory`] with virtual
//! addresses that it has already checked against a memory region (MR) of the right PD, access
//! rights and bounds. [`ProcessMemory`] adds a second line of defence: it only touches ranges
//! that were added with [`ProcessMemory::add_region`] (an `unsafe fn`: the caller promises the
//! range is valid, writable process memory until it is removed). `RoceDevice::reg_mr` /
//! `dereg_mr` keep the MR table and these ranges in step.
//!
//! Concurrency: like RDMA hardware, the device reads and writes registered buffers while the
//! application owns them. The application touches a buffer only when no work request uses it
//! (before posting, after the completion); the completion is handed over through a CQ or an
//! SPSC ring (release/acquire), which orders the device's writes before the reads. Atomics
//! (`cmp_swap`, `fetch_add`) use real 64-bit atomic instructions on the target word.

use droce_transport::{Memory, MemoryError, Message};
use std::sync::atomic::{AtomicU64, Ordering};

/// Registered process memory. Addresses are stored as integers so the type is `Send`
/// (the engine thread owns it).
#[derive(Debug, Default, Clone)]
pub struct ProcessMemory {
    /// `(start, end)` of every registered range; a range registered twice appears twice.
    regions: Vec<(u64, u64)>,
    /// Which received messages go past the caches ([`Memory::write_part`]).
    stream: StreamPolicy,
}

/// How many recent message destinations [`StreamPolicy`] remembers.
const RECENT: usize = 8;

/// Which received messages are placed with non-temporal stores: those of at least `min`
/// bytes whose destination is fresh, i.e. not where one of the last [`RECENT`] messages went.
/// A buffer that receives again and again (a ping-pong's, osu_bw's window into one buffer, a
/// halo exchange's) is likely still in the caches, and a plain copy into cached lines is
/// faster than streaming past them (44 against 25 GB/s here); a run of fresh buffers (MPI's
/// window of 64 distinct 1 MiB buffers, a large array) is not, and there the plain copy first
/// reads every destination line from memory (5-7 against 11-15 GB/s for 4 KiB parts into a
/// 64 MiB buffer). A SEND's length grows part by part: its later parts stream once the bytes
/// so far reach `min`.
#[derive(Debug, Default, Clone)]
struct StreamPolicy {
    min: Option<u64>,
    /// `(start, fresh)` of the last messages, oldest replaced first.
    recent: [Option<(u64, bool)>; RECENT],
    next: usize,
}

impl StreamPolicy {
    fn streams(&mut self, m: Message) -> bool {
        let Some(min) = self.min else { return false };
        let fresh = match self.recent.iter_mut().flatten().find(|(start, _)| *start == m.start) {
            // a new message into a buffer that received lately: keep it in the caches
            Some(e) if m.first => {
                e.1 = false;
                false
            }
            Some(e) => e.1,
            None => {
                self.recent[self.next] = Some((m.start, true));
                self.next = (self.next + 1) % RECENT;
                true
            }
        };
        fresh && m.len >= min
    }
}

impl ProcessMemory {
    pub fn new() -> Self {
        ProcessMemory::default()
    }

    /// Memory that places the parts of received messages of at least `min` bytes past the
    /// caches (`None`: never). See [`Memory::write_part`] and `docs/design.md`, "Where the
    /// payload is copied".
    pub fn with_stream_min(min: Option<u64>) -> Self {
        ProcessMemory { stream: StreamPolicy { min, ..StreamPolicy::default() }, ..ProcessMemory::default() }
    }

    /// Allow the device to reach `addr..addr + len`.
    ///
    /// # Safety
    /// The range must be valid for reads and writes for as long as it stays registered (until
    /// the matching [`remove_region`](Self::remove_region) or the drop of the memory), and must
    /// not be accessed by the application while a work request or a remote peer may use it,
    /// other than through atomics.
    pub unsafe fn add_region(&mut self, addr: u64, len: u64) -> Result<(), MemoryError> {
        let end = addr.checked_add(len).ok_or(MemoryError)?;
        if addr == 0 && len != 0 {
            return Err(MemoryError);
        }
        self.regions.push((addr, end));
        Ok(())
    }

    /// Forget one registration of `addr..addr + len`; `false` if there was none.
    pub fn remove_region(&mut self, addr: u64, len: u64) -> bool {
        let end = addr.saturating_add(len);
        match self.regions.iter().position(|&r| r == (addr, end)) {
            Some(i) => {
                self.regions.swap_remove(i);
                true
            }
            None => false,
        }
    }

    pub fn region_count(&self) -> usize {
        self.regions.len()
    }

    fn check(&self, addr: u64, len: usize) -> Result<(), MemoryError> {
        let end = addr.checked_add(len as u64).ok_or(MemoryError)?;
        if self.regions.iter().any(|&(s, e)| s <= addr && end <= e) {
            Ok(())
        } else {
            Err(MemoryError)
        }
    }

    fn word(&self, addr: u64) -> Result<&AtomicU64, MemoryError> {
        #[allow(clippy::manual_is_multiple_of)] // MSRV 1.75
        if addr % 8 != 0 {
            return Err(MemoryError);
        }
        self.check(addr, 8)?;
        // SAFETY: the word lies inside a registered range (valid and writable by the contract
        // of `add_region`) and is 8-byte aligned; AtomicU64 has the layout of u64. Concurrent
        // accesses by the application or other devices go through atomics too (IBA atomics are
        // only atomic with respect to other atomics, as on hardware).
        Ok(unsafe { AtomicU64::from_ptr(addr as *mut u64) })
    }
}

/// Parts shorter than this go through the caches whatever the message: the head and tail
/// of a non-temporal copy (to and from 16-byte alignment) and its fence would dominate.
const STREAM_PART_MIN: usize = 256;

/// Copies `src` to `dst` with non-temporal stores (SSE2 `movntdq`, baseline on x86-64) for the
/// 16-byte-aligned middle and plain copies for the ends, then fences: the stores are weakly
/// ordered, and the completion that follows (a plain store, maybe read by another thread)
/// must not become visible before them. Elsewhere a plain copy.
///
/// # Safety
/// `dst..dst + src.len()` must be valid for writes and not overlap `src`.
unsafe fn copy_stream(dst: *mut u8, src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let n = src.len();
        let head = ((dst as usize).wrapping_neg() & 15).min(n);
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
        let mut i = head;
        while i + 64 <= n {
            let s = src.as_ptr().add(i) as *const __m128i;
            let d = dst.add(i) as *mut __m128i;
            let (a, b, c, e) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
            i += 64;
        }
        while i + 16 <= n {
            _mm_stream_si128(dst.add(i) as *mut __m128i, _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i));
            i += 16;
        }
        std::ptr::copy_nonoverlapping(src.as_ptr().add(i), dst.add(i), n - i);
        _mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len());
}

impl Memory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        if buf.is_empty() {
            return Ok(());
        }
        self.check(addr, buf.len())?;
        // SAFETY: addr..addr+len lies inside a registered range, valid for reads by the contract
        // of `add_region`; `buf` is a distinct Rust buffer (engine scratch or mbuf), so the two
        // do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemoryError> {
        if data.is_empty() {
            return Ok(());
        }
        self.check(addr, data.len())?;
        // SAFETY: addr..addr+len lies inside a registered range, valid for writes by the
        // contract of `add_region`; `data` is a received frame, not registered memory.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
        Ok(())
    }

    fn write_part(&mut self, addr: u64, data: &[u8], msg: Message) -> Result<(), MemoryError> {
        if !self.stream.streams(msg) || data.len() < STREAM_PART_MIN {
            return self.write(addr, data);
        }
        self.check(addr, data.len())?;
        // SAFETY: as in `write`: addr..addr+len lies inside a registered range, valid for
        // writes; `data` is a received frame, not registered memory.
        unsafe { copy_stream(addr as *mut u8, data) };
        Ok(())
    }

    fn crc32(&self, addr: u64, len: usize, state: u32) -> Result<u32, MemoryError> {
        if len == 0 {
            return Ok(state);
        }
        self.check(addr, len)?;
        // SAFETY: addr..addr+len lies inside a registered range, valid for reads by the contract
        // of `add_region`; the slice lives only for this CRC pass.
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
        Ok(droce_transport::wire::icrc::crc32_update(state, bytes))
    }

    fn cmp_swap(&mut self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemoryError> {
        let w = self.word(addr)?;
        Ok(match w.compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire) {
            Ok(v) | Err(v) => v,
        })
    }

    fn fetch_add(&mut self, addr: u64, add: u64) -> Result<u64, MemoryError> {
        Ok(self.word(addr)?.fetch_add(add, Ordering::AcqRel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_registered_ranges() {
        let mut buf = vec![0u64; 16];
        let base = buf.as_mut_ptr() as u64;
        let mut m = ProcessMemory::new();
        let mut out = [0u8; 4];
        assert_eq!(m.read(base, &mut out), Err(MemoryError), "nothing registered");
        // SAFETY: `buf` outlives `m`'s use below and is only touched through `m` meanwhile.
        unsafe { m.add_region(base, 128).unwrap() };
        m.write(base + 4, &[1, 2, 3, 4]).unwrap();
        m.read(base + 4, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4]);
        assert_eq!(m.write(base + 126, &[0; 4]), Err(MemoryError), "crosses the end");
        assert_eq!(m.fetch_add(base + 8, 5), Ok(0));
        assert_eq!(m.cmp_swap(base + 8, 5, 9), Ok(5));
        assert_eq!(m.cmp_swap(base + 8, 5, 1), Ok(9));
        assert_eq!(m.fetch_add(base + 12, 1), Err(MemoryError), "unaligned");
        assert!(m.remove_region(base, 128));
        assert!(!m.remove_region(base, 128));
        assert_eq!(m.read(base, &mut out), Err(MemoryError));
        assert_eq!(buf[1], 9);
    }

    /// A streamed part lands byte for byte like a plain write, at every alignment and
    /// length around the SIMD steps; bounds are checked the same.
    #[test]
    fn streamed_parts_land_like_plain_writes() {
        let mut plain_buf = vec![0u8; 9000];
        let mut nt_buf = vec![0u8; 9000];
        let (pb, nb) = (plain_buf.as_mut_ptr() as u64, nt_buf.as_mut_ptr() as u64);
        let mut plain = ProcessMemory::new();
        let mut nt = ProcessMemory::with_stream_min(Some(1));
        // SAFETY: both buffers outlive the memories' use below and are read only after it.
        unsafe {
            plain.add_region(pb, 9000).unwrap();
            nt.add_region(nb, 9000).unwrap();
        }
        let data: Vec<u8> = (0..4200u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut at = 0u64;
        for (k, len) in (0..300).chain([1024, 1027, 4096, 4099, 4200]).enumerate() {
            let off = at % 61;
            // every part a fresh message: every one streams
            let msg = Message { start: 1 << 40 | k as u64, len: 1 << 20, first: true };
            plain.write_part(pb + off, &data[..len], msg).unwrap();
            nt.write_part(nb + off, &data[..len], msg).unwrap();
            assert_eq!(plain_buf, nt_buf, "len {len} at offset {off}");
            at += 13;
        }
        let msg = Message { start: 7, len: 1 << 20, first: true };
        assert_eq!(nt.write_part(nb + 8999, &data[..300], msg), Err(MemoryError), "crosses the end");
    }

    /// Large messages into fresh buffers stream; small ones, reused buffers (a ping-pong's)
    /// and memory without a threshold do not; a SEND streams from the part where its bytes
    /// so far reach the threshold; parts of interleaved messages keep their message's choice.
    #[test]
    fn stream_policy() {
        let m = |start: u64, len: u64, first: bool| Message { start, len, first };
        let mut off = StreamPolicy::default();
        assert!(!off.streams(m(1, 1 << 30, true)));
        let mut p = StreamPolicy { min: Some(1000), ..StreamPolicy::default() };
        assert!(!p.streams(m(10, 999, true)), "small");
        assert!(p.streams(m(20, 1000, true)) && p.streams(m(20, 1000, false)), "fresh and large");
        assert!(!p.streams(m(20, 1000, true)), "the same buffer again: cached");
        assert!(!p.streams(m(20, 1000, false)), "and all of that message");
        // a window of more distinct buffers than the policy remembers: every message fresh
        for round in 0..3 {
            for b in 0..2 * RECENT as u64 {
                assert!(p.streams(m(100 + b, 1 << 20, true)), "round {round} buffer {b}");
            }
        }
        // a SEND: the bytes so far cross the threshold on its third part
        assert!(!p.streams(m(500, 400, true)) && !p.streams(m(500, 800, false)) && p.streams(m(500, 1200, false)));
        // interleaved messages keep their own choice
        assert!(p.streams(m(600, 1 << 20, true)));
        assert!(!p.streams(m(500, 1 << 20, true)), "500 received lately");
        assert!(p.streams(m(600, 1 << 20, false)) && !p.streams(m(500, 1 << 20, false)));
    }
}
