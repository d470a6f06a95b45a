//! `fi_getinfo` in plain Rust: what droce offers per endpoint type and how hints narrow it.
//!
//! The ffi layer reads a `struct fi_info` of hints into [`Hints`] and writes every returned
//! [`Info`] into a `struct fi_info` allocated by libfabric (`fi_dupinfo(NULL)`).

use crate::addr::{self, EpAddr, Local};
use crate::ffi::sys as fi;
use std::net::{IpAddr, SocketAddr};

pub const PROV_NAME: &str = "droce";
pub const FABRIC_NAME: &str = "droce";
pub const DOMAIN_NAME: &str = "droce0";
/// libfabric API version the provider implements (1.17).
pub const FI_API_VERSION: u32 = (1 << 16) | 17;
pub const PROV_VERSION: u32 = 1;

/// RC messages are split into MTU segments by the transport; its limit is 2^31 bytes.
pub const MSG_MAX_MSG_SIZE: u64 = 1 << 31;
/// UD: one packet; the 40-byte GRH prefix comes on top (FI_MSG_PREFIX).
pub const UD_PREFIX: u64 = 40;
/// UD: one packet of the smallest path MTU droce configures (Ethernet MTU 1500); a larger
/// port MTU does not raise it (getinfo answers before any port is open).
pub const DGRAM_MAX_MSG_SIZE: u64 = 1024;
pub const TX_SIZE: u64 = 256;
pub const RX_SIZE: u64 = 256;
/// Most gather/scatter elements per request (the storage of a request's list); the limit
/// advertised and enforced is [`iov_limit`], at most this.
pub const IOV_LIMIT: u64 = 8;
pub const INJECT_SIZE: u64 = 256;
/// Private data through IB CM: 56 bytes in a REQ after the rdma_cm header, minus our
/// 2-byte length header.
pub const CM_DATA_SIZE: u64 = 54;
pub const CQ_DATA_SIZE: u64 = 4;

const SEC_CAPS: u64 = fi::FI_LOCAL_COMM | fi::FI_REMOTE_COMM | fi::FI_SOURCE;
pub const MSG_CAPS: u64 = fi::FI_MSG as u64
    | fi::FI_RMA as u64
    | fi::FI_ATOMIC as u64
    | fi::FI_SEND as u64
    | fi::FI_RECV as u64
    | fi::FI_READ as u64
    | fi::FI_WRITE as u64
    | fi::FI_REMOTE_READ as u64
    | fi::FI_REMOTE_WRITE as u64
    | fi::FI_MULTI_RECV as u64
    | fi::FI_LOCAL_COMM
    | fi::FI_REMOTE_COMM;
pub const DGRAM_CAPS: u64 =
    fi::FI_MSG as u64 | fi::FI_SEND as u64 | fi::FI_RECV as u64 | fi::FI_LOCAL_COMM | fi::FI_REMOTE_COMM;
/// MR modes droce can work with; VIRT_ADDR|ALLOCATED|PROV_KEY are what RMA needs.
pub const MR_MODE_SUPPORTED: u32 =
    fi::FI_MR_LOCAL | fi::FI_MR_VIRT_ADDR | fi::FI_MR_ALLOCATED | fi::FI_MR_PROV_KEY;
/// The RoCE atomics (IBA 9.4.5): 64-bit fetch-and-add and compare-and-swap, aligned.
/// `kind`: 0 = fi_atomic, FI_FETCH_ATOMIC, FI_COMPARE_ATOMIC.
pub fn atomic_supported(datatype: u32, op: u32, kind: u64) -> bool {
    let dt = datatype == fi::FI_UINT64 || datatype == fi::FI_INT64;
    dt && match kind {
        0 => op == fi::FI_SUM,
        k if k == fi::FI_FETCH_ATOMIC => op == fi::FI_SUM || op == fi::FI_ATOMIC_READ,
        k if k == fi::FI_COMPARE_ATOMIC => op == fi::FI_CSWAP,
        _ => false,
    }
}

