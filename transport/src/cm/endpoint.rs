//! All CM connections of one port, sans-IO: the GSI (QP1) side of a device.
//!
//! The engine feeds every CM MAD that arrives on QP1 with the sender's GID
//! ([`CmEndpoint::handle_mad`]), sends what [`CmEndpoint::poll_transmit`] returns as UD SENDs
//! to QP1 of that GID, and drives timers with [`CmEndpoint::poll_timeout`] /
//! [`CmEndpoint::handle_timeout`]. REQs for a service ID nobody listens on get a REJ
//! (invalid service ID) and DREQs for unknown connections a DREP, as Linux `cm.c` answers;
//! REQs for a listened service ID come out as [`EndpointEvent::Incoming`] for the owner to
//! [`CmEndpoint::accept`] or [`CmEndpoint::reject`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::conn::{CmConfig, CmEvent, CmState, Connection};
use super::rej::{RejRepr, RejectReason};
use super::rep::RepRepr;
use super::req::ReqRepr;
use super::{drep, CmMad, CmMessage};
use crate::rng::SplitMix64;
use crate::time::Instant;
use crate::types::{Gid, Psn, Qpn};

/// Names one connection of the endpoint; never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnHandle(pub u32);

/// A REQ for a listened service ID, waiting for [`CmEndpoint::accept`] or
/// [`CmEndpoint::reject`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Incoming {
    pub peer: Gid,
    pub transaction_id: u64,
    pub req: ReqRepr,
}

/// What the owner of the endpoint must act on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EndpointEvent {
    Incoming(Incoming),
    Connection(ConnHandle, CmEvent),
}

/// Counters of MADs the endpoint dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointCounters {
    /// Matched no connection (and needed no answer), or came from another peer.
    pub unmatched: u64,
    /// Matched a connection that did not expect it now.
    pub unexpected: u64,
    /// REQs answered with REJ (invalid service ID).
    pub rejected_no_listener: u64,
}

#[derive(Debug, Clone)]
struct Entry {
    peer: Gid,
    conn: Connection,
}

/// The CM of one port.
#[derive(Debug, Clone)]
pub struct CmEndpoint {
    config: CmConfig,
    rng: SplitMix64,
    hi_tid: u32,
    next_tid: u32,
    next_handle: u32,
    listeners: BTreeSet<u64>,
    conns: BTreeMap<ConnHandle, Entry>,
    /// Incoming REQs handed out and not yet answered: (peer, the REQ's local comm ID).
    pending: BTreeSet<(Gid, u32)>,
    outbox: VecDeque<(Gid, CmMad)>,
    events: VecDeque<EndpointEvent>,
    counters: EndpointCounters,
}

impl CmEndpoint {
    /// `seed` makes communication IDs and transaction IDs reproducible.
    pub fn new(config: CmConfig, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let hi_tid = rng.next_u32();
        CmEndpoint {
            config,
            rng,
            hi_tid,
            next_tid: 0,
            next_handle: 0,
            listeners: BTreeSet::new(),
            conns: BTreeMap::new(),
            pending: BTreeSet::new(),
            outbox: VecDeque::new(),
            events: VecDeque::new(),
            counters: EndpointCounters::default(),
        }
    }

    /// Accept REQs for `service_id` (exact match; see `rdma_cm::service_id`).
    pub fn listen(&mut self, service_id: u64) {
        self.listeners.insert(service_id);
    }

    pub fn unlisten(&mut self, service_id: u64) {
        self.listeners.remove(&service_id);
    }

    pub const fn counters(&self) -> &EndpointCounters {
        &self.counters
    }

    pub fn connection(&self, h: ConnHandle) -> Option<&Connection> {
        self.conns.get(&h).map(|e| &e.conn)
    }

