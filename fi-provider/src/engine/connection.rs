//! Connection management: passive endpoints and their rdma_cm ports, connect / accept /
//! reject / shutdown through the runtime's IB CM agent, the CM events that become EQ events,
//! connections failed when their peer is gone, and the SIDR lookups that give a DGRAM
//! destination named by IP and port its QPN.

use super::*;
use crate::addr::EpAddr;
use crate::ffi::sys as fi;
use crate::info;
use droce_dpdk::roce::cm::{CmAgentEvent, ConnId, ConnectParams, SidrEvent, SidrId};
use droce_transport::qp::{QpAttr, QpAttrMask, QpState};

/// Marker + length in front of CM private data, so that the peer gets exactly what was sent
/// (REQ/REP private data arrive zero padded to their fixed size).
const CM_MAGIC: u8 = 0xd5;

pub fn cm_encode(data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(data.len() + 2);
    v.push(CM_MAGIC);
    v.push(data.len() as u8);
    v.extend_from_slice(data);
    v
}

pub fn cm_decode(raw: &[u8]) -> Vec<u8> {
    match raw {
        [CM_MAGIC, n, rest @ ..] if (*n as usize) <= rest.len() => rest[..*n as usize].to_vec(),
        _ => Vec::new(),
    }
}

/// How long a DGRAM send keeps asking a peer's CM for the QPN behind an IP + port (the peer
/// may still be starting: "no QP" answers are retried every [`SIDR_RETRY`]).
const SIDR_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

const SIDR_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// UD QPN resolution of a node/service DGRAM address (SIDR over QP1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sidr {
    Pending { id: SidrId, deadline: std::time::Instant },
    Retry { at: std::time::Instant, deadline: std::time::Instant },
    Done(u32),
    Failed,
}

impl Engine {
    /// What our REQ or REP carries: `data` behind the provider's header, and the offer of
    /// selective repeat (`RuntimeConfig::selective_repeat`), which the host's CM agent adds
    /// as a trailer when `data` leaves room (up to 50 of the 54 bytes) and a droce peer
    /// offers it too; the two QPs then run selective repeat (docs/selective-repeat.md).
    fn connect_params(&self, data: &[u8]) -> ConnectParams {
        let selective_repeat = self.host().config().selective_repeat;
        ConnectParams { private_data: cm_encode(data), responder_resources: 16, initiator_depth: 16, retry_count: 7, rnr_retry_count: 7, selective_repeat }
    }

    pub fn new_pep(&mut self, fid: usize, context: usize, src: EpAddr) -> Id {
        let id = self.fresh_id();
        self.peps.insert(id, Pep { fid, context, eq: None, src, listening: None });
        id
    }

    pub(super) fn ephemeral_port(&mut self) -> u16 {
        loop {
            self.next_port = self.next_port.checked_add(1).unwrap_or(0xc000).max(0xc000);
            if !self.listeners.contains_key(&self.next_port) && !self.peps.values().any(|p| p.src.sa.port() == self.next_port) {
                return self.next_port;
            }
        }
    }

    /// fi_setname on a passive endpoint: the address must be ours; port 0 binds an
    /// ephemeral port at once (as a socket bind would).
    pub fn set_pep_name(&mut self, id: Id, a: EpAddr) -> Result<(), Errno> {
        if !self.local.is_local(a.sa.ip()) {
            return Err(fi::FI_EADDRNOTAVAIL);
        }
        let pep = self.peps.get(&id).ok_or(fi::FI_EINVAL)?;
        if pep.listening.is_some() {
            return Err(fi::FI_EOPBADSTATE);
        }
        let port = match a.sa.port() {
            0 => self.ephemeral_port(),
            p if self.listeners.contains_key(&p) => return Err(fi::FI_EADDRINUSE),
            p => p,
        };
        let ip = self.local.ip;
        let pep = self.peps.get_mut(&id).ok_or(fi::FI_EINVAL)?;
        pep.src = EpAddr::new(SocketAddr::new(ip, port));
        Ok(())
    }

