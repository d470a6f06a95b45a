//! The poll round of the RoCE device: TX of what was posted, one RX burst, timers, TX of what
//! RX and timers made sendable, the ACK-hold policy's TX passes, the TX queue to the PMD.

use super::rx::{ipv4_header_len, is_roce, rc_bth_opcode, RxOrder};
use super::*;
use droce_transport::device::{TxPass, TxPayload};
use droce_transport::wire::classify::ip_dst;

impl RoceDevice {
    // ------------------------------------------------------------------ the loop

    /// One round: frames the application posted since the last round go out first (then the
    /// acknowledgements held from the last round's RX, with `hold_acks`), an RX burst
    /// (≤ `rx_burst`), due timers, and what RX and timers made sendable (ACKs unless held,
    /// READ/atomic responses, requests the window now allows, retransmissions) — each TX
    /// step up to `tx_burst` frames and one TX burst. Returns what happened so callers can
    /// spin or back off.
    ///
    /// Order for latency: a reply posted after a completion leaves at the very start of the
    /// next round without an RX burst in front of it; with [`RoceConfig::hold_acks`] the
    /// ACK for the request it answers waits for it (held one round in the transport,
    /// [`Device::poll_transmit_data`]) and leaves in the same burst, just ahead of it, so
    /// the peer completes its send before the receive. Plain ACKs received behind a request
    /// in one burst, and every frame behind them, are handled at the next round ([`RxOrder`]).
    pub fn poll(&mut self) -> Work {
        let mut work = Work::default();
        self.polls = self.polls.wrapping_add(1);
        // The TSC is read only when there is work, or every IDLE_CLOCK_POLLS idle polls for
        // the timers (rdtsc costs ~45 ns in a VM: half the self time of an idle poll).
        let t0 = if self.dev.tx_ready() || !self.rx_acks_later.is_empty() || self.idle_polls >= IDLE_CLOCK_POLLS {
            crate::rdtsc()
        } else {
            0
        };
        let mut now = if t0 != 0 { self.fresh_now(t0) } else { self.last_now };
        // TX: what the application posted, then the held ACKs
        self.transmit(now, TxPass::DataOnly, &mut work);
        self.transmit(now, TxPass::All, &mut work);
        // RX: the ACKs held back from the last burst, then a new burst
        while let Some(mut m) = self.rx_acks_later.pop_front() {
            work.rx += 1;
            self.rx_mbuf(now, &mut m);
        }
        let mut n = 0;
        if let Some(mw) = &mut self.mesh {
            n = mw.rx_burst(self.cfg.queue, &mut self.rx_batch, self.cfg.rx_burst);
            work.rx += n as u32;
        } else if let Ok(k) = self.port.rx_burst_max(self.cfg.queue, &mut self.rx_batch, self.cfg.rx_burst) {
            n = k;
            work.rx += k as u32;
        }
        if n > 0 && t0 == 0 {
            now = self.fresh_now(crate::rdtsc());
        }
        if n > 0 {
            self.rx_frames(now);
        }
        if let Some(h) = &self.held_rx {
            if now.0.saturating_sub(h.since) >= REORDER_HOLD_NS {
                let mut h = self.held_rx.take().map(|h| h.frame).unwrap_or_default();
                self.rx_frame(now, &mut h);
            }
        }
        // timers
        if let Some(t) = self.dev.poll_timeout() {
            if t <= now {
                self.dev.handle_timeout(now);
                work.timers = true;
            }
        }
        if self.neigh.poll_timeout().is_some_and(|t| t <= now) {
            work.timers = true;
            self.neigh_timers(now.0);
        }
        if let Some((_, since)) = &self.held_tx {
            if now.0.saturating_sub(*since) >= REORDER_HOLD_NS {
                if let Some((m, _)) = self.held_tx.take() {
                    self.wire_tx(now.0, m);
                }
            }
        }
        // TX what RX and timers made sendable; with the ACK-hold policy the ACKs they queued
        // wait for the next round
        if work.rx > 0 || work.timers {
            self.transmit(now, TxPass::AfterRx, &mut work);
        } else {
            self.flush_tx();
        }
        if work.is_idle() {
            self.idle_polls += 1;
        }
        work
    }

    /// The frames of the RX burst in `rx_batch`, in order, each to the receive path or held
    /// for the next round ([`RxOrder`]). Out of line with the `frame-profile` feature, so that
    /// an instruction profile shows the per-frame RX work apart from the idle polls around it.
    #[cfg_attr(feature = "frame-profile", inline(never))]
    fn rx_frames(&mut self, now: Instant) {
        let mut batch = core::mem::take(&mut self.rx_batch);
        // Plain ACKs behind a request wait for the next round: the request's completion
        // (a ping-pong's receive) reaches the application first. Once one waits, every
        // later frame of the burst waits too: responses, so the response stream keeps
        // its order, and requests, which the peer may have sent as its answer to the
        // message that ACK acknowledges (its receive must not complete before our send:
        // ofi_rxm's atomics free the request on the answer).
        let mut order = RxOrder::default();
        let defer = self.fault_rx.is_none();
        // Each frame is handled in its mbuf, which stays in the batch; the handled ones are
        // freed together in one `rte_pktmbuf_free_bulk` (a free per frame cost ~64
        // instructions), the waiting ones stay behind in burst order.
        batch.retain(|m| {
            let op = (m.nb_segs() == 1).then(|| rc_bth_opcode(m.data()));
            if defer && order.later(op) {
                return true;
            }
            self.rx_mbuf(now, m);
            false
        });
        self.rx_acks_later.extend(batch.drain());
        self.rx_batch = batch;
    }

