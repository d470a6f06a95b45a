//! RTU, ReadyToUse (attribute 0x0014; IBA 12.6.9, table 111). Sent by the active side after
//! a REP; the passive side moves its QP to RTS on it.
//!
//! CM byte offsets: 0 Local Communication ID(32), 4 Remote Communication ID(32),
//! 8 private data (224 bytes).

use super::H;

/// Size of RTU private data.
pub const PRIVATE_DATA_LEN: usize = 224;

cm_view! {
    local_comm_id, set_local_comm_id: u32 => u32(H);
    remote_comm_id, set_remote_comm_id: u32 => u32(H + 4);
    private_data, set_private_data: [u8; PRIVATE_DATA_LEN] => bytes(H + 8, PRIVATE_DATA_LEN);
}

/// An RTU as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RtuRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl RtuRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
        RtuRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            private_data: p.private_data(),
        }
    }

    /// Writes the body. The buffer must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.clear_body();
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_private_data(self.private_data);
    }
}
