//! What rdma_cm (Linux `drivers/infiniband/core/cma.c`, librdmacm) adds on top of IB CM.
//!
//! * **Service IDs.** An rdma_cm id listening on port `p` in port space `ps` listens on IB
//!   service ID `ps << 16 | p`, inside the range 0x0000_0000_01xx_xxxx (Linux
//!   `IB_CMA_SERVICE_ID`, mask `IB_CMA_SERVICE_ID_MASK` = 0xFFFF_FFFF_FF00_0000). rping's
//!   default port 7174 over RDMA_PS_TCP gives 0x0000_0000_0106_1c06.
//! * **Private-data header.** For the IP port spaces (TCP, UDP, IPoIB) the first 36 bytes of
//!   REQ (and SIDR_REQ) private data are `struct cma_hdr` (Linux) / `struct ib_connect_hdr`
//!   (librdmacm `cma.h`); the consumer's own private data follows, so an rdma_cm consumer has
//!   92 - 36 = 56 bytes in a REQ. REP, RTU, REJ, DREQ and DREP private data carry no header.
//!
//! ```text
//!  0: cma_version(8) = 0x00
//!  1: ip_version(8): version in bits 7..4 (0x40 IPv4, 0x60 IPv6), low nibble 0
//!  2: port(16): the active side's source port (the destination port is in the service ID)
//!  4: source address(128): IPv6, or IPv4 in the last 4 bytes after 12 zero bytes
//! 20: destination address(128): same encoding
//! ```
//! The passive side matches the destination address against its listening address (unless it
//! listens on a wildcard) and reports source address and port to its consumer.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::field;
use super::Error;

/// rdma_cm port spaces (`enum rdma_ucm_port_space`, librdmacm `rdma_cma.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortSpace(pub u16);

impl PortSpace {
    pub const IPOIB: PortSpace = PortSpace(0x0002);
    /// Reliable connected (RC) ids: rping, ib_*_bw -R, libfabric verbs FI_EP_MSG.
    pub const TCP: PortSpace = PortSpace(0x0106);
    /// UD ids; they use SIDR, and Q_Key `RDMA_UDP_QKEY` 0x0123_4567.
    pub const UDP: PortSpace = PortSpace(0x0111);
    /// AF_IB ids: no private-data header.
    pub const IB: PortSpace = PortSpace(0x013f);

    /// True for the port spaces whose REQ private data starts with a [`CmaHeaderRepr`].
    pub const fn has_ip_header(self) -> bool {
        matches!(self.0, 0x0002 | 0x0106 | 0x0111)
    }
}

/// Q_Key rdma_cm gives RDMA_PS_UDP QPs (librdmacm `RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
/// rdma_cm's service ID range and mask (Linux `IB_CMA_SERVICE_ID`, `IB_CMA_SERVICE_ID_MASK`).
pub const SERVICE_ID_BASE: u64 = 0x0000_0000_0100_0000;
pub const SERVICE_ID_MASK: u64 = 0xffff_ffff_ff00_0000;
/// Length of the private-data header.
pub const HEADER_LEN: usize = 36;
/// `cma_version` of every rdma_cm since 2.6.x (Linux `CMA_VERSION`).
pub const CMA_VERSION: u8 = 0x00;
/// Consumer private data an rdma_cm REQ can carry after the header.
pub const REQ_USER_PRIVATE_DATA_LEN: usize = super::req::PRIVATE_DATA_LEN - HEADER_LEN;

/// The IB service ID of rdma_cm port `port` in port space `ps`.
pub const fn service_id(ps: PortSpace, port: u16) -> u64 {
    ((ps.0 as u64) << 16) | port as u64
}

/// Port space and port of an rdma_cm service ID, `None` outside rdma_cm's range.
pub const fn parse_service_id(service_id: u64) -> Option<(PortSpace, u16)> {
    if service_id & SERVICE_ID_MASK != SERVICE_ID_BASE {
        return None;
    }
    Some((PortSpace((service_id >> 16) as u16), service_id as u16))
}

/// The IPv6 flow label rdma_cm gives a RoCEv2 path when the source address carries none
/// (always for IPv4; Linux `cma_get_roce_udp_flow_label`): `(src_port * 31 + dst_port)` in
/// 20 bits, with the active side's ports. It travels in the REQ primary path, and rxe derives
/// the RC QP's UDP source port from it (see docs/interop.md (d)).
pub const fn roce_flow_label(src_port: u16, dst_port: u16) -> u32 {
    (src_port as u32 * 31 + dst_port as u32) & 0xf_ffff
}

