//! The running application: EAL, the mbuf pool, the ports and their state; the forwarding run
//! (`forward`), the statistics and port reports (`show`) and the prompt and batch loop (`prompt`)
//! are its parts.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use droce_dpdk::{self as dpdk, Eal, LcoreId, Mempool, MempoolConfig, Port, PortConfig, QueueId};

use crate::args::{AppOptions, CommandLine, Source};
use crate::cmdline::PortSel;
use crate::fwd::{Stream, StreamStats};
use crate::modes::{self, ModeInfo};
use crate::switch::{SharedBottleneckStats, SwitchStats};
use crate::stats::{self, FwdTotals, PortCounters, RateMeter};

mod forward;
mod prompt;
mod show;

/// An error that ends a batch run (exit 1) or is reported at the prompt; always one line.
pub type AppResult<T> = Result<T, String>;

struct PortState {
    port: Port,
    mac: [u8; 6],
    meter: RateMeter,
}

/// Where forwarding runs.
enum Worker {
    Lcore(dpdk::LaunchHandle),
    Thread(std::thread::JoinHandle<()>),
}

struct Stream1 {
    rx_port: u16,
    tx_port: u16,
    lcore: Option<LcoreId>,
    stats: Arc<StreamStats>,
}

struct Run {
    stop: Arc<AtomicBool>,
    workers: Vec<Worker>,
    /// Streams the main lcore polls itself (batch mode without worker lcores).
    main_streams: Vec<Box<dyn Stream>>,
    streams: Vec<Stream1>,
    base: Vec<PortCounters>,
}

/// The forward statistics of the last finished run, for `show fwd stats all`.
struct LastRun {
    per_port: Vec<FwdTotals>,
}

/// What the switch stream publishes for the main lcore: its own counters and those of its
/// bottleneck queues (one per port, one shared, or none).
struct SwitchCounters {
    sw: Arc<SwitchStats>,
    bottlenecks: Vec<Arc<SharedBottleneckStats>>,
}

pub struct App {
    opts: AppOptions,
    mode: &'static ModeInfo,
    ports: Vec<PortState>,
    run: Option<Run>,
    last: Option<LastRun>,
    /// The switch's own counters while (or since) it ran in switch mode.
    switch: Option<SwitchCounters>,
    pool: Arc<Mempool>,
    /// Forwarding lcores available (EAL workers).
    workers: Vec<LcoreId>,
    // Declared last: dropped after ports and pool, as DPDK requires.
    _eal: Eal,
}

fn err_line(msg: &str) {
    eprintln!("droce-pmd: error: {msg}");
}

/// Runs droce-pmd with a parsed command line; returns the exit code.
pub fn run(cl: CommandLine) -> i32 {
    let mut app = match App::new(&cl) {
        Ok(a) => a,
        Err(e) => {
            err_line(&e);
            return 1;
        }
    };
    let code = if app.opts.interactive { app.interactive() } else { app.batch() };
    app.close();
    // Not dropping the Eal (rte_eal_cleanup): it would unmap memory under the still running EAL
    // interrupt thread (SIGSEGV at exit when a memif peer disconnects meanwhile); main exits next.
    let App { pool, _eal: eal, .. } = app;
    drop(pool);
    eal.release_for_exit();
    code
}

