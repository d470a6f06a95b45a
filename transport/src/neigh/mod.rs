//! Neighbour resolution for one port: ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861).
//!
//! A port owned by a poll-mode driver has no kernel stack, so the engine answers ARP requests
//! and neighbour solicitations for its own addresses and resolves peers' MACs itself. Sans-IO
//! like the rest of the crate (smoltcp keeps its neighbour cache in the stack the same way):
//!
//! - [`Neighbours::route`] takes a frame to an IP destination and says where it goes: the
//!   MAC to send it to, or held while a request goes out, or dropped (counted);
//! - [`Neighbours::handle_arp`] / [`Neighbours::handle_nd`] feed received ARP / ICMPv6 in:
//!   they learn, answer, and give back the frames that were waiting for the learned MAC;
//! - [`Neighbours::poll_transmit`] hands out the requests and replies to send;
//! - [`Neighbours::poll_timeout`] / [`Neighbours::handle_timeout`] run the retries.
//!
//! Frames are of any type `T` (an mbuf in the engine, a `Vec<u8>` in the simulator): the
//! table only holds them.

mod table;

pub use table::{HoldResult, NeighConfig, NeighTable};

use crate::time::Instant;
use crate::wire::icmpv6::{self, ND_HOP_LIMIT, PROTOCOL_ICMPV6};
use crate::wire::ipv6::{link_local_from_mac, solicited_node};
use crate::wire::{
    arp, eth, ipv6, ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Ipv6Packet,
    Ipv6Repr, NdFlags, NdPacket, NdRepr, Result,
};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Shortest Ethernet frame without FCS; ARP frames are padded to it as Linux does.
pub const ETH_MIN_FRAME: usize = 60;
/// Length of the NS and NA frames sent (Ethernet, IPv6, ND with one link-layer option).
pub const ND_FRAME_LEN: usize = eth::HEADER_LEN + ipv6::HEADER_LEN + icmpv6::HEADER_LEN + 8;
/// The buffer [`Neighbours::poll_transmit`] needs.
pub const MAX_CONTROL_FRAME: usize = ND_FRAME_LEN;

/// What neighbour resolution did, as counters (the engine shows them as its own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NeighCounters {
    pub arp_requests_rx: u64,
    pub arp_replies_rx: u64,
    pub arp_requests_tx: u64,
    pub arp_replies_tx: u64,
    pub nd_solicits_rx: u64,
    pub nd_adverts_rx: u64,
    pub nd_solicits_tx: u64,
    pub nd_adverts_tx: u64,
    /// Frames dropped because their destination never resolved.
    pub unresolved_drops: u64,
    /// Frames dropped because the hold queue (per destination or of destinations) was full.
    pub queue_full: u64,
}

/// Where [`Neighbours::route`] sends a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Route<T> {
    /// The destination is known: send the frame to this MAC.
    Send([u8; 6], T),
    /// Held until the destination resolves (a request is queued when it is the first).
    Held,
    /// The hold queue is full: the frame is given back to be dropped (counted).
    Dropped(T),
}

/// The frames that waited for a MAC just learned: send them to `mac`, in order.
#[derive(Debug, PartialEq, Eq)]
pub struct Released<T> {
    pub mac: [u8; 6],
    pub frames: Vec<T>,
}

/// A request or reply waiting for [`Neighbours::poll_transmit`].
#[derive(Debug, Clone, Copy)]
enum Control {
    Arp { eth_dst: [u8; 6], repr: ArpRepr },
    Nd { eth_dst: [u8; 6], src: Ipv6Addr, dst: Ipv6Addr, repr: NdRepr },
}

/// Neighbour resolution of one port (see the module docs).
#[derive(Debug)]
pub struct Neighbours<T> {
    mac: [u8; 6],
    own_v4: Vec<Ipv4Addr>,
    /// The link-local address from the MAC first, then the configured ones.
    own_v6: Vec<Ipv6Addr>,
    table: NeighTable<T>,
    counters: NeighCounters,
    out: VecDeque<Control>,
}

impl<T> Neighbours<T> {
    /// Resolution for a port with `mac` and addresses `ipv4` / `ipv6` (the link-local address
    /// derived from `mac` is always one of its own).
    pub fn new(cfg: NeighConfig, mac: [u8; 6], ipv4: &[Ipv4Addr], ipv6: &[Ipv6Addr]) -> Self {
        let ll = link_local_from_mac(mac);
        let mut own_v6 = vec![ll];
        own_v6.extend(ipv6.iter().filter(|a| **a != ll));
        Neighbours { mac, own_v4: ipv4.to_vec(), own_v6, table: NeighTable::new(cfg), counters: NeighCounters::default(), out: VecDeque::new() }
    }

