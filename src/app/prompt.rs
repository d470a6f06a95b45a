//! The two ways droce-pmd runs: the interactive prompt and its commands, and batch mode.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::show::fwd_report;
use super::{err_line, App, AppResult};
use crate::cmdline::{self, Command};
use crate::{fwd, modes};

impl App {
    pub(super) fn while_stopped(&self, what: &str) -> AppResult<()> {
        if self.run.is_some() {
            Err(format!("'{what}' cannot be changed while forwarding; type 'stop' first"))
        } else {
            Ok(())
        }
    }

    /// Executes one prompt command; `Ok(false)` means quit.
    pub(super) fn execute(&mut self, cmd: Command) -> AppResult<bool> {
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

    pub(super) fn interactive(&mut self) -> i32 {
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

    pub(super) fn batch(&mut self) -> i32 {
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
}
