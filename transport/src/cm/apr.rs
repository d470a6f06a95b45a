//! APR, AlternatePathResponse (attribute 0x001a; IBA 12.8.2, tables 116-117).
//!
//! CM byte offsets: 0 Local Communication ID(32), 4 Remote Communication ID(32),
//! 8 Additional Info Length(8), 9 AP Status(8), 10 reserved(16), 12 Additional Info (72 bytes),
//! 84 private data (148 bytes).

use super::H;

/// Size of APR private data.
pub const PRIVATE_DATA_LEN: usize = 148;
/// Size of the additional information field.
pub const INFO_LEN: usize = 72;

/// AP Status values (IBA table 117; Linux `enum ib_cm_apr_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ApStatus(pub u8);

impl ApStatus {
    pub const SUCCESS: Self = Self(0);
    pub const INVALID_COMM_ID: Self = Self(1);
    pub const UNSUPPORTED: Self = Self(2);
    pub const REJECT: Self = Self(3);
    pub const REDIRECT: Self = Self(4);
    pub const IS_CURRENT: Self = Self(5);
    pub const INVALID_QPN_EECN: Self = Self(6);
    pub const INVALID_LID: Self = Self(7);
    pub const INVALID_GID: Self = Self(8);
    pub const INVALID_FLOW_LABEL: Self = Self(9);
    pub const INVALID_TCLASS: Self = Self(10);
    pub const INVALID_HOP_LIMIT: Self = Self(11);
    pub const INVALID_PACKET_RATE: Self = Self(12);
    pub const INVALID_SL: Self = Self(13);
}

cm_view! {
    local_comm_id, set_local_comm_id: u32 => u32(H);
    remote_comm_id, set_remote_comm_id: u32 => u32(H + 4);
    info_len, set_info_len: u8 => u8(H + 8);
    ap_status, set_ap_status: u8 => u8(H + 9);
    info, set_info: [u8; INFO_LEN] => bytes(H + 12, INFO_LEN);
    private_data, set_private_data: [u8; PRIVATE_DATA_LEN] => bytes(H + 84, PRIVATE_DATA_LEN);
}

/// An APR as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AprRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub info_len: u8,
    pub ap_status: ApStatus,
    pub info: [u8; INFO_LEN],
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl AprRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
        AprRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            info_len: p.info_len(),
            ap_status: ApStatus(p.ap_status()),
            info: p.info(),
            private_data: p.private_data(),
        }
    }

    /// Writes the body; reserved bits become zero. The buffer must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.clear_body();
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_info_len(self.info_len);
        p.set_ap_status(self.ap_status.0);
        p.set_info(self.info);
        p.set_private_data(self.private_data);
    }
}
