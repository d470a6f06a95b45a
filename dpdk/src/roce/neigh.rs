//! Neighbours: ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861) for the RoCE device.
//!
//! A port owned by DPDK has no kernel stack, so the engine answers ARP requests and neighbour
//! solicitations for its own addresses and resolves peers' MACs itself (DESIGN.md decision 5).
//! This module is plain data: frame builders/parsers and a table that holds frames per
//! unresolved destination; the engine (`super::RoceDevice`) does the I/O.

use droce_transport::wire::{ArpOperation, ArpPacket, ArpRepr, EthernetAddress};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Ethertypes the engine demultiplexes.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_ARP: u16 = 0x0806;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// ICMPv6 next-header value and the ND message types.
pub const IPPROTO_ICMPV6: u8 = 58;
pub const ND_NEIGHBOR_SOLICIT: u8 = 135;
pub const ND_NEIGHBOR_ADVERT: u8 = 136;
/// Shortest Ethernet frame without FCS; ARP/ND frames are padded to it as Linux does.
pub const ETH_MIN_FRAME: usize = 60;

/// Timing and size limits of neighbour resolution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NeighConfig {
    /// Time between two ARP requests / solicitations for one destination (ns).
    pub retry_ns: u64,
    /// Requests sent before the held frames are dropped (counted as unresolved).
    pub max_tries: u32,
    /// Lifetime of a learned entry (ns); static entries never expire.
    pub ttl_ns: u64,
    /// Frames held per unresolved destination; more are dropped (counted).
    pub max_held: usize,
    /// Destinations resolved at once; frames to more are dropped (counted).
    pub max_pending: usize,
}

impl Default for NeighConfig {
    fn default() -> Self {
        NeighConfig { retry_ns: 200_000_000, max_tries: 5, ttl_ns: 300_000_000_000, max_held: 256, max_pending: 64 }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    mac: [u8; 6],
    /// `None`: static.
    expires: Option<u64>,
}

#[derive(Debug)]
struct Pending<T> {
    held: VecDeque<T>,
    tries: u32,
    next_try: u64,
}

/// What `NeighTable::hold` did with a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum HoldResult<T> {
    /// Held; send a request / solicitation now (first frame for this destination).
    HeldSendRequest,
    /// Held behind an outstanding request.
    Held,
    /// The queue for this destination (or the pending table) is full: the frame is given back.
    Full(T),
}

/// The neighbour table with the frames waiting for resolution (`T`: an mbuf in the engine).
#[derive(Debug)]
pub struct NeighTable<T> {
    cfg: NeighConfig,
    entries: HashMap<IpAddr, Entry>,
    pending: HashMap<IpAddr, Pending<T>>,
    /// The last entry looked up: most traffic goes to one peer, so this skips the hash.
    last: Option<(IpAddr, Entry)>,
}

impl<T> NeighTable<T> {
    pub fn new(cfg: NeighConfig) -> Self {
        NeighTable { cfg, entries: HashMap::new(), pending: HashMap::new(), last: None }
    }

    pub fn config(&self) -> &NeighConfig {
        &self.cfg
    }

    /// A static entry (from the configuration): never expires, never replaced by learning.
    pub fn add_static(&mut self, ip: IpAddr, mac: [u8; 6]) {
        self.last = None;
        self.entries.insert(ip, Entry { mac, expires: None });
    }

    /// The MAC of `ip` if known and fresh at `now`.
    pub fn lookup(&mut self, ip: IpAddr, now: u64) -> Option<[u8; 6]> {
        let e = match self.last {
            Some((lip, e)) if lip == ip => e,
            _ => *self.entries.get(&ip)?,
        };
        match e.expires {
            Some(t) if t <= now => {
                self.entries.remove(&ip);
                self.last = None;
                None
            }
            _ => {
                self.last = Some((ip, e));
                Some(e.mac)
            }
        }
    }

    /// Whether a request for `ip` is outstanding.
    pub fn is_pending(&self, ip: IpAddr) -> bool {
        self.pending.contains_key(&ip)
    }