    pub fn listen(&mut self, id: Id) -> Result<(), Errno> {
        let mut port = self.peps.get(&id).ok_or(fi::FI_EINVAL)?.src.sa.port();
        if port == 0 {
            // An ephemeral rdma_cm port nobody listens on yet.
            port = self.ephemeral_port();
        } else if self.listeners.get(&port).is_some_and(|p| *p != id) {
            return Err(fi::FI_EADDRINUSE);
        }
        let svc = self.host().listen(port);
        self.listeners.insert(port, id);
        let pep = self.peps.get_mut(&id).ok_or(fi::FI_EINVAL)?;
        pep.src.sa.set_port(port);
        pep.listening = Some(svc);
        Ok(())
    }

    pub fn close_pep(&mut self, id: Id) {
        if let Some(p) = self.peps.remove(&id) {
            if let Some(svc) = p.listening {
                self.host().unlisten(svc);
                self.listeners.remove(&p.src.sa.port());
            }
        }
    }

    pub fn connect(&mut self, id: Id, dst: EpAddr, data: &[u8]) -> Result<(), Errno> {
        if data.len() as u64 > info::CM_DATA_SIZE {
            return Err(fi::FI_EINVAL);
        }
        self.enable_ep(id)?;
        let ep = self.eps.get(&id).ok_or(fi::FI_EINVAL)?;
        if ep.state != ConnState::Idle || ep.eq.is_none() {
            return Err(if ep.eq.is_none() { fi::FI_ENOEQ } else { fi::FI_EISCONN });
        }
        let qp = ep.qp.ok_or(fi::FI_EOPBADSTATE)?;
        let ip = addr::canon(self.local.resolve_dst(dst.sa.ip()));
        let sa = SocketAddr::new(ip, dst.sa.port());
        let p = self.connect_params(data);
        let conn = {
            let mut h = self.host();
            if h.peer_gone(ip) {
                // nobody there (a zero-config peer that has exited): the REQ could only time out
                return Err(fi::FI_ECONNREFUSED);
            }
            h.connect(sa, qp, &p).map_err(|_| fi::FI_EHOSTUNREACH)?
        };
        self.conns.insert(conn, id);
        let ep = self.eps.get_mut(&id).ok_or(fi::FI_EINVAL)?;
        ep.conn = Some(conn);
        ep.state = ConnState::Connecting;
        ep.peer = Some(EpAddr::new(sa));
        Ok(())
    }

    pub fn accept(&mut self, id: Id, data: &[u8]) -> Result<(), Errno> {
        if data.len() as u64 > info::CM_DATA_SIZE {
            return Err(fi::FI_EINVAL);
        }
        self.enable_ep(id)?;
        let ep = self.eps.get(&id).ok_or(fi::FI_EINVAL)?;
        let (Some(conn), ConnState::Accepting, Some(qp)) = (ep.conn, ep.state, ep.qp) else { return Err(fi::FI_EOPBADSTATE) };
        if ep.eq.is_none() {
            return Err(fi::FI_ENOEQ);
        }
        let p = self.connect_params(data);
        {
            let mut h = self.host();
            h.accept(conn, qp, &p).map_err(|_| fi::FI_ECONNABORTED)?;
        }
        self.conns.insert(conn, id);
        Ok(())
    }

    pub fn reject(&mut self, conn: ConnId, data: &[u8]) -> Result<(), Errno> {
        self.host().reject(conn, &cm_encode(data)).map_err(|_| fi::FI_EINVAL)
    }

    pub fn shutdown(&mut self, id: Id) -> Result<(), Errno> {
        let ep = self.eps.get(&id).ok_or(fi::FI_EINVAL)?;
        let Some(conn) = ep.conn else { return Err(fi::FI_ENOTCONN) };
        if ep.state == ConnState::Shutdown {
            return Ok(());
        }
        {
            let mut h = self.host();
            let _ = h.disconnect(conn);
        }
        if let Some(ep) = self.eps.get_mut(&id) {
            ep.state = ConnState::Shutdown;
        }
        Ok(())
    }

