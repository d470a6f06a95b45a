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
    /// A reconnect that closed a connection the server had not accepted yet would take the
    /// server down: DPDK 22.11's accept handler registers the new connection with the
    /// interrupt thread, fails to send its hello (EPIPE), closes the socket and frees the
    /// handle without unregistering it, and the interrupt thread's next rebuild of its epoll
    /// set panics ("Error adding fd N epoll_ctl, Bad file descriptor", SIGABRT). So only a
    /// connection memif itself has closed (the refusal) is made again
    /// ([`Port::memif_control_open`]), and the tries back off; a client whose server is known
    /// to have started its port (the zero-config pair) uses
    /// [`Port::wait_link_up_no_reconnect`].
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
            // only a connection memif has closed (refused, or the connect failed) is made
            // again: one still open is a handshake the server has not finished yet
            if memif_client && now.duration_since(since) >= every && self.memif_control_open() != Some(true) {
                let _ = self.stop();
                let _ = self.start();
                since = now;
                every = (every * 2).min(std::time::Duration::from_secs(5));
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// For a net_memif client port: whether this process holds an open control connection
    /// to the port's server socket (waiting to be accepted, in the handshake, or connected);
    /// `None` for other ports, or when `/proc/self/fd` cannot be read.
    ///
    /// memif closes the client's side itself when the server refuses it (a disconnect
    /// message: port not started yet, "Already connected") or goes away, and never connects
    /// again: only then may the caller stop and start the port to reconnect. Dropping a
    /// connection the server has not finished with is what DPDK 22.11's memif server does
    /// not survive: a handshake message it answers fails ("sendmsg fail: Broken pipe" on its
    /// stderr) and, when it had not accepted the connection yet, its accept handler frees an
    /// interrupt handle it left registered, and the interrupt thread's next epoll rebuild
    /// panics (SIGABRT). On a loaded machine the server's interrupt thread can take seconds
    /// over a handshake, so no timeout tells the two cases apart; the open socket does.
    /// A process with two client ports on the same server socket cannot tell them apart here
    /// (either open counts for both).
    pub fn memif_control_open(&self) -> Option<bool> {
        let name = port_name(self.id).ok()?;
        let args = crate::devargs::vdev_args(&name)?;
        if !name.starts_with("net_memif") {
            return None;
        }
        let get = |k: &str| args.split(',').filter_map(|p| p.split_once('=')).find(|(a, _)| a.trim() == k).map(|(_, b)| b.trim());
        if get("role") != Some("client") {
            return None;
        }
        // DPDK 22.11's defaults
        let path = get("socket").unwrap_or("/run/memif.sock");
        let abstract_ = get("socket-abstract").map(|a| a != "no").unwrap_or(true);
        unix_peer_open(path.as_bytes(), abstract_)
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
        let mut out = PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        };
        // net_memif forgets its packet and byte counts when its peer disconnects
        // (`counted`): droce's own stand in for them
        if let Some(c) = super::counted::counted(self.id.0) {
            c.apply(&mut out);
        }
        Ok(out)
    }

    /// Zeroes the basic counters.
    pub fn reset_stats(&self) -> Result<()> {
        // SAFETY: valid port id.
        let r = unsafe { sys::rte_eth_stats_reset(self.id.0) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_stats_reset", r));
        }
        if let Some(c) = super::counted::counted(self.id.0) {
            c.reset();
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

/// Whether one of this process's sockets is connected to the Unix socket named `path`
/// (abstract: `@path`): getpeername on every socket in `/proc/self/fd`. `None` when the
/// directory cannot be read.
fn unix_peer_open(path: &[u8], abstract_: bool) -> Option<bool> {
    let want: Vec<u8> = if abstract_ { [&[0u8][..], path].concat() } else { path.to_vec() };
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<libc::c_int>().ok()) else { continue };
        if !std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str().as_encoded_bytes().starts_with(b"socket:")) {
            continue;
        }
        // SAFETY: sockaddr_un is plain data (all-zero valid); getpeername writes at most `len`
        // bytes into it. The fd may have been closed or reused by another thread since it was
        // listed: then the call fails or names another socket, which only reads.
        let (r, sa, len) = unsafe {
            let mut sa: libc::sockaddr_un = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            let r = libc::getpeername(fd, &mut sa as *mut libc::sockaddr_un as *mut libc::sockaddr, &mut len);
            (r, sa, len)
        };
        if r != 0 || sa.sun_family != libc::AF_UNIX as libc::sa_family_t {
            continue;
        }
        let off = std::mem::size_of::<libc::sa_family_t>();
        let n = (len as usize).saturating_sub(off).min(sa.sun_path.len());
        let mut name: Vec<u8> = sa.sun_path[..n].iter().map(|&c| c as u8).collect();
        if !abstract_ {
            // a path is NUL-terminated within the length
            if let Some(z) = name.iter().position(|&b| b == 0) {
                name.truncate(z);
            }
        }
        if name == want {
            return Some(true);
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::unix_peer_open;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

    #[test]
    fn unix_peer_open_finds_only_a_live_connection_to_that_name() {
        let name = format!("/droce-test-peer-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let l = UnixListener::bind_addr(&addr).unwrap();
        assert_eq!(unix_peer_open(name.as_bytes(), true), Some(false), "a listener is no connection");
        // connected, not accepted yet: the state a slow server leaves a memif client in
        let c = UnixStream::connect_addr(&addr).unwrap();
        assert_eq!(unix_peer_open(name.as_bytes(), true), Some(true));
        assert_eq!(unix_peer_open(name.as_bytes(), false), Some(false), "a path of the same name is another socket");
        assert_eq!(unix_peer_open(format!("{name}x").as_bytes(), true), Some(false));
        drop(c);
        assert_eq!(unix_peer_open(name.as_bytes(), true), Some(false));
        // a path socket
        let dir = std::env::temp_dir().join(format!("droce-peer-{}", std::process::id()));
        let _ = std::fs::create_dir(&dir);
        let p = dir.join("s.sock");
        let _ = std::fs::remove_file(&p);
        let l2 = UnixListener::bind(&p).unwrap();
        let c2 = UnixStream::connect(&p).unwrap();
        assert_eq!(unix_peer_open(p.as_os_str().as_encoded_bytes(), false), Some(true));
        drop(c2);
        assert_eq!(unix_peer_open(p.as_os_str().as_encoded_bytes(), false), Some(false));
        drop((l, l2));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
