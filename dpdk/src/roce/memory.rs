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

use droce_transport::{Memory, MemoryError};
use std::sync::atomic::{AtomicU64, Ordering};

/// Registered process memory. Addresses are stored as integers so the type is `Send`
/// (the engine thread owns it).
#[derive(Debug, Default, Clone)]
pub struct ProcessMemory {
    /// `(start, end)` of every registered range; a range registered twice appears twice.
    regions: Vec<(u64, u64)>,
}

impl ProcessMemory {
    pub fn new() -> Self {
        ProcessMemory::default()
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
}
