//! DREQ, DisconnectRequest (attribute 0x0015; IBA 12.6.10, table 112).
//!
//! CM byte offsets: 0 Local Communication ID(32), 4 Remote Communication ID(32),
//! 8 Remote QPN/EECN(24) reserved(8), 12 private data (220 bytes).

use super::H;
use crate::types::Qpn;

/// Size of DREQ private data.
pub const PRIVATE_DATA_LEN: usize = 220;

cm_view! {
    local_comm_id, set_local_comm_id: u32 => u32(H);
    remote_comm_id, set_remote_comm_id: u32 => u32(H + 4);
    /// The QPN of the peer (the receiver of this DREQ).
    remote_qpn, set_remote_qpn: u32 => bits32(H + 8, 8, 24);
    private_data, set_private_data: [u8; PRIVATE_DATA_LEN] => bytes(H + 12, PRIVATE_DATA_LEN);
}

/// A DREQ as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DreqRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub remote_qpn: Qpn,
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl DreqRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
        DreqRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            remote_qpn: Qpn::new(p.remote_qpn()),
            private_data: p.private_data(),
        }
    }

    /// Writes the body; reserved bits become zero. The buffer must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.clear_body();
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_remote_qpn(self.remote_qpn.value());
        p.set_private_data(self.private_data);
    }
}
