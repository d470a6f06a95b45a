//! Ethernet ports: discovery, configuration, start/stop, MAC, link, stats, bursts.

use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::c_char;

use dpdk_sys as sys;
use sys::consts::*;

use crate::error::{Error, Result};
use crate::intr_gate::PortUse;
use crate::mbuf::MbufBatch;
use crate::mempool::Mempool;

/// How long a memif client's link may stay down in [`Port::wait_link_up`] before it first
/// reconnects (each later try waits twice as long as the one before, up to 5 s).
pub const MEMIF_RECONNECT_AFTER: std::time::Duration = std::time::Duration::from_millis(300);

/// Port id (`uint16_t port_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub u16);

/// Queue id on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueId(pub u16);

impl fmt::Display for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for QueueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An Ethernet MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(f, "{:02X}:{:02X}:{:02X}:{:02X}:{:02X}:{:02X}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

impl std::str::FromStr for MacAddr {
    type Err = Error;
    fn from_str(s: &str) -> Result<MacAddr> {
        let bad = || Error::InvalidArgument(format!("bad MAC address '{s}', expected e.g. 02:00:00:00:00:01"));
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for b in out.iter_mut() {
            let p = parts.next().ok_or_else(bad)?;
            if p.len() != 2 {
                return Err(bad());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(MacAddr(out))
    }
}

/// Number of available ports (`rte_eth_dev_count_avail`); 0 without EAL.
#[allow(unsafe_code)]
pub fn port_count() -> u16 {
    if !crate::running::is_running() {
        return 0;
    }
    // SAFETY: EAL is running.
    unsafe { sys::rte_eth_dev_count_avail() }
}

/// Ids of the available ports, ascending (`RTE_ETH_FOREACH_DEV`).
#[allow(unsafe_code)]
pub fn port_ids() -> Vec<PortId> {
    let mut out = Vec::new();
    if !crate::running::is_running() {
        return out;
    }
    // SAFETY: EAL is running; rte_eth_find_next returns RTE_MAX_ETHPORTS when done.
    let mut p = unsafe { sys::rte_eth_find_next(0) };
    while (p as u32) < sys::RTE_MAX_ETHPORTS {
        out.push(PortId(p));
        // SAFETY: as above.
        p = unsafe { sys::rte_eth_find_next(p + 1) };
    }
    out
}

/// The port whose device name is `name` (e.g. "net_ring0").
#[allow(unsafe_code)]
pub fn port_by_name(name: &str) -> Option<PortId> {
    if !crate::running::is_running() {
        return None;
    }
    let c = CString::new(name).ok()?;
    let mut id = 0u16;
    // SAFETY: valid C string and out-pointer.
    let r = unsafe { sys::rte_eth_dev_get_port_by_name(c.as_ptr(), &mut id) };
    (r == 0).then_some(PortId(id))
}

/// Device name of a port.
#[allow(unsafe_code)]
pub fn port_name(port: PortId) -> Result<String> {
    check_port(port)?;
    let mut buf = [0 as c_char; sys::RTE_ETH_NAME_MAX_LEN as usize];
    // SAFETY: buffer of RTE_ETH_NAME_MAX_LEN bytes as the API requires.
    let r = unsafe { sys::rte_eth_dev_get_name_by_port(port.0, buf.as_mut_ptr()) };
    if r != 0 {
        return Err(Error::from_ret("rte_eth_dev_get_name_by_port", r));
    }
    // SAFETY: DPDK NUL-terminated the name inside the buffer.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

#[allow(unsafe_code)]
fn check_port(port: PortId) -> Result<()> {
    crate::running::ensure_running()?;
    // SAFETY: any u16 may be asked.
    if unsafe { sys::rte_eth_dev_is_valid_port(port.0) } == 1 {
        Ok(())
    } else {
        Err(Error::PortOutOfRange { port: port.0, available: port_ids().into_iter().map(|p| p.0).collect() })
    }
}

/// Static facts about a port (`rte_eth_dev_info_get` and friends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    pub port: PortId,
    pub driver_name: String,
    pub device_name: String,
    pub mac: MacAddr,
    pub mtu: u16,
    pub min_mtu: u16,
    pub max_mtu: u16,
    pub max_rx_pktlen: u32,
    pub max_rx_queues: u16,
    pub max_tx_queues: u16,
    /// Queues currently configured.
    pub nb_rx_queues: u16,
    pub nb_tx_queues: u16,
    pub rx_desc_max: u16,
    pub rx_desc_min: u16,
    pub tx_desc_max: u16,
    pub tx_desc_min: u16,
    /// `RTE_ETH_RX_OFFLOAD_*` capability bits.
    pub rx_offload_capa: u64,
    /// `RTE_ETH_TX_OFFLOAD_*` capability bits.
    pub tx_offload_capa: u64,
    /// RSS hash functions the device can use (`RTE_ETH_RSS_*`).
    pub flow_type_rss_offloads: u64,
    /// NUMA socket (-1 unknown).
    pub socket_id: i32,
    pub if_index: u32,
    pub speed_capa: u32,
}

impl PortInfo {
    /// PMD verifies IPv4 header checksums on receive.
    pub fn rx_ipv4_cksum(&self) -> bool {
        self.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM != 0
    }
    /// PMD verifies UDP checksums on receive.
    pub fn rx_udp_cksum(&self) -> bool {
        self.rx_offload_capa & RTE_ETH_RX_OFFLOAD_UDP_CKSUM != 0
    }
    /// PMD can fill IPv4 header checksums on transmit.
    pub fn tx_ipv4_cksum(&self) -> bool {
        self.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM != 0
    }
    /// PMD can fill UDP checksums on transmit.
    pub fn tx_udp_cksum(&self) -> bool {
        self.tx_offload_capa & RTE_ETH_TX_OFFLOAD_UDP_CKSUM != 0
    }
}

/// Link state (`rte_eth_link`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    pub up: bool,
    /// Mbps; 0 when unknown (`RTE_ETH_SPEED_NUM_NONE`), `u32::MAX` for "unknown" from the PMD.
    pub speed_mbps: u32,
    pub full_duplex: bool,
    pub autoneg: bool,
}

impl fmt::Display for LinkStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let speed = match self.speed_mbps {
            0 => "None".to_string(),
            u32::MAX => "Unknown".to_string(),
            s => format!("{s} Mbps"),
        };
        write!(
            f,
            "Link {} - speed {} - {}",
            if self.up { "up" } else { "down" },
            speed,
            if self.full_duplex { "full-duplex" } else { "half-duplex" }
        )
    }
}

