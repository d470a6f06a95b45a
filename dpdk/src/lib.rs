//! droce-dpdk: safe layer over the system DPDK 22.11 (crate `dpdk-sys`).
//!
//! `unsafe` is denied at the crate root and allowed only inside the modules that wrap
//! dpdk-sys; every unsafe block says why it is sound (`// SAFETY:`).
//!
//! # Public API in one page
//! ```text
//! Eal::init(&args) -> Result<Eal>          args[0] = program name, like rte_eal_init; Drop = rte_eal_cleanup
//!   eal.consumed(), eal.app_args()         app args = those after "--"
//!   is_running()
//!   errors: Error::EalInit{errno,..} (bad/unknown option: EINVAL; a --vdev/-a naming no driver:
//!           ENODEV, message lists the device args), EalAlreadyInitialized (once per process),
//!           VdevNotCreated{name,..} (--vdev=net_xxx whose driver rejected its devargs)
//! Mempool::create(name, &MempoolConfig{n, cache_size, priv_size, data_room, socket})   Drop frees
//!   pool.alloc() -> Result<Mbuf>, alloc_from_slice(&[u8]), avail_count(), in_use_count(), size()
//! Mbuf (owning, Drop = rte_pktmbuf_free): data()/data_mut(), pkt_len()/data_len()/len(),
//!   set_len(n) (fast single-segment), append/prepend -> Option<&mut [u8]>, adj/trim -> Option<()>,
//!   headroom/tailroom, refcnt, port, ol_flags, rx_ip_cksum/rx_l4_cksum, set_tx_ipv4_cksum_offload,
//!   to_vec, into_raw / unsafe from_raw / as_ptr
//! MbufBatch<const N = 32>: [*mut rte_mbuf; N] + len, no heap. len/is_empty/is_full/free_slots,
//!   as_slice/as_mut_slice/iter/iter_mut (&mut Mbuf), push/pop/drain/retain, clear (bulk free),
//!   alloc_bulk(&pool, n) (rte_pktmbuf_alloc_bulk). Drop frees what is left.
//! port_count(), port_ids(), port_by_name(name), port_name(id)
//! Port::new(PortId) -> Result<Port> (Error::PortOutOfRange lists valid ids), Port::all()
//!   configure(&PortConfig, &Mempool) -> ConfiguredPort   (queues, descs, MTU, offloads enabled)
//!   start/stop/close, mac_addr/set_mac_addr, set_promiscuous/promiscuous, set_allmulticast,
//!   link()/link_wait(),
//!   info() -> PortInfo (driver, device name, MAC, MTU min/max, max queues, offload capa, ...),
//!   stats()/reset_stats() -> PortStats, xstats()/xstat_names()/reset_xstats()
//!   rx_burst(QueueId, &mut batch) -> Result<u16>            fills the batch's free slots
//!   rx_burst_max(QueueId, &mut batch, max) -> Result<u16>   at most `max` (run-time burst size)
//!   tx_burst(QueueId, &mut batch) -> Result<u16>            unsent stay in the batch (retry or clear)
//!   tx_burst_or_free(q, &mut batch) -> (sent, dropped)      unsent freed
//!   tx_burst_retry(q, &mut batch, retries) -> (sent, dropped)
//! PortConfig::new().rx_queues(n).tx_queues(n).rx_desc(n).tx_desc(n).mtu(m).checksum_offload(true)
//!   .rx_offloads(bits).tx_offloads(bits).rss(bool).fast_free(bool).promiscuous(bool).socket(s)
//! lcores(), worker_lcores(), main_lcore(), lcore_count(), current_lcore(),
//!   launch(LcoreId, closure -> i32) -> LaunchHandle; handle.wait() -> Result<i32> (panic caught)
//!   register_thread() -> Result<LcoreId> / unregister_thread(): a std::thread polling ports gets
//!   an lcore id and mempool caches (rte_thread_register)
//! rdtsc(), tsc_hz(), Tsc::new() (cycles_to_ns, ns_to_cycles, now, elapsed_ns), TscInstant
//! Error (Display has rte_strerror text), strerror(errno), Result<T>
//! offload bit constants: dpdk_sys::consts::*, re-exported as `offload`
//! roce::RoceDevice: a droce-transport Device on a port+queue with ARP/ND, GID table,
//!   UDP 4791 demux, TSC timers, budgeted poll(), pcap, fault injection; API page in the `roce`
//!   module docs
//! runtime::{RuntimeConfig, Runtime, global}: the one bring-up (EAL, pool, port, RoceDevice, CM
//!   agent), poll loop, progress thread and verbs facade of droce-pmd's RDMA tests, the libfabric
//!   provider and the UCX transport; API page in the `runtime` module docs
//! ```
//!
//! # Ownership rules
//! * Drop `Mbuf`s, batches, then `Mempool`s, then the `Eal` (natural order when all are locals
//!   declared in that order). A `Mempool` dropped while mbufs are out is leaked, not freed.
//! * A port holds mbufs from the pool given to `configure` in its RX ring: stop/close the port
//!   before dropping that pool.
//! * DPDK's threading rule applies and is not enforced by the types: one queue of a port is
//!   polled (`rx_burst*` / `tx_burst*`) by one thread at a time. `Port` handles are cheap
//!   clones; give each lcore its own (port, queue) pairs. Reconfigure a port with fewer queues
//!   only when no clone made earlier still polls the dropped queues.
//! * `Mbuf`s and batches must not outlive the `Eal` (their drop returns them to DPDK memory).
//!
//! # Fast path notes
//! * Poll from EAL lcores (`launch`) or from threads passed through `register_thread()`: an
//!   unregistered thread has no per-lcore mempool cache, so every alloc/free hits the shared ring.
//! * txonly like dpdk-testpmd: `alloc_bulk`, `set_len(size)`, write only the headers (testpmd
//!   writes 42 B of Ethernet/IPv4/UDP); the payload is whatever the buffer held. Copying a full
//!   1500 B template per packet costs a memcpy testpmd does not do.
//! * Size `MempoolConfig::cache_size` (default 256) and give each lcore its own queues.
//!
//! # PMD notes
//! * net_ring (`--vdev=net_ring0`): each queue's TX ring is its RX ring (loopback), 1023 frames;
//!   it counts packets but not bytes (`ibytes`/`obytes` stay 0 in 22.11).
//! * net_memif works under `--no-shconf` (it only logs that its multi-process action cannot be
//!   registered); net_tap needs the shared config (drop `--no-shconf`, keep a unique
//!   `--file-prefix`). `Eal`'s drop removes EAL's runtime dir either way.
//! * PMDs that pre-fill RX rings (tap, PCI NICs) take `rx_desc` mbufs per RX queue from the
//!   pool at `configure`: size pools accordingly (`Error::NoMbufs` otherwise).
//!
//! # Drivers
//! DPDK is linked dynamically; EAL loads every PMD from its driver directory
//! ([`dpdk_sys::PMD_DIR`], Debian: `/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0`) during init,
//! so `--vdev=net_ring0`, `net_null0`, `net_memif0`, `net_af_packet0,iface=..`, `net_tap0`,
//! `net_pcap0,...` work without `-d` (tested), and the PCI PMDs (`-a 0000:01:00.0`) load from
//! the same directory (not tested here: no NIC on the build machine).
//!
//! # Example
//! ```no_run
//! use droce_dpdk::*;
//! let args: Vec<String> = ["prog", "--no-huge", "-m", "512", "--no-pci", "--no-shconf",
//!     "--file-prefix=ex", "--vdev=net_ring0"].iter().map(|s| s.to_string()).collect();
//! let eal = Eal::init(&args)?;
//! let pool = Mempool::create("pool0", &MempoolConfig::default())?;
//! let mut port = Port::new(PortId(0))?;
//! port.configure(&PortConfig::new(), &pool)?;
//! port.start()?;
//! let mut batch: MbufBatch<32> = MbufBatch::new();
//! batch.alloc_bulk(&pool, 32)?;
//! for m in batch.iter_mut() { m.set_len(60).unwrap().fill(0xab); }
//! let (sent, dropped) = port.tx_burst_or_free(QueueId(0), &mut batch)?;
//! let got = port.rx_burst(QueueId(0), &mut batch)?;
//! # let _ = (sent, dropped, got, eal);
//! # Ok::<(), droce_dpdk::Error>(())
//! ```

