//! A port's datapath: RX and TX bursts on a queue (queue index checked), TX with retries.

use super::*;

impl Port {
    #[inline]
    pub(super) fn check_rxq(&self, q: QueueId) -> Result<()> {
        if q.0 < self.nb_rxq {
            Ok(())
        } else {
            Err(Error::QueueOutOfRange { port: self.id.0, queue: q.0, configured: self.nb_rxq })
        }
    }

    #[inline]
    pub(super) fn check_txq(&self, q: QueueId) -> Result<()> {
        if q.0 < self.nb_txq {
            Ok(())
        } else {
            Err(Error::QueueOutOfRange { port: self.id.0, queue: q.0, configured: self.nb_txq })
        }
    }

    /// Receives into the free slots of `batch` (`rte_eth_rx_burst`); returns how many arrived.
    /// One call into DPDK per burst, nothing per packet. A port that is stopped returns 0.
    #[inline]
    pub fn rx_burst<const N: usize>(&self, q: QueueId, batch: &mut MbufBatch<N>) -> Result<u16> {
        self.rx_burst_max(q, batch, u16::MAX)
    }

    /// As [`Port::rx_burst`], asking the PMD for at most `max` packets (a burst size smaller
    /// than the batch's capacity, e.g. a run-time `--burst` with a batch sized for the largest).
    /// Out of line with the `frame-profile` feature (with [`Port::tx_burst`]), so that an
    /// instruction profile shows what droce adds around the PMD's burst.
    #[cfg_attr(not(feature = "frame-profile"), inline)]
    #[cfg_attr(feature = "frame-profile", inline(never))]
    pub fn rx_burst_max<const N: usize>(&self, q: QueueId, batch: &mut MbufBatch<N>, max: u16) -> Result<u16> {
        self.check_rxq(q)?;
        let (base, len) = batch.raw_parts();
        let room = (N - len).min(usize::from(max)) as u16;
        if room == 0 {
            return Ok(0);
        }
        let _use = PortUse::enter();
        // SAFETY: queue checked; slots len..N are free and owned by the batch and room is at
        // most their number; DPDK writes at most `room` mbuf pointers whose ownership passes
        // to the batch.
        let n = unsafe { sys::droce_rte_eth_rx_burst(self.id.0, q.0, base.add(len), room) };
        if n > 0 {
            if let Some(c) = super::counted::counted(self.id.0) {
                // SAFETY: the n mbufs DPDK just wrote at base+len are the batch's
                c.rx(u64::from(n), unsafe { super::counted::bytes(base.add(len), n as usize) });
            }
        }
        batch.grow(n as usize);
        Ok(n)
    }

    /// Sends from the front of `batch` (`rte_eth_tx_burst`); sent mbufs leave the batch, the
    /// unsent stay in it, in order, for the caller to retry or drop (`batch.clear()`, or they
    /// Asks the PMD to free the mbufs of frames it has sent (`rte_eth_tx_done_cleanup`);
    /// the count it freed, or `None` when the PMD does not support it. Used to release frames
    /// that point into memory about to be deregistered.
    pub fn tx_done_cleanup(&self, q: QueueId) -> Option<u32> {
        // SAFETY: port and queue ids are plain integers; DPDK checks both.
        let r = unsafe { sys::rte_eth_tx_done_cleanup(self.id().0, q.0, 0) };
        u32::try_from(r).ok()
    }

    /// are freed when the batch is dropped). Returns how many were sent.
    #[cfg_attr(not(feature = "frame-profile"), inline)]
    #[cfg_attr(feature = "frame-profile", inline(never))]
    pub fn tx_burst<const N: usize>(&self, q: QueueId, batch: &mut MbufBatch<N>) -> Result<u16> {
        self.check_txq(q)?;
        let (base, len) = batch.raw_parts();
        if len == 0 {
            return Ok(0);
        }
        let _use = PortUse::enter();
        // a counted port's bytes are summed before the burst: the PMD may free what it takes
        // (memif copies and frees), and the frames it leaves are subtracted after
        // SAFETY: the first len slots are the batch's valid mbufs
        let counted = super::counted::counted(self.id.0).map(|c| (c, unsafe { super::counted::bytes(base, len) }));
        // SAFETY: queue checked; the first len slots are owned valid mbufs; the PMD takes
        // ownership of the first `n` it accepts.
        let n = unsafe { sys::droce_rte_eth_tx_burst(self.id.0, q.0, base, len as u16) };
        if let Some((c, offered)) = counted {
            // SAFETY: slots n..len are still the batch's
            let left = unsafe { super::counted::bytes(base.add(n as usize), len - n as usize) };
            c.tx(u64::from(n), offered - left);
        }
        batch.consume_front(n as usize);
        Ok(n)
    }

    /// `tx_burst`, then frees what the PMD did not take (counted as dropped, like
    /// dpdk-testpmd). Returns `(sent, dropped)`; the batch is empty afterwards.
    #[inline]
    pub fn tx_burst_or_free<const N: usize>(&self, q: QueueId, batch: &mut MbufBatch<N>) -> Result<(u16, u16)> {
        let sent = self.tx_burst(q, batch);
        let dropped = batch.clear() as u16;
        sent.map(|s| (s, dropped))
    }

    /// `tx_burst`, retrying the rest up to `retries` more times, then frees what is still
    /// unsent. Returns `(sent, dropped)`; the batch is empty afterwards.
    #[inline]
    pub fn tx_burst_retry<const N: usize>(&self, q: QueueId, batch: &mut MbufBatch<N>, retries: u32) -> Result<(u16, u16)> {
        let mut sent = match self.tx_burst(q, batch) {
            Ok(s) => s,
            Err(e) => {
                batch.clear();
                return Err(e);
            }
        };
        let mut tries = 0;
        while !batch.is_empty() && tries < retries {
            sent += self.tx_burst(q, batch)?;
            tries += 1;
        }
        let dropped = batch.clear() as u16;
        Ok((sent, dropped))
    }
}
