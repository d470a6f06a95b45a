//! QP attributes (IBA 11.2.5) with their encodings and validation.

use crate::time::Duration;
use crate::types::{Psn, QKey, Qpn};
use crate::verbs::{AccessFlags, AddressVector};

/// Which attributes a modify_qp call sets (bit values as `enum ibv_qp_attr_mask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpAttrMask(pub u32);

impl QpAttrMask {
    pub const STATE: Self = Self(1 << 0);
    pub const CUR_STATE: Self = Self(1 << 1);
    pub const EN_SQD_ASYNC_NOTIFY: Self = Self(1 << 2);
    pub const ACCESS_FLAGS: Self = Self(1 << 3);
    pub const PKEY_INDEX: Self = Self(1 << 4);
    pub const PORT: Self = Self(1 << 5);
    pub const QKEY: Self = Self(1 << 6);
    pub const AV: Self = Self(1 << 7);
    pub const PATH_MTU: Self = Self(1 << 8);
    pub const TIMEOUT: Self = Self(1 << 9);
    pub const RETRY_CNT: Self = Self(1 << 10);
    pub const RNR_RETRY: Self = Self(1 << 11);
    pub const RQ_PSN: Self = Self(1 << 12);
    pub const MAX_QP_RD_ATOMIC: Self = Self(1 << 13);
    pub const ALT_PATH: Self = Self(1 << 14);
    pub const MIN_RNR_TIMER: Self = Self(1 << 15);
    pub const SQ_PSN: Self = Self(1 << 16);
    pub const MAX_DEST_RD_ATOMIC: Self = Self(1 << 17);
    pub const PATH_MIG_STATE: Self = Self(1 << 18);
    pub const CAP: Self = Self(1 << 19);
    pub const DEST_QPN: Self = Self(1 << 20);
    /// droce extension, not an ibverbs bit: [`QpAttr::selective_repeat`]. Set it only when
    /// both peers announced selective repeat at connection time (docs/selective-repeat.md).
    pub const SELECTIVE_REPEAT: Self = Self(1 << 31);

    pub const fn empty() -> Self {
        Self(0)
    }
    pub const fn or(self, o: Self) -> Self {
        Self(self.0 | o.0)
    }
    pub const fn without(self, o: Self) -> Self {
        Self(self.0 & !o.0)
    }
    pub const fn contains(self, o: Self) -> bool {
        self.0 & o.0 == o.0
    }
    pub const fn intersects(self, o: Self) -> bool {
        self.0 & o.0 != 0
    }
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl core::ops::BitOr for QpAttrMask {
    type Output = Self;
    fn bitor(self, o: Self) -> Self {
        self.or(o)
    }
}

/// IB path MTU (IBA 9.6.1; values as `enum ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum PathMtu {
    Mtu256 = 1,
    Mtu512 = 2,
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl PathMtu {
    pub const fn bytes(self) -> u32 {
        256 << (self as u32 - 1)
    }
    pub fn from_bytes(b: u32) -> Option<Self> {
        Some(match b {
            256 => PathMtu::Mtu256,
            512 => PathMtu::Mtu512,
            1024 => PathMtu::Mtu1024,
            2048 => PathMtu::Mtu2048,
            4096 => PathMtu::Mtu4096,
            _ => return None,
        })
    }
    /// The largest IB MTU whose RoCEv2 frame fits an Ethernet MTU (rxe: eth MTU 1500 -> 1024).
    pub fn for_eth_mtu(eth_mtu: u32) -> Self {
        // IPv6 40 + UDP 8 + BTH 12 + RETH 16 + ICRC 4 (the largest header set of a data packet
        // plus IPv6), like rxe's RXE_MAX_HDR_LENGTH reasoning.
        let room = eth_mtu.saturating_sub(40 + 8 + 12 + 16 + 4 + 4);
        [PathMtu::Mtu4096, PathMtu::Mtu2048, PathMtu::Mtu1024, PathMtu::Mtu512]
            .into_iter()
            .find(|m| m.bytes() <= room)
            .unwrap_or(PathMtu::Mtu256)
    }
}

/// IBA 9.7.5.2.8 table 45: the RNR NAK timer field, in microseconds per 5-bit code.
/// Code 0 is the longest (655.36 ms).
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840, 5_120, 7_680,
    10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760, 327_680, 491_520,
];