/// Basic counters (`rte_eth_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortStats {
    pub ipackets: u64,
    pub opackets: u64,
    pub ibytes: u64,
    pub obytes: u64,
    /// Dropped by the NIC: RX queues full.
    pub imissed: u64,
    pub ierrors: u64,
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// One extended statistic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xstat {
    pub id: u64,
    pub name: String,
    pub value: u64,
}

/// Port configuration; build with the chained setters. Defaults: 1 RX + 1 TX queue,
/// 1024 descriptors each (clamped to the PMD's limits), PMD default MTU, no offloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    pub rx_queues: u16,
    pub tx_queues: u16,
    pub rx_desc: u16,
    pub tx_desc: u16,
    /// `None` keeps the PMD default (1500).
    pub mtu: Option<u16>,
    /// Extra RX offloads that must be supported (`RTE_ETH_RX_OFFLOAD_*`), else configure fails.
    pub rx_offloads: u64,
    /// Extra TX offloads that must be supported (`RTE_ETH_TX_OFFLOAD_*`), else configure fails.
    pub tx_offloads: u64,
    /// Enable IPv4 and UDP checksum offloads (RX check, TX fill) *where the PMD offers them*.
    pub checksum_offload: bool,
    /// Spread RX over the queues with RSS (IP/UDP hash) when more than one RX queue is asked
    /// for and the PMD supports it.
    pub rss: bool,
    /// Enable `RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE` where offered (all mbufs from one pool,
    /// refcnt 1): cheaper TX completion, as dpdk-testpmd does by default.
    pub fast_free: bool,
    /// Set promiscuous mode at configure time (`None`: leave as is).
    pub promiscuous: Option<bool>,
    /// NUMA socket for the queues; `None`: the port's socket.
    pub socket: Option<i32>,
}

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            mtu: None,
            rx_offloads: 0,
            tx_offloads: 0,
            checksum_offload: false,
            rss: true,
            fast_free: true,
            promiscuous: None,
            socket: None,
        }
    }
}