    pub(super) fn cm_event(&mut self, e: CmAgentEvent) {
        if debug() {
            eprintln!("droce-fi: cm event {e:?}");
        }
        if let CmAgentEvent::Disconnected { id } | CmAgentEvent::Rejected { id, .. } | CmAgentEvent::TimedOut { id } = &e {
            if let Some(qp) = self.zombies.remove(id) {
                let _ = self.host().destroy_qp(qp);
                self.reap_srqs();
                return;
            }
            if let Some(ep) = self.conns.get(id).and_then(|x| self.eps.get_mut(x)) {
                ep.cm_done = true;
            }
        }
        match e {
            CmAgentEvent::ConnectRequest { id, src, dst, private_data, .. } => {
                let Some(pep) = self.listeners.get(&dst.port()).and_then(|p| self.peps.get(p)) else {
                    let _ = self.host().reject(id, &[]);
                    return;
                };
                let ev = EqEvent::ConnReq { pep_fid: pep.fid, pep_context: pep.context, conn: id, src, dst, data: cm_decode(&private_data) };
                match pep.eq.and_then(|q| self.eqs.get_mut(&q)) {
                    Some(q) => q.push(ev),
                    None => {
                        let _ = self.host().reject(id, &[]);
                    }
                }
            }
            CmAgentEvent::Established { id, private_data, .. } => {
                let Some(ep) = self.conns.get(&id).and_then(|e| self.eps.get_mut(e)) else { return };
                // The REP's private data is the acceptor's own: only the connecting side gets it.
                let active = ep.state == ConnState::Connecting;
                ep.state = ConnState::Connected;
                let data = if active { cm_decode(&private_data) } else { Vec::new() };
                let ev = EqEvent::Connected { fid: ep.fid, context: ep.context, data };
                if let Some(q) = ep.eq.and_then(|q| self.eqs.get_mut(&q)) {
                    q.push(ev);
                }
            }
            CmAgentEvent::Rejected { id, private_data, .. } => self.conn_error(id, fi::FI_ECONNREFUSED, cm_decode(&private_data)),
            CmAgentEvent::TimedOut { id } => self.conn_error(id, fi::FI_ETIMEDOUT, Vec::new()),
            CmAgentEvent::Disconnected { id } => {
                let Some(ep) = self.conns.get(&id).and_then(|e| self.eps.get_mut(e)) else { return };
                let was = ep.state;
                ep.state = ConnState::Shutdown;
                if matches!(was, ConnState::Connected | ConnState::Shutdown) {
                    let ev = EqEvent::Shutdown { fid: ep.fid, context: ep.context };
                    if let Some(q) = ep.eq.and_then(|q| self.eqs.get_mut(&q)) {
                        q.push(ev);
                    }
                } else {
                    let (fid, context, eq) = (ep.fid, ep.context, ep.eq);
                    if let Some(q) = eq.and_then(|q| self.eqs.get_mut(&q)) {
                        q.push_error(EqError { fid, context, err: fi::FI_ECONNRESET, prov_errno: 0, data: Vec::new() });
                    }
                }
            }
        }
    }

    pub(super) fn conn_error(&mut self, id: ConnId, err: Errno, data: Vec<u8>) {
        let Some(ep) = self.conns.get(&id).and_then(|e| self.eps.get_mut(e)) else { return };
        ep.state = ConnState::Shutdown;
        let x = EqError { fid: ep.fid, context: ep.context, err, prov_errno: 0, data };
        if let Some(q) = ep.eq.and_then(|q| self.eqs.get_mut(&q)) {
            q.push_error(x);
        }
    }