/// Message orders RC keeps (what verbs reports for RC: a WRITE or SEND may pass a READ, so
/// no WAR/SAR).
pub const MSG_ORDER: u64 = (fi::FI_ORDER_SAS | fi::FI_ORDER_RAR | fi::FI_ORDER_RAW | fi::FI_ORDER_RAS | fi::FI_ORDER_WAW | fi::FI_ORDER_WAS | fi::FI_ORDER_SAW) as u64;
/// UD: sends to one peer leave and arrive in order on a single path.
pub const DGRAM_ORDER: u64 = fi::FI_ORDER_SAS as u64;
pub const DOMAIN_CAPS: u64 = fi::FI_LOCAL_COMM | fi::FI_REMOTE_COMM;
const TX_CAPS: u64 = (fi::FI_MSG | fi::FI_RMA | fi::FI_ATOMIC | fi::FI_SEND | fi::FI_READ | fi::FI_WRITE) as u64;
const RX_CAPS: u64 = (fi::FI_MSG | fi::FI_RMA | fi::FI_ATOMIC | fi::FI_RECV | fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE) as u64 | fi::FI_SOURCE | fi::FI_MULTI_RECV as u64;

pub const MR_MODE_RMA: u32 = fi::FI_MR_VIRT_ADDR | fi::FI_MR_ALLOCATED | fi::FI_MR_PROV_KEY;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpType {
    Msg,
    Dgram,
}

impl EpType {
    pub fn raw(self) -> u32 {
        match self {
            EpType::Msg => fi::FI_EP_MSG,
            EpType::Dgram => fi::FI_EP_DGRAM,
        }
    }
}

/// The parts of `struct fi_info` hints droce looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hints {
    pub caps: u64,
    pub mode: u64,
    pub tx_caps: u64,
    pub rx_caps: u64,
    /// 0 = FI_EP_UNSPEC
    pub ep_type: u32,
    /// 0 = FI_FORMAT_UNSPEC
    pub addr_format: u32,
    pub src: Option<EpAddr>,
    pub dest: Option<EpAddr>,
    /// `None`: no domain_attr in the hints.
    pub mr_mode: Option<u32>,
    pub threading: u32,
    pub control_progress: u32,
    pub data_progress: u32,
    pub fabric_name: Option<String>,
    pub domain_name: Option<String>,
    pub prov_name: Option<String>,
    pub max_msg_size: u64,
    pub tx_size: u64,
    pub rx_size: u64,
    pub inject_size: u64,
    pub protocol: u32,
    pub tx_msg_order: u64,
    pub rx_msg_order: u64,
    pub domain_caps: u64,
    /// ep_attr tx/rx_ctx_cnt (FI_SHARED_CONTEXT = usize::MAX; > 1: scalable endpoints)
    pub tx_ctx_cnt: u64,
    pub rx_ctx_cnt: u64,
}

/// One answer of getinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub ep_type: EpType,
    pub caps: u64,
    pub tx_caps: u64,
    pub rx_caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src: Option<EpAddr>,
    pub dest: Option<EpAddr>,
    pub mr_mode: u32,
    pub threading: u32,
    pub progress: u32,
    pub max_msg_size: u64,
    pub msg_prefix_size: u64,
    pub inject_size: u64,
    pub tx_size: u64,
    pub rx_size: u64,
    pub iov_limit: u64,
    pub protocol: u32,
    pub msg_order: u64,
    pub fabric_name: String,
    pub domain_name: String,
    /// ep_attr tx/rx_ctx_cnt = FI_SHARED_CONTEXT (asked for in the hints; FI_EP_MSG only).
    pub shared_tx: bool,
    pub shared_rx: bool,
}

/// FI_SHARED_CONTEXT as an ep_attr tx/rx_ctx_cnt (SIZE_MAX).
pub const SHARED_CONTEXT: u64 = u64::MAX;

/// getinfo's inputs besides the hints.
#[derive(Debug, Clone, Default)]
pub struct Query<'a> {
    pub node: Option<&'a str>,
    pub service: Option<&'a str>,
    /// FI_SOURCE: node/service name the local (source) address.
    pub source: bool,
    /// The API version the caller asks for.
    pub version: u32,
}

/// errno-style failure (positive FI_E* value).
pub type Errno = u32;

fn mr_mode_for(hints: &Hints, need_rma: bool, version: u32) -> Option<u32> {
    let Some(h) = hints.mr_mode else { return Some(MR_MODE_RMA | fi::FI_MR_LOCAL) };
    // Pre-1.5 style: FI_MR_BASIC / FI_MR_UNSPEC (0 with an old API) mean "basic registration".
    if h == fi::FI_MR_BASIC || (h == fi::FI_MR_UNSPEC && version < ((1 << 16) | 5)) {
        return Some(fi::FI_MR_BASIC);
    }
    if h == fi::FI_MR_SCALABLE {
        return None;
    }
    if need_rma && h & MR_MODE_RMA != MR_MODE_RMA {
        return None;
    }
    Some(h & MR_MODE_SUPPORTED)
}