impl PortConfig {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn rx_queues(mut self, n: u16) -> Self {
        self.rx_queues = n;
        self
    }
    pub fn tx_queues(mut self, n: u16) -> Self {
        self.tx_queues = n;
        self
    }
    pub fn rx_desc(mut self, n: u16) -> Self {
        self.rx_desc = n;
        self
    }
    pub fn tx_desc(mut self, n: u16) -> Self {
        self.tx_desc = n;
        self
    }
    pub fn mtu(mut self, mtu: u16) -> Self {
        self.mtu = Some(mtu);
        self
    }
    pub fn rx_offloads(mut self, bits: u64) -> Self {
        self.rx_offloads = bits;
        self
    }
    pub fn tx_offloads(mut self, bits: u64) -> Self {
        self.tx_offloads = bits;
        self
    }
    pub fn checksum_offload(mut self, on: bool) -> Self {
        self.checksum_offload = on;
        self
    }
    pub fn rss(mut self, on: bool) -> Self {
        self.rss = on;
        self
    }
    pub fn fast_free(mut self, on: bool) -> Self {
        self.fast_free = on;
        self
    }
    pub fn promiscuous(mut self, on: bool) -> Self {
        self.promiscuous = Some(on);
        self
    }
    pub fn socket(mut self, socket: i32) -> Self {
        self.socket = Some(socket);
        self
    }
}

/// What `configure` actually set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConfiguredPort {
    pub rx_queues: u16,
    pub tx_queues: u16,
    /// Descriptors after clamping to the PMD's limits.
    pub rx_desc: u16,
    pub tx_desc: u16,
    pub mtu: u16,
    /// RX offloads enabled (`RTE_ETH_RX_OFFLOAD_*`).
    pub rx_offloads: u64,
    /// TX offloads enabled (`RTE_ETH_TX_OFFLOAD_*`).
    pub tx_offloads: u64,
    pub rss: bool,
}

impl ConfiguredPort {
    pub fn rx_ipv4_cksum(&self) -> bool {
        self.rx_offloads & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM != 0
    }
    pub fn rx_udp_cksum(&self) -> bool {
        self.rx_offloads & RTE_ETH_RX_OFFLOAD_UDP_CKSUM != 0
    }
    pub fn tx_ipv4_cksum(&self) -> bool {
        self.tx_offloads & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM != 0
    }
    pub fn tx_udp_cksum(&self) -> bool {
        self.tx_offloads & RTE_ETH_TX_OFFLOAD_UDP_CKSUM != 0
    }
}

/// Handle on an Ethernet port. It remembers how many queues are configured so that bursts
/// on a queue that does not exist are refused instead of crashing inside the PMD.
/// Cheap to clone; clones made before `configure` keep the old queue counts.
#[derive(Debug, Clone)]
pub struct Port {
    id: PortId,
    nb_rxq: u16,
    nb_txq: u16,
}

#[allow(unsafe_code)]
impl Port {
    /// Opens a handle on `id`; `Error::PortOutOfRange` if no such port exists.
    pub fn new(id: PortId) -> Result<Port> {
        check_port(id)?;
        let info = raw_info(id)?;
        Ok(Port { id, nb_rxq: info.nb_rx_queues, nb_txq: info.nb_tx_queues })
    }

    /// Handles on every available port.
    pub fn all() -> Result<Vec<Port>> {
        port_ids().into_iter().map(Port::new).collect()
    }

    #[inline]
    pub fn id(&self) -> PortId {
        self.id
    }

    /// RX / TX queues configured.
    pub fn nb_rx_queues(&self) -> u16 {
        self.nb_rxq
    }
    pub fn nb_tx_queues(&self) -> u16 {
        self.nb_txq
    }