    pub fn config(&self) -> &NeighConfig {
        self.table.config()
    }
    pub fn counters(&self) -> &NeighCounters {
        &self.counters
    }
    /// The IPv6 addresses ND answers for: the link-local one first.
    pub fn own_ipv6(&self) -> &[Ipv6Addr] {
        &self.own_v6
    }
    /// A static entry: never expires, never replaced by learning.
    pub fn add_static(&mut self, ip: IpAddr, mac: [u8; 6]) {
        self.table.add_static(ip, mac);
    }
    /// `(ip, mac, is_static)` of every entry, sorted.
    pub fn entries(&self) -> Vec<(IpAddr, [u8; 6], bool)> {
        self.table.entries()
    }
    /// The MAC of `ip` if known and fresh.
    pub fn lookup(&mut self, ip: IpAddr, now: Instant) -> Option<[u8; 6]> {
        self.table.lookup(ip, now)
    }
    /// The MAC of `ip` if known and fresh; else starts resolving it (one ARP request / NS now,
    /// retried by [`Neighbours::handle_timeout`] as for a held frame) and returns `None`. What
    /// an address handle does before its first send: verbs resolve the destination when the
    /// AH is made, so that a burst of UD sends is not dropped behind an unanswered request.
    pub fn resolve(&mut self, ip: IpAddr, now: Instant) -> Option<[u8; 6]> {
        if let Some(mac) = self.table.lookup(ip, now) {
            return Some(mac);
        }
        if self.table.start_request(ip, now) {
            self.solicit(ip);
        }
        None
    }
    /// Frames waiting for resolution, all destinations.
    pub fn held_frames(&self) -> usize {
        self.table.held_frames()
    }

    /// Where a frame to `ip` goes: a known MAC, or held (the first frame for a destination
    /// queues an ARP request / solicitation), or dropped when the hold queue is full.
    #[inline]
    pub fn route(&mut self, now: Instant, ip: IpAddr, frame: T) -> Route<T> {
        if let Some(mac) = self.table.lookup(ip, now) {
            return Route::Send(mac, frame);
        }
        match self.table.hold(ip, frame, now) {
            HoldResult::HeldSendRequest => {
                self.solicit(ip);
                Route::Held
            }
            HoldResult::Held => Route::Held,
            HoldResult::Full(frame) => {
                self.counters.queue_full += 1;
                Route::Dropped(frame)
            }
        }
    }

    /// A received ARP packet (the Ethernet payload). Err: not an Ethernet/IPv4 request or
    /// reply (drop and count it).
    pub fn handle_arp(&mut self, now: Instant, packet: &[u8]) -> Result<Option<Released<T>>> {
        let r = ArpRepr::parse(&ArpPacket::new_checked(packet)?)?;
        match r.operation {
            ArpOperation::Request => self.counters.arp_requests_rx += 1,
            ArpOperation::Reply => self.counters.arp_replies_rx += 1,
            ArpOperation::Unknown(_) => return Err(crate::wire::Error),
        }
        let for_us = self.own_v4.contains(&r.target_protocol_addr);
        let sender = IpAddr::V4(r.source_protocol_addr);
        let smac = r.source_hardware_addr.0;
        // RFC 826: update a sender we know (or are asking for); add it when the packet is for us.
        let learn = (for_us || self.table.knows(sender) || self.table.is_pending(sender))
            && r.source_protocol_addr != Ipv4Addr::UNSPECIFIED
            && smac != [0; 6];
        let released = if learn { Some(self.learn(now, sender, smac)) } else { None };
        if for_us && r.operation == ArpOperation::Request {
            self.counters.arp_replies_tx += 1;
            let repr = ArpRepr {
                operation: ArpOperation::Reply,
                source_hardware_addr: EthernetAddress(self.mac),
                source_protocol_addr: r.target_protocol_addr,
                target_hardware_addr: r.source_hardware_addr,
                target_protocol_addr: r.source_protocol_addr,
            };
            self.out.push_back(Control::Arp { eth_dst: smac, repr });
        }
        Ok(released)
    }

    /// A received IPv6 packet carrying ICMPv6 (from the IPv6 header on), from Ethernet source
    /// `eth_src` (the MAC when the message has no link-layer option). Err: not a valid NS or
    /// NA (RFC 4861 7.1.1/7.1.2: hop limit 255, code 0, checksum, options): drop and count it.
    pub fn handle_nd(&mut self, now: Instant, eth_src: [u8; 6], packet: &[u8]) -> Result<Option<Released<T>>> {
        let ip = Ipv6Repr::parse(&Ipv6Packet::new_checked(packet)?)?;
        if ip.next_header != PROTOCOL_ICMPV6 || ip.hop_limit != ND_HOP_LIMIT {
            return Err(crate::wire::Error);
        }
        let msg = &packet[ipv6::HEADER_LEN..ipv6::HEADER_LEN + ip.payload_len];
        let nd = NdRepr::parse(&NdPacket::new_checked(msg)?, ip.src_addr, ip.dst_addr)?;
        match nd {
            NdRepr::Solicit { target_addr, source_lladdr } => {
                self.counters.nd_solicits_rx += 1;
                // An unspecified source is a duplicate address detection probe: nothing to
                // learn, and the answer would go to all-nodes (not done).
                if !self.own_v6.contains(&target_addr) || ip.src_addr.is_unspecified() {
                    return Ok(None);
                }
                let lladdr = source_lladdr.map_or(eth_src, |a| a.0);
                let released = self.learn(now, IpAddr::V6(ip.src_addr), lladdr);
                self.counters.nd_adverts_tx += 1;
                // RFC 4861 7.2.4: solicited, override, to the solicitation's source
                let flags = NdFlags { router: false, solicited: true, override_: true };
                let repr = NdRepr::Advert { flags, target_addr, target_lladdr: Some(EthernetAddress(self.mac)) };
                self.out.push_back(Control::Nd { eth_dst: lladdr, src: target_addr, dst: ip.src_addr, repr });
                Ok(Some(released))
            }
            NdRepr::Advert { target_addr, target_lladdr, .. } => {
                self.counters.nd_adverts_rx += 1;
                let ip = IpAddr::V6(target_addr);
                if self.table.is_pending(ip) || self.table.knows(ip) {
                    return Ok(Some(self.learn(now, ip, target_lladdr.map_or(eth_src, |a| a.0))));
                }
                Ok(None)
            }
        }
    }

