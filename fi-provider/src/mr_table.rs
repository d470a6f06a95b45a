//! The provider's memory registrations by address: the application's (fi_mr_reg) and the
//! temporary ones the provider makes for an operation posted without a descriptor.
//!
//! An operation without a descriptor borrows the lkey of an application MR that covers its
//! buffer. It never borrows a temporary registration: that one belongs to another operation
//! in flight and is deregistered when that operation completes, while the borrower may still
//! be queued (its frames would then name a dead lkey and complete in error).

use droce_transport::{Lkey, Rkey};
use std::collections::BTreeMap;

/// A registered memory region of the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    pub va: u64,
    pub len: u64,
    pub lkey: Lkey,
    pub rkey: Rkey,
    /// Made for one operation (no descriptor given); dropped at its completion.
    pub temp: bool,
}

#[derive(Debug, Default)]
pub struct MrTable {
    by_va: BTreeMap<u64, Vec<Mr>>,
}

impl MrTable {
    pub fn insert(&mut self, mr: Mr) {
        self.by_va.entry(mr.va).or_default().push(mr);
    }

    /// Takes the registration with this lkey out of the table.
    pub fn remove(&mut self, lkey: Lkey) -> Option<Mr> {
        let (va, i) = self.by_va.iter().find_map(|(va, v)| v.iter().position(|m| m.lkey == lkey).map(|i| (*va, i)))?;
        let v = self.by_va.get_mut(&va)?;
        let mr = v.swap_remove(i);
        if v.is_empty() {
            self.by_va.remove(&va);
        }
        Some(mr)
    }

    /// The lkey of an application MR covering `addr..addr+len` (never a temporary one).
    pub fn find(&self, addr: u64, len: u64) -> Option<Lkey> {
        let end = addr.checked_add(len)?;
        self.by_va
            .range(..=addr)
            .rev()
            .flat_map(|(_, v)| v.iter())
            .find(|m| !m.temp && m.va <= addr && end <= m.va + m.len)
            .map(|m| m.lkey)
    }

    pub fn len(&self) -> usize {
        self.by_va.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_va.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mr(va: u64, len: u64, key: u32, temp: bool) -> Mr {
        Mr { va, len, lkey: Lkey(key), rkey: Rkey(key), temp }
    }

    #[test]
    fn application_mr_covers_subranges_only() {
        let mut t = MrTable::default();
        t.insert(mr(0x1000, 0x1000, 7, false));
        assert_eq!(t.find(0x1000, 0x1000), Some(Lkey(7)));
        assert_eq!(t.find(0x1800, 0x10), Some(Lkey(7)));
        assert_eq!(t.find(0x1800, 0x801), None, "runs past the end");
        assert_eq!(t.find(0xfff, 2), None, "starts before");
        assert_eq!(t.find(u64::MAX, 2), None, "wraps");
    }

    #[test]
    fn temporary_registration_is_never_lent() {
        let mut t = MrTable::default();
        t.insert(mr(0x1000, 0x1000, 9, true));
        assert_eq!(t.find(0x1000, 0x100), None, "another operation's temporary MR");
        t.insert(mr(0x1000, 0x1000, 10, false));
        assert_eq!(t.find(0x1000, 0x100), Some(Lkey(10)), "the application's MR on the same range");
        assert_eq!(t.remove(Lkey(9)).map(|m| m.temp), Some(true));
        assert_eq!(t.find(0x1000, 0x100), Some(Lkey(10)));
    }

    #[test]
    fn remove_by_lkey_among_same_address() {
        let mut t = MrTable::default();
        t.insert(mr(0x1000, 0x10, 1, false));
        t.insert(mr(0x1000, 0x20, 2, false));
        t.insert(mr(0x3000, 0x10, 3, true));
        assert_eq!(t.len(), 3);
        assert_eq!(t.remove(Lkey(1)).map(|m| m.len), Some(0x10));
        assert_eq!(t.remove(Lkey(1)), None);
        assert_eq!(t.find(0x1000, 0x20), Some(Lkey(2)));
        t.remove(Lkey(2));
        t.remove(Lkey(3));
        assert!(t.is_empty());
    }
}