    /// Static information.
    pub fn info(&self) -> Result<PortInfo> {
        let i = raw_info(self.id)?;
        let driver_name = if i.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: driver_name points to the PMD's static NUL-terminated name.
            unsafe { CStr::from_ptr(i.driver_name) }.to_string_lossy().into_owned()
        };
        let mut mtu = 0u16;
        // SAFETY: valid port and out-pointer.
        let r = unsafe { sys::rte_eth_dev_get_mtu(self.id.0, &mut mtu) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_dev_get_mtu", r));
        }
        Ok(PortInfo {
            port: self.id,
            driver_name,
            device_name: port_name(self.id)?,
            mac: self.mac_addr()?,
            mtu,
            min_mtu: i.min_mtu,
            max_mtu: i.max_mtu,
            max_rx_pktlen: i.max_rx_pktlen,
            max_rx_queues: i.max_rx_queues,
            max_tx_queues: i.max_tx_queues,
            nb_rx_queues: i.nb_rx_queues,
            nb_tx_queues: i.nb_tx_queues,
            rx_desc_max: i.rx_desc_lim.nb_max,
            rx_desc_min: i.rx_desc_lim.nb_min,
            tx_desc_max: i.tx_desc_lim.nb_max,
            tx_desc_min: i.tx_desc_lim.nb_min,
            rx_offload_capa: i.rx_offload_capa,
            tx_offload_capa: i.tx_offload_capa,
            flow_type_rss_offloads: i.flow_type_rss_offloads,
            socket_id: self.socket_id(),
            if_index: i.if_index,
            speed_capa: i.speed_capa,
        })
    }

    /// NUMA socket of the device (-1 if unknown).
    pub fn socket_id(&self) -> i32 {
        // SAFETY: valid port id (checked at construction; a closed port yields -1).
        unsafe { sys::rte_eth_dev_socket_id(self.id.0) }
    }

    /// Configures queues, descriptors, MTU and offloads, and sets up every RX queue on
    /// `pool` and every TX queue. The port must be stopped. Requested `rx_offloads`/
    /// `tx_offloads` the PMD lacks are an error; checksum offloads and fast-free are enabled
    /// only where offered.
    pub fn configure(&mut self, cfg: &PortConfig, pool: &Mempool) -> Result<ConfiguredPort> {
        let info = raw_info(self.id)?;
        let p = self.id.0;
        if cfg.rx_queues == 0 && cfg.tx_queues == 0 {
            return Err(Error::InvalidArgument("a port needs at least one RX or TX queue".into()));
        }
        if cfg.rx_queues > info.max_rx_queues || cfg.tx_queues > info.max_tx_queues {
            return Err(Error::InvalidArgument(format!(
                "port {p}: {} RX / {} TX queues asked, the PMD allows at most {} / {}",
                cfg.rx_queues, cfg.tx_queues, info.max_rx_queues, info.max_tx_queues
            )));
        }
        if cfg.rx_offloads & !info.rx_offload_capa != 0 {
            return Err(Error::OffloadUnsupported { port: p, what: "RX", requested: cfg.rx_offloads, capa: info.rx_offload_capa });
        }
        if cfg.tx_offloads & !info.tx_offload_capa != 0 {
            return Err(Error::OffloadUnsupported { port: p, what: "TX", requested: cfg.tx_offloads, capa: info.tx_offload_capa });
        }
        if let Some(mtu) = cfg.mtu {
            if mtu < info.min_mtu || mtu > info.max_mtu {
                return Err(Error::InvalidArgument(format!(
                    "port {p}: MTU {mtu} outside the PMD's range {}..={}",
                    info.min_mtu, info.max_mtu
                )));
            }
        }
        let mut rx_off = cfg.rx_offloads;
        let mut tx_off = cfg.tx_offloads;
        if cfg.checksum_offload {
            rx_off |= info.rx_offload_capa & (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
            tx_off |= info.tx_offload_capa & (RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM);
        }
        if cfg.fast_free {
            tx_off |= info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
        }
        let mut conf = sys::rte_eth_conf::default();
        conf.rxmode.mtu = cfg.mtu.map(u32::from).unwrap_or(0);
        conf.rxmode.offloads = rx_off;
        conf.txmode.offloads = tx_off;
        // SAFETY: returns a constant.
        let rss_hf = unsafe { sys::droce_rss_ip_udp() } & info.flow_type_rss_offloads;
        let rss = cfg.rss && cfg.rx_queues > 1 && rss_hf != 0;
        if rss {
            conf.rxmode.mq_mode = sys::rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
        }
        // queue setup meets the state a memif connection handshake on the interrupt thread uses
        let _use = PortUse::enter();
        // SAFETY: valid port, conf fully initialised.
        let r = unsafe { sys::rte_eth_dev_configure(p, cfg.rx_queues, cfg.tx_queues, &conf) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_dev_configure", r));
        }
        let (mut nrx, mut ntx) = (cfg.rx_desc, cfg.tx_desc);
        // SAFETY: valid port and out-pointers.
        let r = unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(p, &mut nrx, &mut ntx) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_dev_adjust_nb_rx_tx_desc", r));
        }
        let socket = cfg.socket.unwrap_or_else(|| self.socket_id());
        let socket = if socket < 0 { sys::SOCKET_ID_ANY } else { socket } as u32;
        for q in 0..cfg.rx_queues {
            // SAFETY: configured port; NULL rxconf selects the PMD default; pool is a live pktmbuf pool.
            let r = unsafe { sys::rte_eth_rx_queue_setup(p, q, nrx, socket, std::ptr::null(), pool.as_ptr()) };
            if r != 0 {
                return Err(Error::from_ret("rte_eth_rx_queue_setup", r));
            }
        }
        for q in 0..cfg.tx_queues {
            // SAFETY: configured port; NULL txconf selects the PMD default plus port offloads.
            let r = unsafe { sys::rte_eth_tx_queue_setup(p, q, ntx, socket, std::ptr::null()) };
            if r != 0 {
                return Err(Error::from_ret("rte_eth_tx_queue_setup", r));
            }
        }
        self.nb_rxq = cfg.rx_queues;
        self.nb_txq = cfg.tx_queues;
        // the queue setup zeroed the PMD's counters: droce's own, where it keeps them, too
        counted::set(p, self.info().is_ok_and(|i| counted::driver_needs_counting(&i.driver_name)));
        if let Some(on) = cfg.promiscuous {
            self.set_promiscuous(on)?;
        }
        let mut mtu = 0u16;
        // SAFETY: valid port and out-pointer.
        unsafe { sys::rte_eth_dev_get_mtu(p, &mut mtu) };
        Ok(ConfiguredPort { rx_queues: cfg.rx_queues, tx_queues: cfg.tx_queues, rx_desc: nrx, tx_desc: ntx, mtu, rx_offloads: rx_off, tx_offloads: tx_off, rss })
    }

    /// Starts the port (`rte_eth_dev_start`).
    pub fn start(&self) -> Result<()> {
        check_port(self.id)?;
        let _use = PortUse::enter();
        // SAFETY: valid port.
        let r = unsafe { sys::rte_eth_dev_start(self.id.0) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_dev_start", r));
        }
        Ok(())
    }

    /// Stops the port (`rte_eth_dev_stop`); bursts then return 0.
    pub fn stop(&self) -> Result<()> {
        check_port(self.id)?;
        let _use = PortUse::enter();
        // SAFETY: valid port.
        let r = unsafe { sys::rte_eth_dev_stop(self.id.0) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_dev_stop", r));
        }
        Ok(())
    }

    /// Closes the port (`rte_eth_dev_close`), releasing its queues; the id becomes invalid.
    pub fn close(self) -> Result<()> {
        check_port(self.id)?;
        let _use = PortUse::enter();
        // SAFETY: valid port; consumes the handle.
        let r = unsafe { sys::rte_eth_dev_close(self.id.0) };
        if r != 0 {
            return Err(Error::from_ret("rte_eth_dev_close", r));
        }
        Ok(())
    }

    /// Stop and close for a process that exits right after (with `Eal::release_for_exit`).
    ///
    /// Parks DPDK's interrupt thread for good first ([`crate::intr_gate::freeze`]): net_memif's
    /// close frees its listening socket's interrupt handle without unregistering it (DPDK 22.11
    /// up to today's main), so that thread must never run again once a memif server port is
    /// closed; and stop and close then run `memif_disconnect` here with no peer event racing
    /// them. The peer gets the "Device closed" disconnect at once. Returns whether the port was
    /// really closed (always, now; the `bool` is kept for callers that report it).
    pub fn close_at_exit(self) -> Result<bool> {
        crate::intr_gate::freeze();
        let stopped = self.stop();
        self.close()?;
        stopped.map(|()| true)
    }
}


