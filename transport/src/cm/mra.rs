//! MRA, MessageReceiptAcknowledgement (attribute 0x0011; IBA 12.6.6, table 107): "I got your
//! REQ/REP/LAP, give me longer"; the receiver extends its timeout by the service timeout.
//!
//! CM byte offsets: 0 Local Communication ID(32), 4 Remote Communication ID(32),
//! 8 Message MRAed(2) reserved(6), 9 Service Timeout(5) reserved(3),
//! 10 private data (222 bytes).

use super::H;

/// Size of MRA private data.
pub const PRIVATE_DATA_LEN: usize = 222;

/// Which message an MRA or a REJ refers to (IBA tables 107 and 108).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageKind(pub u8);

impl MessageKind {
    pub const REQ: MessageKind = MessageKind(0);
    pub const REP: MessageKind = MessageKind(1);
    /// LAP for an MRA; "other" (no REQ/REP) for a REJ.
    pub const OTHER: MessageKind = MessageKind(2);
}

cm_view! {
    local_comm_id, set_local_comm_id: u32 => u32(H);
    remote_comm_id, set_remote_comm_id: u32 => u32(H + 4);
    message_mraed, set_message_mraed: u8 => bits8(H + 8, 6, 2);
    /// 5-bit exponent: 4.096 µs × 2^n.
    service_timeout, set_service_timeout: u8 => bits8(H + 9, 3, 5);
    private_data, set_private_data: [u8; PRIVATE_DATA_LEN] => bytes(H + 10, PRIVATE_DATA_LEN);
}

/// An MRA as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MraRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_mraed: MessageKind,
    pub service_timeout: u8,
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl MraRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
        MraRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            message_mraed: MessageKind(p.message_mraed()),
            service_timeout: p.service_timeout(),
            private_data: p.private_data(),
        }
    }

    /// Writes the body; reserved bits become zero. The buffer must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.clear_body();
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_message_mraed(self.message_mraed.0);
        p.set_service_timeout(self.service_timeout);
        p.set_private_data(self.private_data);
    }
}
