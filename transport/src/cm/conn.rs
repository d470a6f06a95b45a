//! One IB CM connection, sans-IO (IBA vol 1, 12.9 state diagrams; Linux `cm.c` behaviour).
//!
//! The caller builds the REQ (active side) or the REP (passive side) as records, and the
//! connection does the rest: it matches incoming MADs, answers (RTU, DREP), retransmits on
//! timeout, honours MRA, and reports what the QP must do through [`CmEvent`]s.
//!
//! Driving it, quinn-proto style:
//! * [`Connection::handle_mad`] with every CM MAD addressed to it ([`Connection::matches`]
//!   tells; demultiplexing several connections is the caller's job);
//! * [`Connection::poll_transmit`] until `None`, sending each MAD as a UD SEND to the peer's
//!   QP1 with Q_Key [`super::GSI_QKEY`];
//! * [`Connection::poll_timeout`] / [`Connection::handle_timeout`] for retransmissions and
//!   TimeWait;
//! * [`Connection::poll_event`] for `Established` (move the QP to RTR/RTS with
//!   [`ConnParams`]), `Disconnected` (move it to error), `Rejected`, `TimedOut`.
//!
//! Order matters for the QP: the active side applies `Established` (RTR, RTS) before it sends
//! the RTU queued by the same `handle_mad` call; the passive side programs its QP from
//! [`Connection::params`] right after [`Connection::accept`], before the REP goes out.
//!
//! PSN direction follows Linux `cm.c` (checked on rxe's wire, see `tests/cm_golden.rs`): the
//! REQ's starting PSN is the one the passive side sends with, the REP's the one the active
//! side sends with.

use std::collections::VecDeque;

use super::mra::MessageKind;
use super::path::PathRepr;
use super::rej::{RejRepr, RejectReason};
use super::rep::RepRepr;
use super::req::ReqRepr;
use super::{drep, dreq, rej, rtu, CmMad, CmMessage};
use crate::time::{Duration, Instant};
use crate::types::{Psn, Qpn};

/// 4.096 µs × 2^`exp`: IBA's encoding of CM response timeouts, packet life times and ACK
/// timeouts (exponents above 31 are clamped to 31).
pub const fn timeout_exp(exp: u8) -> Duration {
    let e = if exp > 31 { 31 } else { exp };
    Duration::from_nanos(4096u64 << e)
}

/// Knobs of the local CM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// Packet life time exponent of the path. Linux 6.1 rdma_cm uses 18 on RoCE
    /// (`CMA_IBOE_PACKET_LIFETIME`), which gives the REQ's local ACK timeout 19.
    pub packet_life_time: u8,
    /// How long TimeWait lasts before the QP number may be reused.
    pub time_wait: Duration,
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig {
            packet_life_time: 18,
            time_wait: timeout_exp(18 + 1),
        }
    }
}

/// Which side of the connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Sent the REQ.
    Active,
    /// Answered a REQ with a REP.
    Passive,
}

/// Connection states (IBA figure 160, reduced to what a REQ/REP/RTU + DREQ/DREP peer needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmState {
    /// Active: REQ sent, waiting for REP (an MRA only moves the deadline).
    ReqSent,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// Disconnected; stray DREQs are still answered until the timer ends.
    TimeWait,
    /// Finished: rejected, timed out, or TimeWait over.
    Closed,
}

/// What the QP needs from the CM exchange, from this side's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnParams {
    pub remote_qpn: Qpn,
    /// PSN of this side's first request (QP attribute `sq_psn`).
    pub sq_psn: Psn,
    /// PSN this side expects first (QP attribute `rq_psn`).
    pub rq_psn: Psn,
    /// IBA MTU code (3 = 1024).
    pub path_mtu: u8,
    pub retry_count: u8,
    /// RNR retries for this side's requests: the number the *peer* asked for.
    pub rnr_retry_count: u8,
    /// Outstanding RDMA READ/atomic this side may issue (`max_rd_atomic`).
    pub initiator_depth: u8,
    /// Outstanding RDMA READ/atomic this side accepts (`max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// Local ACK timeout exponent for the QP (`timeout`).
    pub ack_timeout: u8,
    /// Primary path seen from this side: `local_gid` is ours, `remote_gid` the peer's.
    pub path: PathRepr,
    pub remote_ca_guid: u64,
    pub remote_comm_id: u32,
}