#![deny(unsafe_code)]
#![warn(missing_debug_implementations)]

mod devargs;
#[allow(unsafe_code)]
mod eal;
#[allow(unsafe_code)]
mod error;
#[allow(unsafe_code)]
mod lcore;
/// Keeps DPDK's interrupt thread out of PMD code while ports are in use (peer-exit race).
pub mod intr_gate;
#[allow(unsafe_code)]
mod mbuf;
#[allow(unsafe_code)]
mod mempool;
#[allow(unsafe_code)]
mod port;
mod running;
#[allow(unsafe_code)]
mod tsc;
/// The one bring-up, poll loop, progress thread and verbs facade of every frontend.
pub mod runtime;
/// RoCEv2 device on a port: see the module docs.
pub mod roce;

pub use dpdk_sys as sys;
/// Offload capability / enable bits (`RTE_ETH_{RX,TX}_OFFLOAD_*`).
pub use dpdk_sys::consts as offload;

pub use devargs::{not_a_directory, vdev_args};
pub use eal::Eal;
pub use error::{rte_errno, strerror, Error, Result};
pub use lcore::{
    current_lcore, launch, lcore_count, lcore_socket, lcores, main_lcore, register_thread, unregister_thread, worker_lcores,
    LaunchHandle, LcoreId,
};
pub use mbuf::{CksumStatus, Drain, Mbuf, MbufBatch, DEFAULT_BURST};
pub use mempool::{Mempool, MempoolConfig, SOCKET_ANY};
pub use port::{
    port_by_name, port_count, port_ids, port_name, ConfiguredPort, MEMIF_RECONNECT_AFTER, LinkStatus, MacAddr, Port, PortConfig, PortId, PortInfo,
    PortStats, QueueId, Xstat,
};
pub use running::is_running;
pub use tsc::{rdtsc, tsc_hz, Tsc, TscInstant};
