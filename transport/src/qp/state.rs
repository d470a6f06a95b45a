//! The IBTA QP state machine (IBA 10.3.1, figure 124) and the table of attributes each
//! transition requires and allows per QP type (IBA 11.2.5.3 / the ibv_modify_qp table).

use super::attr::QpAttrMask as M;

/// QP states (values as `enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QpState {
    Reset = 0,
    Init = 1,
    Rtr = 2,
    Rts = 3,
    Sqd = 4,
    Sqe = 5,
    Err = 6,
}

impl QpState {
    pub const ALL: [QpState; 7] =
        [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts, QpState::Sqd, QpState::Sqe, QpState::Err];
    /// Can post receives (IBA 10.3.1: not in RESET).
    pub const fn can_post_recv(self) -> bool {
        !matches!(self, QpState::Reset)
    }
    /// Can post sends (RTS, SQD queue them; SQE and ERR complete them with flush errors
    /// at the next progress, like rxe).
    pub const fn can_post_send(self) -> bool {
        matches!(self, QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err)
    }
    /// Receive side processes incoming packets (RTR and later, 10.3.1).
    pub const fn receives(self) -> bool {
        matches!(self, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe)
    }
}

/// QP transport service (values as `enum ibv_qp_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QpType {
    Rc = 2,
    Ud = 4,
}

/// Required and optional attributes of one legal transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub required: M,
    pub optional: M,
}

const fn t(required: M, optional: M) -> Option<Transition> {
    Some(Transition { required, optional })
}

/// The transition table: `None` when `cur -> next` is not a legal transition for `ty`.
/// Mirrors IBA table 92-94 (Modify QP attributes) as implemented by ib_modify_qp_is_ok.
pub const fn transition(ty: QpType, cur: QpState, next: QpState) -> Option<Transition> {
    use QpState::*;
    use QpType::*;
    let none = M::empty();
    match (cur, next) {
        // Any state may go to RESET or ERR without attributes.
        (_, Reset) | (_, Err) => t(none, none),
        (Reset, Init) => match ty {
            Rc => t(M::PKEY_INDEX.or(M::PORT).or(M::ACCESS_FLAGS), none),
            Ud => t(M::PKEY_INDEX.or(M::PORT).or(M::QKEY), none),
        },
        (Init, Init) => match ty {
            Rc => t(none, M::PKEY_INDEX.or(M::PORT).or(M::ACCESS_FLAGS)),
            Ud => t(none, M::PKEY_INDEX.or(M::PORT).or(M::QKEY)),
        },
        (Init, Rtr) => match ty {
            Rc => t(
                M::AV.or(M::PATH_MTU).or(M::DEST_QPN).or(M::RQ_PSN).or(M::MAX_DEST_RD_ATOMIC).or(M::MIN_RNR_TIMER),
                M::ALT_PATH.or(M::ACCESS_FLAGS).or(M::PKEY_INDEX).or(M::SELECTIVE_REPEAT),
            ),
            Ud => t(none, M::PKEY_INDEX.or(M::QKEY)),
        },
        (Rtr, Rts) => match ty {
            Rc => t(
                M::TIMEOUT.or(M::RETRY_CNT).or(M::RNR_RETRY).or(M::SQ_PSN).or(M::MAX_QP_RD_ATOMIC),
                M::CUR_STATE.or(M::ALT_PATH).or(M::ACCESS_FLAGS).or(M::MIN_RNR_TIMER).or(M::PATH_MIG_STATE)
                    .or(M::SELECTIVE_REPEAT),
            ),
            Ud => t(M::SQ_PSN, M::CUR_STATE.or(M::QKEY)),
        },
        (Rts, Rts) | (Sqd, Rts) => match ty {
            Rc => t(
                none,
                M::CUR_STATE.or(M::ACCESS_FLAGS).or(M::ALT_PATH).or(M::PATH_MIG_STATE).or(M::MIN_RNR_TIMER),
            ),
            Ud => t(none, M::CUR_STATE.or(M::QKEY)),
        },
        (Rts, Sqd) => t(none, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => match ty {
            Rc => t(
                none,
                M::AV.or(M::ALT_PATH).or(M::ACCESS_FLAGS).or(M::PKEY_INDEX).or(M::MIN_RNR_TIMER)
                    .or(M::PATH_MIG_STATE).or(M::TIMEOUT).or(M::RETRY_CNT).or(M::RNR_RETRY)
                    .or(M::MAX_QP_RD_ATOMIC).or(M::MAX_DEST_RD_ATOMIC),
            ),
            Ud => t(none, M::PKEY_INDEX.or(M::QKEY)),
        },
        // SQE is entered by UD send errors only; RC send errors go to ERR (10.3.1.7).
        (Sqe, Rts) => match ty {
            Rc => None,
            Ud => t(none, M::CUR_STATE.or(M::QKEY)),
        },
        _ => None,
    }
}

/// Check an attribute mask against the table (STATE itself is always allowed).
pub fn mask_is_ok(ty: QpType, cur: QpState, next: QpState, mask: M) -> bool {
    let Some(tr) = transition(ty, cur, next) else { return false };
    let mask = mask.without(M::STATE);
    mask.contains(tr.required) && mask.without(tr.required).without(tr.optional).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use QpState::*;

    #[test]
    fn legal_transitions() {
        let legal_rc = [
            (Reset, Init), (Init, Init), (Init, Rtr), (Rtr, Rts), (Rts, Rts), (Rts, Sqd), (Sqd, Rts), (Sqd, Sqd),
        ];
        for cur in QpState::ALL {
            for next in QpState::ALL {
                let rc = transition(QpType::Rc, cur, next).is_some();
                let ud = transition(QpType::Ud, cur, next).is_some();
                let expect_rc = next == Reset || next == Err || legal_rc.contains(&(cur, next));
                let expect_ud = expect_rc || (cur, next) == (Sqe, Rts);
                assert_eq!(rc, expect_rc, "RC {cur:?} -> {next:?}");
                assert_eq!(ud, expect_ud, "UD {cur:?} -> {next:?}");
            }
        }
    }

    #[test]
    fn required_and_optional() {
        let rtr = M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
        assert!(mask_is_ok(QpType::Rc, Init, Rtr, rtr | M::STATE));
        assert!(mask_is_ok(QpType::Rc, Init, Rtr, rtr | M::ACCESS_FLAGS));
        assert!(!mask_is_ok(QpType::Rc, Init, Rtr, rtr.without(M::RQ_PSN)), "missing required");
        assert!(!mask_is_ok(QpType::Rc, Init, Rtr, rtr | M::SQ_PSN), "not allowed");
        assert!(mask_is_ok(QpType::Ud, Init, Rtr, M::empty()));
        // the droce selective-repeat extension: RC, before the QP runs, never on UD
        assert!(mask_is_ok(QpType::Rc, Init, Rtr, rtr | M::SELECTIVE_REPEAT));
        assert!(!mask_is_ok(QpType::Rc, Rts, Rts, M::SELECTIVE_REPEAT), "not once the QP runs");
        assert!(!mask_is_ok(QpType::Ud, Init, Rtr, M::SELECTIVE_REPEAT));
        assert!(!mask_is_ok(QpType::Ud, Rtr, Rts, M::empty()), "UD RTS needs SQ_PSN");
        assert!(mask_is_ok(QpType::Ud, Reset, Init, M::PKEY_INDEX | M::PORT | M::QKEY));
        assert!(!mask_is_ok(QpType::Ud, Reset, Init, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS));
        assert!(!mask_is_ok(QpType::Rc, Reset, Rts, M::empty()));
    }
}
