//! Work requests and work completions (IBA 11.4.1, 11.4.2), shaped like `ibv_send_wr`,
//! `ibv_recv_wr` and `ibv_wc`.

use crate::status::{WcOpcode, WcStatus};
use crate::types::{Gid, Lkey, QKey, Qpn, Rkey};

/// A scatter/gather element: `length` bytes at `addr`, inside the MR of `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: Lkey,
}

/// Send queue operations (IBA 10.7.2.1; values as `enum ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SendOpcode {
    Write = 0,
    WriteImm = 1,
    Send = 2,
    SendImm = 3,
    Read = 4,
    CmpSwap = 5,
    FetchAdd = 6,
    SendInv = 9,
}

impl SendOpcode {
    pub const fn is_send(self) -> bool {
        matches!(self, SendOpcode::Send | SendOpcode::SendImm | SendOpcode::SendInv)
    }
    pub const fn is_write(self) -> bool {
        matches!(self, SendOpcode::Write | SendOpcode::WriteImm)
    }
    pub const fn is_atomic(self) -> bool {
        matches!(self, SendOpcode::CmpSwap | SendOpcode::FetchAdd)
    }
    /// READ and atomics use responder resources (max_rd_atomic / max_dest_rd_atomic).
    pub const fn is_rd_atomic(self) -> bool {
        matches!(self, SendOpcode::Read | SendOpcode::CmpSwap | SendOpcode::FetchAdd)
    }
    pub const fn wc_opcode(self) -> WcOpcode {
        match self {
            SendOpcode::Write | SendOpcode::WriteImm => WcOpcode::RdmaWrite,
            SendOpcode::Send | SendOpcode::SendImm | SendOpcode::SendInv => WcOpcode::Send,
            SendOpcode::Read => WcOpcode::RdmaRead,
            SendOpcode::CmpSwap => WcOpcode::CompSwap,
            SendOpcode::FetchAdd => WcOpcode::FetchAdd,
        }
    }
}

/// Send flags (values as `enum ibv_send_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SendFlags(pub u32);

impl SendFlags {
    pub const FENCE: SendFlags = SendFlags(1 << 0);
    pub const SIGNALED: SendFlags = SendFlags(1 << 1);
    pub const SOLICITED: SendFlags = SendFlags(1 << 2);
    pub const INLINE: SendFlags = SendFlags(1 << 3);
    pub const NONE: SendFlags = SendFlags(0);
    pub const fn contains(self, o: SendFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

impl core::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, o: SendFlags) -> SendFlags {
        SendFlags(self.0 | o.0)
    }
}

/// Where a packet goes: the path part of an address handle / QP address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AddressVector {
    pub dgid: Gid,
    /// Peer MAC; neighbour resolution is the engine's job.
    pub dmac: [u8; 6],
    /// Index into the device's GID table for the source address.
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// 0: derive the UDP source port from the QP numbers (as rdma_get_udp_sport does).
    pub flow_label: u32,
}

/// UD destination of a send (IBA 11.4.1.1: the address handle, remote QPN and Q_Key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    pub av: AddressVector,
    pub remote_qpn: Qpn,
    /// High bit set: use the QP's own Q_Key (C10-15 / 10.2.5: controlled Q_Keys).
    pub remote_qkey: QKey,
}

/// A send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub opcode: SendOpcode,
    pub sg_list: Vec<Sge>,
    pub flags: SendFlags,
    /// Immediate data (host order, sent big-endian) for *_IMM; the rkey to invalidate for SEND_INV.
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: Rkey,
    /// FETCH_ADD: the add value; CMP_SWAP: the compare value.
    pub compare_add: u64,
    /// CMP_SWAP: the swap value.
    pub swap: u64,
    pub ud: Option<UdDest>,
}

