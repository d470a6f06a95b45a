//! REQ, ConnectRequest (attribute 0x0010; IBA 12.6.5, table 106). Sent by the active side.
//!
//! CM byte offsets (MAD offset = 24 + n):
//! ```text
//!   0: Local Communication ID(32)            4: reserved(32)
//!   8: ServiceID(64)                        16: Local CA GUID(64)
//!  24: reserved(32)                         28: Local Q_Key(32)
//!  32: Local QPN(24) Responder Resources(8)
//!  36: Local EECN(24) Initiator Depth(8)
//!  40: Remote EECN(24) Remote CM Response Timeout(5) Transport Service Type(2) E2E Flow Control(1)
//!  44: Starting PSN(24) Local CM Response Timeout(5) Retry Count(3)
//!  48: P_Key(16) Path MTU(4) RDC Exists(1) RNR Retry Count(3) Max CM Retries(4) SRQ(1) Ext Transport Type(3)
//!  52: primary path (44 bytes, see `path`)
//!  96: alternate path (44 bytes); byte 139 bit 5 (mask 0x04): SAP Supported
//! 140: private data (92 bytes)
//! ```

use super::path::{PathRepr, PATH_LEN};
use super::H;
use crate::types::{PKey, Psn, QKey, Qpn};

/// Size of REQ private data.
pub const PRIVATE_DATA_LEN: usize = 92;

const PRIMARY_PATH: usize = H + 52;
const ALTERNATE_PATH: usize = H + 96;
const PRIVATE_DATA: usize = H + 140;

/// Transport Service Type values (IBA table 106; 3 means "see Extended Transport Type").
pub mod transport_service_type {
    pub const RC: u8 = 0;
    pub const UC: u8 = 1;
    pub const RD: u8 = 2;
    pub const EXTENDED: u8 = 3;
}

/// Extended Transport Type values used with Transport Service Type 3.
pub mod extended_transport_type {
    pub const XRC: u8 = 1;
}

