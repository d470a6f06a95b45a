//! LAP, LoadAlternatePath (attribute 0x0019; IBA 12.8.1, table 115). Not used by rxe (no
//! alternate paths on RoCE); kept so that a LAP can be parsed and answered with an APR.
//!
//! CM byte offsets:
//! ```text
//!  0: Local Communication ID(32)        4: Remote Communication ID(32)
//!  8: reserved(32)                     12: Remote QPN/EECN(24) Remote CM Response Timeout(5) reserved(3)
//! 16: reserved(32)                     20: Alternate Local Port LID(16) Alternate Remote Port LID(16)
//! 24: Alternate Local Port GID(128)    40: Alternate Remote Port GID(128)
//! 56: Alternate Flow Label(20) reserved(4) Alternate Traffic Class(8)
//! 60: Alternate Hop Limit(8) reserved(2) Alternate Packet Rate(6)
//!     Alternate SL(4) Alternate Subnet Local(1) reserved(3) Alternate Local ACK Timeout(5) reserved(3)
//! 64: private data (168 bytes)
//! ```

use super::path::PathRepr;
use super::H;
use crate::types::Qpn;

/// Size of LAP private data.
pub const PRIVATE_DATA_LEN: usize = 168;

cm_view! {
    local_comm_id, set_local_comm_id: u32 => u32(H);
    remote_comm_id, set_remote_comm_id: u32 => u32(H + 4);
    remote_qpn, set_remote_qpn: u32 => bits32(H + 12, 8, 24);
    remote_cm_response_timeout, set_remote_cm_response_timeout: u8 => bits8(H + 15, 3, 5);
    alt_local_lid, set_alt_local_lid: u16 => u16(H + 20);
    alt_remote_lid, set_alt_remote_lid: u16 => u16(H + 22);
    alt_local_gid, set_alt_local_gid: crate::types::Gid => gid(H + 24);
    alt_remote_gid, set_alt_remote_gid: crate::types::Gid => gid(H + 40);
    alt_flow_label, set_alt_flow_label: u32 => bits32(H + 56, 12, 20);
    alt_traffic_class, set_alt_traffic_class: u8 => u8(H + 59);
    alt_hop_limit, set_alt_hop_limit: u8 => u8(H + 60);
    alt_packet_rate, set_alt_packet_rate: u8 => bits8(H + 61, 0, 6);
    alt_sl, set_alt_sl: u8 => bits8(H + 62, 4, 4);
    alt_subnet_local, set_alt_subnet_local: bool => flag(H + 62, 3);
    alt_local_ack_timeout, set_alt_local_ack_timeout: u8 => bits8(H + 63, 3, 5);
    private_data, set_private_data: [u8; PRIVATE_DATA_LEN] => bytes(H + 64, PRIVATE_DATA_LEN);
}

/// A LAP as plain data; the alternate path uses the REQ path record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LapRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub remote_qpn: Qpn,
    pub remote_cm_response_timeout: u8,
    pub alternate_path: PathRepr,
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl LapRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
        LapRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            remote_qpn: Qpn::new(p.remote_qpn()),
            remote_cm_response_timeout: p.remote_cm_response_timeout(),
            alternate_path: PathRepr {
                local_lid: p.alt_local_lid(),
                remote_lid: p.alt_remote_lid(),
                local_gid: p.alt_local_gid(),
                remote_gid: p.alt_remote_gid(),
                flow_label: p.alt_flow_label(),
                packet_rate: p.alt_packet_rate(),
                traffic_class: p.alt_traffic_class(),
                hop_limit: p.alt_hop_limit(),
                sl: p.alt_sl(),
                subnet_local: p.alt_subnet_local(),
                local_ack_timeout: p.alt_local_ack_timeout(),
            },
            private_data: p.private_data(),
        }
    }

    /// Writes the body; reserved bits become zero. The buffer must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        let a = &self.alternate_path;
        p.clear_body();
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_remote_qpn(self.remote_qpn.value());
        p.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        p.set_alt_local_lid(a.local_lid);
        p.set_alt_remote_lid(a.remote_lid);
        p.set_alt_local_gid(a.local_gid);
        p.set_alt_remote_gid(a.remote_gid);
        p.set_alt_flow_label(a.flow_label);
        p.set_alt_traffic_class(a.traffic_class);
        p.set_alt_hop_limit(a.hop_limit);
        p.set_alt_packet_rate(a.packet_rate);
        p.set_alt_sl(a.sl);
        p.set_alt_subnet_local(a.subnet_local);
        p.set_alt_local_ack_timeout(a.local_ack_timeout);
        p.set_private_data(self.private_data);
    }
}