/// The two addresses of the header; one family for both, as rdma_cm sends them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmaAddrs {
    V4 { src: Ipv4Addr, dst: Ipv4Addr },
    V6 { src: Ipv6Addr, dst: Ipv6Addr },
}

impl CmaAddrs {
    pub const fn src(&self) -> IpAddr {
        match *self {
            CmaAddrs::V4 { src, .. } => IpAddr::V4(src),
            CmaAddrs::V6 { src, .. } => IpAddr::V6(src),
        }
    }

    pub const fn dst(&self) -> IpAddr {
        match *self {
            CmaAddrs::V4 { dst, .. } => IpAddr::V4(dst),
            CmaAddrs::V6 { dst, .. } => IpAddr::V6(dst),
        }
    }
}

/// The rdma_cm IP private-data header as plain data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHeaderRepr {
    /// The active side's source port; the listening port travels in the service ID.
    pub src_port: u16,
    pub addrs: CmaAddrs,
}

mod fld {
    pub const VERSION: usize = 0;
    pub const IP_VERSION: usize = 1;
    pub const PORT: usize = 2;
    pub const SRC: usize = 4;
    pub const DST: usize = 20;
}

impl CmaHeaderRepr {
    /// Parses the header at the start of REQ private data.
    pub fn parse(private_data: &[u8]) -> Result<Self, Error> {
        let b = private_data;
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[fld::VERSION] != CMA_VERSION {
            return Err(Error::Malformed);
        }
        let src_port = field::u16_at(b, fld::PORT);
        let addrs = match b[fld::IP_VERSION] >> 4 {
            4 => CmaAddrs::V4 {
                src: Ipv4Addr::from(field::array_at::<4>(b, fld::SRC + 12)),
                dst: Ipv4Addr::from(field::array_at::<4>(b, fld::DST + 12)),
            },
            6 => CmaAddrs::V6 {
                src: Ipv6Addr::from(field::array_at::<16>(b, fld::SRC)),
                dst: Ipv6Addr::from(field::array_at::<16>(b, fld::DST)),
            },
            _ => return Err(Error::Malformed),
        };
        Ok(CmaHeaderRepr { src_port, addrs })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 36 header bytes at the start of `private_data` (zeroing the IPv4 padding).
    ///
    /// # Panics
    /// If `private_data` is shorter than [`HEADER_LEN`].
    pub fn emit(&self, private_data: &mut [u8]) {
        let b = &mut private_data[..HEADER_LEN];
        b.fill(0);
        b[fld::VERSION] = CMA_VERSION;
        field::set_u16_at(b, fld::PORT, self.src_port);
        match self.addrs {
            CmaAddrs::V4 { src, dst } => {
                b[fld::IP_VERSION] = 4 << 4;
                b[fld::SRC + 12..fld::SRC + 16].copy_from_slice(&src.octets());
                b[fld::DST + 12..fld::DST + 16].copy_from_slice(&dst.octets());
            }
            CmaAddrs::V6 { src, dst } => {
                b[fld::IP_VERSION] = 6 << 4;
                b[fld::SRC..fld::SRC + 16].copy_from_slice(&src.octets());
                b[fld::DST..fld::DST + 16].copy_from_slice(&dst.octets());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rping_service_id() {
        assert_eq!(service_id(PortSpace::TCP, 7174), 0x0000_0000_0106_1c06);
        assert_eq!(
            parse_service_id(0x0000_0000_0106_1c06),
            Some((PortSpace::TCP, 7174))
        );
        assert_eq!(service_id(PortSpace::UDP, 1), 0x0111_0001);
        assert_eq!(parse_service_id(0x0200_0000_0000_0001), None);
        assert_eq!(parse_service_id(0x0000_0001_0106_1c06), None);
    }

    #[test]
    fn header_v4_roundtrip() {
        let h = CmaHeaderRepr {
            src_port: 0xb6b3,
            addrs: CmaAddrs::V4 {
                src: Ipv4Addr::new(192, 168, 77, 11),
                dst: Ipv4Addr::new(192, 168, 77, 10),
            },
        };
        let mut b = [0xeeu8; 40];
        h.emit(&mut b);
        let mut want = [0u8; 36];
        want[1] = 0x40;
        want[2..4].copy_from_slice(&[0xb6, 0xb3]);
        want[16..20].copy_from_slice(&[192, 168, 77, 11]);
        want[32..36].copy_from_slice(&[192, 168, 77, 10]);
        assert_eq!(b[..36], want);
        assert_eq!(b[36..], [0xee; 4]);
        assert_eq!(CmaHeaderRepr::parse(&b).unwrap(), h);
    }

    #[test]
    fn header_v6_roundtrip() {
        let h = CmaHeaderRepr {
            src_port: 1,
            addrs: CmaAddrs::V6 {
                src: "fd00::1".parse().unwrap(),
                dst: "fd00::2".parse().unwrap(),
            },
        };
        let mut b = [0u8; 36];
        h.emit(&mut b);
        assert_eq!(b[1], 0x60);
        assert_eq!(CmaHeaderRepr::parse(&b).unwrap(), h);
    }

    #[test]
    fn header_bad_input() {
        let mut b = [0u8; 36];
        b[1] = 0x40;
        assert!(CmaHeaderRepr::parse(&b).is_ok());
        assert_eq!(CmaHeaderRepr::parse(&b[..35]), Err(Error::Truncated));
        b[0] = 1;
        assert_eq!(CmaHeaderRepr::parse(&b), Err(Error::Malformed));
        b[0] = 0;
        b[1] = 0x50;
        assert_eq!(CmaHeaderRepr::parse(&b), Err(Error::Malformed));
    }
}

/// What an rdma_cm active side puts into its REQ for an RC connection (RDMA_PS_TCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RcConnect<'a> {
    pub local_comm_id: u32,
    pub local_ca_guid: u64,
    pub local_qpn: crate::types::Qpn,
    /// Goes into the REQ's Starting PSN: the PSN the passive side will send with, i.e. this
    /// side's `rq_psn` (Linux `cm.c` direction).
    pub starting_psn: crate::types::Psn,
    /// Source and destination IP and port; the destination port selects the listener.
    pub src: core::net::SocketAddr,
    pub dst: core::net::SocketAddr,
    /// The RoCEv2 GIDs of the two ports (`Gid::from_ipv4` for IPv4).
    pub local_gid: crate::types::Gid,
    pub remote_gid: crate::types::Gid,
    /// IBA MTU code (3 = 1024 for a 1500-byte Ethernet MTU).
    pub path_mtu: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// At most [`REQ_USER_PRIVATE_DATA_LEN`] bytes; more is cut.
    pub private_data: &'a [u8],
}

impl RcConnect<'_> {
    /// The REQ Linux 6.1 rdma_cm sends for these parameters: CM response timeouts 20
    /// (`CMA_CM_RESPONSE_TIMEOUT`), 15 CM retries (`CMA_MAX_CM_RETRIES`), P_Key 0xffff,
    /// permissive LIDs, hop limit 64, local ACK timeout 19 (packet life time 18 + 1), the
    /// RoCEv2 flow label from the ports, the rdma_cm header then `private_data`.
    /// Returns `None` when the two addresses are not of one family.
    pub fn to_req(&self) -> Option<super::req::ReqRepr> {
        use core::net::IpAddr;
        let addrs = match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => CmaAddrs::V4 { src, dst },
            (IpAddr::V6(src), IpAddr::V6(dst)) => CmaAddrs::V6 { src, dst },
            _ => return None,
        };
        let mut private_data = [0u8; super::req::PRIVATE_DATA_LEN];
        CmaHeaderRepr {
            src_port: self.src.port(),
            addrs,
        }
        .emit(&mut private_data);
        let n = self.private_data.len().min(REQ_USER_PRIVATE_DATA_LEN);
        private_data[HEADER_LEN..HEADER_LEN + n].copy_from_slice(&self.private_data[..n]);
        Some(super::req::ReqRepr {
            local_comm_id: self.local_comm_id,
            service_id: service_id(PortSpace::TCP, self.dst.port()),
            local_ca_guid: self.local_ca_guid,
            local_qkey: crate::types::QKey(0),
            local_qpn: self.local_qpn,
            responder_resources: self.responder_resources,
            local_eecn: 0,
            initiator_depth: self.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: 20,
            transport_service_type: super::req::transport_service_type::RC,
            end_to_end_flow_control: false,
            starting_psn: self.starting_psn,
            local_cm_response_timeout: 20,
            retry_count: self.retry_count.min(7),
            pkey: crate::types::PKey(0xffff),
            path_mtu: self.path_mtu,
            rdc_exists: false,
            rnr_retry_count: self.rnr_retry_count.min(7),
            max_cm_retries: 15,
            srq: false,
            extended_transport_type: 0,
            primary_path: super::path::PathRepr {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: self.local_gid,
                remote_gid: self.remote_gid,
                flow_label: roce_flow_label(self.src.port(), self.dst.port()),
                packet_rate: 0,
                traffic_class: 0,
                hop_limit: 64,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: 19,
            },
            alternate_path: None,
            sap_supported: false,
            private_data,
        })
    }
}