#[allow(unsafe_code)]
fn raw_info(id: PortId) -> Result<sys::rte_eth_dev_info> {
    check_port(id)?;
    let mut i = sys::rte_eth_dev_info::default();
    // SAFETY: valid port and out-pointer.
    let r = unsafe { sys::rte_eth_dev_info_get(id.0, &mut i) };
    if r != 0 {
        return Err(Error::from_ret("rte_eth_dev_info_get", r));
    }
    Ok(i)
}

impl LinkStatus {
    fn from_raw(l: &sys::rte_eth_link) -> LinkStatus {
        LinkStatus { up: l.link_status() != 0, speed_mbps: l.link_speed, full_duplex: l.link_duplex() != 0, autoneg: l.link_autoneg() != 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_parse_display() {
        let m: MacAddr = "02:00:0a:0B:0c:ff".parse().unwrap();
        assert_eq!(m.0, [2, 0, 0xa, 0xb, 0xc, 0xff]);
        assert_eq!(m.to_string(), "02:00:0A:0B:0C:FF");
        assert!("02:00:0a:0b:0c".parse::<MacAddr>().is_err());
        assert!("02:00:0a:0b:0c:0d:0e".parse::<MacAddr>().is_err());
        assert!("zz:00:0a:0b:0c:0d".parse::<MacAddr>().is_err());
    }

    #[test]
    fn no_eal_no_ports() {
        assert_eq!(port_count(), 0);
        assert!(port_ids().is_empty());
        assert_eq!(Port::new(PortId(0)).unwrap_err(), Error::EalNotInitialized);
    }
}

mod burst;
mod control;
mod counted;
