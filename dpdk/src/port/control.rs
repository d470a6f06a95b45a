//! A port's controls and counters: MAC address, multicast and promiscuous modes, link
//! status and waits, basic and extended statistics.

use super::*;

impl Port {
    /// Primary MAC address.
    pub fn mac_addr(&self) -> Result<MacAddr> {
        let mut a = sys::rte_ether_addr::default();
        // SAFETY: valid out-pointer.
        let r = unsafe { sys::rte_eth_macaddr_get(self.id.0, &mut a) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_macaddr_get", r));
        }
        Ok(MacAddr(a.addr_bytes))
    }

    /// Sets the primary MAC address.
    pub fn set_mac_addr(&self, mac: MacAddr) -> Result<()> {
        let mut a = sys::rte_ether_addr { addr_bytes: mac.0 };
        // SAFETY: valid pointer to an address DPDK copies.
        let r = unsafe { sys::rte_eth_dev_default_mac_addr_set(self.id.0, &mut a) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_dev_default_mac_addr_set", r));
        }
        Ok(())
    }

    /// Promiscuous mode on/off.
    /// Receive all multicast frames (`rte_eth_allmulticast_enable/disable`); IPv6 neighbour
    /// discovery needs the solicited-node groups (33:33:ff:xx:xx:xx).
    pub fn set_allmulticast(&self, on: bool) -> Result<()> {
        // SAFETY: valid port id.
        let r = unsafe {
            if on {
                sys::rte_eth_allmulticast_enable(self.id.0)
            } else {
                sys::rte_eth_allmulticast_disable(self.id.0)
            }
        };
        if r != 0 {
            return Err(Error::from_ret(if on { "rte_eth_allmulticast_enable" } else { "rte_eth_allmulticast_disable" }, r));
        }
        Ok(())
    }

    pub fn set_promiscuous(&self, on: bool) -> Result<()> {
        // SAFETY: valid port id.
        let r = unsafe {
            if on {
                sys::rte_eth_promiscuous_enable(self.id.0)
            } else {
                sys::rte_eth_promiscuous_disable(self.id.0)
            }
        };
        if r != 0 {
            return Err(Error::from_ret(if on { "rte_eth_promiscuous_enable" } else { "rte_eth_promiscuous_disable" }, r));
        }
        Ok(())
    }

    /// Whether promiscuous mode is on.
    pub fn promiscuous(&self) -> Result<bool> {
        // SAFETY: valid port id; returns 1, 0 or -1.
        match unsafe { sys::rte_eth_promiscuous_get(self.id.0) } {
            1 => Ok(true),
            0 => Ok(false),
            r => Err(Error::from_ret("rte_eth_promiscuous_get", r)),
        }
    }

    /// Link state without waiting (`rte_eth_link_get_nowait`). A link that is down asks the
    /// interrupt thread, where PMDs such as net_memif bring links up, for an early window
    /// (see [`crate::intr_gate`]; at most one per 100 us).
    pub fn link(&self) -> Result<LinkStatus> {
        let status = self.link_quiet()?;
        if !status.up {
            crate::intr_gate::kick_link_wait();
        }
        Ok(status)
    }

    /// Link state without waiting and without asking the interrupt thread for an early window
    /// (unlike [`Port::link`]): for a watcher that looks at many ports every millisecond, most
    /// of them down for long stretches (the zero-config mesh), where kicks would keep the
    /// interrupt thread running instead of parked.
    pub fn link_quiet(&self) -> Result<LinkStatus> {
        let mut l = sys::rte_eth_link::default();
        // SAFETY: valid out-pointer.
        let r = unsafe { sys::rte_eth_link_get_nowait(self.id.0, &mut l) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_link_get_nowait", r));
        }
        Ok(LinkStatus::from_raw(&l))
    }

    /// Polls the link until it is up or `timeout` passed; true when up.
    ///
    /// A net_memif *client* whose link stays down for [`MEMIF_RECONNECT_AFTER`] is stopped and
    /// started again, i.e. reconnects, then after twice as long, and so on (up to 5 s between
    /// tries). DPDK 22.11's memif server answers a client that connects before the server's
    /// port is started (the socket exists from EAL init on) with a disconnect ("ID 0 not
    /// found"), and its client never tries again: two processes started together then both
    /// waited out their timeouts (seen in 1 of ~8 droce-pmd pairs once startup timing
    /// shifted). A start that fails (no server listening) is retried the same way.
    ///
    /// Each reconnect closes a connection the server may not have accepted yet, and DPDK
    /// 22.11's memif server does not survive that: its accept handler registers the new
    /// connection with the interrupt thread, fails to send its hello (EPIPE), closes the
    /// socket and frees the handle without unregistering it, and the interrupt thread's next
    /// rebuild of its epoll set panics ("Error adding fd N epoll_ctl, Bad file descriptor",
    /// SIGABRT). On a loaded machine a handshake can take longer than 300 ms, so the tries
    /// back off; a client whose server is known to have started its port (the zero-config
    /// pair) uses [`Port::wait_link_up_no_reconnect`].
    pub fn wait_link_up(&self, timeout: std::time::Duration) -> Result<bool> {
        self.wait_link(timeout, true)
    }