/// The delay an RNR NAK timer code asks for.
pub fn rnr_timer_duration(code: u8) -> Duration {
    Duration::from_micros(RNR_TIMER_US[(code & 0x1f) as usize] as u64)
}

/// Local ACK timeout (IBA 11.2.4.2): 4.096 µs · 2^timeout; 0 means infinite (`None`).
pub fn ack_timeout_duration(timeout: u8) -> Option<Duration> {
    if timeout == 0 {
        return None;
    }
    Some(Duration::from_nanos(4096u64 << timeout.min(31)))
}

/// Retry count meaning "retry forever" for rnr_retry (IBA 9.7.5.2.8).
pub const RNR_RETRY_INFINITE: u8 = 7;

/// QP attributes; only the fields selected by the mask are read by modify_qp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    pub qp_state: super::QpState,
    pub cur_qp_state: super::QpState,
    pub qp_access_flags: AccessFlags,
    pub pkey_index: u16,
    pub port_num: u8,
    pub qkey: QKey,
    pub ah_attr: AddressVector,
    pub path_mtu: PathMtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub rq_psn: Psn,
    pub sq_psn: Psn,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub dest_qp_num: Qpn,
    pub en_sqd_async_notify: bool,
    /// droce extension: selective repeat with a droce peer that negotiated it (the responder
    /// keeps out-of-order SEND/WRITE packets, the requester resends only the NAKed PSN).
    /// Off, the QP is the plain IBA go-back-N QP rxe and NICs expect. Set on INIT -> RTR or
    /// RTR -> RTS, RC only; see docs/selective-repeat.md.
    pub selective_repeat: bool,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: super::QpState::Reset,
            cur_qp_state: super::QpState::Reset,
            qp_access_flags: AccessFlags::NONE,
            pkey_index: 0,
            port_num: 1,
            qkey: QKey(0),
            ah_attr: AddressVector::default(),
            path_mtu: PathMtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            rq_psn: Psn::ZERO,
            sq_psn: Psn::ZERO,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            dest_qp_num: Qpn::new(0),
            en_sqd_async_notify: false,
            selective_repeat: false,
        }
    }
}

/// Device limits the attributes are checked against.
pub const MAX_RD_ATOMIC: u8 = 128;

/// What was wrong with an attribute value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidAttr {
    PortNum,
    PkeyIndex,
    Timeout,
    RetryCnt,
    RnrRetry,
    MinRnrTimer,
    MaxRdAtomic,
    MaxDestRdAtomic,
    SgidIndex,
    AccessFlags,
    DestQpn,
    PathMtu,
}

