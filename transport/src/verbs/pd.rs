//! Protection domains (IBA 10.6.3.1). A PD has no state of its own: it is the tag that
//! memory regions, QPs, SRQs and address handles must share (10.6.3.2).

/// Handle of a protection domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdHandle(pub u32);

#[derive(Debug, Default, Clone)]
pub(crate) struct ProtectionDomain {
    /// Objects that reference this PD; dealloc is refused while non-zero.
    pub users: u32,
}