/// What happened, for the owner of the QP.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CmEvent {
    /// The connection is up: move the QP to RTR and RTS with these parameters.
    Established(ConnParams),
    /// The peer refused (or gave up on) the connection.
    Rejected {
        reason: RejectReason,
        private_data: [u8; rej::PRIVATE_DATA_LEN],
    },
    /// REQ or REP unanswered after every retry; a REJ (timeout) went out for a REP.
    TimedOut,
    /// DREQ received or DREP received (or our DREQ unanswered): move the QP to error.
    Disconnected,
    /// TimeWait is over; the QP may be reused.
    TimeWaitExit,
}

/// Why [`Connection::handle_mad`] did nothing with a MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ignored {
    /// Not addressed to this connection (communication IDs differ).
    NotOurs,
    /// Ours, but not expected in the current state (a late duplicate, a stray RTU, ...).
    UnexpectedInState(CmState),
}

/// One CM connection.
#[derive(Debug, Clone)]
pub struct Connection {
    role: Role,
    state: CmState,
    config: CmConfig,
    transaction_id: u64,
    local_comm_id: u32,
    remote_comm_id: u32,
    req: ReqRepr,
    rep: Option<RepRepr>,
    /// The last REQ/REP/DREQ, resent on timeout.
    resend: Option<CmMad>,
    /// TID of a DREQ this side starts (Linux `cm_form_tid`: the sender's own TID).
    dreq_tid: u64,
    retries_left: u8,
    deadline: Option<Instant>,
    /// Replayed when a duplicate of the peer's last message shows up (RTU for a REP, DREP for
    /// a DREQ).
    last_answer: Option<CmMad>,
    params: Option<ConnParams>,
    outbox: VecDeque<CmMad>,
    events: VecDeque<CmEvent>,
}

impl Connection {
    /// Active side: sends `req` (its `local_comm_id` names this connection) under
    /// `transaction_id`. Retries: `req.max_cm_retries`; each wait
    /// 2 × packet life time + `req.remote_cm_response_timeout`.
    pub fn connect(now: Instant, config: CmConfig, transaction_id: u64, req: ReqRepr) -> Self {
        let mut c = Connection {
            role: Role::Active,
            state: CmState::ReqSent,
            config,
            transaction_id,
            dreq_tid: transaction_id,
            local_comm_id: req.local_comm_id,
            remote_comm_id: 0,
            retries_left: req.max_cm_retries,
            req,
            rep: None,
            resend: None,
            deadline: None,
            last_answer: None,
            params: None,
            outbox: VecDeque::new(),
            events: VecDeque::new(),
        };
        let req = CmMessage::Req(c.req.clone());
        let req = CmMad::new(c.transaction_id, req);
        c.send_with_retry(now, req, c.req_wait());
        c
    }

    /// Passive side: accepts the REQ that arrived under `transaction_id` by sending `rep`
    /// (build it with [`RepRepr::accepting`]). Waits for the RTU as long as the REQ's
    /// `local_cm_response_timeout` says (Linux `cm_req_handler`: no packet life time added),
    /// `req.max_cm_retries` times.
    pub fn accept(
        now: Instant,
        config: CmConfig,
        transaction_id: u64,
        req: &ReqRepr,
        rep: RepRepr,
    ) -> Self {
        let mut c = Connection {
            role: Role::Passive,
            state: CmState::RepSent,
            config,
            transaction_id,
            dreq_tid: transaction_id,
            local_comm_id: rep.local_comm_id,
            remote_comm_id: req.local_comm_id,
            retries_left: req.max_cm_retries,
            req: req.clone(),
            rep: Some(rep.clone()),
            resend: None,
            deadline: None,
            last_answer: None,
            params: None,
            outbox: VecDeque::new(),
            events: VecDeque::new(),
        };
        c.params = c.compute_params();
        let wait = timeout_exp(c.req.local_cm_response_timeout);
        let rep = CmMad::new(c.transaction_id, CmMessage::Rep(rep));
        c.send_with_retry(now, rep, wait);
        c
    }

    pub const fn role(&self) -> Role {
        self.role
    }
    pub const fn state(&self) -> CmState {
        self.state
    }
    pub const fn local_comm_id(&self) -> u32 {
        self.local_comm_id
    }
    /// Zero until the REP arrives (active side).
    pub const fn remote_comm_id(&self) -> u32 {
        self.remote_comm_id
    }
    pub const fn transaction_id(&self) -> u64 {
        self.transaction_id
    }

    /// The TID a DREQ from this side will carry. Linux forms it from the sender's own ID, so
    /// on the active side it equals the REQ's TID; a passive side should set its own (the
    /// default is the REQ's TID, which Linux accepts too: DREQs are matched by comm ID).
    pub fn set_dreq_transaction_id(&mut self, tid: u64) {
        self.dreq_tid = tid;
    }
    /// The negotiated parameters: on the passive side from [`Self::accept`] on (program the
    /// QP to RTR and RTS with them before the REP leaves, as Linux `cma_accept_ib` does), on
    /// the active side from the REP on.
    pub const fn params(&self) -> Option<&ConnParams> {
        self.params.as_ref()
    }