cm_view! {
    local_comm_id, set_local_comm_id: u32 => u32(H);
    service_id, set_service_id: u64 => u64(H + 8);
    local_ca_guid, set_local_ca_guid: u64 => u64(H + 16);
    local_qkey, set_local_qkey: u32 => u32(H + 28);
    local_qpn, set_local_qpn: u32 => bits32(H + 32, 8, 24);
    responder_resources, set_responder_resources: u8 => u8(H + 35);
    local_eecn, set_local_eecn: u32 => bits32(H + 36, 8, 24);
    initiator_depth, set_initiator_depth: u8 => u8(H + 39);
    remote_eecn, set_remote_eecn: u32 => bits32(H + 40, 8, 24);
    remote_cm_response_timeout, set_remote_cm_response_timeout: u8 => bits8(H + 43, 3, 5);
    transport_service_type, set_transport_service_type: u8 => bits8(H + 43, 1, 2);
    end_to_end_flow_control, set_end_to_end_flow_control: bool => flag(H + 43, 0);
    starting_psn, set_starting_psn: u32 => bits32(H + 44, 8, 24);
    local_cm_response_timeout, set_local_cm_response_timeout: u8 => bits8(H + 47, 3, 5);
    retry_count, set_retry_count: u8 => bits8(H + 47, 0, 3);
    pkey, set_pkey: u16 => u16(H + 48);
    /// IBA MTU code: 1 = 256, 2 = 512, 3 = 1024, 4 = 2048, 5 = 4096.
    path_mtu, set_path_mtu: u8 => bits8(H + 50, 4, 4);
    rdc_exists, set_rdc_exists: bool => flag(H + 50, 3);
    rnr_retry_count, set_rnr_retry_count: u8 => bits8(H + 50, 0, 3);
    max_cm_retries, set_max_cm_retries: u8 => bits8(H + 51, 4, 4);
    srq, set_srq: bool => flag(H + 51, 3);
    extended_transport_type, set_extended_transport_type: u8 => bits8(H + 51, 0, 3);
    sap_supported, set_sap_supported: bool => flag(H + 139, 2);
    private_data, set_private_data: [u8; PRIVATE_DATA_LEN] => bytes(PRIVATE_DATA, PRIVATE_DATA_LEN);
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn primary_path(&self) -> PathRepr {
        PathRepr::parse_at(self.buffer.as_ref(), PRIMARY_PATH)
    }

    /// `None` when the alternate path is all zero (no alternate path, always so on rxe).
    pub fn alternate_path(&self) -> Option<PathRepr> {
        let b = self.buffer.as_ref();
        if PathRepr::is_zero_at(b, ALTERNATE_PATH) {
            None
        } else {
            Some(PathRepr::parse_at(b, ALTERNATE_PATH))
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_primary_path(&mut self, p: &PathRepr) {
        p.emit_at(self.buffer.as_mut(), PRIMARY_PATH);
    }

    /// `None` zeroes the alternate path (SAP Supported is kept).
    pub fn set_alternate_path(&mut self, p: Option<&PathRepr>) {
        let b = self.buffer.as_mut();
        match p {
            Some(p) => p.emit_at(b, ALTERNATE_PATH),
            None => {
                b[ALTERNATE_PATH..ALTERNATE_PATH + PATH_LEN - 1].fill(0);
                b[ALTERNATE_PATH + PATH_LEN - 1] &= 0x07;
            }
        }
    }
}

/// A REQ as plain data. EECNs are 24 bits wide; timeouts are 5-bit
/// exponents (4.096 µs × 2^n).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReqRepr {
    pub local_comm_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: QKey,
    pub local_qpn: Qpn,
    pub responder_resources: u8,
    pub local_eecn: u32,
    pub initiator_depth: u8,
    pub remote_eecn: u32,
    pub remote_cm_response_timeout: u8,
    pub transport_service_type: u8,
    pub end_to_end_flow_control: bool,
    pub starting_psn: Psn,
    pub local_cm_response_timeout: u8,
    pub retry_count: u8,
    pub pkey: PKey,
    pub path_mtu: u8,
    pub rdc_exists: bool,
    pub rnr_retry_count: u8,
    pub max_cm_retries: u8,
    pub srq: bool,
    pub extended_transport_type: u8,
    pub primary_path: PathRepr,
    pub alternate_path: Option<PathRepr>,
    pub sap_supported: bool,
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl ReqRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
        ReqRepr {
            local_comm_id: p.local_comm_id(),
            service_id: p.service_id(),
            local_ca_guid: p.local_ca_guid(),
            local_qkey: QKey(p.local_qkey()),
            local_qpn: Qpn::new(p.local_qpn()),
            responder_resources: p.responder_resources(),
            local_eecn: p.local_eecn(),
            initiator_depth: p.initiator_depth(),
            remote_eecn: p.remote_eecn(),
            remote_cm_response_timeout: p.remote_cm_response_timeout(),
            transport_service_type: p.transport_service_type(),
            end_to_end_flow_control: p.end_to_end_flow_control(),
            starting_psn: Psn::new(p.starting_psn()),
            local_cm_response_timeout: p.local_cm_response_timeout(),
            retry_count: p.retry_count(),
            pkey: PKey(p.pkey()),
            path_mtu: p.path_mtu(),
            rdc_exists: p.rdc_exists(),
            rnr_retry_count: p.rnr_retry_count(),
            max_cm_retries: p.max_cm_retries(),
            srq: p.srq(),
            extended_transport_type: p.extended_transport_type(),
            primary_path: p.primary_path(),
            alternate_path: p.alternate_path(),
            sap_supported: p.sap_supported(),
            private_data: p.private_data(),
        }
    }

    /// Writes the body; reserved bits become zero. The buffer must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.clear_body();
        p.set_local_comm_id(self.local_comm_id);
        p.set_service_id(self.service_id);
        p.set_local_ca_guid(self.local_ca_guid);
        p.set_local_qkey(self.local_qkey.0);
        p.set_local_qpn(self.local_qpn.value());
        p.set_responder_resources(self.responder_resources);
        p.set_local_eecn(self.local_eecn);
        p.set_initiator_depth(self.initiator_depth);
        p.set_remote_eecn(self.remote_eecn);
        p.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        p.set_transport_service_type(self.transport_service_type);
        p.set_end_to_end_flow_control(self.end_to_end_flow_control);
        p.set_starting_psn(self.starting_psn.value());
        p.set_local_cm_response_timeout(self.local_cm_response_timeout);
        p.set_retry_count(self.retry_count);
        p.set_pkey(self.pkey.0);
        p.set_path_mtu(self.path_mtu);
        p.set_rdc_exists(self.rdc_exists);
        p.set_rnr_retry_count(self.rnr_retry_count);
        p.set_max_cm_retries(self.max_cm_retries);
        p.set_srq(self.srq);
        p.set_extended_transport_type(self.extended_transport_type);
        p.set_primary_path(&self.primary_path);
        p.set_alternate_path(self.alternate_path.as_ref());
        p.set_sap_supported(self.sap_supported);
        p.set_private_data(self.private_data);
    }
}
