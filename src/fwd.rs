//! Forwarding engines: the per-burst work of each mode, and the poll loop that runs streams.
//!
//! A stream is one (RX port, TX port) pair driven by one mode. Each engine does one DPDK call
//! per burst in each direction (`rx_burst`, `tx_burst`, bulk alloc, bulk free) on a fixed
//! `MbufBatch`, so nothing is allocated and nothing crosses into C per packet; per packet there
//! is only the mode's own work (a 12-byte MAC rewrite, or a 42-byte header copy for txonly).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use droce_dpdk::{MbufBatch, Mempool, Port, QueueId};

use crate::pkt::MAX_BURST;
use crate::modes::FwdKind;
use crate::pkt;

/// Counters of one stream. Written by the one lcore that polls the stream (plain load + store,
/// no locked read-modify-write), read by the main lcore for statistics.
#[derive(Debug, Default)]
pub struct StreamStats {
    pub rx: AtomicU64,
    pub tx: AtomicU64,
    /// Frames the TX PMD did not take; freed at once, never leaked.
    pub tx_dropped: AtomicU64,
    /// Bursts txonly could not build for want of mbufs.
    pub tx_nombuf: AtomicU64,
}

#[inline(always)]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// What a stream needs to know to run.
pub struct StreamSpec {
    pub rx_port: Port,
    pub tx_port: Port,
    pub queue: QueueId,
    pub pool: Arc<Mempool>,
    pub burst: u16,
    pub txpkts: u16,
    /// MAC of the TX port.
    pub tx_mac: [u8; 6],
    /// Destination MAC for frames sent on the TX port (`--eth-peer`, default 02:00:00:00:00:NN).
    pub peer_mac: [u8; 6],
    /// Send one txonly burst before forwarding (testpmd's `start tx_first`).
    pub tx_first: bool,
}

/// One burst of work; implemented by every mode's engine. The runner calls `poll` in a tight
/// loop until told to stop; `stats` is shared with the main lcore.
pub trait Stream: Send {
    fn poll(&mut self);
    fn stats(&self) -> &Arc<StreamStats>;
}

/// Builds the stream of a one-pair forwarding mode for `spec`.
pub fn build(kind: FwdKind, spec: StreamSpec) -> Box<dyn Stream> {
    let stats = Arc::new(StreamStats::default());
    let frame = pkt::udp_ipv4_frame(spec.txpkts, spec.tx_mac, spec.peer_mac);
    let mut headers = [0u8; HDR_LEN];
    headers.copy_from_slice(&frame[..HDR_LEN]);
    let mut s = Fwd {
        headers,
        frame_len: frame.len() as u16,
        batch: MbufBatch::new(),
        stats,
        kind,
        spec,
    };
    if s.spec.tx_first && kind != FwdKind::TxOnly && kind != FwdKind::RxOnly {
        s.tx_burst_from_template();
    }
    Box::new(s)
}

const HDR_LEN: usize = crate::pkt::MIN_TXPKTS as usize;

struct Fwd {
    spec: StreamSpec,
    kind: FwdKind,
    batch: MbufBatch<{ MAX_BURST as usize }>,
    /// Ethernet + IPv4 + UDP headers of the txonly frame; the payload is not written (as in
    /// testpmd's txonly: its bytes are whatever the recycled mbuf held).
    headers: [u8; HDR_LEN],
    frame_len: u16,
    stats: Arc<StreamStats>,
}

impl Fwd {
    #[inline(always)]
    fn send(&mut self) {
        let n = self.batch.len() as u64;
        match self.spec.tx_port.tx_burst(self.spec.queue, &mut self.batch) {
            Ok(sent) => {
                bump(&self.stats.tx, u64::from(sent));
                if sent as u64 != n {
                    bump(&self.stats.tx_dropped, self.batch.clear() as u64);
                }
            }
            Err(_) => bump(&self.stats.tx_dropped, self.batch.clear() as u64),
        }
    }

    #[inline(always)]
    fn receive(&mut self) -> usize {
        match self.spec.rx_port.rx_burst_max(self.spec.queue, &mut self.batch, self.spec.burst) {
            Ok(n) => {
                bump(&self.stats.rx, u64::from(n));
                n as usize
            }
            Err(_) => 0,
        }
    }

    #[inline(always)]
    fn tx_burst_from_template(&mut self) {
        // one pass: mempool get, reset fields, header copy (frame_len was checked against
        // the data room when the stream was built)
        if self.batch.alloc_frames(&self.spec.pool, self.spec.burst as usize, &self.headers, self.frame_len).is_err() {
            bump(&self.stats.tx_nombuf, 1);
            return;
        }
        self.send();
    }
}

impl Stream for Fwd {
    #[inline]
    fn poll(&mut self) {
        match self.kind {
            FwdKind::TxOnly => self.tx_burst_from_template(),
            FwdKind::RxOnly => {
                if self.receive() > 0 {
                    self.batch.clear();
                }
            }
            FwdKind::Io => {
                if self.receive() > 0 {
                    self.send();
                }
            }
            FwdKind::Mac => {
                if self.receive() > 0 {
                    let (dst, src) = (self.spec.peer_mac, self.spec.tx_mac);
                    for m in self.batch.iter_mut() {
                        pkt::set_macs(m.data_mut(), &dst, &src);
                    }
                    self.send();
                }
            }
            FwdKind::MacSwap => {
                if self.receive() > 0 {
                    for m in self.batch.iter_mut() {
                        pkt::swap_macs(m.data_mut());
                    }
                    self.send();
                }
            }
        }
    }

    fn stats(&self) -> &Arc<StreamStats> {
        &self.stats
    }
}

/// Polls `streams` until `stop` is set. Runs on a forwarding lcore (or a helper thread).
pub fn run_streams(mut streams: Vec<Box<dyn Stream>>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        for s in streams.iter_mut() {
            s.poll();
        }
    }
}

/// Polls `streams` `rounds` times; the main lcore's share of work when it forwards itself.
#[inline]
pub fn poll_rounds(streams: &mut [Box<dyn Stream>], rounds: u32) {
    for _ in 0..rounds {
        for s in streams.iter_mut() {
            s.poll();
        }
    }
}