    /// The REP: received (active side, from the REP on) or sent (passive side); its private
    /// data is what rdma_cm reports with the ESTABLISHED event.
    pub const fn rep(&self) -> Option<&RepRepr> {
        self.rep.as_ref()
    }

    /// True if `mad` belongs to this connection: its remote communication ID is ours, or it
    /// is a duplicate of the peer's REQ.
    pub fn matches(&self, mad: &CmMad) -> bool {
        match &mad.message {
            CmMessage::Req(r) => {
                self.role == Role::Passive && r.local_comm_id == self.remote_comm_id
            }
            CmMessage::Rep(r) => r.remote_comm_id == self.local_comm_id,
            CmMessage::Rtu(r) => r.remote_comm_id == self.local_comm_id,
            CmMessage::Mra(r) => r.remote_comm_id == self.local_comm_id,
            CmMessage::Rej(r) => r.remote_comm_id == self.local_comm_id,
            CmMessage::Dreq(r) => r.remote_comm_id == self.local_comm_id,
            CmMessage::Drep(r) => r.remote_comm_id == self.local_comm_id,
            CmMessage::Lap(r) => r.remote_comm_id == self.local_comm_id,
            CmMessage::Apr(r) => r.remote_comm_id == self.local_comm_id,
            CmMessage::SidrReq(_) | CmMessage::SidrRep(_) => false,
        }
    }

    /// Feeds one received CM MAD.
    pub fn handle_mad(&mut self, now: Instant, mad: &CmMad) -> Result<(), Ignored> {
        if !self.matches(mad) {
            return Err(Ignored::NotOurs);
        }
        let unexpected = Err(Ignored::UnexpectedInState(self.state));
        match (&mad.message, self.state) {
            (CmMessage::Rep(rep), CmState::ReqSent) if self.role == Role::Active => {
                self.remote_comm_id = rep.local_comm_id;
                self.rep = Some(rep.clone());
                let rtu = CmMessage::Rtu(rtu::RtuRepr {
                    local_comm_id: self.local_comm_id,
                    remote_comm_id: self.remote_comm_id,
                    private_data: [0; rtu::PRIVATE_DATA_LEN],
                });
                self.answer(CmMad::new(self.transaction_id, rtu));
                self.establish();
                Ok(())
            }
            // Our RTU got lost: the passive side resends its REP.
            (CmMessage::Rep(rep), CmState::Established)
                if self.role == Role::Active && rep.local_comm_id == self.remote_comm_id =>
            {
                self.replay_answer();
                Ok(())
            }
            (CmMessage::Mra(mra), CmState::ReqSent) if mra.message_mraed == MessageKind::REQ => {
                self.extend(now, mra.service_timeout);
                Ok(())
            }
            (CmMessage::Mra(mra), CmState::RepSent) if mra.message_mraed == MessageKind::REP => {
                self.extend(now, mra.service_timeout);
                Ok(())
            }
            (CmMessage::Req(_), CmState::RepSent) => {
                // Duplicate REQ: the REP may have been lost; answer at once.
                if let Some(rep) = self.resend.clone() {
                    self.outbox.push_back(rep);
                }
                Ok(())
            }
            (CmMessage::Rtu(_), CmState::RepSent) => {
                self.establish();
                Ok(())
            }
            (CmMessage::Rej(r), CmState::ReqSent | CmState::RepSent) => {
                self.close();
                self.events.push_back(CmEvent::Rejected {
                    reason: r.reason,
                    private_data: r.private_data,
                });
                Ok(())
            }
            (CmMessage::Dreq(_), CmState::Established | CmState::DreqSent) => {
                self.answer_drep(mad.header.transaction_id);
                self.enter_time_wait(now);
                self.events.push_back(CmEvent::Disconnected);
                Ok(())
            }
            // A DREQ before the RTU (RTU lost, peer already done): IBA lets the passive side
            // treat it as established then disconnected.
            (CmMessage::Dreq(_), CmState::RepSent) => {
                self.establish();
                self.answer_drep(mad.header.transaction_id);
                self.enter_time_wait(now);
                self.events.push_back(CmEvent::Disconnected);
                Ok(())
            }
            (CmMessage::Dreq(_), CmState::TimeWait) => {
                self.replay_answer();
                Ok(())
            }
            (CmMessage::Drep(_), CmState::DreqSent) => {
                self.enter_time_wait(now);
                self.events.push_back(CmEvent::Disconnected);
                Ok(())
            }
            _ => unexpected,
        }
    }

