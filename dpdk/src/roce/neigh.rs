//! Neighbours: the I/O of ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861) for the RoCE
//! device. The protocol (table, rules, frames) is `droce_transport::neigh`; this moves its
//! frames between it and the port: transport frames re-addressed or held, received ARP/ND
//! fed in, the requests and replies it queues put in mbufs.

use super::RoceDevice;
use crate::Mbuf;
use droce_transport::neigh::{Released, Route, MAX_CONTROL_FRAME};
use droce_transport::wire::{eth, EthernetFrame};
use droce_transport::Instant;
use std::net::IpAddr;

pub use droce_transport::neigh::{NeighConfig, NeighCounters, Neighbours};
pub use droce_transport::wire::ipv6::link_local_from_mac;

impl RoceDevice {
    /// Address a transport frame from the neighbour table, or hold it and resolve. `ip` is
    /// the frame's destination (`classify::ip_dst`), which the caller has read already.
    pub(super) fn route(&mut self, now: u64, ip: Option<IpAddr>, mut m: Mbuf) {
        let Some(ip) = ip else {
            self.counters.tx_no_route += 1;
            return;
        };
        // The frames of one TX step mostly go where the previous one went; within the step
        // (one `now`, no RX) the table cannot change, so its answer stands.
        if let Some((last, mac)) = self.tx_route {
            if last == ip {
                set_dst_mac(&mut m, mac);
                self.wire_tx(now, m);
                return;
            }
        }
        // To one of our own addresses (rdma_cm self-connect, ofi_rxm's loopback connection):
        // received right here, it never reaches the wire.
        let own = match ip {
            IpAddr::V4(a) => self.cfg.ipv4.contains(&a),
            IpAddr::V6(a) => self.cfg.ipv6.contains(&a),
        };
        if own {
            let mac = self.mac();
            set_dst_mac(&mut m, mac);
            if m.nb_segs() > 1 {
                // a zero-copy chain: the receive path wants the frame in one slice
                let mut f = m.to_vec();
                drop(m);
                self.rx_frame(Instant(now), &mut f);
            } else {
                self.rx_frame(Instant(now), m.data_mut());
            }
            return;
        }
        match self.neigh.route(Instant(now), ip, m) {
            Route::Send(mac, mut m) => {
                self.tx_route = Some((ip, mac));
                set_dst_mac(&mut m, mac);
                self.wire_tx(now, m);
            }
            Route::Held => self.neigh_transmit(now),
            Route::Dropped(_m) => self.sync_neigh_counters(),
        }
    }

    /// The MAC frames to `dgid` go to, or `None` while it resolves (a request goes out now if
    /// none is pending; the retry timers ask again). Our own addresses answer at once.
    pub fn resolve_gid(&mut self, dgid: droce_transport::Gid) -> Option<[u8; 6]> {
        let ip = dgid.to_ipv4().map_or(IpAddr::V6(dgid.to_ipv6()), IpAddr::V4);
        let own = match ip {
            IpAddr::V4(a) => self.cfg.ipv4.contains(&a),
            IpAddr::V6(a) => self.cfg.ipv6.contains(&a),
        };
        if own {
            return Some(self.mac());
        }
        let now = self.now().0;
        let mac = self.neigh.resolve(ip, Instant(now));
        self.neigh_transmit(now);
        mac
    }

    /// Retries of unanswered requests; frames of destinations that gave up are dropped.
    pub(super) fn neigh_timers(&mut self, now: u64) {
        drop(self.neigh.handle_timeout(Instant(now)));
        self.neigh_transmit(now);
    }

    /// A received ARP frame.
    pub(super) fn rx_arp(&mut self, now: u64, f: &[u8]) {
        let r = self.neigh.handle_arp(Instant(now), &f[eth::HEADER_LEN..]);
        self.neigh_rx_done(now, r);
    }

    /// A received ICMPv6 frame (`f` cut to its IPv6 length): NS and NA are fed in, the rest
    /// is dropped.
    pub(super) fn rx_nd(&mut self, now: u64, f: &[u8]) {
        let src = EthernetFrame::new_unchecked(f).src_addr().0;
        let r = self.neigh.handle_nd(Instant(now), src, &f[eth::HEADER_LEN..]);
        self.neigh_rx_done(now, r);
    }

    fn neigh_rx_done(&mut self, now: u64, r: droce_transport::wire::Result<Option<Released<Mbuf>>>) {
        match r {
            Err(_) => self.counters.non_roce_drops += 1,
            Ok(Some(Released { mac, frames })) => {
                for mut m in frames {
                    set_dst_mac(&mut m, mac);
                    self.wire_tx(now, m);
                }
            }
            Ok(None) => {}
        }
        self.neigh_transmit(now);
    }

    /// Put the requests and replies the neighbour protocol queued on the wire.
    fn neigh_transmit(&mut self, now: u64) {
        while self.neigh.has_transmit() {
            let mut m = match self.pool.alloc() {
                Ok(m) => m,
                Err(_) => {
                    self.counters.tx_nombuf += 1;
                    // lost like a dropped frame: the retry timer asks again
                    let _ = self.neigh.poll_transmit(&mut [0u8; MAX_CONTROL_FRAME]);
                    continue;
                }
            };
            let Some(buf) = m.set_len(MAX_CONTROL_FRAME as u16) else {
                self.counters.tx_nombuf += 1;
                let _ = self.neigh.poll_transmit(&mut [0u8; MAX_CONTROL_FRAME]);
                continue;
            };
            let Some(n) = self.neigh.poll_transmit(buf) else { break };
            let _ = m.set_len(n as u16);
            self.wire_tx(now, m);
        }
        self.sync_neigh_counters();
    }

    /// The protocol's counters into the engine's.
    fn sync_neigh_counters(&mut self) {
        self.counters.neigh = *self.neigh.counters();
    }
}

fn set_dst_mac(m: &mut Mbuf, mac: [u8; 6]) {
    EthernetFrame::new_unchecked(m.data_mut()).set_dst_addr(droce_transport::wire::EthernetAddress(mac));
}