    /// [`Port::wait_link_up`] without reconnecting: for a memif client whose server had its
    /// port started before this client connected, so that it never drops the connection.
    pub fn wait_link_up_no_reconnect(&self, timeout: std::time::Duration) -> Result<bool> {
        self.wait_link(timeout, false)
    }

    pub(super) fn wait_link(&self, timeout: std::time::Duration, reconnect: bool) -> Result<bool> {
        let memif_client = reconnect
            && self.info().map(|i| i.driver_name == "net_memif").unwrap_or(false)
            && port_name(self.id).ok().and_then(|n| crate::devargs::vdev_args(&n)).is_some_and(|a| a.split(',').any(|kv| kv.trim() == "role=client"));
        let t0 = std::time::Instant::now();
        let mut since = t0;
        let mut every = MEMIF_RECONNECT_AFTER;
        loop {
            if self.link()?.up {
                return Ok(true);
            }
            let now = std::time::Instant::now();
            if now.duration_since(t0) >= timeout {
                return Ok(false);
            }
            if memif_client && now.duration_since(since) >= every {
                let _ = self.stop();
                let _ = self.start();
                since = now;
                every = (every * 2).min(std::time::Duration::from_secs(5));
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// Link state, waiting up to 9 s for autonegotiation (`rte_eth_link_get`).
    pub fn link_wait(&self) -> Result<LinkStatus> {
        let mut l = sys::rte_eth_link::default();
        // SAFETY: valid out-pointer.
        let r = unsafe { sys::rte_eth_link_get(self.id.0, &mut l) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_link_get", r));
        }
        Ok(LinkStatus::from_raw(&l))
    }

    /// Basic counters.
    pub fn stats(&self) -> Result<PortStats> {
        let mut s = sys::rte_eth_stats::default();
        // SAFETY: valid out-pointer.
        let r = unsafe { sys::rte_eth_stats_get(self.id.0, &mut s) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_stats_get", r));
        }
        Ok(PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Zeroes the basic counters.
    pub fn reset_stats(&self) -> Result<()> {
        // SAFETY: valid port id.
        let r = unsafe { sys::rte_eth_stats_reset(self.id.0) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_stats_reset", r));
        }
        Ok(())
    }

    /// Names of the extended statistics, index = xstat id.
    pub fn xstat_names(&self) -> Result<Vec<String>> {
        // SAFETY: NULL/0 asks for the count.
        let n = unsafe { sys::rte_eth_xstats_get_names(self.id.0, std::ptr::null_mut(), 0) };
        if n < 0 {
            return Err(Error::from_ret("rte_eth_xstats_get_names", n));
        }
        let mut names = vec![sys::rte_eth_xstat_name::default(); n as usize];
        // SAFETY: buffer of n entries.
        let m = unsafe { sys::rte_eth_xstats_get_names(self.id.0, names.as_mut_ptr(), n as u32) };
        if m < 0 {
            return Err(Error::from_ret("rte_eth_xstats_get_names", m));
        }
        names.truncate(m.min(n) as usize);
        Ok(names
            .iter()
            // SAFETY: each name is a NUL-terminated char array of RTE_ETH_XSTATS_NAME_SIZE.
            .map(|x| unsafe { CStr::from_ptr(x.name.as_ptr()) }.to_string_lossy().into_owned())
            .collect())
    }

    /// Extended statistics with their names.
    pub fn xstats(&self) -> Result<Vec<Xstat>> {
        let names = self.xstat_names()?;
        let mut vals = vec![sys::rte_eth_xstat::default(); names.len()];
        // SAFETY: buffer of names.len() entries.
        let n = unsafe { sys::rte_eth_xstats_get(self.id.0, vals.as_mut_ptr(), vals.len() as u32) };
        if n < 0 {
            return Err(Error::from_ret("rte_eth_xstats_get", n));
        }
        vals.truncate((n as usize).min(names.len()));
        Ok(vals
            .iter()
            .map(|v| Xstat { id: v.id, name: names.get(v.id as usize).cloned().unwrap_or_default(), value: v.value })
            .collect())
    }

    /// Zeroes the extended statistics.
    pub fn reset_xstats(&self) -> Result<()> {
        // SAFETY: valid port id.
        let r = unsafe { sys::rte_eth_xstats_reset(self.id.0) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_xstats_reset", r));
        }
        Ok(())
    }
}