/// Range checks for the attributes in `mask` that do not need device state.
pub fn validate(attr: &QpAttr, mask: QpAttrMask) -> Result<(), InvalidAttr> {
    use QpAttrMask as M;
    if mask.contains(M::PORT) && attr.port_num != 1 {
        return Err(InvalidAttr::PortNum);
    }
    if mask.contains(M::TIMEOUT) && attr.timeout > 31 {
        return Err(InvalidAttr::Timeout);
    }
    if mask.contains(M::RETRY_CNT) && attr.retry_cnt > 7 {
        return Err(InvalidAttr::RetryCnt);
    }
    if mask.contains(M::RNR_RETRY) && attr.rnr_retry > 7 {
        return Err(InvalidAttr::RnrRetry);
    }
    if mask.contains(M::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
        return Err(InvalidAttr::MinRnrTimer);
    }
    if mask.contains(M::MAX_QP_RD_ATOMIC) && attr.max_rd_atomic > MAX_RD_ATOMIC {
        return Err(InvalidAttr::MaxRdAtomic);
    }
    if mask.contains(M::MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic > MAX_RD_ATOMIC {
        return Err(InvalidAttr::MaxDestRdAtomic);
    }
    if mask.contains(M::ACCESS_FLAGS) && attr.qp_access_flags.0 & !AccessFlags::ALL.0 != 0 {
        return Err(InvalidAttr::AccessFlags);
    }
    if mask.contains(M::DEST_QPN) && (attr.dest_qp_num.value() == 0 || attr.dest_qp_num == Qpn::MULTICAST) {
        return Err(InvalidAttr::DestQpn);
    }
    Ok(())
}

/// The UDP source port of a RoCEv2 QP, as the Linux kernel computes it.
///
/// rxe (rxe_modify_qp) sets the port from the AV's flow label with `rdma_get_udp_sport`:
/// with a zero flow label the label is `rdma_calc_flow_label(lqpn, rqpn)` (the product of
/// the two QPNs folded to 20 bits), then folded to 14 bits and or-ed with 0xC000. Both ends
/// of an RC connection therefore use the same port (vector A1: QPNs 0x13/0x23 -> 49817).
pub fn rc_udp_sport(flow_label: u32, lqpn: Qpn, rqpn: Qpn) -> u16 {
    let fl = if flow_label & 0xfffff != 0 { flow_label & 0xfffff } else { calc_flow_label(lqpn, rqpn) };
    flow_label_to_udp_sport(fl)
}

fn calc_flow_label(lqpn: Qpn, rqpn: Qpn) -> u32 {
    let mut v = lqpn.value() as u64 * rqpn.value() as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xfffff) as u32
}

fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let low = (fl & 0x3fff) ^ ((fl & 0xfc000) >> 14);
    (low | 0xC000) as u16
}

/// The UDP source port of a QP without a connection (UD, and RC before RTR):
/// rxe_qp_init_req uses `0xC000 + hash_32(qpn, 14)` (vector G: QP1 -> 55410).
pub fn default_udp_sport(qpn: Qpn) -> u16 {
    let h = qpn.value().wrapping_mul(0x61C8_8647) >> (32 - 14);
    0xC000 + h as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_sport_matches_rxe_vectors() {
        // A1: QPNs 0x13 and 0x23, both directions use 49817.
        assert_eq!(rc_udp_sport(0, Qpn::new(0x13), Qpn::new(0x23)), 49817);
        assert_eq!(rc_udp_sport(0, Qpn::new(0x23), Qpn::new(0x13)), 49817);
        // G: CM MADs from QP1 use 55410.
        assert_eq!(default_udp_sport(Qpn::GSI), 55410);
    }

    #[test]
    fn timer_tables() {
        assert_eq!(rnr_timer_duration(0), Duration::from_micros(655_360));
        assert_eq!(rnr_timer_duration(1), Duration::from_micros(10));
        assert_eq!(rnr_timer_duration(14), Duration::from_micros(1_280));
        assert_eq!(rnr_timer_duration(15), Duration::from_micros(1_920));
        assert_eq!(rnr_timer_duration(31), Duration::from_micros(491_520));
        assert_eq!(ack_timeout_duration(0), None);
        assert_eq!(ack_timeout_duration(1), Some(Duration::from_nanos(8192)));
        assert_eq!(ack_timeout_duration(14), Some(Duration::from_nanos(4096 << 14)));
        assert_eq!(PathMtu::Mtu256.bytes(), 256);
        assert_eq!(PathMtu::Mtu4096.bytes(), 4096);
        assert_eq!(PathMtu::for_eth_mtu(1500), PathMtu::Mtu1024);
        assert_eq!(PathMtu::for_eth_mtu(9000), PathMtu::Mtu4096);
    }

    #[test]
    fn validation() {
        let a = QpAttr { timeout: 32, retry_cnt: 8, ..QpAttr::default() };
        assert_eq!(validate(&a, QpAttrMask::TIMEOUT), Err(InvalidAttr::Timeout));
        assert_eq!(validate(&a, QpAttrMask::RETRY_CNT), Err(InvalidAttr::RetryCnt));
        assert_eq!(validate(&a, QpAttrMask::RNR_RETRY), Ok(()));
        let a = QpAttr { port_num: 2, ..QpAttr::default() };
        assert_eq!(validate(&a, QpAttrMask::PORT), Err(InvalidAttr::PortNum));
    }
}
