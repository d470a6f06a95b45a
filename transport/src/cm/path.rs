//! The 44-byte path description carried twice in a REQ (primary at CM byte 52, alternate at
//! CM byte 96; IBA table 106).
//!
//! ```text
//!  0: Local Port LID(16) Remote Port LID(16)
//!  4: Local Port GID(128)
//! 20: Remote Port GID(128)
//! 36: Flow Label(20) Reserved(6) Packet Rate(6)
//! 40: Traffic Class(8) Hop Limit(8) SL(4) Subnet Local(1) Reserved(3) Local ACK Timeout(5) Reserved(3)
//! ```
//! On RoCE both LIDs are the permissive LID 0xffff and the GIDs are the RoCEv2 GIDs of the two
//! ports (IPv4-mapped for IPv4), the hop limit is the IP TTL (64 on Linux) and the flow label
//! is the one rdma_cm derives from the ports (`rdma_calc_flow_label`).

use super::field;
use crate::types::Gid;

/// Length of one path in a REQ.
pub const PATH_LEN: usize = 44;

mod fld {
    pub const LOCAL_LID: usize = 0;
    pub const REMOTE_LID: usize = 2;
    pub const LOCAL_GID: usize = 4;
    pub const REMOTE_GID: usize = 20;
    /// Flow label: bits 31..12 of the word; packet rate: bits 5..0.
    pub const FLOW_RATE: usize = 36;
    pub const TRAFFIC_CLASS: usize = 40;
    pub const HOP_LIMIT: usize = 41;
    /// SL: bits 7..4; subnet local: bit 3.
    pub const SL: usize = 42;
    /// Local ACK timeout: bits 7..3.
    pub const ACK_TIMEOUT: usize = 43;
}

/// One REQ path as plain data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathRepr {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: Gid,
    pub remote_gid: Gid,
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits, IBA rate encoding (0 on rxe).
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// 5 bits: the ACK timeout exponent, 4.096 µs × 2^n.
    pub local_ack_timeout: u8,
}

impl PathRepr {
    /// Reads the path at MAD offset `at`; `b` must hold `at + PATH_LEN` bytes.
    pub(crate) fn parse_at(b: &[u8], at: usize) -> Self {
        PathRepr {
            local_lid: field::u16_at(b, at + fld::LOCAL_LID),
            remote_lid: field::u16_at(b, at + fld::REMOTE_LID),
            local_gid: field::gid_at(b, at + fld::LOCAL_GID),
            remote_gid: field::gid_at(b, at + fld::REMOTE_GID),
            flow_label: field::bits32(b, at + fld::FLOW_RATE, 12, 20),
            packet_rate: field::bits8(b, at + fld::FLOW_RATE + 3, 0, 6),
            traffic_class: b[at + fld::TRAFFIC_CLASS],
            hop_limit: b[at + fld::HOP_LIMIT],
            sl: field::bits8(b, at + fld::SL, 4, 4),
            subnet_local: field::bits8(b, at + fld::SL, 3, 1) != 0,
            local_ack_timeout: field::bits8(b, at + fld::ACK_TIMEOUT, 3, 5),
        }
    }

    /// Writes the path at MAD offset `at`, keeping the reserved bits of `b`.
    pub(crate) fn emit_at(&self, b: &mut [u8], at: usize) {
        field::set_u16_at(b, at + fld::LOCAL_LID, self.local_lid);
        field::set_u16_at(b, at + fld::REMOTE_LID, self.remote_lid);
        field::set_gid_at(b, at + fld::LOCAL_GID, self.local_gid);
        field::set_gid_at(b, at + fld::REMOTE_GID, self.remote_gid);
        field::set_bits32(b, at + fld::FLOW_RATE, 12, 20, self.flow_label);
        field::set_bits8(b, at + fld::FLOW_RATE + 3, 0, 6, self.packet_rate);
        b[at + fld::TRAFFIC_CLASS] = self.traffic_class;
        b[at + fld::HOP_LIMIT] = self.hop_limit;
        field::set_bits8(b, at + fld::SL, 4, 4, self.sl);
        field::set_bits8(b, at + fld::SL, 3, 1, u8::from(self.subnet_local));
        field::set_bits8(b, at + fld::ACK_TIMEOUT, 3, 5, self.local_ack_timeout);
    }

    /// True if no bit of the path at `at` is set outside the last byte's low 3 bits
    /// (where the REQ keeps SAP Supported): IBA 12.6.5 says an absent alternate path is zero.
    pub(crate) fn is_zero_at(b: &[u8], at: usize) -> bool {
        b[at..at + PATH_LEN - 1].iter().all(|&x| x == 0) && b[at + PATH_LEN - 1] & 0xf8 == 0
    }
}
