//! DREP, DisconnectReply (attribute 0x0016; IBA 12.6.11, table 113). The answer to a DREQ;
//! its sender enters TimeWait.
//!
//! CM byte offsets: 0 Local Communication ID(32), 4 Remote Communication ID(32),
//! 8 private data (224 bytes).

use super::H;

/// Size of DREP private data.
pub const PRIVATE_DATA_LEN: usize = 224;

cm_view! {
    local_comm_id, set_local_comm_id: u32 => u32(H);
    remote_comm_id, set_remote_comm_id: u32 => u32(H + 4);
    private_data, set_private_data: [u8; PRIVATE_DATA_LEN] => bytes(H + 8, PRIVATE_DATA_LEN);
}

/// A DREP as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DrepRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl DrepRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
        DrepRepr {
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