    /// Send everything the transport has now, held ACKs included, and push the TX queue to
    /// the PMD: for a caller with [`RoceConfig::hold_acks`] before it stops polling.
    pub fn flush(&mut self) -> Work {
        let mut work = Work::default();
        let now = self.now();
        self.transmit(now, TxPass::All, &mut work);
        work
    }

    /// Hold the ACKs RX produces until the next poll: the transport's ACK-hold policy
    /// ([`DeviceConfig::hold_acks`]). Only for callers that keep polling, or [`flush`](Self::flush)
    /// before they stop: a held ACK is not sent without a further `poll`/`flush`.
    pub fn set_hold_acks(&mut self, on: bool) {
        self.dev.set_hold_acks(on);
    }

    /// Whether ACKs RX produces wait for the next poll.
    pub fn hold_acks(&self) -> bool {
        self.dev.hold_acks()
    }

    /// The safety net for a caller that may stop polling (a library under an application, or
    /// one descheduled for a while): called every so often from another thread (with the
    /// device's lock), when no `poll` ran since the previous call (`*seen` keeps the count
    /// between calls) it runs one [`poll`](Self::poll) (RX, timers) and a
    /// [`flush`](Self::flush), so a process whose application is away still receives and
    /// acknowledges, and ACKs held behind a last receive leave. Returns whether it polled.
    pub fn poll_if_unpolled(&mut self, seen: &mut u64) -> bool {
        let idle = self.polls == *seen;
        if idle {
            self.poll();
            self.flush();
        }
        *seen = self.polls;
        idle
    }

    /// `now` from a TSC reading, remembered for the idle polls that skip the read.
    #[inline]
    pub(super) fn fresh_now(&mut self, tsc: u64) -> Instant {
        let now = Instant(self.clock.elapsed_ns(tsc).max(self.last_now.0));
        self.last_now = now;
        self.idle_polls = 0;
        now
    }

    /// Frames from the transport (all, or without plain ACK/NAKs) up to the budget, bounded
    /// by frames still waiting for the PMD, then a TX burst.
    pub(super) fn transmit(&mut self, now: Instant, pass: TxPass, work: &mut Work) {
        if !self.dev.tx_ready() {
            self.flush_tx();
            return;
        }
        let room = match &self.mesh {
            Some(mw) if mw.backlogged() => 0,
            Some(_) => self.cfg.tx_burst as usize * 4,
            None => (self.cfg.tx_burst as usize * 4).saturating_sub(self.tx_queue.len() + self.tx_batch.len()),
        };
        let budget = (self.cfg.tx_burst as usize).min(room);
        // A capture and TX faults read and rewrite the frame as one slice: they see copies.
        let zc_min = self.zc_min.filter(|_| self.pcap.is_none() && self.fault_tx.is_none());
        // the last destination routed is remembered for this step only (`route`)
        self.tx_route = None;
        let sent = self.transmit_frames(now, pass, zc_min, budget);
        self.tx_route = None;
        work.tx += sent as u32;
        self.flush_tx();
    }

    /// Up to `budget` frames from the transport, each into an mbuf, routed to the TX queue;
    /// stops when the transport has none or no mbuf is left. The frames come as a segment
    /// train ([`Device::tx_train`]: a QP's run of frames without the per-frame round robin
    /// and QP checks) and are routed when the train ends, except that a frame to a
    /// destination not yet routed in this step ends the train and is routed at once: it may
    /// be to one of our own addresses, received right here, and the transport must see it
    /// before it makes the next frame, as it did frame by frame. Out of line with the
    /// `frame-profile` feature, so that an instruction profile shows the per-frame TX work
    /// apart from the idle polls.
    #[cfg_attr(feature = "frame-profile", inline(never))]
    fn transmit_frames(&mut self, now: Instant, pass: TxPass, zc_min: Option<usize>, budget: usize) -> usize {
        let mut sent = 0;
        let mut step = core::mem::take(&mut self.tx_step);
        let mut more = true;
        while more && sent < budget {
            more = false;
            // No zero-copy minimum: every frame written whole, as by `poll_transmit`.
            let mut train = self.dev.tx_train(now, pass, zc_min.unwrap_or(usize::MAX));
            while sent < budget {
                let mut m = match self.spare.take() {
                    Some(m) => m,
                    None => match self.tx_mbufs.take(&self.pool) {
                        Some(m) => m,
                        None => {
                            self.counters.tx_nombuf += 1;
                            break;
                        }
                    },
                };
                let Some(buf) = m.set_len(self.frame_len as u16) else {
                    self.counters.tx_nombuf += 1;
                    break;
                };
                let Some(f) = train.next(buf) else {
                    self.spare = Some(m);
                    break;
                };
                let _ = m.set_len(f.len as u16);
                if let Some(p) = f.payload {
                    attach_payload(&mut self.ext, &self.pool, &mut self.tx_mbufs, &mut self.counters, train.memory(), &mut m, f.len, &p);
                }
                self.counters.tx_roce += 1;
                sent += 1;
                let ip = ip_dst(m.data());
                let routed = ip.is_some() && self.tx_route.is_some_and(|(last, _)| Some(last) == ip);
                step.push((ip, m));
                if !routed {
                    more = true;
                    break;
                }
            }
            drop(train);
            for (ip, m) in step.drain(..) {
                self.route(now.0, ip, m);
            }
        }
        self.tx_step = step;
        sent
    }

