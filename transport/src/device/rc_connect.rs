//! Convenience for embedders and tests: the attributes of the usual RC bring-up.
use super::*;

/// RESET -> INIT attributes for an RC QP.
pub fn init_attr(access: AccessFlags) -> (QpAttr, QpAttrMask) {
    let a = QpAttr { qp_state: QpState::Init, qp_access_flags: access, pkey_index: 0, port_num: 1, ..QpAttr::default() };
    (a, QpAttrMask::STATE | QpAttrMask::ACCESS_FLAGS | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT)
}

/// INIT -> RTR attributes.
pub fn rtr_attr(av: AddressVector, mtu: PathMtu, dest_qpn: Qpn, rq_psn: crate::types::Psn, max_dest_rd_atomic: u8, min_rnr_timer: u8) -> (QpAttr, QpAttrMask) {
    let a = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: av,
        path_mtu: mtu,
        dest_qp_num: dest_qpn,
        rq_psn,
        max_dest_rd_atomic,
        min_rnr_timer,
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    (a, m)
}

/// RTR -> RTS attributes.
pub fn rts_attr(sq_psn: crate::types::Psn, timeout: u8, retry_cnt: u8, rnr_retry: u8, max_rd_atomic: u8) -> (QpAttr, QpAttrMask) {
    let a = QpAttr { qp_state: QpState::Rts, sq_psn, timeout, retry_cnt, rnr_retry, max_rd_atomic, ..QpAttr::default() };
    let m = QpAttrMask::STATE
        | QpAttrMask::SQ_PSN
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    (a, m)
}