    /// Whether `ip` is in the table (fresh or not).
    pub fn knows(&self, ip: IpAddr) -> bool {
        self.entries.contains_key(&ip)
    }

    /// Learn `ip` → `mac` (ARP reply/request, NA, NS source option). Static entries win.
    /// Returns the frames that were waiting for it, in order.
    pub fn learn(&mut self, ip: IpAddr, mac: [u8; 6], now: u64) -> Vec<T> {
        self.last = None;
        match self.entries.get_mut(&ip) {
            Some(e) if e.expires.is_none() => {}
            _ => {
                self.entries.insert(ip, Entry { mac, expires: Some(now.saturating_add(self.cfg.ttl_ns)) });
            }
        }
        self.pending.remove(&ip).map(|p| p.held.into_iter().collect()).unwrap_or_default()
    }

    /// Hold a frame for an unresolved `ip`.
    pub fn hold(&mut self, ip: IpAddr, frame: T, now: u64) -> HoldResult<T> {
        if let Some(p) = self.pending.get_mut(&ip) {
            if p.held.len() >= self.cfg.max_held {
                return HoldResult::Full(frame);
            }
            p.held.push_back(frame);
            return HoldResult::Held;
        }
        if self.pending.len() >= self.cfg.max_pending {
            return HoldResult::Full(frame);
        }
        let mut held = VecDeque::new();
        held.push_back(frame);
        self.pending.insert(ip, Pending { held, tries: 1, next_try: now.saturating_add(self.cfg.retry_ns) });
        HoldResult::HeldSendRequest
    }

    /// Earliest retry deadline.
    pub fn next_deadline(&self) -> Option<u64> {
        self.pending.values().map(|p| p.next_try).min()
    }

    /// Run the retry timers: returns the destinations to send another request to, and the
    /// frames of destinations that gave up (to be dropped and counted).
    pub fn on_timer(&mut self, now: u64) -> (Vec<IpAddr>, Vec<T>) {
        let mut retry = Vec::new();
        let mut give_up = Vec::new();
        for (ip, p) in self.pending.iter_mut() {
            if p.next_try > now {
                continue;
            }
            if p.tries >= self.cfg.max_tries {
                give_up.push(*ip);
            } else {
                p.tries += 1;
                p.next_try = now.saturating_add(self.cfg.retry_ns);
                retry.push(*ip);
            }
        }
        let mut dropped = Vec::new();
        for ip in give_up {
            if let Some(p) = self.pending.remove(&ip) {
                dropped.extend(p.held);
            }
        }
        (retry, dropped)
    }

    /// `(ip, mac, is_static)` of every entry, for display.
    pub fn entries(&self) -> Vec<(IpAddr, [u8; 6], bool)> {
        let mut v: Vec<_> = self.entries.iter().map(|(ip, e)| (*ip, e.mac, e.expires.is_none())).collect();
        v.sort();
        v
    }

    /// Frames currently held, all destinations.
    pub fn held_frames(&self) -> usize {
        self.pending.values().map(|p| p.held.len()).sum()
    }
}

// ------------------------------------------------------------------------------------------
// Frames

fn eth_header(buf: &mut [u8], dst: [u8; 6], src: [u8; 6], ethertype: u16) {
    buf[0..6].copy_from_slice(&dst);
    buf[6..12].copy_from_slice(&src);
    buf[12..14].copy_from_slice(&ethertype.to_be_bytes());
}

/// Builds an ARP request or reply frame into `buf` (≥ 60 bytes); returns its length (60).
pub fn arp_frame(buf: &mut [u8], eth_dst: [u8; 6], repr: &ArpRepr) -> usize {
    buf[..ETH_MIN_FRAME].fill(0);
    eth_header(buf, eth_dst, repr.source_hardware_addr.0, ETHERTYPE_ARP);
    let mut p = ArpPacket::new_unchecked(&mut buf[14..14 + repr.buffer_len()]);
    repr.emit(&mut p);
    ETH_MIN_FRAME
}