    pub(super) fn flush_tx(&mut self) {
        if let Some(mw) = &mut self.mesh {
            // every frame to its peer's port (the single-port batch stays unused)
            if self.tx_queue.is_empty() {
                mw.flush(self.cfg.queue);
            } else {
                mw.transmit(self.cfg.queue, &mut self.tx_queue, &self.pool);
            }
            return;
        }
        if self.tx_queue.is_empty() && self.tx_batch.is_empty() {
            return;
        }
        self.tx_batch.fill_from(&mut self.tx_queue);
        if !self.tx_batch.is_empty() {
            // Unsent frames stay in the batch (in order) for the next poll.
            let _ = self.port.tx_burst(self.cfg.queue, &mut self.tx_batch);
            self.counters.tx_ring_full += u64::from(!self.tx_batch.is_empty());
        }
    }

    /// Frames queued for the PMD, not yet taken by it.
    pub fn tx_pending(&self) -> usize {
        self.tx_queue.len() + self.tx_batch.len() + self.mesh.as_ref().map_or(0, |m| m.pending())
    }

    /// Does I/O through the ports of `mesh` from now on instead of the device's own port
    /// (which still gives the MTU, the offloads and the window; see [`mesh`]).
    pub fn attach_mesh(&mut self, mesh: mesh::MeshWire) {
        self.mesh = Some(mesh);
    }

    /// The attached mesh (its owner marks ports up and down).
    pub fn mesh_mut(&mut self) -> Option<&mut mesh::MeshWire> {
        self.mesh.as_mut()
    }

    /// The last step before the PMD: TX faults, capture, queue.
    pub(super) fn wire_tx(&mut self, now: u64, mut m: Mbuf) {
        if let Some(f) = &mut self.fault_tx {
            let a = f.decide(m.len(), is_roce(m.data()));
            self.sync_fault_total();
            if a.drop {
                return;
            }
            apply_corruption(m.data_mut(), &a);
            if a.dup {
                if let Ok(c) = self.pool.alloc_from_slice(m.data()) {
                    self.enqueue_wire(now, c);
                }
            }
            if a.reorder && self.held_tx.is_none() {
                self.held_tx = Some((m, now));
                return;
            }
        }
        self.enqueue_wire(now, m);
        if let Some((h, _)) = self.held_tx.take() {
            self.enqueue_wire(now, h);
        }
    }

    pub(super) fn enqueue_wire(&mut self, now: u64, mut m: Mbuf) {
        if self.pcap.is_some() {
            let d = m.data().to_vec();
            self.capture(now, &d);
        }
        if self.tx_ip_offload {
            if let Some(ihl) = ipv4_header_len(m.data()) {
                m.set_tx_ipv4_cksum_offload(eth::HEADER_LEN as u8, ihl, true, false);
            }
        }
        self.tx_queue.push_back(m);
    }
}

/// Behind the `hdr_len` header bytes in `m`: the payload in registered memory as an
/// external-buffer segment and the pad + ICRC as a third ([`zerocopy`]); or, when that
/// cannot be done (no range holds it, the pool is out of mbufs), a copy into `m` from `mem`,
/// the same bytes as the copy path would have written.
#[allow(clippy::too_many_arguments)]
fn attach_payload(
    ext: &mut zerocopy::ExtRanges,
    pool: &Mempool,
    tx_mbufs: &mut txmbufs::TxMbufs,
    counters: &mut EngineCounters,
    mem: &ProcessMemory,
    m: &mut Mbuf,
    hdr_len: usize,
    p: &TxPayload,
) {
    if ext.attach(pool, tx_mbufs, m, p.addr, p.len, p.trailer()) {
        counters.tx_zero_copy += 1;
        return;
    }
    let total = hdr_len + p.len + p.trailer().len();
    let Some(buf) = m.set_len(total as u16) else { return };
    let (body, trailer) = buf[hdr_len..].split_at_mut(p.len);
    if mem.read(p.addr, body).is_err() {
        body.fill(0);
    }
    trailer.copy_from_slice(p.trailer());
}