/// The answers for `hints` on a host whose address is `local`.
pub fn getinfo(q: &Query<'_>, hints: Option<&Hints>, local: &Local) -> Result<Vec<Info>, Errno> {
    let dflt = Hints::default();
    let h = hints.unwrap_or(&dflt);
    if let Some(p) = &h.prov_name {
        // "droce" alone or a layering like "droce;ofi_rxm" that names us as the core.
        if !p.split(';').any(|n| n.eq_ignore_ascii_case(PROV_NAME)) {
            return Err(fi::FI_ENODATA);
        }
    }
    // One transmit and one receive context per endpoint, or shared ones (FI_EP_MSG only:
    // an SRQ for the receive side); no scalable endpoints.
    if (h.tx_ctx_cnt > 1 && h.tx_ctx_cnt != SHARED_CONTEXT) || (h.rx_ctx_cnt > 1 && h.rx_ctx_cnt != SHARED_CONTEXT) {
        return Err(fi::FI_ENODATA);
    }
    let (shared_tx, shared_rx) = (h.tx_ctx_cnt == SHARED_CONTEXT, h.rx_ctx_cnt == SHARED_CONTEXT);
    if h.domain_caps & !DOMAIN_CAPS != 0 {
        return Err(fi::FI_ENODATA);
    }
    if h.fabric_name.as_deref().is_some_and(|n| n != FABRIC_NAME) || h.domain_name.as_deref().is_some_and(|n| n != DOMAIN_NAME) {
        return Err(fi::FI_ENODATA);
    }
    // Addresses: node/service name the destination unless FI_SOURCE; hints addresses win
    // over nothing, node/service over hints.
    let port = match q.service {
        Some(s) => Some(addr::parse_service(s).ok_or(fi::FI_EINVAL)?),
        None => None,
    };
    let node_ip = match q.node {
        Some(n) => Some(addr::resolve_node(n).ok_or(fi::FI_ENODATA)?),
        None => None,
    };
    let mut src = h.src;
    let mut dest = h.dest;
    if q.source {
        if node_ip.is_some() || port.is_some() {
            let ip = node_ip.unwrap_or(local.ip);
            src = Some(EpAddr::new(SocketAddr::new(ip, port.unwrap_or(0))));
        }
    } else if node_ip.is_some() || port.is_some() {
        let ip = node_ip.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        dest = Some(EpAddr::new(SocketAddr::new(ip, port.unwrap_or(0))));
    }
    // A source must be ours (loopback/unspecified are aliases for our address).
    let src = match src {
        Some(s) => {
            if !local.is_local(s.sa.ip()) {
                return Err(fi::FI_ENODATA);
            }
            EpAddr { sa: SocketAddr::new(local.ip, s.sa.port()), qpn: s.qpn }
        }
        None => EpAddr::new(SocketAddr::new(local.ip, 0)),
    };
    let dest = dest.map(|d| EpAddr { sa: SocketAddr::new(addr::canon(local.resolve_dst(d.sa.ip())), d.sa.port()), qpn: d.qpn });
    if dest.is_some_and(|d| d.sa.is_ipv6() != src.sa.is_ipv6()) {
        return Err(fi::FI_ENODATA);
    }
    let addr_format = match h.addr_format {
        0 => {
            if src.sa.is_ipv6() {
                fi::FI_SOCKADDR_IN6
            } else {
                fi::FI_SOCKADDR_IN
            }
        }
        f if f == fi::FI_SOCKADDR_IN && !src.sa.is_ipv6() => f,
        f if f == fi::FI_SOCKADDR_IN6 => f,
        f if f == fi::FI_SOCKADDR => {
            if src.sa.is_ipv6() {
                fi::FI_SOCKADDR_IN6
            } else {
                fi::FI_SOCKADDR_IN
            }
        }
        _ => return Err(fi::FI_ENODATA),
    };
    let threading = match h.threading {
        0 => fi::FI_THREAD_SAFE,
        t if t <= fi::FI_THREAD_COMPLETION || t == fi::FI_THREAD_DOMAIN => t,
        _ => return Err(fi::FI_ENODATA),
    };
    let progress_hint = h.data_progress.max(h.control_progress);
    let progress = if progress_hint == fi::FI_PROGRESS_AUTO { fi::FI_PROGRESS_AUTO } else { fi::FI_PROGRESS_MANUAL };

    let mut out = Vec::new();
    for ep in [EpType::Msg, EpType::Dgram] {
        if h.ep_type != fi::FI_EP_UNSPEC && h.ep_type != ep.raw() {
            continue;
        }
        let (ours, max_msg, prefix, protocol, order) = match ep {
            EpType::Msg => (MSG_CAPS, MSG_MAX_MSG_SIZE, 0, fi::FI_PROTO_RDMA_CM_IB_RC, MSG_ORDER),
            EpType::Dgram => (DGRAM_CAPS, DGRAM_MAX_MSG_SIZE, UD_PREFIX, fi::FI_PROTO_IB_UD, DGRAM_ORDER),
        };
        if (h.tx_msg_order | h.rx_msg_order) & !order != 0 {
            continue;
        }
        let want = h.caps | h.tx_caps | h.rx_caps;
        if want & !(ours | SEC_CAPS) != 0 {
            continue;
        }
        if h.protocol != 0 && h.protocol != protocol {
            continue;
        }
        if (shared_tx || shared_rx) && ep != EpType::Msg {
            continue;
        }
        // A shared receive context is an SRQ: one receive per message, no multi-receive
        // buffers there.
        if shared_rx && want & fi::FI_MULTI_RECV as u64 != 0 {
            continue;
        }
        // A UD endpoint is named by its QPN: fi_getname names carry it; a node/service
        // address has none, and the provider asks the peer's CM for it (SIDR: a DGRAM
        // endpoint bound to a port answers for that port).
        // UD receives start with the GRH: applications that leave room for it
        // (FI_MSG_PREFIX) get it in their buffer, others a copy from a bounce buffer.
        let mut mode = 0;
        let mut prefix = prefix;
        if ep == EpType::Dgram {
            if h.mode & fi::FI_MSG_PREFIX != 0 || hints.is_none() {
                mode |= fi::FI_MSG_PREFIX;
            } else {
                prefix = 0;
            }
        }
        if ep == EpType::Msg && h.mode & fi::FI_RX_CQ_DATA != 0 {
            // WRITE with immediate consumes a posted receive (IBA 9.4.1.1.2).
            mode |= fi::FI_RX_CQ_DATA;
        }
        let rma = want & (fi::FI_RMA as u64 | fi::FI_ATOMIC as u64) != 0 || (want == 0 && ep == EpType::Msg);
        let Some(mr_mode) = mr_mode_for(h, rma && ep == EpType::Msg, q.version) else { continue };
        if h.max_msg_size > max_msg || h.tx_size > TX_SIZE || h.rx_size > RX_SIZE || h.inject_size > INJECT_SIZE {
            continue;
        }
        let mut caps = if want == 0 { ours } else { (want & ours) | (ours & (fi::FI_LOCAL_COMM | fi::FI_REMOTE_COMM)) };
        if shared_rx {
            caps &= !(fi::FI_MULTI_RECV as u64);
        }
        // FI_MSG/FI_RMA without direction flags mean both directions.
        if caps & fi::FI_MSG as u64 != 0 && caps & (fi::FI_SEND as u64 | fi::FI_RECV as u64) == 0 {
            caps |= fi::FI_SEND as u64 | fi::FI_RECV as u64;
        }
        if caps & fi::FI_RMA as u64 != 0 && caps & (fi::FI_READ | fi::FI_WRITE | fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE) as u64 == 0 {
            caps |= (fi::FI_READ | fi::FI_WRITE | fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE) as u64;
        }
        caps |= want & fi::FI_SOURCE;
        out.push(Info {
            ep_type: ep,
            caps,
            tx_caps: caps & TX_CAPS,
            rx_caps: caps & RX_CAPS,
            mode,
            addr_format,
            src: Some(src),
            dest,
            mr_mode,
            threading,
            progress,
            max_msg_size: max_msg,
            msg_prefix_size: prefix,
            inject_size: INJECT_SIZE.min(max_msg),
            tx_size: TX_SIZE,
            rx_size: RX_SIZE,
            iov_limit: iov_limit(),
            protocol,
            msg_order: order,
            fabric_name: FABRIC_NAME.into(),
            domain_name: DOMAIN_NAME.into(),
            shared_tx,
            shared_rx,
        });
    }
    if out.is_empty() {
        Err(fi::FI_ENODATA)
    } else {
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> Local {
        Local { ip: "10.77.0.1".parse().unwrap(), peer: Some("10.77.0.2".parse().unwrap()) }
    }
    fn q() -> Query<'static> {
        Query { version: FI_API_VERSION, ..Default::default() }
    }

    #[test]
    fn no_hints_lists_msg_and_dgram() {
        let v = getinfo(&q(), None, &local()).unwrap();
        assert_eq!(v.iter().map(|i| i.ep_type).collect::<Vec<_>>(), vec![EpType::Msg, EpType::Dgram]);
        assert_eq!(v[0].max_msg_size, 1 << 31);
        assert_eq!(v[0].src.unwrap().sa, "10.77.0.1:0".parse().unwrap());
        assert_eq!(v[0].addr_format, fi::FI_SOCKADDR_IN);
        assert_eq!(v[0].fabric_name, "droce");
        assert_eq!(v[1].msg_prefix_size, 40);
    }

    #[test]
    fn ep_type_caps_and_mode_filter() {
        let h = Hints { ep_type: fi::FI_EP_MSG, caps: fi::FI_MSG as u64, ..Default::default() };
        let v = getinfo(&q(), Some(&h), &local()).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].caps & fi::FI_RMA as u64, 0);
        assert_ne!(v[0].caps & fi::FI_SEND as u64, 0);
        let tagged = Hints { caps: fi::FI_TAGGED as u64, ..Default::default() };
        assert_eq!(getinfo(&q(), Some(&tagged), &local()), Err(fi::FI_ENODATA));
        // DGRAM without FI_MSG_PREFIX: no prefix (the provider copies)
        let dg = Hints { ep_type: fi::FI_EP_DGRAM, caps: fi::FI_MSG as u64, ..Default::default() };
        let v = getinfo(&q(), Some(&dg), &local()).unwrap();
        assert_eq!((v[0].mode, v[0].msg_prefix_size), (0, 0));
        let dg = Hints { mode: fi::FI_MSG_PREFIX | fi::FI_CONTEXT, ..dg };
        assert_eq!(getinfo(&q(), Some(&dg), &local()).unwrap()[0].mode, fi::FI_MSG_PREFIX);
        let rdm = Hints { ep_type: fi::FI_EP_RDM, ..Default::default() };
        assert!(getinfo(&q(), Some(&rdm), &local()).is_err());
    }

    #[test]
    fn atomics_are_the_roce_ones() {
        assert!(atomic_supported(fi::FI_UINT64, fi::FI_SUM, 0));
        assert!(atomic_supported(fi::FI_INT64, fi::FI_SUM, fi::FI_FETCH_ATOMIC));
        assert!(atomic_supported(fi::FI_UINT64, fi::FI_ATOMIC_READ, fi::FI_FETCH_ATOMIC));
        assert!(atomic_supported(fi::FI_UINT64, fi::FI_CSWAP, fi::FI_COMPARE_ATOMIC));
        assert!(!atomic_supported(fi::FI_UINT32, fi::FI_SUM, 0));
        assert!(!atomic_supported(fi::FI_UINT64, fi::FI_PROD, 0));
        assert!(!atomic_supported(fi::FI_UINT64, fi::FI_CSWAP_GT, fi::FI_COMPARE_ATOMIC));
        assert!(!atomic_supported(fi::FI_UINT64, fi::FI_CSWAP, 0));
    }

    #[test]
    fn orders_and_directional_caps() {
        let h = Hints { ep_type: fi::FI_EP_MSG, tx_msg_order: fi::FI_ORDER_SAS as u64 | fi::FI_ORDER_RAW as u64, ..Default::default() };
        let v = getinfo(&q(), Some(&h), &local()).unwrap();
        assert_eq!(v[0].msg_order & h.tx_msg_order, h.tx_msg_order);
        let h = Hints { ep_type: fi::FI_EP_MSG, rx_msg_order: fi::FI_ORDER_WAR as u64, ..Default::default() };
        assert!(getinfo(&q(), Some(&h), &local()).is_err(), "RC does not keep WRITE after READ");
        let h = Hints { ep_type: fi::FI_EP_MSG, rx_msg_order: fi::FI_ORDER_DATA as u64, ..Default::default() };
        assert!(getinfo(&q(), Some(&h), &local()).is_err());
        let v = getinfo(&q(), None, &local()).unwrap();
        assert_eq!(v[0].tx_caps & (fi::FI_RECV | fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE) as u64, 0);
        assert_eq!(v[0].rx_caps & (fi::FI_SEND | fi::FI_READ | fi::FI_WRITE) as u64, 0);
        let h = Hints { domain_caps: fi::FI_SHARED_AV, ..Default::default() };
        assert!(getinfo(&q(), Some(&h), &local()).is_err());
        // shared contexts: FI_EP_MSG only, echoed in the answer
        let h = Hints { tx_ctx_cnt: SHARED_CONTEXT, rx_ctx_cnt: SHARED_CONTEXT, ..Default::default() };
        let v = getinfo(&q(), Some(&h), &local()).unwrap();
        assert_eq!(v.iter().map(|i| (i.ep_type, i.shared_tx, i.shared_rx)).collect::<Vec<_>>(), vec![(EpType::Msg, true, true)]);
        let h = Hints { ep_type: fi::FI_EP_DGRAM, rx_ctx_cnt: SHARED_CONTEXT, ..Default::default() };
        assert!(getinfo(&q(), Some(&h), &local()).is_err(), "no shared contexts on DGRAM");
        let v = getinfo(&q(), None, &local()).unwrap();
        assert!(v.iter().all(|i| !i.shared_tx && !i.shared_rx), "not shared unless asked");
        assert!(v.iter().any(|i| i.caps & fi::FI_MULTI_RECV as u64 != 0));
        // a shared receive context is an SRQ: no multi-receive buffers there
        let h = Hints { rx_ctx_cnt: SHARED_CONTEXT, ..Default::default() };
        let v = getinfo(&q(), Some(&h), &local()).unwrap();
        assert!(v.iter().all(|i| i.caps & fi::FI_MULTI_RECV as u64 == 0), "{v:?}");
        let h = Hints { rx_ctx_cnt: SHARED_CONTEXT, caps: (fi::FI_MSG | fi::FI_MULTI_RECV) as u64, ..Default::default() };
        assert!(getinfo(&q(), Some(&h), &local()).is_err(), "multi-receive on a shared receive context");
        let h = Hints { rx_ctx_cnt: 4, ..Default::default() };
        assert!(getinfo(&q(), Some(&h), &local()).is_err(), "scalable endpoints");
    }

    #[test]
    fn mr_mode_threading_names() {
        let h = Hints { ep_type: fi::FI_EP_MSG, caps: fi::FI_RMA as u64, mr_mode: Some(fi::FI_MR_LOCAL), ..Default::default() };
        assert!(getinfo(&q(), Some(&h), &local()).is_err(), "RMA needs provider keys and virtual addresses");
        let h = Hints { mr_mode: Some(fi::FI_MR_LOCAL | MR_MODE_RMA | fi::FI_MR_ENDPOINT), ..h };
        assert_eq!(getinfo(&q(), Some(&h), &local()).unwrap()[0].mr_mode, fi::FI_MR_LOCAL | MR_MODE_RMA);
        let h = Hints { mr_mode: Some(fi::FI_MR_BASIC), ..h };
        assert_eq!(getinfo(&q(), Some(&h), &local()).unwrap()[0].mr_mode, fi::FI_MR_BASIC);
        let h = Hints { threading: fi::FI_THREAD_DOMAIN, ..Default::default() };
        assert_eq!(getinfo(&q(), Some(&h), &local()).unwrap()[0].threading, fi::FI_THREAD_DOMAIN);
        let h = Hints { domain_name: Some("mlx5_0".into()), ..Default::default() };
        assert!(getinfo(&q(), Some(&h), &local()).is_err());
        let h = Hints { prov_name: Some("tcp".into()), ..Default::default() };
        assert!(getinfo(&q(), Some(&h), &local()).is_err());
        let h = Hints { prov_name: Some("droce;ofi_rxm".into()), max_msg_size: 1 << 20, ..Default::default() };
        assert!(getinfo(&q(), Some(&h), &local()).is_ok());
        let h = Hints { max_msg_size: 1 << 40, ..Default::default() };
        assert!(getinfo(&q(), Some(&h), &local()).is_err());
    }

    #[test]
    fn node_service_and_source() {
        let qq = Query { node: Some("127.0.0.1"), service: Some("47592"), ..q() };
        let v = getinfo(&qq, None, &local()).unwrap();
        assert_eq!(v[0].dest.unwrap().sa, "10.77.0.2:47592".parse().unwrap(), "loopback is the wire's peer");
        assert_eq!(v.len(), 2, "msg and dgram (the UD QPN comes from the peer's CM through SIDR)");
        assert_eq!((v[1].ep_type, v[1].dest.unwrap().sa, v[1].dest.unwrap().qpn), (EpType::Dgram, "10.77.0.2:47592".parse().unwrap(), None));
        let named = Hints { dest: Some(EpAddr::with_qpn("10.77.0.2:0".parse().unwrap(), 0x12)), ep_type: fi::FI_EP_DGRAM, ..Default::default() };
        assert_eq!(getinfo(&q(), Some(&named), &local()).unwrap()[0].dest.unwrap().qpn, Some(0x12));
        let qq = Query { node: None, service: Some("47592"), source: true, ..q() };
        let v = getinfo(&qq, None, &local()).unwrap();
        assert_eq!(v[0].src.unwrap().sa, "10.77.0.1:47592".parse().unwrap());
        assert!(v[0].dest.is_none());
        let qq = Query { node: Some("10.9.9.9"), source: true, ..q() };
        assert!(getinfo(&qq, None, &local()).is_err(), "not our address");
        let qq = Query { node: Some("::1"), service: Some("5"), source: true, ..q() };
        assert_eq!(getinfo(&qq, None, &local()).unwrap()[0].src.unwrap().sa, "10.77.0.1:5".parse().unwrap());
        let h = Hints { addr_format: fi::FI_SOCKADDR_IN6, ..Default::default() };
        assert_eq!(getinfo(&q(), Some(&h), &local()).unwrap()[0].addr_format, fi::FI_SOCKADDR_IN6);
        let h = Hints { addr_format: fi::FI_ADDR_PSMX2, ..Default::default() };
        assert!(getinfo(&q(), Some(&h), &local()).is_err());
        let h = Hints { dest: Some(EpAddr::new("127.0.0.1:9".parse().unwrap())), ..Default::default() };
        assert_eq!(getinfo(&q(), Some(&h), &local()).unwrap()[0].dest.unwrap().sa, "10.77.0.2:9".parse().unwrap());
    }
}

