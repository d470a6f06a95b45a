//! Queue pairs: common state, the per-QP requester/completer/responder state of RC, and
//! the attribute application of modify_qp.

pub mod attr;
pub mod state;

pub use attr::{PathMtu, QpAttr, QpAttrMask};
pub use state::{QpState, QpType};

use crate::rc::completer::Completer;
use crate::rc::requester::Requester;
use crate::rc::responder::Responder;
use crate::timer::TimerTable;
use crate::types::{PKey, Qpn};
use crate::verbs::{CqHandle, PdHandle, RecvWqe, SrqHandle};
use std::collections::VecDeque;

/// Handle of a queue pair (its slab index; the QP number is `query_qp().qp_num`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpHandle(pub u32);

/// Queue capacities (IBA 11.2.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 8, max_recv_sge: 8, max_inline_data: 256 }
    }
}

/// Arguments of create_qp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    pub qp_type: QpType,
    pub pd: PdHandle,
    pub send_cq: CqHandle,
    pub recv_cq: CqHandle,
    pub srq: Option<SrqHandle>,
    pub cap: QpCap,
    /// Every send WQE generates a completion (ibv `sq_sig_all`).
    pub sq_sig_all: bool,
}

/// What query_qp returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    pub qp_num: Qpn,
    pub qp_type: QpType,
    pub attr: QpAttr,
    pub cap: QpCap,
    pub udp_sport: u16,
}

#[derive(Debug)]
pub(crate) struct Qp {
    pub qpn: Qpn,
    pub init: QpInitAttr,
    pub attr: QpAttr,
    pub state: QpState,
    pub pkey: PKey,
    pub udp_sport: u16,
    pub rq: VecDeque<RecvWqe>,
    pub req: Requester,
    pub comp: Completer,
    pub resp: Responder,
    pub timers: TimerTable,
    /// Earliest deadline this QP has in the device's timer heap.
    pub scheduled: Option<crate::time::Instant>,
    /// Queued in the device's transmit round robin.
    pub in_ready: bool,
    /// An SQ drained event is owed (SQD entered with en_sqd_async_notify).
    pub sqd_notify: bool,
    /// Outer headers of the last path this QP sent on (RC: its one path; UD: the last
    /// destination), rebuilt when the address vector or UDP source port differs.
    pub tx_hdr: Option<TxHeader>,
    /// ECN notification point and DCQCN reaction point.
    pub cc: crate::cc::QpCc,
}

/// A [`HeaderTemplate`](crate::wire::HeaderTemplate) and the path it was made for.
#[derive(Debug, Clone)]
pub(crate) struct TxHeader {
    pub av: crate::verbs::AddressVector,
    pub sport: u16,
    pub tpl: crate::wire::HeaderTemplate,
    /// The ICRC state after the last split frame's headers on this path (made afresh with
    /// the template, whose bytes it assumes).
    pub icrc: crate::wire::icrc_delta::HeaderCrc,
}

impl Qp {
    pub fn new(qpn: Qpn, init: QpInitAttr) -> Self {
        let udp_sport = attr::default_udp_sport(qpn);
        Qp {
            qpn,
            init,
            attr: QpAttr::default(),
            state: QpState::Reset,
            pkey: PKey::DEFAULT,
            udp_sport,
            rq: VecDeque::new(),
            req: Requester::default(),
            comp: Completer::default(),
            resp: Responder::default(),
            timers: TimerTable::default(),
            scheduled: None,
            in_ready: false,
            sqd_notify: false,
            tx_hdr: None,
            cc: crate::cc::QpCc::default(),
        }
    }

    pub fn mtu(&self) -> u32 {
        self.attr.path_mtu.bytes()
    }

    /// Bring the QP back to its just-created state (transition to RESET, IBA 10.3.1.1).
    pub fn reset(&mut self) {
        let (qpn, init) = (self.qpn, self.init);
        let ready = self.in_ready;
        let sched = self.scheduled;
        *self = Qp::new(qpn, init);
        // Device bookkeeping survives: it points at the device's heap and ready list.
        self.in_ready = ready;
        self.scheduled = sched;
    }
}
