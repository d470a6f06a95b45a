//! Service ID resolution for UD (IBA 12.11) as rdma_cm does it for RDMA_PS_UDP ids: the
//! passive side answers SIDR_REQs for its registered UDP-port-space services with the QPN
//! and Q_Key behind them (NO_QP otherwise); the active side retransmits its SIDR_REQ until a
//! SIDR_REP or the last attempt. Sans-IO: the MADs to send are returned, time comes in.

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

use crate::cm::rdma_cm::{self, CmaAddrs, CmaHeaderRepr, PortSpace};
use crate::cm::sidr::{self, rep::SidrStatus, SidrRepRepr, SidrReqRepr};
use crate::cm::{CmMad, CmMessage};
use crate::time::{Duration, Instant};
use crate::types::{Gid, PKey, QKey, Qpn};

/// SIDR_REQ retransmission interval and attempts (the passive side answers at once).
pub const SIDR_RETRY: Duration = Duration::from_millis(200);
pub const SIDR_TRIES: u32 = 10;

/// `SidrEvent::Failed` status when every SIDR_REQ went unanswered.
pub const SIDR_TIMEOUT: u8 = 0xff;

/// A UD service resolution started by `CmAgent::sidr_resolve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SidrId(pub u32);

/// The answer to a `CmAgent::sidr_resolve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SidrEvent {
    /// The peer's UD QP behind the service.
    Resolved { id: SidrId, qpn: Qpn, qkey: QKey },
    /// A SIDR_REP with a non-success status (`SidrStatus`, e.g. 3 = no QP for the service),
    /// or [`SIDR_TIMEOUT`] when no answer came.
    Failed { id: SidrId, status: u8 },
}

#[derive(Debug, Clone)]
struct Query {
    id: SidrId,
    peer: Gid,
    mad: CmMad,
    next: Instant,
    tries: u32,
}

/// The SIDR state of one agent: registered services, queries in flight, answers.
#[derive(Debug, Default)]
pub(super) struct Sidr {
    /// UDP-port-space service ID -> the UD QP that answers it.
    services: BTreeMap<u64, (Qpn, QKey)>,
    /// SIDR_REQs in flight by request ID.
    queries: BTreeMap<u32, Query>,
    events: VecDeque<SidrEvent>,
}

impl Sidr {
    pub(super) fn register(&mut self, port: u16, qpn: Qpn, qkey: QKey) -> u64 {
        let s = rdma_cm::service_id(PortSpace::UDP, port);
        self.services.insert(s, (qpn, qkey));
        s
    }

    pub(super) fn unregister(&mut self, service_id: u64) {
        self.services.remove(&service_id);
    }

    /// Starts a query from `src` to `dst` with the random draw `r` (request ID, rdma_cm
    /// source port, transaction ID). Returns the id and the first SIDR_REQ to send to
    /// `dst`'s GID; `None` when the address families differ.
    pub(super) fn resolve(&mut self, now: Instant, src: IpAddr, dst: SocketAddr, r: u64) -> Option<(SidrId, Gid, CmMad)> {
        let addrs = match (src, dst.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => CmaAddrs::V4 { src, dst },
            (IpAddr::V6(src), IpAddr::V6(dst)) => CmaAddrs::V6 { src, dst },
            _ => return None,
        };
        let mut request_id = r as u32;
        while self.queries.contains_key(&request_id) {
            request_id = request_id.wrapping_add(1);
        }
        let mut private_data = [0u8; sidr::req::PRIVATE_DATA_LEN];
        CmaHeaderRepr { src_port: 0x8000 | ((r >> 32) as u16 & 0x7fff), addrs }.emit(&mut private_data);
        let req = SidrReqRepr { request_id, pkey: PKey(0xffff), service_id: rdma_cm::service_id(PortSpace::UDP, dst.port()), private_data };
        let peer = match dst.ip() {
            IpAddr::V4(a) => Gid::from_ipv4(a),
            IpAddr::V6(a) => Gid::from_ipv6(a),
        };
        let id = SidrId(request_id);
        let mad = CmMad::new(r >> 8, CmMessage::SidrReq(req));
        self.queries.insert(request_id, Query { id, peer, mad: mad.clone(), next: now + SIDR_RETRY, tries: SIDR_TRIES - 1 });
        Some((id, peer, mad))
    }