/// The tx/rx `iov_limit` advertised and enforced: `DROCE_IOV_LIMIT` (1..=IOV_LIMIT), else
/// IOV_LIMIT. A lower limit serves applications that cannot use more (fabtests' ubertest
/// splits a message over up to iov_limit entries and its rounding loses or adds a byte from
/// 5 entries on; docs/libfabric.md). A value out of range is named on stderr once and ignored.
pub fn iov_limit() -> u64 {
    static L: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *L.get_or_init(|| match parse_iov_limit(std::env::var("DROCE_IOV_LIMIT").ok().as_deref()) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("droce: {e}; iov_limit stays {IOV_LIMIT}");
            IOV_LIMIT
        }
    })
}

fn parse_iov_limit(v: Option<&str>) -> Result<u64, String> {
    match v.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(IOV_LIMIT),
        Some(v) => v.parse::<u64>().ok().filter(|n| (1..=IOV_LIMIT).contains(n)).ok_or_else(|| format!("DROCE_IOV_LIMIT='{v}': want 1..={IOV_LIMIT}")),
    }
}

#[cfg(test)]
mod iov_limit_tests {
    use super::*;

    #[test]
    fn the_iov_limit_knob_takes_1_to_the_storage_limit() {
        assert_eq!(parse_iov_limit(None), Ok(IOV_LIMIT));
        assert_eq!(parse_iov_limit(Some(" ")), Ok(IOV_LIMIT));
        assert_eq!(parse_iov_limit(Some("4")), Ok(4));
        assert_eq!(parse_iov_limit(Some("1")), Ok(1));
        assert!(parse_iov_limit(Some("0")).unwrap_err().contains("want 1..=8"));
        assert!(parse_iov_limit(Some("9")).is_err());
        assert!(parse_iov_limit(Some("four")).is_err());
    }
}
