//! The running application: EAL, the mbuf pool, the ports, the forwarding run, the prompt.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use droce_dpdk::{self as dpdk, Eal, LcoreId, Mempool, MempoolConfig, Port, PortConfig, QueueId};

use crate::args::{AppOptions, CommandLine, Source};
use crate::cmdline::{self, Command, PortSel};
use crate::fwd::{self, Stream, StreamSpec, StreamStats};
use crate::modes::{self, Family, ModeInfo};
use crate::switch::{BottleneckScope, SharedBottleneckStats, SwitchSpec, SwitchStats, SwitchStream};
use crate::stats::{self, FwdTotals, PortCounters, RateMeter};

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
            Err(dpdk::Error::VdevNotCreated { name, .. }) if crate::capture::vdev_failure_reason(&log, &name).is_some() => {
                let why = crate::capture::vdev_failure_reason(&log, &name).unwrap_or_default();
                let why = why.trim_end_matches('.');
                return Err(format!(
                    "virtual device '{name}' was not created: {why}; check its key=value arguments \
                     (e.g. --vdev=net_memif0,role=server,socket=/tmp/memif.sock, --vdev=net_ring0)"
                ));
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
            let need = nb_ports * (u32::from(opts.rxd) + u32::from(opts.txd) + 2 * u32::from(crate::args::MAX_BURST))
                + nb_lcores * (256 + u32::from(crate::args::MAX_BURST));
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

    /// Forwarding lcores a run would use, and whether the main lcore forwards instead.
    fn plan_lcores(&self, nb_streams: usize, batch: bool) -> (Vec<LcoreId>, bool) {
        if self.workers.is_empty() {
            return (Vec::new(), batch);
        }
        let n = self.opts.nb_cores.map(usize::from).unwrap_or(self.workers.len()).min(self.workers.len()).min(nb_streams).max(1);
        (self.workers[..n].to_vec(), false)
    }

    fn stream_pairs(&self) -> Vec<(u16, u16)> {
        (0..self.nb_ports()).map(|p| (p, self.opts.topology.peer(p, self.nb_ports()))).collect()
    }

    fn scope(&self) -> BottleneckScope {
        self.opts.bottleneck_scope.unwrap_or(BottleneckScope::Port)
    }

    fn is_switch(&self) -> bool {
        self.mode.family == Family::Switch
    }

    /// Streams a run has: one per port pair, or the switch's one over all ports.
    fn nb_streams(&self) -> usize {
        if self.is_switch() {
            1
        } else {
            self.stream_pairs().len()
        }
    }

    fn fwd_config_text(&self, batch: bool) -> String {
        let pairs = self.stream_pairs();
        let (lcores, on_main) = self.plan_lcores(self.nb_streams(), batch);
        let nb_cores = if lcores.is_empty() { 1 } else { lcores.len() };
        let mut s = format!(
            "{} packet forwarding - ports={} - cores={} - streams={} - topology={}\n",
            self.mode.name,
            self.nb_ports(),
            nb_cores,
            self.nb_streams(),
            if self.is_switch() { "learning" } else { self.opts.topology.name() }
        );
        let where_: Vec<String> = if !lcores.is_empty() {
            lcores.iter().map(|l| format!("Logical Core {l} (socket {})", dpdk::lcore_socket(*l).max(0))).collect()
        } else if on_main {
            vec!["Main lcore (no worker lcore enabled; batch mode forwards on it)".to_string()]
        } else {
            vec!["A helper thread (no worker lcore enabled; give -l 0-1 for a dedicated lcore)".to_string()]
        };
        if self.is_switch() {
            let all: Vec<String> = (0..self.nb_ports()).map(|p| p.to_string()).collect();
            s.push_str(&format!("{} forwards packets on 1 stream:\n", where_[0]));
            s.push_str(&format!("  RX P={}/Q=0 -> TX learnt port, flood to the others\n", all.join(",")));
            if let Some(b) = &self.opts.bottleneck {
                let where_ = match self.scope() {
                    BottleneckScope::Port => "on each egress port",
                    BottleneckScope::Switch => "shared by all ports (scope switch)",
                };
                s.push_str(&format!("  bottleneck {where_}: {}\n", stats::bottleneck_config(b)));
            }
        }
        for (i, w) in where_.iter().enumerate().filter(|_| !self.is_switch()) {
            let mine: Vec<&(u16, u16)> = pairs.iter().enumerate().filter(|(j, _)| j % where_.len() == i).map(|(_, p)| p).collect();
            s.push_str(&format!("{w} forwards packets on {} streams:\n", mine.len()));
            for (rx, tx) in mine {
                s.push_str(&format!("  RX P={rx}/Q=0 -> TX P={tx}/Q=0 peer={}\n", stats::mac(&self.peer_mac(*tx))));
            }
        }
        s.push_str(&format!("\n  {} packet forwarding packets/burst={}\n", self.mode.name, self.opts.burst));
        if self.mode.name == "txonly" {
            s.push_str(&format!("  packet len={} - nb packet segments=1\n", self.opts.txpkts));
        }
        s.push_str(&format!("  nb forwarding cores={} - nb forwarding ports={}\n", nb_cores, self.nb_ports()));
        s.push_str(&format!("  RX desc={} - TX desc={} - mbufs={}\n", self.opts.rxd, self.opts.txd, self.pool.size()));
        s
    }

    fn start(&mut self, tx_first: bool, batch: bool) -> AppResult<()> {
        if self.run.is_some() {
            return Err("packet forwarding already started; type 'stop' first".into());
        }
        let pairs = self.stream_pairs();
        let (lcores, _) = self.plan_lcores(self.nb_streams(), batch);
        print!("{}", self.fwd_config_text(batch));
        let base: Vec<PortCounters> = (0..self.nb_ports()).map(|p| self.counters(p)).collect();
        // The first "Throughput (since last show)" of a run then covers the run so far.
        let now = Instant::now();
        for (st, c) in self.ports.iter_mut().zip(&base) {
            st.meter.update(now, c);
        }
        // each stream with the counters it feeds (the switch feeds one set per port)
        let mut built: Vec<(Box<dyn Stream>, Vec<Stream1>)> = Vec::new();
        self.switch = None;
        if self.is_switch() {
            let sw = SwitchStream::new(SwitchSpec {
                ports: self.ports.iter().map(|p| p.port.clone()).collect(),
                queue: QueueId(0),
                pool: self.pool.clone(),
                burst: self.opts.burst,
                bottleneck: self.opts.bottleneck.map(|b| (b, self.scope())),
            });
            let infos = sw.port_stats().into_iter().enumerate().map(|(p, st)| Stream1 { rx_port: p as u16, tx_port: p as u16, lcore: None, stats: st }).collect();
            self.switch = Some(SwitchCounters { sw: sw.switch_stats(), bottlenecks: sw.bottleneck_stats() });
            built.push((Box::new(sw), infos));
        }
        let kind = match self.mode.family {
            Family::Forward(k) => k,
            Family::Switch => crate::modes::FwdKind::Io,
        };
        // a forwarding mode's streams, one per port pair (none in switch mode)
        for (rx, tx) in pairs.into_iter().filter(|_| !self.is_switch()) {
            let spec = StreamSpec {
                rx_port: self.ports[rx as usize].port.clone(),
                tx_port: self.ports[tx as usize].port.clone(),
                queue: QueueId(0),
                pool: self.pool.clone(),
                burst: self.opts.burst,
                txpkts: self.opts.txpkts,
                tx_mac: self.ports[tx as usize].mac,
                peer_mac: self.peer_mac(tx),
                tx_first,
            };
            let s = fwd::build(kind, spec);
            let info = Stream1 { rx_port: rx, tx_port: tx, lcore: None, stats: s.stats().clone() };
            built.push((s, vec![info]));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        let mut main_streams = Vec::new();
        let mut infos = Vec::new();
        if lcores.is_empty() {
            let (streams, i): (Vec<_>, Vec<_>) = built.into_iter().unzip();
            infos.extend(i.into_iter().flatten());
            if batch {
                main_streams = streams;
            } else {
                let stop2 = stop.clone();
                let h = std::thread::Builder::new()
                    .name("droce-fwd".into())
                    .spawn(move || {
                        // An lcore id gives the thread mempool caches; without one it still works.
                        let registered = dpdk::register_thread().is_ok();
                        fwd::run_streams(streams, &stop2);
                        if registered {
                            dpdk::unregister_thread();
                        }
                    })
                    .map_err(|e| format!("cannot start the forwarding thread: {e}"))?;
                workers.push(Worker::Thread(h));
            }
        } else {
            let mut per: Vec<Vec<Box<dyn Stream>>> = (0..lcores.len()).map(|_| Vec::new()).collect();
            for (j, (s, mut info)) in built.into_iter().enumerate() {
                for i in info.iter_mut() {
                    i.lcore = Some(lcores[j % lcores.len()]);
                }
                per[j % lcores.len()].push(s);
                infos.append(&mut info);
            }
            for (l, streams) in lcores.iter().zip(per) {
                let stop2 = stop.clone();
                match dpdk::launch(*l, move || {
                    fwd::run_streams(streams, &stop2);
                    0
                }) {
                    Ok(h) => workers.push(Worker::Lcore(h)),
                    Err(e) => {
                        stop.store(true, Ordering::Relaxed);
                        for w in workers {
                            join(w);
                        }
                        return Err(format!("cannot launch forwarding on lcore {l}: {e}"));
                    }
                }
            }
        }
        self.run = Some(Run { stop, workers, main_streams, streams: infos, base });
        Ok(())
    }

    fn totals(&self, run: &Run) -> Vec<FwdTotals> {
        (0..self.nb_ports())
            .map(|p| {
                let now = self.counters(p).since(&run.base[p as usize]);
                let mut t = FwdTotals { rx_dropped: now.imissed, rx_errors: now.ierrors, rx_nombuf: now.rx_nombuf, ..Default::default() };
                for s in &run.streams {
                    if s.rx_port == p {
                        t.rx_packets += s.stats.rx.load(Ordering::Relaxed);
                    }
                    if s.tx_port == p {
                        t.tx_packets += s.stats.tx.load(Ordering::Relaxed);
                        t.tx_dropped += s.stats.tx_dropped.load(Ordering::Relaxed);
                    }
                }
                t
            })
            .collect()
    }

    fn stop(&mut self) -> AppResult<()> {
        let Some(mut run) = self.run.take() else {
            return Err("packet forwarding not started; type 'start' first".into());
        };
        println!("Telling cores to stop...");
        run.stop.store(true, Ordering::Relaxed);
        println!("Waiting for lcores to finish...");
        for w in std::mem::take(&mut run.workers) {
            join(w);
        }
        run.main_streams.clear();
        let per_port = self.totals(&run);
        print!("{}", fwd_report(&per_port));
        print!("{}", self.switch_report());
        println!("\nDone.");
        self.last = Some(LastRun { per_port });
        Ok(())
    }

    /// The switch's block (MACs, floods, filtered frames), empty outside switch mode.
    fn switch_block(&self) -> String {
        match &self.switch {
            Some(c) => stats::switch_block(&stats::SwitchTotals {
                macs: c.sw.macs.load(Ordering::Relaxed),
                flooded: c.sw.flooded.load(Ordering::Relaxed),
                filtered: c.sw.filtered.load(Ordering::Relaxed),
                copy_failed: c.sw.copy_failed.load(Ordering::Relaxed),
            }),
            None => String::new(),
        }
    }

    /// The bottleneck blocks of `ports` (port scope), or the shared queue's block (switch scope).
    fn bottleneck_report(&self, ports: &[u16]) -> String {
        let Some(c) = &self.switch else { return String::new() };
        let mut s = String::new();
        if self.scope() == BottleneckScope::Switch {
            if let Some(b) = c.bottlenecks.first() {
                s.push_str(&stats::bottleneck_block("all ports (scope switch)", &b.load()));
            }
            return s;
        }
        for &p in ports {
            if let Some(b) = c.bottlenecks.get(usize::from(p)) {
                s.push_str(&stats::bottleneck_block(&format!("port {p}"), &b.load()));
            }
        }
        s
    }

    /// Everything the switch counted: its block and its bottlenecks' (empty in other modes).
    fn switch_report(&self) -> String {
        let all: Vec<u16> = (0..self.nb_ports()).collect();
        format!("{}{}", self.switch_block(), self.bottleneck_report(&all))
    }

    fn show_port_stats(&mut self, ports: &[u16]) {
        let now = Instant::now();
        let mut out = String::new();
        for &p in ports {
            let c = self.counters(p);
            let t = self.ports[p as usize].meter.update(now, &c);
            out.push_str(&stats::nic_stats_block(p, &c, &t));
        }
        out.push_str(&self.bottleneck_report(ports));
        print!("{out}");
        let _ = std::io::stdout().flush();
    }

    fn show_port_info(&self, ports: &[u16]) -> AppResult<()> {
        for &p in ports {
            let st = &self.ports[p as usize];
            let info = st.port.info().map_err(|e| e.to_string())?;
            let link = st.port.link().ok();
            let promisc = st.port.promiscuous().unwrap_or(false);
            println!("\n********************* Infos for port {p:<2} *********************");
            println!("MAC address: {}", stats::mac(&st.mac));
            println!("Device name: {}", info.device_name);
            println!("Driver name: {}", info.driver_name);
            println!("Connect to socket: {}", info.socket_id.max(0));
            if let Some(l) = link {
                println!("Link status: {}", if l.up { "up" } else { "down" });
                let speed = match l.speed_mbps {
                    0 => "None".to_string(),
                    u32::MAX => "Unknown".to_string(),
                    s if s % 1000 == 0 => format!("{} Gbps", s / 1000),
                    s => format!("{s} Mbps"),
                };
                println!("Link speed: {speed}");
                println!("Link duplex: {}", if l.full_duplex { "full-duplex" } else { "half-duplex" });
                println!("Autoneg status: {}", if l.autoneg { "On" } else { "Off" });
            }
            println!("MTU: {}", info.mtu);
            println!("Promiscuous mode: {}", if promisc { "enabled" } else { "disabled" });
            println!("Minimum/maximum MTU: {}/{}", info.min_mtu, info.max_mtu);
            println!("Max possible RX queues: {}", info.max_rx_queues);
            println!("Max possible number of RXDs per queue: {}", info.rx_desc_max);
            println!("Min possible number of RXDs per queue: {}", info.rx_desc_min);
            println!("Current number of RX queues: {}", info.nb_rx_queues);
            println!("Max possible TX queues: {}", info.max_tx_queues);
            println!("Max possible number of TXDs per queue: {}", info.tx_desc_max);
            println!("Min possible number of TXDs per queue: {}", info.tx_desc_min);
            println!("Current number of TX queues: {}", info.nb_tx_queues);
            println!(
                "Checksum offload: RX IPv4 {} UDP {}, TX IPv4 {} UDP {}",
                yes(info.rx_ipv4_cksum()),
                yes(info.rx_udp_cksum()),
                yes(info.tx_ipv4_cksum()),
                yes(info.tx_udp_cksum())
            );
        }
        Ok(())
    }

    fn show_port_xstats(&self, ports: &[u16]) -> AppResult<()> {
        for &p in ports {
            let xs = self.ports[p as usize].port.xstats().map_err(|e| format!("port {p}: {e}"))?;
            println!("###### NIC extended statistics for port {p:<2}");
            for x in xs.iter().filter(|x| x.value != 0) {
                println!("{}: {}", x.name, x.value);
            }
            println!("#################################################");
        }
        Ok(())
    }

    fn clear_port_stats(&mut self, ports: &[u16]) -> AppResult<()> {
        for &p in ports {
            self.ports[p as usize].port.reset_stats().map_err(|e| format!("port {p}: {e}"))?;
            self.ports[p as usize].meter.reset();
            if let Some(run) = self.run.as_mut() {
                run.base[p as usize] = PortCounters::default();
            }
            println!("\n  NIC statistics for port {p} cleared");
        }
        Ok(())
    }

    fn while_stopped(&self, what: &str) -> AppResult<()> {
        if self.run.is_some() {
            Err(format!("'{what}' cannot be changed while forwarding; type 'stop' first"))
        } else {
            Ok(())
        }
    }

    /// Executes one prompt command; `Ok(false)` means quit.
    fn execute(&mut self, cmd: Command) -> AppResult<bool> {
        match cmd {
            Command::Help(topic) => print!("{}", cmdline::help(topic.as_deref()).map_err(|e| e.0)?),
            Command::ShowPortInfo(sel) => {
                let ps = self.select(sel)?;
                self.show_port_info(&ps)?
            }
            Command::ShowPortStats(sel) => {
                let ps = self.select(sel)?;
                self.show_port_stats(&ps)
            }
            Command::ShowPortXstats(sel) => {
                let ps = self.select(sel)?;
                self.show_port_xstats(&ps)?
            }
            Command::ClearPortStats(sel) => {
                let ps = self.select(sel)?;
                self.clear_port_stats(&ps)?
            }
            Command::ShowFwdStats => {
                let per_port = match (&self.run, &self.last) {
                    (Some(run), _) => self.totals(run),
                    (None, Some(last)) => last.per_port.clone(),
                    (None, None) => return Err("no forwarding run yet; type 'start' first".into()),
                };
                print!("{}", fwd_report(&per_port));
            }
            Command::ClearFwdStats => {
                if let Some(run) = self.run.as_ref() {
                    for s in &run.streams {
                        // Writers use load+store; a concurrent burst may re-add its own count.
                        s.stats.rx.store(0, Ordering::Relaxed);
                        s.stats.tx.store(0, Ordering::Relaxed);
                        s.stats.tx_dropped.store(0, Ordering::Relaxed);
                    }
                }
                self.last = None;
                println!("  forward statistics cleared");
            }
            Command::ShowConfigFwd => print!("{}", self.fwd_config_text(false)),
            Command::SetFwd(m) => {
                self.while_stopped("set fwd")?;
                self.mode = modes::lookup(m).ok_or("unknown mode")?;
                println!("Set {} packet forwarding mode", self.mode.name);
                if self.opts.bottleneck.is_some() && !self.is_switch() {
                    println!("Note: --bottleneck applies to the switch mode only; {} runs without it", self.mode.name);
                }
            }
            Command::SetBurst(n) => {
                self.while_stopped("set burst")?;
                self.opts.burst = n;
                println!("Number of packets per burst set to {n}");
            }
            Command::SetTxpkts(n) => {
                self.while_stopped("set txpkts")?;
                let room = self.opts.mbuf_size - crate::args::MBUF_HEADROOM;
                if n > room {
                    return Err(format!("'set txpkts {n}': frames must fit in one mbuf ({room} B); run with a larger --mbuf-size"));
                }
                self.opts.txpkts = n;
                println!("txonly packet length set to {n}");
            }
            Command::SetNbCores(n) => {
                self.while_stopped("set nbcore")?;
                if self.workers.is_empty() && n > 1 || !self.workers.is_empty() && usize::from(n) > self.workers.len() {
                    return Err(format!(
                        "'set nbcore {n}': only {} forwarding lcore(s) enabled; restart with more lcores, e.g. -l 0-{n}",
                        self.workers.len().max(1)
                    ));
                }
                self.opts.nb_cores = Some(n);
                println!("Number of forwarding cores set to {n}");
            }
            Command::SetPromisc(sel, on) => {
                for p in self.select(sel)? {
                    self.ports[p as usize].port.set_promiscuous(on).map_err(|e| format!("port {p}: {e}"))?;
                }
            }
            Command::Start { tx_first } => self.start(tx_first, false)?,
            Command::Stop => self.stop()?,
            Command::Quit => return Ok(false),
        }
        Ok(true)
    }

    fn interactive(&mut self) -> i32 {
        if self.opts.auto_start {
            println!("Start automatic packet forwarding");
            if let Err(e) = self.start(self.opts.tx_first, false) {
                err_line(&e);
            }
        }
        let config = rustyline::Config::builder().auto_add_history(true).max_history_size(1000).map(|b| b.build());
        let mut rl = match config.and_then(rustyline::DefaultEditor::with_config) {
            Ok(rl) => rl,
            Err(e) => {
                err_line(&format!("cannot start the prompt: {e}"));
                return 1;
            }
        };
        loop {
            let line = match rl.readline("droce> ") {
                Ok(l) => l,
                Err(rustyline::error::ReadlineError::Interrupted) => continue,
                Err(rustyline::error::ReadlineError::Eof) => break,
                Err(e) => {
                    err_line(&format!("prompt: {e}"));
                    break;
                }
            };
            let cmd = match cmdline::parse(&line) {
                Ok(Some(c)) => c,
                Ok(None) => continue,
                Err(e) => {
                    err_line(&e.0);
                    continue;
                }
            };
            match self.execute(cmd) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => err_line(&e),
            }
            let _ = std::io::stdout().flush();
        }
        if self.run.is_some() {
            let _ = self.stop();
        }
        println!("\nBye...");
        0
    }

    fn batch(&mut self) -> i32 {
        let signalled = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let _ = signal_hook::flag::register(sig, signalled.clone());
        }
        let enter = Arc::new(AtomicBool::new(false));
        if self.opts.run_time.is_none() && self.opts.stats_period.is_none() {
            // testpmd's batch mode without a stats period waits for Enter (or end of input).
            println!("Press enter to exit");
            let e2 = enter.clone();
            let _ = std::thread::Builder::new().name("droce-stdin".into()).spawn(move || {
                let mut s = String::new();
                let _ = std::io::stdin().lock().read_line(&mut s);
                e2.store(true, Ordering::Relaxed);
            });
        }
        if let Err(e) = self.start(self.opts.tx_first, true) {
            err_line(&e);
            return 1;
        }
        let t0 = Instant::now();
        let deadline = self.opts.run_time.map(|s| t0 + Duration::from_secs_f64(s));
        let period = self.opts.stats_period.map(Duration::from_secs);
        let mut next_stats = period.map(|p| t0 + p);
        let clear = std::io::stdout().is_terminal();
        let main_forwards = self.run.as_ref().is_some_and(|r| !r.main_streams.is_empty());
        loop {
            if main_forwards {
                if let Some(run) = self.run.as_mut() {
                    fwd::poll_rounds(&mut run.main_streams, 256);
                }
            } else {
                // The forwarding lcore may share this CPU (e.g. --lcores=0@1,1@1): wake up
                // rarely, only for the next stats print, the deadline or a signal/Enter check.
                let now = Instant::now();
                let mut until = now + Duration::from_millis(50);
                for t in [next_stats, deadline].into_iter().flatten() {
                    until = until.min(t);
                }
                std::thread::sleep(until.saturating_duration_since(now));
            }
            let now = Instant::now();
            if let Some(t) = next_stats {
                if now >= t {
                    if clear {
                        print!("\x1b[2J\x1b[1;1H");
                    }
                    println!("\nPort statistics ====================================");
                    let all: Vec<u16> = (0..self.nb_ports()).collect();
                    self.show_port_stats(&all);
                    print!("{}", self.switch_block());
                    next_stats = period.map(|p| t + p);
                }
            }
            if deadline.is_some_and(|d| now >= d) || signalled.load(Ordering::Relaxed) || enter.load(Ordering::Relaxed) {
                break;
            }
        }
        if signalled.load(Ordering::Relaxed) {
            println!("\nSignal received, preparing to exit...");
        }
        let _ = self.stop();
        0
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

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn join(w: Worker) {
    match w {
        Worker::Lcore(h) => {
            if let Err(e) = h.wait() {
                err_line(&format!("forwarding lcore: {e}"));
            }
        }
        Worker::Thread(h) => {
            if h.join().is_err() {
                err_line("forwarding thread panicked");
            }
        }
    }
}

/// Forward statistics of every port and the accumulated block, as testpmd prints at `stop`.
fn fwd_report(per_port: &[FwdTotals]) -> String {
    let mut s = String::new();
    let mut acc = FwdTotals::default();
    for (p, t) in per_port.iter().enumerate() {
        s.push_str(&stats::fwd_stats_block(p as u16, t));
        acc.add(t);
    }
    s.push_str(&stats::accumulated_block(&acc));
    s
}