    /// The passive side saw the first packet on the QP before the RTU (IB_EVENT_COMM_EST):
    /// the connection is established.
    pub fn notify_comm_established(&mut self) {
        if self.state == CmState::RepSent {
            self.establish();
        }
    }

    /// Starts a disconnect (DREQ). Returns false when not established.
    pub fn disconnect(&mut self, now: Instant) -> bool {
        if self.state != CmState::Established {
            return false;
        }
        let Some(params) = self.params else {
            return false;
        };
        let dreq = CmMessage::Dreq(dreq::DreqRepr {
            local_comm_id: self.local_comm_id,
            remote_comm_id: self.remote_comm_id,
            remote_qpn: params.remote_qpn,
            private_data: [0; dreq::PRIVATE_DATA_LEN],
        });
        self.state = CmState::DreqSent;
        self.retries_left = self.req.max_cm_retries;
        let wait = self.wait(self.peer_response_timeout());
        let dreq = CmMad::new(self.dreq_tid, dreq);
        self.send_with_retry(now, dreq, wait);
        true
    }

    /// The next MAD to send, if any.
    pub fn poll_transmit(&mut self) -> Option<CmMad> {
        self.outbox.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// When [`Self::handle_timeout`] should run next.
    pub const fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// Retransmits, gives up, or ends TimeWait, as the deadline says. Does nothing before it.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(deadline) = self.deadline else {
            return;
        };
        if now < deadline {
            return;
        }
        match self.state {
            CmState::ReqSent | CmState::RepSent | CmState::DreqSent if self.retries_left > 0 => {
                self.retries_left -= 1;
                if let Some(m) = self.resend.clone() {
                    self.outbox.push_back(m);
                }
                let wait = match self.state {
                    CmState::ReqSent => self.req_wait(),
                    CmState::RepSent => timeout_exp(self.req.local_cm_response_timeout),
                    _ => self.wait(self.peer_response_timeout()),
                };
                self.deadline = Some(now + wait);
            }
            CmState::ReqSent => {
                self.close();
                self.events.push_back(CmEvent::TimedOut);
            }
            CmState::RepSent => {
                // C12-23: give up with a REJ (timeout) so the active side stops too.
                let rej = CmMessage::Rej(RejRepr {
                    local_comm_id: self.local_comm_id,
                    remote_comm_id: self.remote_comm_id,
                    message_rejected: MessageKind::REP,
                    reject_info_len: 0,
                    reason: RejectReason::TIMEOUT,
                    ari: [0; rej::ARI_LEN],
                    private_data: [0; rej::PRIVATE_DATA_LEN],
                });
                self.push(rej);
                self.close();
                self.events.push_back(CmEvent::TimedOut);
            }
            CmState::DreqSent => {
                // No DREP: the connection is gone anyway (IBA 12.9.6: DREQ timeout → TimeWait).
                self.enter_time_wait(now);
                self.events.push_back(CmEvent::Disconnected);
            }
            CmState::TimeWait => {
                self.state = CmState::Closed;
                self.deadline = None;
                self.events.push_back(CmEvent::TimeWaitExit);
            }
            CmState::Established | CmState::Closed => self.deadline = None,
        }
    }

    fn establish(&mut self) {
        let Some(p) = self.compute_params() else {
            return;
        };
        self.params = Some(p);
        self.state = CmState::Established;
        self.resend = None;
        self.deadline = None;
        self.events.push_back(CmEvent::Established(p));
    }

    fn compute_params(&self) -> Option<ConnParams> {
        let rep = self.rep.as_ref()?;
        let req = &self.req;
        Some(match self.role {
            Role::Active => ConnParams {
                remote_qpn: rep.local_qpn,
                sq_psn: rep.starting_psn,
                rq_psn: req.starting_psn,
                path_mtu: req.path_mtu,
                retry_count: req.retry_count,
                rnr_retry_count: rep.rnr_retry_count,
                initiator_depth: rep.responder_resources,
                responder_resources: rep.initiator_depth,
                ack_timeout: req.primary_path.local_ack_timeout,
                path: req.primary_path,
                remote_ca_guid: rep.local_ca_guid,
                remote_comm_id: rep.local_comm_id,
            },
            Role::Passive => ConnParams {
                remote_qpn: req.local_qpn,
                sq_psn: req.starting_psn,
                rq_psn: rep.starting_psn,
                path_mtu: req.path_mtu,
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
                initiator_depth: rep.initiator_depth,
                responder_resources: rep.responder_resources,
                ack_timeout: req.primary_path.local_ack_timeout,
                path: PathRepr {
                    local_lid: req.primary_path.remote_lid,
                    remote_lid: req.primary_path.local_lid,
                    local_gid: req.primary_path.remote_gid,
                    remote_gid: req.primary_path.local_gid,
                    ..req.primary_path
                },
                remote_ca_guid: req.local_ca_guid,
                remote_comm_id: req.local_comm_id,
            },
        })
    }

    /// A DREP carries the TID of the DREQ it answers (Linux `cm_dreq_handler`).
    fn answer_drep(&mut self, dreq_tid: u64) {
        let drep = CmMessage::Drep(drep::DrepRepr {
            local_comm_id: self.local_comm_id,
            remote_comm_id: self.remote_comm_id,
            private_data: [0; drep::PRIVATE_DATA_LEN],
        });
        self.answer(CmMad::new(dreq_tid, drep));
    }

    fn enter_time_wait(&mut self, now: Instant) {
        self.state = CmState::TimeWait;
        self.resend = None;
        self.deadline = Some(now + self.config.time_wait);
    }

    fn close(&mut self) {
        self.state = CmState::Closed;
        self.resend = None;
        self.deadline = None;
    }

    /// An MRA asks for `service_timeout` more (plus the round trip).
    fn extend(&mut self, now: Instant, service_timeout: u8) {
        self.deadline = Some(now + self.wait(service_timeout));
    }

    fn answer(&mut self, m: CmMad) {
        self.last_answer = Some(m.clone());
        self.outbox.push_back(m);
    }

    fn replay_answer(&mut self) {
        if let Some(m) = self.last_answer.clone() {
            self.outbox.push_back(m);
        }
    }

    fn send_with_retry(&mut self, now: Instant, m: CmMad, wait: Duration) {
        self.resend = Some(m.clone());
        self.deadline = Some(now + wait);
        self.outbox.push_back(m);
    }

    fn push(&mut self, m: CmMessage) {
        self.outbox.push_back(CmMad::new(self.transaction_id, m));
    }

    /// Linux `cm.c`: 2 × packet life time + the response timeout.
    fn wait(&self, response_timeout: u8) -> Duration {
        let plt = timeout_exp(self.config.packet_life_time);
        plt + plt + timeout_exp(response_timeout)
    }

    fn req_wait(&self) -> Duration {
        self.wait(self.req.remote_cm_response_timeout)
    }

    /// The response timeout the peer announced for itself.
    fn peer_response_timeout(&self) -> u8 {
        match self.role {
            Role::Active => self.req.remote_cm_response_timeout,
            Role::Passive => self.req.local_cm_response_timeout,
        }
    }
}

