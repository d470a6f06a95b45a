//! REP, ConnectReply (attribute 0x0013; IBA 12.6.8, table 110). Sent by the passive side.
//!
//! CM byte offsets (MAD offset = 24 + n):
//! ```text
//!   0: Local Communication ID(32)      4: Remote Communication ID(32)
//!   8: Local Q_Key(32)                12: Local QPN(24) reserved(8)
//!  16: Local EE Context Number(24) reserved(8)
//!  20: Starting PSN(24) reserved(8)
//!  24: Responder Resources(8) Initiator Depth(8)
//!      Target ACK Delay(5) Failover Accepted(2) E2E Flow Control(1) RNR Retry Count(3) SRQ(1) reserved(4)
//!  28: Local CA GUID(64)
//!  36: private data (196 bytes)
//! ```

use super::H;
use crate::types::{Psn, QKey, Qpn};

/// Size of REP private data.
pub const PRIVATE_DATA_LEN: usize = 196;

cm_view! {
    local_comm_id, set_local_comm_id: u32 => u32(H);
    remote_comm_id, set_remote_comm_id: u32 => u32(H + 4);
    local_qkey, set_local_qkey: u32 => u32(H + 8);
    local_qpn, set_local_qpn: u32 => bits32(H + 12, 8, 24);
    local_eecn, set_local_eecn: u32 => bits32(H + 16, 8, 24);
    starting_psn, set_starting_psn: u32 => bits32(H + 20, 8, 24);
    responder_resources, set_responder_resources: u8 => u8(H + 24);
    initiator_depth, set_initiator_depth: u8 => u8(H + 25);
    target_ack_delay, set_target_ack_delay: u8 => bits8(H + 26, 3, 5);
    /// 0 accepted, 1 alternate path rejected, 2 not supported.
    failover_accepted, set_failover_accepted: u8 => bits8(H + 26, 1, 2);
    end_to_end_flow_control, set_end_to_end_flow_control: bool => flag(H + 26, 0);
    rnr_retry_count, set_rnr_retry_count: u8 => bits8(H + 27, 5, 3);
    srq, set_srq: bool => flag(H + 27, 4);
    local_ca_guid, set_local_ca_guid: u64 => u64(H + 28);
    private_data, set_private_data: [u8; PRIVATE_DATA_LEN] => bytes(H + 36, PRIVATE_DATA_LEN);
}

/// A REP as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: QKey,
    pub local_qpn: Qpn,
    pub local_eecn: u32,
    pub starting_psn: Psn,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl RepRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
        RepRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            local_qkey: QKey(p.local_qkey()),
            local_qpn: Qpn::new(p.local_qpn()),
            local_eecn: p.local_eecn(),
            starting_psn: Psn::new(p.starting_psn()),
            responder_resources: p.responder_resources(),
            initiator_depth: p.initiator_depth(),
            target_ack_delay: p.target_ack_delay(),
            failover_accepted: p.failover_accepted(),
            end_to_end_flow_control: p.end_to_end_flow_control(),
            rnr_retry_count: p.rnr_retry_count(),
            srq: p.srq(),
            local_ca_guid: p.local_ca_guid(),
            private_data: p.private_data(),
        }
    }

    /// Writes the body; reserved bits become zero. The buffer must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.clear_body();
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_local_qkey(self.local_qkey.0);
        p.set_local_qpn(self.local_qpn.value());
        p.set_local_eecn(self.local_eecn);
        p.set_starting_psn(self.starting_psn.value());
        p.set_responder_resources(self.responder_resources);
        p.set_initiator_depth(self.initiator_depth);
        p.set_target_ack_delay(self.target_ack_delay);
        p.set_failover_accepted(self.failover_accepted);
        p.set_end_to_end_flow_control(self.end_to_end_flow_control);
        p.set_rnr_retry_count(self.rnr_retry_count);
        p.set_srq(self.srq);
        p.set_local_ca_guid(self.local_ca_guid);
        p.set_private_data(self.private_data);
    }
}
