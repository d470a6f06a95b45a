//! Reliable Connection service (IBA 9.7): the requester builds request packets from send
//! WQEs, the responder checks and executes requests, the completer turns responses into
//! completions. Each returns what should happen; the device applies it in one place.

pub mod completer;
pub(crate) mod reorder;
pub mod requester;
pub mod responder;

use crate::status::WcStatus;
use crate::types::{Psn, Qpn, Rkey};
use crate::verbs::{CqHandle, WorkCompletion};
use crate::wire::{AtomicEthRepr, ExtReprs, RethRepr};
use crate::wire::opcode::Opcode;

/// A request packet as the responder needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub opcode: Opcode,
    pub psn: Psn,
    pub ack_req: bool,
    pub solicited: bool,
    pub reth: Option<RethRepr>,
    pub atomic: Option<AtomicEthRepr>,
    pub immdt: Option<u32>,
    pub ieth: Option<Rkey>,
    pub payload: &'a [u8],
}

/// Where the payload of an outgoing packet comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Payload {
    None,
    /// Bytes `offset..offset+len` of the gather list (or inline copy) of send WQE `wqe`
    /// (an index into the send queue).
    SendWqe { wqe: usize, offset: u64, len: u32 },
    /// Bytes of local memory (READ responses).
    Memory { va: u64, len: u32 },
}

/// A packet a QP wants to send, before addressing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TxPkt {
    pub opcode: Opcode,
    pub psn: Psn,
    pub ack_req: bool,
    pub solicited: bool,
    pub dest_qp: Qpn,
    /// The extension headers (those the opcode carries are sent).
    pub ext: ExtReprs,
    pub payload: Payload,
}

impl TxPkt {
    pub fn new(opcode: Opcode, psn: Psn, dest_qp: Qpn) -> Self {
        TxPkt {
            opcode,
            psn,
            ack_req: false,
            solicited: false,
            dest_qp,
            ext: ExtReprs::default(),
            payload: Payload::None,
        }
    }
}

/// Side effects of handling a packet or timer, applied by the device.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    /// Completions to post: (cq, completion, solicited event).
    pub wcs: Vec<(CqHandle, WorkCompletion, bool)>,
    /// The QP must go to the error state (after the completions above).
    pub qp_error: bool,
    /// An SRQ crossed its limit.
    pub srq_limit: Option<crate::verbs::SrqHandle>,
    /// An error status for the async event of a QP error (for diagnostics).
    pub error_status: Option<WcStatus>,
}

/// Number of packets a message of `len` bytes takes at `mtu` (a zero-length message
/// still takes one packet).
pub(crate) fn packets_for(len: u64, mtu: u32) -> u32 {
    if len == 0 {
        1
    } else {
        len.div_ceil(mtu as u64).min(u32::MAX as u64) as u32
    }
}