    /// Due retransmissions (appended to `out`) and timeouts (as events). True when a query
    /// was due.
    pub(super) fn handle_timeout(&mut self, now: Instant, out: &mut Vec<(Gid, CmMad)>) -> bool {
        let due: Vec<u32> = self.queries.iter().filter(|(_, q)| q.next <= now).map(|(k, _)| *k).collect();
        for k in &due {
            let Some(q) = self.queries.get_mut(k) else { continue };
            if q.tries == 0 {
                let id = q.id;
                self.queries.remove(k);
                self.events.push_back(SidrEvent::Failed { id, status: SIDR_TIMEOUT });
                continue;
            }
            q.tries -= 1;
            q.next = now + SIDR_RETRY;
            out.push((q.peer, q.mad.clone()));
        }
        !due.is_empty()
    }

    pub(super) fn has_queries(&self) -> bool {
        !self.queries.is_empty()
    }

    /// A SIDR MAD from `peer`: a SIDR_REQ gets its SIDR_REP (returned, to send back); a
    /// SIDR_REP ends its query with an event.
    pub(super) fn handle_mad(&mut self, mad: &CmMad) -> Option<CmMad> {
        match &mad.message {
            CmMessage::SidrReq(req) => {
                let (status, (qpn, qkey)) = match self.services.get(&req.service_id) {
                    Some(x) => (SidrStatus::SUCCESS, *x),
                    None => (SidrStatus::NO_QP, (Qpn::new(0), QKey(0))),
                };
                let rep = SidrRepRepr {
                    request_id: req.request_id,
                    status,
                    info_len: 0,
                    qpn,
                    service_id: req.service_id,
                    qkey,
                    info: [0; sidr::rep::INFO_LEN],
                    private_data: [0; sidr::rep::PRIVATE_DATA_LEN],
                };
                Some(CmMad::new(mad.header.transaction_id, CmMessage::SidrRep(rep)))
            }
            CmMessage::SidrRep(rep) => {
                let q = self.queries.remove(&rep.request_id)?;
                self.events.push_back(if rep.status == SidrStatus::SUCCESS {
                    SidrEvent::Resolved { id: q.id, qpn: rep.qpn, qkey: rep.qkey }
                } else {
                    SidrEvent::Failed { id: q.id, status: rep.status.0 }
                });
                None
            }
            _ => None,
        }
    }

    pub(super) fn poll_event(&mut self) -> Option<SidrEvent> {
        self.events.pop_front()
    }

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.queries.values().map(|q| q.next).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn dst() -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 7471)
    }

    #[test]
    fn retransmits_then_fails() {
        let mut s = Sidr::default();
        let (id, peer, mad) = s.resolve(Instant(0), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), dst(), 0x1234_5678_9abc).unwrap();
        assert_eq!(peer, Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(id, SidrId(0x5678_9abc));
        assert!(matches!(mad.message, CmMessage::SidrReq(ref r) if r.request_id == 0x5678_9abc));
        let mut out = Vec::new();
        let mut t = Instant(0);
        for n in 1..SIDR_TRIES {
            assert!(!s.handle_timeout(Instant(t.0 + SIDR_RETRY.0 - 1), &mut out), "early");
            t = s.poll_timeout().unwrap();
            assert!(s.handle_timeout(t, &mut out));
            assert_eq!(out.len(), n as usize);
            assert_eq!(out[n as usize - 1].1, mad, "the same SIDR_REQ again");
        }
        assert_eq!(s.poll_event(), None);
        assert!(s.handle_timeout(s.poll_timeout().unwrap(), &mut out));
        assert_eq!(out.len(), SIDR_TRIES as usize - 1);
        assert_eq!(s.poll_event(), Some(SidrEvent::Failed { id, status: SIDR_TIMEOUT }));
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn answers_and_resolves() {
        let mut server = Sidr::default();
        let svc = server.register(7471, Qpn::new(0x33), QKey(0x1111_2222));
        let mut client = Sidr::default();
        let v6 = IpAddr::V6("fd00::1".parse().unwrap());
        assert!(client.resolve(Instant(0), v6, dst(), 1).is_none(), "families differ");
        let (id, _, req) = client.resolve(Instant(0), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), dst(), 7).unwrap();
        let rep = server.handle_mad(&req).expect("a SIDR_REP");
        assert_eq!(rep.header.transaction_id, req.header.transaction_id);
        assert_eq!(client.handle_mad(&rep), None);
        assert_eq!(client.poll_event(), Some(SidrEvent::Resolved { id, qpn: Qpn::new(0x33), qkey: QKey(0x1111_2222) }));
        assert_eq!(client.handle_mad(&rep), None, "a duplicate SIDR_REP is ignored");
        assert_eq!(client.poll_event(), None);
        server.unregister(svc);
        let (id, _, req) = client.resolve(Instant(0), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), dst(), 8).unwrap();
        client.handle_mad(&server.handle_mad(&req).unwrap());
        assert_eq!(client.poll_event(), Some(SidrEvent::Failed { id, status: SidrStatus::NO_QP.0 }));
    }
}