impl App {
    fn new(cl: &CommandLine) -> AppResult<App> {
        match &cl.source {
            Source::Embedded => println!("droce-pmd: no arguments: running the embedded demo (conf/default.conf): {}", cl.eal[1..].join(" ")),
            Source::File(f) => println!("droce-pmd: configuration from {f}"),
            Source::Args => {}
        }
        let (res, log) = crate::capture::capture_stdio(|| droce_dpdk::runtime::start_eal(&cl.eal, false));
        let eal = match res {
            Ok(eal) => {
                print!("{log}");
                eal
            }
            Err(dpdk::Error::EalInit { errno, .. }) => {
                return Err(crate::capture::eal_failure_line(&log, &dpdk::strerror(errno)));
            }
            Err(dpdk::Error::VdevNotCreated { .. }) if crate::capture::memif_socket_in_use(&log).is_some() => {
                return Err(crate::capture::memif_socket_in_use(&log).unwrap_or_default());
            }
            Err(dpdk::Error::VdevNotCreated { name, .. }) if crate::capture::vdev_refused(&log, &name).is_some() => {
                return Err(crate::capture::vdev_refused(&log, &name).unwrap_or_default());
            }
            Err(e) => return Err(e.to_string()),
        };
        let opts = cl.app.clone();
        let mode = modes::lookup(opts.forward_mode).ok_or("unknown forwarding mode")?;
        let ids = dpdk::port_ids();
        if ids.is_empty() {
            return Err("no ports found: add a virtual port (--vdev=net_ring0) or a PCI device (-a 0000:01:00.0) before '--'".into());
        }
        if let Some((p, _)) = opts.eth_peers.iter().find(|(p, _)| usize::from(*p) >= ids.len()) {
            return Err(format!(
                "--eth-peer={p},...: port {p} out of range: valid ports are {}",
                if ids.len() == 1 { "0".to_string() } else { format!("0..{}", ids.len() - 1) }
            ));
        }
        let workers = dpdk::worker_lcores();
        if let Some(n) = opts.nb_cores {
            if workers.is_empty() && n > 1 {
                return Err(format!(
                    "--nb-cores={n} but EAL has no worker lcore (only the main one); enable more with -l, e.g. -l 0-{n}"
                ));
            }
            if !workers.is_empty() && n as usize > workers.len() {
                return Err(format!(
                    "--nb-cores={n} but only {} forwarding lcore(s) are enabled; give more with -l (e.g. -l 0-{n}) or lower --nb-cores",
                    workers.len()
                ));
            }
        }
        let nb_lcores = dpdk::lcore_count().max(1);
        let nb_ports = ids.len() as u32;
        let total = opts.total_num_mbufs.unwrap_or_else(|| {
            let need = nb_ports * (u32::from(opts.rxd) + u32::from(opts.txd) + 2 * u32::from(crate::pkt::MAX_BURST))
                + nb_lcores * (256 + u32::from(crate::pkt::MAX_BURST));
            need.max(8192 * nb_ports.min(4)).next_power_of_two() - 1
        });
        let pool = Mempool::create(
            "droce_pmd_pool",
            &MempoolConfig { n: total, cache_size: 256, priv_size: 0, data_room: opts.mbuf_size, socket: dpdk::SOCKET_ANY },
        )
        .map_err(|e| format!("cannot create a pool of {total} mbufs: {e}; lower --total-num-mbufs or give EAL more memory (-m 1024)"))?;
        println!("droce-pmd: mbuf pool: n={total}, data room={} B", opts.mbuf_size);
        let pool = Arc::new(pool);

        let mut ports = Vec::new();
        for id in ids {
            let mut port = Port::new(id).map_err(|e| e.to_string())?;
            let cfg = PortConfig::new()
                .rx_queues(1)
                .tx_queues(1)
                .rx_desc(opts.rxd)
                .tx_desc(opts.txd)
                .rss(false)
                .fast_free(true)
                .promiscuous(true);
            port.configure(&cfg, &pool).map_err(|e| format!("port {id}: configure failed: {e}"))?;
            port.start().map_err(|e| format!("port {id}: start failed: {e}"))?;
            // a memif client reconnects until its server's port is up (Port::wait_link_up);
            // other ports, memif servers included, go on at once as in dpdk-testpmd
            let memif_client = dpdk::port_name(id).ok().and_then(|n| dpdk::vdev_args(&n)).is_some_and(|a| a.split(',').any(|kv| kv.trim() == "role=client"));
            if memif_client && !port.wait_link_up(std::time::Duration::from_secs(5)).unwrap_or(false) {
                println!("Port {id}: memif link still down after 5 s (is the role=server peer running?)");
            }
            let mac = port.mac_addr().map(|m| m.0).unwrap_or([0; 6]);
            println!("Port {id}: {}", stats::mac(&mac));
            ports.push(PortState { port, mac, meter: RateMeter::default() });
        }
        if ports.len() % 2 == 1 && opts.topology == crate::args::Topology::Paired && ports.len() > 1 {
            println!("\nWarning! port-topology=paired and odd forward ports number, the last port will pair with itself.\n");
        }
        Ok(App { opts, mode, ports, run: None, last: None, switch: None, pool, workers, _eal: eal })
    }

    fn nb_ports(&self) -> u16 {
        self.ports.len() as u16
    }

    fn select(&self, sel: PortSel) -> AppResult<Vec<u16>> {
        match sel {
            PortSel::All => Ok((0..self.nb_ports()).collect()),
            PortSel::One(p) if p < self.nb_ports() => Ok(vec![p]),
            PortSel::One(p) => Err(format!(
                "port {p} out of range: valid ports are {} or 'all'",
                if self.nb_ports() == 1 { "0".to_string() } else { format!("0..{}", self.nb_ports() - 1) }
            )),
        }
    }

    fn peer_mac(&self, port: u16) -> [u8; 6] {
        self.opts.eth_peers.iter().find(|(p, _)| *p == port).map(|(_, m)| *m).unwrap_or_else(|| crate::pkt::default_peer_mac(port))
    }

    fn counters(&self, p: u16) -> PortCounters {
        match self.ports[p as usize].port.stats() {
            Ok(s) => PortCounters {
                ipackets: s.ipackets,
                imissed: s.imissed,
                ibytes: s.ibytes,
                ierrors: s.ierrors,
                rx_nombuf: s.rx_nombuf,
                opackets: s.opackets,
                oerrors: s.oerrors,
                obytes: s.obytes,
            },
            Err(_) => PortCounters::default(),
        }
    }


    fn close(&mut self) {
        if self.run.is_some() {
            let _ = self.stop();
        }
        println!("\nStopping ports...");
        for st in self.ports.drain(..) {
            let id = st.port.id();
            // Frames still queued in a port (net_ring's rings hold a tx_first burst forever)
            // go back to the pool before it is dropped; bounded, forwarding has stopped.
            let mut b: dpdk::MbufBatch<64> = dpdk::MbufBatch::new();
            for _ in 0..4096 {
                match st.port.rx_burst(QueueId(0), &mut b) {
                    Ok(n) if n > 0 => {
                        b.clear();
                    }
                    _ => break,
                }
            }
            // parks DPDK's interrupt thread for good first (see Port::close_at_exit)
            let _ = st.port.close_at_exit();
            println!("Port {id} is closed");
        }
        println!("Done");
    }
}