    /// Handles of the connections still alive (not yet closed and reaped).
    pub fn handles(&self) -> impl Iterator<Item = ConnHandle> + '_ {
        self.conns.keys().copied()
    }

    /// Opens a connection to `peer` with `req` (e.g. from `rdma_cm::RcConnect::to_req`); its
    /// `local_comm_id` is replaced by a fresh one.
    pub fn connect(&mut self, now: Instant, peer: Gid, mut req: ReqRepr) -> ConnHandle {
        req.local_comm_id = self.fresh_comm_id();
        let tid = self.fresh_tid();
        let conn = Connection::connect(now, self.config, tid, req);
        self.insert(peer, conn)
    }

    /// Accepts `incoming` with our QP: `starting_psn` is the PSN the *active* side will send
    /// with (our `rq_psn`). Program the QP from `connection(h).params()` before sending the
    /// REP (see `conn`).
    pub fn accept(
        &mut self,
        now: Instant,
        incoming: &Incoming,
        local_qpn: Qpn,
        starting_psn: Psn,
        local_ca_guid: u64,
    ) -> ConnHandle {
        self.accept_with_private_data(now, incoming, local_qpn, starting_psn, local_ca_guid, &[])
    }

    /// [`Self::accept`] with consumer private data in the REP (at most 196 bytes; more is cut).
    pub fn accept_with_private_data(
        &mut self,
        now: Instant,
        incoming: &Incoming,
        local_qpn: Qpn,
        starting_psn: Psn,
        local_ca_guid: u64,
        private_data: &[u8],
    ) -> ConnHandle {
        self.pending
            .remove(&(incoming.peer, incoming.req.local_comm_id));
        let mut rep = RepRepr::accepting(
            &incoming.req,
            self.fresh_comm_id(),
            local_qpn,
            starting_psn,
            local_ca_guid,
        );
        let n = private_data.len().min(rep.private_data.len());
        rep.private_data[..n].copy_from_slice(&private_data[..n]);
        let mut conn = Connection::accept(
            now,
            self.config,
            incoming.transaction_id,
            &incoming.req,
            rep,
        );
        // Our own DREQ gets our own TID, as Linux cm_form_tid does.
        conn.set_dreq_transaction_id(self.fresh_tid());
        self.insert(incoming.peer, conn)
    }

    /// Refuses `incoming` (reason 28, consumer defined, is what `rdma_reject` sends).
    pub fn reject(&mut self, incoming: &Incoming, reason: RejectReason, private_data: &[u8]) {
        self.pending
            .remove(&(incoming.peer, incoming.req.local_comm_id));
        let rej = RejRepr::rejecting_req(&incoming.req, 0, reason, private_data);
        self.outbox.push_back((
            incoming.peer,
            CmMad::new(incoming.transaction_id, CmMessage::Rej(rej)),
        ));
    }

    /// Takes back the accept `h` of `incoming` when the consumer could not program its QP:
    /// the connection is forgotten, its REP is dropped if it has not left yet (it has not
    /// unless `poll_transmit` ran since the accept), and a REJ with `reason` refuses the REQ
    /// instead (IBA 12.6.7: the passive side rejects a REQ it cannot satisfy; the peer then
    /// fails fast instead of waiting out its REP timeout). False if `h` is unknown.
    pub fn abort_accept(&mut self, h: ConnHandle, incoming: &Incoming, reason: RejectReason, private_data: &[u8]) -> bool {
        let Some(e) = self.conns.remove(&h) else {
            return false;
        };
        let tid = incoming.transaction_id;
        let mut local_comm_id = 0;
        self.outbox.retain(|(peer, m)| match &m.message {
            CmMessage::Rep(rep) if *peer == e.peer && m.header.transaction_id == tid => {
                local_comm_id = rep.local_comm_id;
                false
            }
            _ => true,
        });
        let rej = RejRepr::rejecting_req(&incoming.req, local_comm_id, reason, private_data);
        self.outbox.push_back((incoming.peer, CmMad::new(tid, CmMessage::Rej(rej))));
        true
    }

    /// Starts disconnecting `h`; false if it is not established.
    pub fn disconnect(&mut self, now: Instant, h: ConnHandle) -> bool {
        let Some(e) = self.conns.get_mut(&h) else {
            return false;
        };
        let ok = e.conn.disconnect(now);
        self.collect(h);
        ok
    }

    /// The passive QP `h` received data before the RTU.
    pub fn notify_comm_established(&mut self, h: ConnHandle) {
        if let Some(e) = self.conns.get_mut(&h) {
            e.conn.notify_comm_established();
            self.collect(h);
        }
    }

    /// One CM MAD received on QP1 from `peer`.
    pub fn handle_mad(&mut self, now: Instant, peer: Gid, mad: &CmMad) {
        let found = self
            .conns
            .iter()
            .find(|(_, e)| e.peer == peer && e.conn.matches(mad))
            .map(|(h, _)| *h);
        if let Some(h) = found {
            let e = self.conns.get_mut(&h).expect("found above");
            if e.conn.handle_mad(now, mad).is_err() {
                self.counters.unexpected += 1;
            }
            self.collect(h);
            return;
        }
        match &mad.message {
            CmMessage::Req(req) => {
                let key = (peer, req.local_comm_id);
                if self.pending.contains(&key) {
                    // The owner is still deciding; the active side will retry.
                } else if self.listeners.contains(&req.service_id) {
                    self.pending.insert(key);
                    self.events.push_back(EndpointEvent::Incoming(Incoming {
                        peer,
                        transaction_id: mad.header.transaction_id,
                        req: req.clone(),
                    }));
                } else {
                    self.counters.rejected_no_listener += 1;
                    let rej = RejRepr::rejecting_req(req, 0, RejectReason::INVALID_SERVICE_ID, &[]);
                    self.outbox.push_back((
                        peer,
                        CmMad::new(mad.header.transaction_id, CmMessage::Rej(rej)),
                    ));
                }
            }
            CmMessage::Dreq(dreq) => {
                // A DREQ for a connection we no longer know: the peer still needs its DREP.
                let drep = drep::DrepRepr {
                    local_comm_id: dreq.remote_comm_id,
                    remote_comm_id: dreq.local_comm_id,
                    private_data: [0; drep::PRIVATE_DATA_LEN],
                };
                self.outbox.push_back((
                    peer,
                    CmMad::new(mad.header.transaction_id, CmMessage::Drep(drep)),
                ));
            }
            _ => self.counters.unmatched += 1,
        }
    }

    /// The next MAD to send and the GID of the peer whose QP1 gets it.
    pub fn poll_transmit(&mut self) -> Option<(Gid, CmMad)> {
        self.outbox.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<EndpointEvent> {
        self.events.pop_front()
    }

    /// The earliest deadline of all connections.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns
            .values()
            .filter_map(|e| e.conn.poll_timeout())
            .min()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<ConnHandle> = self
            .conns
            .iter()
            .filter(|(_, e)| e.conn.poll_timeout().is_some_and(|t| t <= now))
            .map(|(h, _)| *h)
            .collect();
        for h in due {
            if let Some(e) = self.conns.get_mut(&h) {
                e.conn.handle_timeout(now);
            }
            self.collect(h);
        }
    }

    fn insert(&mut self, peer: Gid, conn: Connection) -> ConnHandle {
        let h = ConnHandle(self.next_handle);
        self.next_handle += 1;
        self.conns.insert(h, Entry { peer, conn });
        self.collect(h);
        h
    }

    /// Moves a connection's MADs and events out, and forgets it once closed.
    fn collect(&mut self, h: ConnHandle) {
        let Some(e) = self.conns.get_mut(&h) else {
            return;
        };
        while let Some(m) = e.conn.poll_transmit() {
            self.outbox.push_back((e.peer, m));
        }
        while let Some(ev) = e.conn.poll_event() {
            self.events.push_back(EndpointEvent::Connection(h, ev));
        }
        if e.conn.state() == CmState::Closed {
            self.conns.remove(&h);
        }
    }

    /// `hi_tid << 32 | n`, like Linux's MAD agent TIDs.
    fn fresh_tid(&mut self) -> u64 {
        let tid = (u64::from(self.hi_tid) << 32) | u64::from(self.next_tid);
        self.next_tid = self.next_tid.wrapping_add(1);
        tid
    }

    /// A random non-zero communication ID no live connection uses.
    fn fresh_comm_id(&mut self) -> u32 {
        loop {
            let id = self.rng.next_u32();
            if id != 0 && !self.conns.values().any(|e| e.conn.local_comm_id() == id) {
                return id;
            }
        }
    }
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
