//! Memory regions (IBA 10.6.3): a (va, len) window of application memory with keys and
//! access rights. Keys follow rxe: `index << 8 | variant`, the 8-bit variant drawn from the
//! device seed so that a stale key of a re-registered slot does not match (10.6.3.3).

use super::pd::PdHandle;
use crate::types::{Lkey, Rkey};

/// Handle of a memory region (its slab index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MrHandle(pub u32);

/// Memory access rights (values as `enum ibv_access_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessFlags(pub u32);

impl AccessFlags {
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(1 << 0);
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(1 << 1);
    pub const REMOTE_READ: AccessFlags = AccessFlags(1 << 2);
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(1 << 3);
    pub const NONE: AccessFlags = AccessFlags(0);
    pub const ALL: AccessFlags = AccessFlags(0xf);

    pub const fn contains(self, o: AccessFlags) -> bool {
        self.0 & o.0 == o.0
    }
    pub const fn union(self, o: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | o.0)
    }
}

impl core::ops::BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, o: AccessFlags) -> AccessFlags {
        self.union(o)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegMrError {
    InvalidPd,
    /// IBA 10.6.3.1 (C10-...): remote write or remote atomic access requires local write.
    RemoteWriteWithoutLocalWrite,
    /// Unknown bits in the access flags.
    InvalidAccess,
    /// va + len overflows.
    InvalidRange,
    /// The key space (24-bit index) is exhausted.
    NoResources,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeregMrError {
    InvalidMr,
    /// Frames that point into the region are still held by the driver (zero-copy transmit):
    /// the region stays registered; try again once they have left.
    InUse,
}

/// A registered memory region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryRegion {
    pub pd: PdHandle,
    pub va: u64,
    pub len: u64,
    pub access: AccessFlags,
    pub lkey: Lkey,
    pub rkey: Rkey,
    /// Cleared by a SEND with Invalidate naming this rkey (IBA 10.6.7.2.2 remote invalidate).
    pub(crate) remote_valid: bool,
}

/// Find the region of an rkey in the MR table (key index in the upper 24 bits, rxe style).
pub(crate) fn lookup_rkey(mrs: &crate::slab::Slab<MemoryRegion>, rkey: Rkey) -> Option<&MemoryRegion> {
    mrs.get(rkey.0 >> 8).filter(|m| m.rkey == rkey && m.remote_valid)
}

/// Find the region of an lkey.
pub(crate) fn lookup_lkey(mrs: &crate::slab::Slab<MemoryRegion>, lkey: Lkey) -> Option<&MemoryRegion> {
    mrs.get(lkey.0 >> 8).filter(|m| m.lkey == lkey)
}

/// Why a memory access was refused; local accesses report it as `LocProtErr`, remote
/// ones as a remote access NAK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessError {
    BadKey,
    WrongPd,
    OutOfBounds,
    NoAccess,
}

impl MemoryRegion {
    pub(crate) fn validate_access(access: AccessFlags) -> Result<(), RegMrError> {
        if access.0 & !AccessFlags::ALL.0 != 0 {
            return Err(RegMrError::InvalidAccess);
        }
        let needs_local = AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_ATOMIC.0;
        if access.0 & needs_local != 0 && !access.contains(AccessFlags::LOCAL_WRITE) {
            return Err(RegMrError::RemoteWriteWithoutLocalWrite);
        }
        Ok(())
    }

    /// Bounds, PD and rights check for an access of `len` bytes at `va` (C9-88..C9-90 for
    /// remote accesses, 10.6.3.3 for local ones). A zero-length access needs no rights.
    pub fn check(&self, pd: PdHandle, va: u64, len: u64, need: AccessFlags) -> Result<(), AccessError> {
        if pd != self.pd {
            return Err(AccessError::WrongPd);
        }
        if len == 0 {
            return Ok(());
        }
        let end = va.checked_add(len).ok_or(AccessError::OutOfBounds)?;
        if va < self.va || end > self.va + self.len {
            return Err(AccessError::OutOfBounds);
        }
        if !self.access.contains(need) {
            return Err(AccessError::NoAccess);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mr(access: AccessFlags) -> MemoryRegion {
        MemoryRegion { pd: PdHandle(1), va: 0x1000, len: 0x100, access, lkey: Lkey(0x105), rkey: Rkey(0x105), remote_valid: true }
    }

    #[test]
    fn remote_write_needs_local_write() {
        assert_eq!(
            MemoryRegion::validate_access(AccessFlags::REMOTE_WRITE),
            Err(RegMrError::RemoteWriteWithoutLocalWrite)
        );
        assert_eq!(
            MemoryRegion::validate_access(AccessFlags::REMOTE_ATOMIC),
            Err(RegMrError::RemoteWriteWithoutLocalWrite)
        );
        assert!(MemoryRegion::validate_access(AccessFlags::REMOTE_READ).is_ok());
        assert!(MemoryRegion::validate_access(AccessFlags::ALL).is_ok());
        assert_eq!(MemoryRegion::validate_access(AccessFlags(0x100)), Err(RegMrError::InvalidAccess));
    }

    #[test]
    fn bounds_pd_rights() {
        let m = mr(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
        let r = AccessFlags::REMOTE_READ;
        assert_eq!(m.check(PdHandle(1), 0x1000, 0x100, r), Ok(()));
        assert_eq!(m.check(PdHandle(1), 0x1001, 0x100, r), Err(AccessError::OutOfBounds));
        assert_eq!(m.check(PdHandle(1), 0xfff, 1, r), Err(AccessError::OutOfBounds));
        assert_eq!(m.check(PdHandle(1), u64::MAX, 2, r), Err(AccessError::OutOfBounds));
        assert_eq!(m.check(PdHandle(2), 0x1000, 1, r), Err(AccessError::WrongPd));
        assert_eq!(m.check(PdHandle(1), 0x1000, 1, AccessFlags::REMOTE_WRITE), Err(AccessError::NoAccess));
    }
}