impl SendWr {
    pub fn new(wr_id: u64, opcode: SendOpcode) -> Self {
        SendWr {
            wr_id,
            opcode,
            sg_list: Vec::new(),
            flags: SendFlags::SIGNALED,
            imm_data: 0,
            remote_addr: 0,
            rkey: Rkey(0),
            compare_add: 0,
            swap: 0,
            ud: None,
        }
    }
    pub fn with_sge(mut self, addr: u64, length: u32, lkey: Lkey) -> Self {
        self.sg_list.push(Sge { addr, length, lkey });
        self
    }
    pub fn with_flags(mut self, flags: SendFlags) -> Self {
        self.flags = flags;
        self
    }
    pub fn with_remote(mut self, remote_addr: u64, rkey: Rkey) -> Self {
        self.remote_addr = remote_addr;
        self.rkey = rkey;
        self
    }
    pub fn with_imm(mut self, imm: u32) -> Self {
        self.imm_data = imm;
        self
    }
    pub fn with_atomic(mut self, compare_add: u64, swap: u64) -> Self {
        self.compare_add = compare_add;
        self.swap = swap;
        self
    }
    pub fn with_ud(mut self, ud: UdDest) -> Self {
        self.ud = Some(ud);
        self
    }
    pub fn total_len(&self) -> u64 {
        self.sg_list.iter().map(|s| s.length as u64).sum()
    }
    /// Everything but the gather list (which the send queue keeps as an [`SgeList`]).
    pub(crate) fn without_sges(&self) -> SendWr {
        SendWr {
            wr_id: self.wr_id,
            opcode: self.opcode,
            sg_list: Vec::new(),
            flags: self.flags,
            imm_data: self.imm_data,
            remote_addr: self.remote_addr,
            rkey: self.rkey,
            compare_add: self.compare_add,
            swap: self.swap,
            ud: self.ud,
        }
    }
}

/// A receive work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sg_list: Vec<Sge>,
}

impl RecvWr {
    pub fn new(wr_id: u64) -> Self {
        RecvWr { wr_id, sg_list: Vec::new() }
    }
    pub fn with_sge(mut self, addr: u64, length: u32, lkey: Lkey) -> Self {
        self.sg_list.push(Sge { addr, length, lkey });
        self
    }
}

/// A posted receive: its id, its scatter list (stored inline) and total length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecvWqe {
    pub wr_id: u64,
    pub sges: SgeList,
    pub len: u64,
}

/// How many SGEs a queued WQE keeps without a heap allocation (perftest, libfabric and UCX
/// post one or two; the verbs limit is 32).
const INLINE_SGES: usize = 4;

/// The scatter/gather list of a queued WQE: inline up to [`INLINE_SGES`] entries, on the heap
/// beyond. Posting copies the caller's list here, so a caller may keep reusing one work
/// request (and its `Vec`) and the post path allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SgeList {
    Inline { len: u8, sges: [Sge; INLINE_SGES] },
    Heap(Vec<Sge>),
}

impl SgeList {
    const EMPTY: Sge = Sge { addr: 0, length: 0, lkey: Lkey(0) };

    pub fn from_slice(s: &[Sge]) -> Self {
        if s.len() <= INLINE_SGES {
            let mut sges = [Self::EMPTY; INLINE_SGES];
            sges[..s.len()].copy_from_slice(s);
            SgeList::Inline { len: s.len() as u8, sges }
        } else {
            SgeList::Heap(s.to_vec())
        }
    }

    #[inline]
    pub fn as_slice(&self) -> &[Sge] {
        match self {
            SgeList::Inline { len, sges } => &sges[..*len as usize],
            SgeList::Heap(v) => v,
        }
    }
}

impl Default for SgeList {
    fn default() -> Self {
        SgeList::Inline { len: 0, sges: [Self::EMPTY; INLINE_SGES] }
    }
}

/// Work completion flags (values as `enum ibv_wc_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WcFlags(pub u32);

impl WcFlags {
    pub const GRH: WcFlags = WcFlags(1 << 0);
    pub const WITH_IMM: WcFlags = WcFlags(1 << 1);
    pub const WITH_INV: WcFlags = WcFlags(1 << 3);
    pub const fn contains(self, o: WcFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub byte_len: u32,
    /// Immediate data (host order) with WITH_IMM, the invalidated rkey with WITH_INV.
    pub imm_data: u32,
    /// The local QP number.
    pub qp_num: Qpn,
    /// The sender's QP number (receive completions of UD QPs; the peer QPN for RC).
    pub src_qp: Qpn,
    pub wc_flags: WcFlags,
    pub pkey_index: u16,
}