/// An ARP who-has for `target` from `(mac, ip)`, broadcast.
pub fn arp_request(buf: &mut [u8], mac: [u8; 6], ip: Ipv4Addr, target: Ipv4Addr) -> usize {
    let r = ArpRepr {
        operation: ArpOperation::Request,
        source_hardware_addr: EthernetAddress(mac),
        source_protocol_addr: ip,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: target,
    };
    arp_frame(buf, [0xff; 6], &r)
}

/// Parses the ARP payload of a frame (after the 14-byte Ethernet header).
pub fn parse_arp(l3: &[u8]) -> Option<ArpRepr> {
    let p = ArpPacket::new_checked(l3).ok()?;
    ArpRepr::parse(&p).ok()
}

/// The solicited-node multicast address of `a` (RFC 4291 2.7.1) and its MAC (RFC 2464 7).
pub fn solicited_node(a: Ipv6Addr) -> (Ipv6Addr, [u8; 6]) {
    let o = a.octets();
    let ip = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00 | o[13] as u16, u16::from_be_bytes([o[14], o[15]]));
    (ip, multicast_mac(ip))
}

/// The Ethernet address of an IPv6 multicast group: 33:33 + the low 32 bits.
pub fn multicast_mac(ip: Ipv6Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// The link-local address Linux derives from a MAC (modified EUI-64, RFC 4291 appendix A).
pub fn link_local_from_mac(mac: [u8; 6]) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o[0] = 0xfe;
    o[1] = 0x80;
    o[8] = mac[0] ^ 0x02;
    o[9] = mac[1];
    o[10] = mac[2];
    o[11] = 0xff;
    o[12] = 0xfe;
    o[13] = mac[3];
    o[14] = mac[4];
    o[15] = mac[5];
    Ipv6Addr::from(o)
}

/// ICMPv6 checksum over the IPv6 pseudo-header (RFC 8200 8.1) and the message.
pub fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        let mut chunks = b.chunks_exact(2);
        for c in &mut chunks {
            sum += u16::from_be_bytes([c[0], c[1]]) as u32;
        }
        if let [last] = chunks.remainder() {
            sum += (*last as u32) << 8;
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&(msg.len() as u32).to_be_bytes());
    add(&[0, 0, 0, IPPROTO_ICMPV6]);
    add(msg);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// ICMPv6 ND message (NS or NA) of 32 bytes: type, code, checksum, flags/reserved, target,
/// one link-layer address option (source for NS, target for NA).
#[allow(clippy::too_many_arguments)]
fn nd_frame(buf: &mut [u8], eth_dst: [u8; 6], mac: [u8; 6], src: Ipv6Addr, dst: Ipv6Addr, ty: u8, flags: u32, target: Ipv6Addr) -> usize {
    const ICMP_LEN: usize = 32;
    let len = 14 + 40 + ICMP_LEN;
    buf[..len].fill(0);
    eth_header(buf, eth_dst, mac, ETHERTYPE_IPV6);
    let ip = &mut buf[14..54];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&(ICMP_LEN as u16).to_be_bytes());
    ip[6] = IPPROTO_ICMPV6;
    ip[7] = 255; // RFC 4861 7.1.1: hop limit 255
    ip[8..24].copy_from_slice(&src.octets());
    ip[24..40].copy_from_slice(&dst.octets());
    let m = &mut buf[54..54 + ICMP_LEN];
    m[0] = ty;
    m[4..8].copy_from_slice(&flags.to_be_bytes());
    m[8..24].copy_from_slice(&target.octets());
    m[24] = if ty == ND_NEIGHBOR_SOLICIT { 1 } else { 2 };
    m[25] = 1;
    m[26..32].copy_from_slice(&mac);
    let c = icmpv6_checksum(src, dst, m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    len
}

/// A neighbour solicitation for `target` from `(mac, src)` to its solicited-node group.
pub fn nd_solicit(buf: &mut [u8], mac: [u8; 6], src: Ipv6Addr, target: Ipv6Addr) -> usize {
    let (group, gmac) = solicited_node(target);
    nd_frame(buf, gmac, mac, src, group, ND_NEIGHBOR_SOLICIT, 0, target)
}