impl RepRepr {
    /// The REP that accepts `req` the way Linux ib_cm does for rdma_cm: our comm ID, QPN and
    /// starting PSN (the PSN the *active* side will send with), responder resources and
    /// initiator depth capped by what the REQ offers, RNR retry count for the active side,
    /// target ACK delay, no flow control, no SRQ, no private data.
    pub fn accepting(
        req: &ReqRepr,
        local_comm_id: u32,
        local_qpn: Qpn,
        starting_psn: Psn,
        local_ca_guid: u64,
    ) -> Self {
        RepRepr {
            local_comm_id,
            remote_comm_id: req.local_comm_id,
            local_qkey: crate::types::QKey(0),
            local_qpn,
            local_eecn: 0,
            starting_psn,
            responder_resources: req.initiator_depth,
            initiator_depth: req.responder_resources,
            target_ack_delay: 15,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: req.rnr_retry_count,
            srq: false,
            local_ca_guid,
            private_data: [0; super::rep::PRIVATE_DATA_LEN],
        }
    }
}

impl RejRepr {
    /// A REJ refusing `req` (e.g. [`RejectReason::INVALID_SERVICE_ID`] when nobody listens, as
    /// Linux answers, or [`RejectReason::CONSUMER_DEFINED`] with the consumer's private data).
    pub fn rejecting_req(
        req: &ReqRepr,
        local_comm_id: u32,
        reason: RejectReason,
        private_data: &[u8],
    ) -> Self {
        let mut pd = [0; rej::PRIVATE_DATA_LEN];
        let n = private_data.len().min(pd.len());
        pd[..n].copy_from_slice(&private_data[..n]);
        RejRepr {
            local_comm_id,
            remote_comm_id: req.local_comm_id,
            message_rejected: MessageKind::REQ,
            reject_info_len: 0,
            reason,
            ari: [0; rej::ARI_LEN],
            private_data: pd,
        }
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