    fn learn(&mut self, now: Instant, ip: IpAddr, mac: [u8; 6]) -> Released<T> {
        Released { mac, frames: self.table.learn(ip, mac, now) }
    }

    /// Queue an ARP request / neighbour solicitation for `ip`.
    fn solicit(&mut self, ip: IpAddr) {
        let mac = EthernetAddress(self.mac);
        match ip {
            IpAddr::V4(target) => {
                let Some(&src) = self.own_v4.first() else { return };
                self.counters.arp_requests_tx += 1;
                let repr = ArpRepr {
                    operation: ArpOperation::Request,
                    source_hardware_addr: mac,
                    source_protocol_addr: src,
                    target_hardware_addr: EthernetAddress([0; 6]),
                    target_protocol_addr: target,
                };
                self.out.push_back(Control::Arp { eth_dst: [0xff; 6], repr });
            }
            IpAddr::V6(target) => {
                // Source: the link-local address for a link-local target, a configured one otherwise.
                let src = if target.segments()[0] & 0xffc0 == 0xfe80 { self.own_v6[0] } else { self.own_v6[self.own_v6.len() - 1] };
                let (group, group_mac) = solicited_node(target);
                self.counters.nd_solicits_tx += 1;
                let repr = NdRepr::Solicit { target_addr: target, source_lladdr: Some(mac) };
                self.out.push_back(Control::Nd { eth_dst: group_mac, src, dst: group, repr });
            }
        }
    }

    /// When [`Neighbours::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.table.next_deadline()
    }

    /// Retries due requests; destinations out of tries give their frames back, to be
    /// dropped (counted as unresolved).
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<T> {
        let (retry, dropped) = self.table.on_timer(now);
        self.counters.unresolved_drops += dropped.len() as u64;
        for ip in retry {
            self.solicit(ip);
        }
        dropped
    }

    /// Whether a request or reply waits for [`Neighbours::poll_transmit`].
    pub fn has_transmit(&self) -> bool {
        !self.out.is_empty()
    }

    /// Writes the next request or reply into `buf` (at least [`MAX_CONTROL_FRAME`] bytes)
    /// and returns its length; `None` when there is none, or `buf` is too small (the frame
    /// then stays queued).
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        let c = *self.out.front()?;
        let n = match c {
            Control::Arp { .. } => ETH_MIN_FRAME,
            Control::Nd { .. } => ND_FRAME_LEN,
        };
        let frame = buf.get_mut(..n)?;
        self.out.pop_front();
        frame.fill(0);
        let (eth_dst, ethertype) = match c {
            Control::Arp { eth_dst, .. } => (eth_dst, EtherType::Arp),
            Control::Nd { eth_dst, .. } => (eth_dst, EtherType::Ipv6),
        };
        let ethr = EthernetRepr { src_addr: EthernetAddress(self.mac), dst_addr: EthernetAddress(eth_dst), ethertype };
        ethr.emit(&mut EthernetFrame::new_unchecked(&mut *frame));
        let l3 = &mut frame[eth::HEADER_LEN..];
        match c {
            Control::Arp { repr, .. } => repr.emit(&mut ArpPacket::new_unchecked(&mut l3[..arp::PACKET_LEN])),
            Control::Nd { src, dst, repr, .. } => {
                let ip = Ipv6Repr {
                    src_addr: src,
                    dst_addr: dst,
                    next_header: PROTOCOL_ICMPV6,
                    payload_len: repr.buffer_len(),
                    traffic_class: 0,
                    flow_label: 0,
                    hop_limit: ND_HOP_LIMIT,
                };
                ip.emit(&mut Ipv6Packet::new_unchecked(&mut *l3));
                let msg = &mut l3[ipv6::HEADER_LEN..ipv6::HEADER_LEN + repr.buffer_len()];
                repr.emit(&mut NdPacket::new_unchecked(msg), src, dst);
            }
        }
        Some(n)
    }
}

#[cfg(test)]
mod tests;