/// A solicited neighbour advertisement (S and O set, RFC 4861 7.2.4) for our `target`.
pub fn nd_advert(buf: &mut [u8], mac: [u8; 6], target: Ipv6Addr, to_ip: Ipv6Addr, to_mac: [u8; 6]) -> usize {
    nd_frame(buf, to_mac, mac, target, to_ip, ND_NEIGHBOR_ADVERT, 0x6000_0000, target)
}

/// A parsed NS or NA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdMessage {
    pub ty: u8,
    pub src: Ipv6Addr,
    pub target: Ipv6Addr,
    /// The source (NS) or target (NA) link-layer address option, if present.
    pub lladdr: Option<[u8; 6]>,
}

/// Parses an IPv6 packet (from the IPv6 header on) holding an NS or NA. `None` for other
/// ICMPv6 messages and for malformed ones (bad checksum, hop limit ≠ 255, code ≠ 0:
/// RFC 4861 7.1.1/7.1.2 validity checks).
pub fn parse_nd(ip6: &[u8]) -> Option<NdMessage> {
    if ip6.len() < 40 || ip6[0] >> 4 != 6 || ip6[6] != IPPROTO_ICMPV6 || ip6[7] != 255 {
        return None;
    }
    let plen = u16::from_be_bytes([ip6[4], ip6[5]]) as usize;
    let msg = ip6.get(40..40 + plen)?;
    if msg.len() < 24 || msg[1] != 0 || !matches!(msg[0], ND_NEIGHBOR_SOLICIT | ND_NEIGHBOR_ADVERT) {
        return None;
    }
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip6[8..24]).ok()?);
    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip6[24..40]).ok()?);
    if icmpv6_checksum(src, dst, msg) != 0 {
        return None;
    }
    let target = Ipv6Addr::from(<[u8; 16]>::try_from(&msg[8..24]).ok()?);
    let want_opt = if msg[0] == ND_NEIGHBOR_SOLICIT { 1 } else { 2 };
    let mut lladdr = None;
    let mut opts = &msg[24..];
    while opts.len() >= 8 {
        let olen = opts[1] as usize * 8;
        if olen == 0 || olen > opts.len() {
            return None; // RFC 4861 7.1.1: options of length 0 invalidate the message
        }
        if opts[0] == want_opt && olen >= 8 {
            lladdr = Some(<[u8; 6]>::try_from(&opts[2..8]).ok()?);
        }
        opts = &opts[olen..];
    }
    Some(NdMessage { ty: msg[0], src, target, lladdr })
}

