//! A forwarding run: its streams on lcores or threads, `start` and `stop`, the totals.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use droce_dpdk::{self as dpdk, LcoreId, QueueId};

use super::show::fwd_report;
use super::{err_line, App, AppResult, LastRun, Run, Stream1, SwitchCounters, Worker};
use crate::fwd::{self, Stream, StreamSpec};
use crate::modes::Family;
use crate::stats::{self, FwdTotals, PortCounters};
use crate::switch::{BottleneckScope, SwitchSpec, SwitchStream};

impl App {
    /// Forwarding lcores a run would use, and whether the main lcore forwards instead.
    pub(super) fn plan_lcores(&self, nb_streams: usize, batch: bool) -> (Vec<LcoreId>, bool) {
        if self.workers.is_empty() {
            return (Vec::new(), batch);
        }
        let n = self.opts.nb_cores.map(usize::from).unwrap_or(self.workers.len()).min(self.workers.len()).min(nb_streams).max(1);
        (self.workers[..n].to_vec(), false)
    }

    pub(super) fn stream_pairs(&self) -> Vec<(u16, u16)> {
        (0..self.nb_ports()).map(|p| (p, self.opts.topology.peer(p, self.nb_ports()))).collect()
    }

    pub(super) fn scope(&self) -> BottleneckScope {
        self.opts.bottleneck_scope.unwrap_or(BottleneckScope::Port)
    }

    pub(super) fn is_switch(&self) -> bool {
        self.mode.family == Family::Switch
    }

    /// Streams a run has: one per port pair, or the switch's one over all ports.
    pub(super) fn nb_streams(&self) -> usize {
        if self.is_switch() {
            1
        } else {
            self.stream_pairs().len()
        }
    }

    pub(super) fn fwd_config_text(&self, batch: bool) -> String {
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

    pub(super) fn start(&mut self, tx_first: bool, batch: bool) -> AppResult<()> {
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

    pub(super) fn totals(&self, run: &Run) -> Vec<FwdTotals> {
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

    pub(super) fn stop(&mut self) -> AppResult<()> {
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
}

pub(super) fn join(w: Worker) {
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
