//! `ucs_status_t` values (UCX 1.13 `ucs/type/status.h`) and the translation of droce errors.

use droce_transport::device::PostSendError;
use droce_transport::status::WcStatus;

pub type Status = i32;

pub const UCS_OK: Status = 0;
pub const UCS_INPROGRESS: Status = 1;
pub const UCS_ERR_NO_MESSAGE: Status = -1;
pub const UCS_ERR_NO_RESOURCE: Status = -2;
pub const UCS_ERR_IO_ERROR: Status = -3;
pub const UCS_ERR_NO_MEMORY: Status = -4;
pub const UCS_ERR_INVALID_PARAM: Status = -5;
pub const UCS_ERR_UNREACHABLE: Status = -6;
pub const UCS_ERR_INVALID_ADDR: Status = -7;
pub const UCS_ERR_NOT_IMPLEMENTED: Status = -8;
pub const UCS_ERR_MESSAGE_TRUNCATED: Status = -9;
pub const UCS_ERR_NO_PROGRESS: Status = -10;
pub const UCS_ERR_BUFFER_TOO_SMALL: Status = -11;
pub const UCS_ERR_NO_ELEM: Status = -12;
pub const UCS_ERR_SOME_CONNECTS_FAILED: Status = -13;
pub const UCS_ERR_NO_DEVICE: Status = -14;
pub const UCS_ERR_BUSY: Status = -15;
pub const UCS_ERR_CANCELED: Status = -16;
pub const UCS_ERR_SHMEM_SEGMENT: Status = -17;
pub const UCS_ERR_ALREADY_EXISTS: Status = -18;
pub const UCS_ERR_OUT_OF_RANGE: Status = -19;
pub const UCS_ERR_TIMED_OUT: Status = -20;
pub const UCS_ERR_EXCEEDS_LIMIT: Status = -21;
pub const UCS_ERR_UNSUPPORTED: Status = -22;
pub const UCS_ERR_REJECTED: Status = -23;
pub const UCS_ERR_NOT_CONNECTED: Status = -24;
pub const UCS_ERR_CONNECTION_RESET: Status = -25;
pub const UCS_ERR_ENDPOINT_TIMEOUT: Status = -80;

/// A failed work completion as the status UCX expects on the operation's completion.
pub fn from_wc(s: WcStatus) -> Status {
    match s {
        WcStatus::Success => UCS_OK,
        WcStatus::WrFlushErr => UCS_ERR_CANCELED,
        WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr => UCS_ERR_ENDPOINT_TIMEOUT,
        WcStatus::RemAccessErr | WcStatus::LocProtErr | WcStatus::LocAccessErr => UCS_ERR_INVALID_ADDR,
        WcStatus::RemInvReqErr | WcStatus::LocLenErr => UCS_ERR_MESSAGE_TRUNCATED,
        _ => UCS_ERR_IO_ERROR,
    }
}

/// A refused post: a full send queue is backpressure, the rest are caller errors.
pub fn from_post(e: PostSendError) -> Status {
    match e {
        PostSendError::QueueFull => UCS_ERR_NO_RESOURCE,
        PostSendError::InvalidState => UCS_ERR_NOT_CONNECTED,
        PostSendError::MessageTooLong | PostSendError::InlineTooLong => UCS_ERR_EXCEEDS_LIMIT,
        _ => UCS_ERR_INVALID_PARAM,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wc_errors_map_to_ucs() {
        assert_eq!(from_wc(WcStatus::Success), UCS_OK);
        assert_eq!(from_wc(WcStatus::RetryExcErr), UCS_ERR_ENDPOINT_TIMEOUT);
        assert_eq!(from_wc(WcStatus::WrFlushErr), UCS_ERR_CANCELED);
        assert_eq!(from_post(PostSendError::QueueFull), UCS_ERR_NO_RESOURCE);
    }
}