/// The IP destination of an Ethernet frame carrying IPv4 or IPv6.
pub fn frame_ip_dst(frame: &[u8]) -> Option<IpAddr> {
    match u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]) {
        ETHERTYPE_IPV4 => {
            let b: [u8; 4] = frame.get(30..34)?.try_into().ok()?;
            Some(IpAddr::V4(Ipv4Addr::from(b)))
        }
        ETHERTYPE_IPV6 => {
            let b: [u8; 16] = frame.get(38..54)?.try_into().ok()?;
            Some(IpAddr::V6(Ipv6Addr::from(b)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_like_linux() {
        // Linux: 02:00:00:00:00:01 -> fe80::ff:fe00:1
        assert_eq!(link_local_from_mac([0x02, 0, 0, 0, 0, 1]), "fe80::ff:fe00:1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(link_local_from_mac([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]), "fe80::5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap());
    }

    #[test]
    fn solicited_node_group() {
        let (g, m) = solicited_node("fd00::1:2:3456".parse().unwrap());
        assert_eq!(g, "ff02::1:ff02:3456".parse::<Ipv6Addr>().unwrap());
        assert_eq!(m, [0x33, 0x33, 0xff, 0x02, 0x34, 0x56]);
    }

    #[test]
    fn ns_na_roundtrip_and_checksum() {
        let mac = [2, 0, 0, 0, 0, 1];
        let src: Ipv6Addr = "fd00::1".parse().unwrap();
        let tgt: Ipv6Addr = "fd00::2".parse().unwrap();
        let mut b = [0u8; 128];
        let n = nd_solicit(&mut b, mac, src, tgt);
        assert_eq!(n, 86);
        assert_eq!(&b[0..6], &[0x33, 0x33, 0xff, 0, 0, 2]);
        let m = parse_nd(&b[14..n]).unwrap();
        assert_eq!(m, NdMessage { ty: ND_NEIGHBOR_SOLICIT, src, target: tgt, lladdr: Some(mac) });
        // a flipped bit fails the checksum
        b[70] ^= 1;
        assert!(parse_nd(&b[14..n]).is_none());
        let n = nd_advert(&mut b, [2, 0, 0, 0, 0, 2], tgt, src, mac);
        let m = parse_nd(&b[14..n]).unwrap();
        assert_eq!(m, NdMessage { ty: ND_NEIGHBOR_ADVERT, src: tgt, target: tgt, lladdr: Some([2, 0, 0, 0, 0, 2]) });
        assert_eq!(&b[54 + 4..54 + 8], &[0x60, 0, 0, 0], "S and O flags");
    }

    #[test]
    fn icmpv6_checksum_known_value() {
        // Echo request fe80::1 -> fe80::2, id 0 seq 0, no data: checksum computed by hand
        // (sum of pseudo header + 0x8000 folded, inverted).
        let src: Ipv6Addr = "fe80::1".parse().unwrap();
        let dst: Ipv6Addr = "fe80::2".parse().unwrap();
        let msg = [0x80u8, 0, 0, 0, 0, 0, 0, 0];
        // pseudo: fe80+0001 + fe80+0002 + 0008 + 003a + 8000 = 0x27d45 -> 0x7d47 -> !0x7d47 = 0x82b8
        assert_eq!(icmpv6_checksum(src, dst, &msg), 0x82b8);
    }

    #[test]
    fn arp_request_layout() {
        let mut b = [0u8; 64];
        let n = arp_request(&mut b, [2, 0, 0, 0, 0, 1], [10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        assert_eq!(n, 60);
        assert_eq!(&b[0..6], &[0xff; 6]);
        assert_eq!(&b[12..14], &[0x08, 0x06]);
        let r = parse_arp(&b[14..n]).unwrap();
        assert_eq!(r.operation, ArpOperation::Request);
        assert_eq!(r.target_protocol_addr, Ipv4Addr::new(10, 0, 0, 2));
    }

    #[test]
    fn table_hold_learn_retry_give_up() {
        let cfg = NeighConfig { retry_ns: 10, max_tries: 3, ttl_ns: 1000, max_held: 2, max_pending: 1 };
        let mut t: NeighTable<u32> = NeighTable::new(cfg);
        let a: IpAddr = Ipv4Addr::new(10, 0, 0, 2).into();
        let b: IpAddr = Ipv4Addr::new(10, 0, 0, 3).into();
        assert_eq!(t.lookup(a, 0), None);
        assert_eq!(t.hold(a, 1, 0), HoldResult::HeldSendRequest);
        assert_eq!(t.hold(a, 2, 0), HoldResult::Held);
        assert_eq!(t.hold(a, 3, 0), HoldResult::Full(3));
        assert_eq!(t.hold(b, 4, 0), HoldResult::Full(4), "pending table full");
        assert_eq!(t.on_timer(5), (vec![], vec![]));
        assert_eq!(t.on_timer(10), (vec![a], vec![]));
        assert_eq!(t.on_timer(20), (vec![a], vec![]));
        assert_eq!(t.on_timer(30), (vec![], vec![1, 2]), "gave up after 3 tries");
        assert!(!t.is_pending(a));
        // learn releases held frames in order; entries expire; static ones do not
        t.hold(a, 7, 40);
        t.hold(a, 8, 40);
        assert_eq!(t.learn(a, [1; 6], 50), vec![7, 8]);
        assert_eq!(t.lookup(a, 1049), Some([1; 6]));
        assert_eq!(t.lookup(a, 1050), None);
        t.add_static(b, [9; 6]);
        assert!(t.learn(b, [8; 6], 0).is_empty());
        assert_eq!(t.lookup(b, u64::MAX), Some([9; 6]), "static wins and never expires");
    }
}
