//! Several point-to-point ports behind one RoCE device (the zero-config memif mesh of
//! [`crate::host`]): one port per peer, each peer reached through its own port.
//!
//! The device keeps its single TX queue and RX batch; with a mesh attached
//! ([`RoceDevice::attach_mesh`](super::RoceDevice::attach_mesh)) its TX step hands every
//! addressed frame to the port of the frame's destination MAC (the peer's static neighbour
//! entry), a broadcast (ARP) to every port that is up, and its RX step takes a burst from each
//! port that is up in turn. Ports are marked up and down by their owner (the host's link
//! watch); a port that is down is not polled and the frames for it are dropped (counted in
//! [`MeshWire::dropped_down`]): its peer is gone or not there yet, and the transport's
//! retries or the frontends' per-peer failure handle what was in flight. Every burst goes
//! through [`crate::Port`], i.e. under the interrupt-thread gate.

use crate::{Mbuf, MbufBatch, Mempool, Port, QueueId};
use std::collections::VecDeque;

/// Frames queued per port beyond the PMD's ring before the device stops taking frames from
/// the transport (the single-port device's bound: 4 bursts).
const PORT_QUEUE_MAX: usize = 256;

/// One peer's port.
#[derive(Debug)]
pub struct MeshPort {
    port: Port,
    /// The peer's MAC: frames addressed to it go out here.
    peer_mac: [u8; 6],
    up: bool,
    batch: MbufBatch<64>,
    queue: VecDeque<Mbuf>,
}

/// The ports of a mesh (see the module docs).
#[derive(Debug, Default)]
pub struct MeshWire {
    ports: Vec<MeshPort>,
    /// Indices of the ports that are up (RX polls only these).
    active: Vec<usize>,
    /// The active port the next RX round starts with (every port gets its turn first).
    rx_next: usize,
    /// The port the last unicast frame went to: looked at first (a pair, or a burst to one
    /// peer, finds its port without a search).
    last_tx: usize,
    /// Frames dropped because their peer's port was down (or no port had their MAC).
    pub dropped_down: u64,
    /// TX bursts a port's PMD did not take whole (the engine's `tx_ring_full`).
    pub ring_full: u64,
}

impl MeshWire {
    pub fn new() -> MeshWire {
        MeshWire::default()
    }

    /// Adds a port (down) for the peer with `peer_mac`; returns its index.
    pub fn add_port(&mut self, port: Port, peer_mac: [u8; 6]) -> usize {
        self.ports.push(MeshPort { port, peer_mac, up: false, batch: MbufBatch::new(), queue: VecDeque::new() });
        self.ports.len() - 1
    }

    /// Marks port `i` up or down. Going down drops the frames still queued for it (its peer
    /// is gone: they would go to whoever takes the peer's place next).
    pub fn set_up(&mut self, i: usize, up: bool) {
        let Some(p) = self.ports.get_mut(i) else { return };
        if p.up == up {
            return;
        }
        p.up = up;
        if !up {
            self.dropped_down += (p.queue.len() + p.batch.len()) as u64;
            p.queue.clear();
            p.batch.clear();
        }
        self.active = self.ports.iter().enumerate().filter(|(_, p)| p.up).map(|(i, _)| i).collect();
        self.rx_next = 0;
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.ports.get(i).is_some_and(|p| p.up)
    }

    /// Frames queued for the ports, not yet taken by their PMDs.
    pub fn pending(&self) -> usize {
        self.ports.iter().map(|p| p.queue.len() + p.batch.len()).sum()
    }

    /// Whether some port's queue is full (the device then takes no more from the transport).
    pub fn backlogged(&self) -> bool {
        self.ports.iter().any(|p| p.queue.len() >= PORT_QUEUE_MAX)
    }

    /// One RX burst from each port that is up, into `batch`, at most `max` frames in all.
    pub fn rx_burst<const N: usize>(&mut self, q: QueueId, batch: &mut MbufBatch<N>, max: u16) -> u16 {
        let n = self.active.len();
        let mut got = 0u16;
        for k in 0..n {
            let i = self.active[(self.rx_next + k) % n];
            if got >= max {
                break;
            }
            if let Ok(r) = self.ports[i].port.rx_burst_max(q, batch, max - got) {
                got += r;
            }
        }
        if n > 0 {
            self.rx_next = (self.rx_next + 1) % n;
        }
        got
    }

    /// Hands each frame of `frames` to the port of its destination MAC (broadcast: a copy to
    /// every port that is up), then one TX burst per port with frames waiting.
    pub fn transmit(&mut self, q: QueueId, frames: &mut VecDeque<Mbuf>, pool: &Mempool) {
        while let Some(m) = frames.pop_front() {
            let d = m.data();
            if d.len() < 6 {
                self.dropped_down += 1;
                continue;
            }
            if d[0] & 1 != 0 {
                // broadcast / multicast (ARP, ND): every peer
                for &i in &self.active {
                    if let Ok(c) = pool.alloc_from_slice(m.data()) {
                        self.ports[i].queue.push_back(c);
                    }
                }
                continue;
            }
            let mac = [d[0], d[1], d[2], d[3], d[4], d[5]];
            let hit = self.ports.get(self.last_tx).is_some_and(|p| p.peer_mac == mac && p.up);
            let i = if hit { Some(self.last_tx) } else { self.ports.iter().position(|p| p.peer_mac == mac && p.up) };
            match i {
                Some(i) => {
                    self.last_tx = i;
                    self.ports[i].queue.push_back(m);
                }
                None => self.dropped_down += 1,
            }
        }
        self.flush(q);
    }

    /// One TX burst per port with frames waiting (the unsent stay queued, in order).
    pub fn flush(&mut self, q: QueueId) {
        for &i in &self.active {
            let p = &mut self.ports[i];
            if p.queue.is_empty() && p.batch.is_empty() {
                continue;
            }
            p.batch.fill_from(&mut p.queue);
            if !p.batch.is_empty() {
                let _ = p.port.tx_burst(q, &mut p.batch);
                self.ring_full += u64::from(!p.batch.is_empty());
            }
        }
    }
}
