//! Work-completion statuses and opcodes with their IBA / verbs values, and the one table
//! that ties a responder-detected error to the NAK it sends and the statuses both sides report.

macro_rules! wc_status {
    ($($(#[$m:meta])* $name:ident = $v:expr,)*) => {
        /// Work completion status (IBA 11.4.2.1, values as `enum ibv_wc_status`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum WcStatus { $($(#[$m])* $name = $v,)* }
        impl WcStatus {
            pub const ALL: &'static [WcStatus] = &[$(WcStatus::$name,)*];
            pub const fn value(self) -> u8 { self as u8 }
            pub fn from_value(v: u8) -> Option<Self> {
                match v { $($v => Some(WcStatus::$name),)* _ => None }
            }
        }
    };
}

wc_status! {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
}

/// Work completion opcode (values as `enum ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WcOpcode {
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

pub use crate::wire::NakCode;

/// What a responder found wrong with a request (IBA 9.7.5.2, o9-...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResponderError {
    /// PSN beyond the expected one (C9-92): NAK once per gap, requester goes back.
    PsnSequence,
    /// Bad opcode sequence or unsupported opcode (C9-93, C9-94).
    InvalidRequest,
    /// Incoming SEND longer than the receive WQE (C9-95: length error).
    Length,
    /// R_Key, bounds, PD or access rights violation (C9-88 .. C9-90, 10.6.7.2).
    RemoteAccess,
    /// Responder could not carry out the request (memory fault, QP broken).
    RemoteOperational,
}

/// One row per responder error: the NAK it sends, the status the requester reports when it
/// receives that NAK, and the status the responder reports on a receive WQE it consumed.
struct Row {
    err: ResponderError,
    nak: NakCode,
    requester: Option<WcStatus>,
    responder: WcStatus,
}

const TABLE: &[Row] = &[
    // PSN sequence errors are recovered by go-back-N, never completed with an error.
    Row { err: ResponderError::PsnSequence, nak: NakCode::PsnSequenceError, requester: None, responder: WcStatus::WrFlushErr },
    Row { err: ResponderError::InvalidRequest, nak: NakCode::InvalidRequest, requester: Some(WcStatus::RemInvReqErr), responder: WcStatus::LocQpOpErr },
    Row { err: ResponderError::Length, nak: NakCode::InvalidRequest, requester: Some(WcStatus::RemInvReqErr), responder: WcStatus::LocLenErr },
    Row { err: ResponderError::RemoteAccess, nak: NakCode::RemoteAccessError, requester: Some(WcStatus::RemAccessErr), responder: WcStatus::LocAccessErr },
    Row { err: ResponderError::RemoteOperational, nak: NakCode::RemoteOperationalError, requester: Some(WcStatus::RemOpErr), responder: WcStatus::LocQpOpErr },
];

fn row(err: ResponderError) -> &'static Row {
    // The table has exactly one row per variant (checked by a test).
    TABLE.iter().find(|r| r.err == err).unwrap_or(&TABLE[0])
}

impl ResponderError {
    pub fn nak_code(self) -> NakCode {
        row(self).nak
    }
    pub fn responder_status(self) -> WcStatus {
        row(self).responder
    }
}

impl NakCode {
    /// The status a requester completes the NAKed WQE with (`None`: retry, not an error).
    pub fn requester_status(self) -> Option<WcStatus> {
        if self == NakCode::InvalidRdRequest {
            return Some(WcStatus::RemInvRdReqErr);
        }
        TABLE.iter().find(|r| r.nak == self).and_then(|r| r.requester)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_per_error_and_iba_values() {
        for e in [
            ResponderError::PsnSequence,
            ResponderError::InvalidRequest,
            ResponderError::Length,
            ResponderError::RemoteAccess,
            ResponderError::RemoteOperational,
        ] {
            assert_eq!(TABLE.iter().filter(|r| r.err == e).count(), 1, "{e:?}");
        }
        assert_eq!(WcStatus::RemAccessErr.value(), 10);
        assert_eq!(WcStatus::RetryExcErr.value(), 12);
        assert_eq!(WcStatus::RnrRetryExcErr.value(), 13);
        assert_eq!(WcStatus::WrFlushErr.value(), 5);
        for s in WcStatus::ALL {
            assert_eq!(WcStatus::from_value(s.value()), Some(*s));
        }
        assert_eq!(NakCode::RemoteAccessError.requester_status(), Some(WcStatus::RemAccessErr));
        assert_eq!(NakCode::InvalidRequest.requester_status(), Some(WcStatus::RemInvReqErr));
        assert_eq!(NakCode::RemoteOperationalError.requester_status(), Some(WcStatus::RemOpErr));
        assert_eq!(NakCode::PsnSequenceError.requester_status(), None);
        assert_eq!(ResponderError::Length.nak_code(), NakCode::InvalidRequest);
    }
}
