//! RoCEv2 wire formats: zero-copy header views (`*Packet<T>`) and plain records (`*Repr`),
//! after smoltcp's `wire` module (see `docs/design.md`), plus the whole-frame record [`RoceRepr`],
//! the ICRC, ARP and ICMPv6 ND for neighbour resolution, and the RX frame [`classify`]er.
//!
//! A RoCEv2 frame is Ethernet / IPv4 or IPv6 / UDP (dst 4791) / BTH / extension headers /
//! payload / pad / ICRC (IBA annex A17).

use core::fmt;
use core::ops::Range;

pub mod aeth;
pub mod arp;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub(crate) mod checksum;
pub mod classify;
pub mod deth;
pub mod eth;
pub mod icmpv6;
pub mod icrc;
pub mod icrc_delta;
pub mod ieth;
pub mod immdt;
pub mod ipv4;
pub mod ipv6;
pub mod opcode;
pub mod reth;
mod roce;
pub mod udp;

pub use aeth::{AethPacket, AethRepr, AethSyndrome, NakCode, CREDITS_UNLIMITED};
pub use arp::{ArpOperation, ArpPacket, ArpRepr};
pub use atomic_ack_eth::{AtomicAckEthPacket, AtomicAckEthRepr};
pub use atomic_eth::{AtomicEthPacket, AtomicEthRepr};
pub use bth::{BthPacket, BthRepr};
pub use classify::{classify, FrameKind};
pub use deth::{DethPacket, DethRepr};
pub use eth::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr};
pub use icmpv6::{NdFlags, NdPacket, NdRepr};
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub use opcode::{ExtHeader, ExtHeaders, OpInfo, Opcode, Operation, Position, TransportClass};
pub use reth::{RethPacket, RethRepr};
pub use roce::{emit_transport, finish_frame, pad_len, ExtReprs, HeaderTemplate, IpRepr, RoceRepr, CNP_RESERVED_LEN};
pub use udp::{UdpPacket, UdpRepr, ROCE_V2_PORT};

/// A byte range inside a header.
type Field = Range<usize>;

/// A malformed, truncated, unsupported or corrupted packet: drop it and count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Error;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("malformed packet")
    }
}

impl std::error::Error for Error {}

pub type Result<T> = core::result::Result<T, Error>;
