//! What the agent tells its user and what the user offers: connection ids, connect
//! parameters, events, errors and counters.

use std::fmt;
use std::net::SocketAddr;

use crate::cm::rej::RejectReason;
use crate::cm::ConnParams;
use crate::types::Qpn;

/// The connection parameters an application offers (rdma_cm `rdma_conn_param`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectParams {
    /// Consumer private data (≤ 56 bytes in a REQ, ≤ 196 in a REP; more is cut).
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// Offer droce's selective repeat (docs/selective-repeat.md) to a droce consumer that
    /// offers it too: a trailer in the last bytes of the private data field (`ext`), when the
    /// consumer's data leaves them free; the QP gets `QpAttr::selective_repeat` only when both
    /// sides offered. Default off: the REQ and REP are those of before, byte for byte.
    pub selective_repeat: bool,
}

impl ConnectParams {
    /// rping's `conn_param`: 1 READ each way, retry 7, RNR retry 7.
    pub fn rping() -> Self {
        ConnectParams { private_data: Vec::new(), responder_resources: 1, initiator_depth: 1, retry_count: 7, rnr_retry_count: 7, selective_repeat: false }
    }
}

/// Names one connection (or one connect request) of the agent; never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u32);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn{}", self.0)
    }
}

/// What the application must know about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmAgentEvent {
    /// A REQ for a listened service: answer with `accept` or `reject`.
    ConnectRequest {
        id: ConnId,
        /// The peer's address and port from the rdma_cm header (the GID's address and 0
        /// when the REQ carries no rdma_cm header).
        src: SocketAddr,
        dst: SocketAddr,
        private_data: Vec<u8>,
        responder_resources: u8,
        initiator_depth: u8,
        peer_qpn: Qpn,
    },
    /// The QP is in RTS (active side: before the RTU leaves; passive: the RTU arrived).
    /// `private_data`: the REP's (the acceptor's private data; 196 bytes, zero padded).
    Established { id: ConnId, params: ConnParams, private_data: Vec<u8> },
    /// The peer refused (REJ); the QP is in ERROR.
    Rejected { id: ConnId, reason: RejectReason, private_data: Vec<u8> },
    /// DREQ or DREP: the QP is in ERROR.
    Disconnected { id: ConnId },
    /// No answer after every CM retry; the QP is in ERROR.
    TimedOut { id: ConnId },
}

impl CmAgentEvent {
    pub fn id(&self) -> ConnId {
        match self {
            CmAgentEvent::ConnectRequest { id, .. }
            | CmAgentEvent::Established { id, .. }
            | CmAgentEvent::Rejected { id, .. }
            | CmAgentEvent::Disconnected { id }
            | CmAgentEvent::TimedOut { id } => *id,
        }
    }
}

/// Why a CM call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmAgentError {
    /// QP1 or its resources could not be created (already taken, no memory, ...).
    Setup(String),
    /// Unknown or already finished connection, or a call in the wrong state.
    InvalidConn,
    /// The QP is not an RC QP in RESET or INIT, or a transition failed.
    Qp(String),
    /// The destination address has no matching local GID (IPv4 vs IPv6).
    NoLocalAddress,
}

impl fmt::Display for CmAgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmAgentError::Setup(s) => write!(f, "GSI setup failed: {s}"),
            CmAgentError::InvalidConn => f.write_str("no such connection in this state"),
            CmAgentError::Qp(s) => write!(f, "QP: {s}"),
            CmAgentError::NoLocalAddress => f.write_str("no local address of the destination's family"),
        }
    }
}

impl std::error::Error for CmAgentError {}

/// Counters of the agent (the endpoint has its own, see `CmAgent::endpoint`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmAgentCounters {
    pub mads_rx: u64,
    pub mads_tx: u64,
    /// Received on QP1 but not a CM MAD we understand (other classes, truncated, ...).
    pub bad_mads: u64,
    /// MADs that could not be posted (all send slots busy, or post_send failed): the CM
    /// retransmits.
    pub tx_dropped: u64,
    /// QP transitions that failed (the connection is then reported as an error/reject).
    pub qp_errors: u64,
}
