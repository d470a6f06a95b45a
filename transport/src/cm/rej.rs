//! REJ, ConnectReject (attribute 0x0012; IBA 12.6.7, tables 108-109).
//!
//! CM byte offsets: 0 Local Communication ID(32), 4 Remote Communication ID(32),
//! 8 Message REJected(2) reserved(6), 9 Reject Info Length(7) reserved(1), 10 Reason(16),
//! 12 Additional Rejection Information (ARI, 72 bytes), 84 private data (148 bytes).
//!
//! rdma_cm puts the consumer's reject private data here with reason 28 (consumer defined);
//! a REQ to a service ID nobody listens on gets reason 8 (invalid service ID) from Linux.

use super::mra::MessageKind;
use super::H;

/// Size of REJ private data.
pub const PRIVATE_DATA_LEN: usize = 148;
/// Size of the ARI field; Reject Info Length says how much of it is meaningful.
pub const ARI_LEN: usize = 72;

/// REJ reason codes (IBA table 109; Linux `enum ib_cm_rej_reason`). Unknown codes are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RejectReason(pub u16);

impl RejectReason {
    pub const NO_QP: Self = Self(1);
    pub const NO_EEC: Self = Self(2);
    pub const NO_RESOURCES: Self = Self(3);
    pub const TIMEOUT: Self = Self(4);
    pub const UNSUPPORTED: Self = Self(5);
    pub const INVALID_COMM_ID: Self = Self(6);
    pub const INVALID_COMM_INSTANCE: Self = Self(7);
    pub const INVALID_SERVICE_ID: Self = Self(8);
    pub const INVALID_TRANSPORT_TYPE: Self = Self(9);
    pub const STALE_CONN: Self = Self(10);
    pub const RDC_NOT_EXIST: Self = Self(11);
    pub const INVALID_GID: Self = Self(12);
    pub const INVALID_LID: Self = Self(13);
    pub const INVALID_SL: Self = Self(14);
    pub const INVALID_TRAFFIC_CLASS: Self = Self(15);
    pub const INVALID_HOP_LIMIT: Self = Self(16);
    pub const INVALID_PACKET_RATE: Self = Self(17);
    pub const INVALID_ALT_GID: Self = Self(18);
    pub const INVALID_ALT_LID: Self = Self(19);
    pub const INVALID_ALT_SL: Self = Self(20);
    pub const INVALID_ALT_TRAFFIC_CLASS: Self = Self(21);
    pub const INVALID_ALT_HOP_LIMIT: Self = Self(22);
    pub const INVALID_ALT_PACKET_RATE: Self = Self(23);
    pub const PORT_CM_REDIRECT: Self = Self(24);
    pub const PORT_REDIRECT: Self = Self(25);
    pub const INVALID_MTU: Self = Self(26);
    pub const INSUFFICIENT_RESP_RESOURCES: Self = Self(27);
    pub const CONSUMER_DEFINED: Self = Self(28);
    pub const INVALID_RNR_RETRY: Self = Self(29);
    pub const DUPLICATE_LOCAL_COMM_ID: Self = Self(30);
    pub const INVALID_CLASS_VERSION: Self = Self(31);
    pub const INVALID_FLOW_LABEL: Self = Self(32);
    pub const INVALID_ALT_FLOW_LABEL: Self = Self(33);
    pub const VENDOR_OPTION_NOT_SUPPORTED: Self = Self(35);

    /// The IBA name of a known reason.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "no QP",
            2 => "no EEC",
            3 => "no resources",
            4 => "timeout",
            5 => "unsupported request",
            6 => "invalid communication ID",
            7 => "invalid communication instance",
            8 => "invalid service ID",
            9 => "invalid transport service type",
            10 => "stale connection",
            11 => "RDC does not exist",
            12 => "primary remote port GID rejected",
            13 => "primary remote port LID rejected",
            14 => "invalid primary SL",
            15 => "invalid primary traffic class",
            16 => "invalid primary hop limit",
            17 => "invalid primary packet rate",
            18 => "alternate remote port GID rejected",
            19 => "alternate remote port LID rejected",
            20 => "invalid alternate SL",
            21 => "invalid alternate traffic class",
            22 => "invalid alternate hop limit",
            23 => "invalid alternate packet rate",
            24 => "port and CM redirection",
            25 => "port redirection",
            26 => "invalid path MTU",
            27 => "insufficient responder resources",
            28 => "consumer defined",
            29 => "invalid RNR retry count",
            30 => "duplicate local communication ID",
            31 => "invalid class version",
            32 => "invalid primary flow label",
            33 => "invalid alternate flow label",
            35 => "vendor option not supported",
            _ => return None,
        })
    }
}

cm_view! {
    local_comm_id, set_local_comm_id: u32 => u32(H);
    /// Zero when rejecting a REQ whose sender is unknown (IBA 12.6.7).
    remote_comm_id, set_remote_comm_id: u32 => u32(H + 4);
    message_rejected, set_message_rejected: u8 => bits8(H + 8, 6, 2);
    reject_info_len, set_reject_info_len: u8 => bits8(H + 9, 1, 7);
    reason, set_reason: u16 => u16(H + 10);
    ari, set_ari: [u8; ARI_LEN] => bytes(H + 12, ARI_LEN);
    private_data, set_private_data: [u8; PRIVATE_DATA_LEN] => bytes(H + 84, PRIVATE_DATA_LEN);
}

/// A REJ as plain data. `ari` holds the whole field; `reject_info_len` (7 bits) how many of
/// its bytes carry information.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RejRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_rejected: MessageKind,
    pub reject_info_len: u8,
    pub reason: RejectReason,
    pub ari: [u8; ARI_LEN],
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl RejRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
        RejRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            message_rejected: MessageKind(p.message_rejected()),
            reject_info_len: p.reject_info_len(),
            reason: RejectReason(p.reason()),
            ari: p.ari(),
            private_data: p.private_data(),
        }
    }

    /// The meaningful part of the ARI (`reject_info_len` clamped to the field).
    pub fn ari_bytes(&self) -> &[u8] {
        &self.ari[..usize::from(self.reject_info_len).min(ARI_LEN)]
    }

    /// Writes the body; reserved bits become zero. The buffer must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.clear_body();
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_message_rejected(self.message_rejected.0);
        p.set_reject_info_len(self.reject_info_len);
        p.set_reason(self.reason.0);
        p.set_ari(self.ari);
        p.set_private_data(self.private_data);
    }
}