    /// Peers the host found gone ([`Runtime::lost_peers_since`]: the process behind a memif link
    /// that went down, one link per peer on the zero-config mesh): every connection to one of
    /// `lost` fails now, as the tcp provider's do when their socket closes, instead of after
    /// the transport's retries (17 s), which only run while something is outstanding.
    /// Connections to other peers are untouched (an endpoint whose peer address is unknown
    /// fails with any loss).
    /// The QP goes to the error state, so posted receives and sends complete with flush
    /// errors through the usual path (FI_ECANCELED in the CQ error entry); a connected
    /// endpoint gets FI_SHUTDOWN on its EQ, one still connecting an FI_ECONNRESET error.
    pub(super) fn fail_connections(&mut self, lost: &[IpAddr]) {
        let mut h = self.host();
        let mut failed = Vec::new();
        for (&id, ep) in self.eps.iter_mut() {
            if !matches!(ep.state, ConnState::Connected | ConnState::Connecting | ConnState::Accepting) {
                continue;
            }
            if ep.peer.is_some_and(|p| !lost.iter().any(|l| addr::same_ip(*l, p.sa.ip()))) {
                continue;
            }
            if let Some(qp) = ep.qp {
                let a = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
                let _ = h.modify_qp(qp, &a, QpAttrMask::STATE);
            }
            failed.push((id, ep.state));
            ep.state = ConnState::Shutdown;
        }
        drop(h);
        for (id, was) in failed {
            let Some(ep) = self.eps.get(&id) else { continue };
            let (fid, context, eq) = (ep.fid, ep.context, ep.eq);
            let Some(q) = eq.and_then(|q| self.eqs.get_mut(&q)) else { continue };
            if was == ConnState::Connected {
                q.push(EqEvent::Shutdown { fid, context });
            } else {
                q.push_error(EqError { fid, context, err: fi::FI_ECONNRESET, prov_errno: 0, data: Vec::new() });
            }
        }
    }

    /// The UD QPN behind a node/service DGRAM address: asks the peer's CM (SIDR) and
    /// answers `FI_EAGAIN` until it replied (the caller's retries drive the progress),
    /// `FI_EHOSTUNREACH` when nobody answered within [`SIDR_DEADLINE`].
    pub(super) fn resolve_ud(&mut self, sa: SocketAddr) -> Result<u32, Errno> {
        if sa.port() == 0 {
            return Err(fi::FI_EADDRNOTAVAIL);
        }
        let key = SocketAddr::new(addr::canon(sa.ip()), sa.port());
        let now = std::time::Instant::now();
        let deadline = match self.sidr.get(&key) {
            Some(Sidr::Done(q)) => return Ok(*q),
            Some(Sidr::Failed) => return Err(fi::FI_EHOSTUNREACH),
            Some(Sidr::Pending { .. }) => None,
            Some(Sidr::Retry { at, deadline }) => (now >= *at).then_some(*deadline),
            None => Some(now + SIDR_DEADLINE),
        };
        if let Some(deadline) = deadline {
            let r = {
                let mut h = self.host();
                h.sidr_resolve(key)
            };
            match r {
                Ok(id) => self.sidr.insert(key, Sidr::Pending { id, deadline }),
                Err(_) => return Err(fi::FI_EHOSTUNREACH),
            };
        }
        self.progress();
        match self.sidr.get(&key) {
            Some(Sidr::Done(q)) => Ok(*q),
            Some(Sidr::Failed) => Err(fi::FI_EHOSTUNREACH),
            _ => Err(fi::FI_EAGAIN),
        }
    }

    pub(super) fn sidr_event(&mut self, ev: SidrEvent) {
        if debug() {
            eprintln!("droce-fi: sidr {ev:?}");
        }
        let (id, result) = match ev {
            SidrEvent::Resolved { id, qpn, .. } => (id, Some(qpn.value())),
            SidrEvent::Failed { id, .. } => (id, None),
        };
        let now = std::time::Instant::now();
        for v in self.sidr.values_mut() {
            if let Sidr::Pending { id: p, deadline } = *v {
                if p == id {
                    *v = match result {
                        Some(q) => Sidr::Done(q),
                        None if now + SIDR_RETRY < deadline => Sidr::Retry { at: now + SIDR_RETRY, deadline },
                        None => Sidr::Failed,
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_data_round_trip_through_zero_padding() {
        let d: Vec<u8> = (0..54).collect();
        let mut wire = cm_encode(&d);
        wire.resize(196, 0);
        assert_eq!(cm_decode(&wire), d);
        let mut short = cm_encode(b"hello");
        short.resize(56, 0);
        assert_eq!(cm_decode(&short), b"hello");
        assert!(cm_decode(&[0u8; 56]).is_empty(), "a peer that sent none");
        assert!(cm_decode(&[CM_MAGIC, 9, 1]).is_empty(), "length beyond the data");
    }
}
