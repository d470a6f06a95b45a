//! The progress step: runs the runtime (bounded), polls the device CQs, collects CM, SIDR and
//! lost-peer events, and hands them to connection management and completion translation.

use super::*;
use crate::info::EpType;
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::WcFlags;
use droce_transport::Qpn;

impl Engine {
    /// One full progress step (EQ reads, trywait, the progress thread): the device and the CM
    /// agent run until idle (bounded), CM events and work completions are turned into EQ
    /// events and CQ entries. Returns whether anything happened.
    pub fn progress(&mut self) -> bool {
        self.step(true)
    }

    /// The datapath step of CQ and counter reads: the device every call, the CM agent only
    /// every `CM_POLL_EVERY`-th call (it answers MADs and runs its timers a few calls late;
    /// connection setup is driven by EQ reads, which poll it every time). Like the full step
    /// it runs the device until idle (bounded), or until a round found completions while
    /// the host holds ACKs: those then leave with the next call, in one burst with the
    /// reply the application posts (just ahead of it), or from the host's ACK watchdog when it stops polling (before
    /// the watchdog, fi_pingpong 1 MiB ended in the peer's retry-exceeded that way).
    pub fn progress_datapath(&mut self) -> bool {
        self.step(false)
    }

    pub(super) fn step(&mut self, full: bool) -> bool {
        let mut h = self.host();
        // A round can queue frames for the next one (the RTU after a REP, ACKs): run until
        // idle, bounded, so nothing waits for the application's next call.
        let mut work = false;
        let mut wcs = std::mem::take(&mut self.wcs);
        wcs.clear();
        let mut buf = [WorkCompletion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: 0,
            qp_num: Qpn::new(0),
            src_qp: Qpn::new(0),
            wc_flags: WcFlags::default(),
            pkey_index: 0,
        }; 16];
        for _ in 0..8 {
            let w = if full { h.progress() } else { h.progress_datapath() };
            work |= w;
            for &(id, d) in &self.cq_list {
                for _ in 0..256 {
                    let n = h.poll_cq(d, &mut buf).unwrap_or(0);
                    wcs.extend(buf[..n].iter().map(|w| (id, *w)));
                    if n < buf.len() {
                        break;
                    }
                }
            }
            // With held ACKs (the host's default) another round would send them now, a TX
            // burst before the reply the application posts on these completions: return
            // them first; the ACKs leave with the next call (in the reply's burst, ahead of
            // it) or from the host's watchdog.
            if !w || (!wcs.is_empty() && h.hold_acks()) {
                break;
            }
        }
        let lost: Vec<IpAddr> = h.lost_peers_since(&mut self.lost_seen).to_vec();
        let mut events = Vec::new();
        let mut sidr_events = Vec::new();
        while let Some(e) = h.poll_cm_event() {
            events.push(e);
        }
        while let Some(e) = h.poll_sidr_event() {
            sidr_events.push(e);
        }
        // UD receives: the sender's address is in the GRH the device wrote.
        let mut grh_src: HashMap<u64, IpAddr> = HashMap::new();
        if !wcs.is_empty() && self.eps.values().any(|e| e.ty == EpType::Dgram) {
            for (_, wc) in &wcs {
                if let Some(op) = self.ops.get(&wc.wr_id) {
                    if op.kind == OpKind::Recv && wc.status == WcStatus::Success && self.eps.get(&op.ep).is_some_and(|e| e.ty == EpType::Dgram) {
                        let mut g = [0u8; 40];
                        if h.read_mem(op.grh_addr(), &mut g).is_ok() {
                            if let Some(ip) = grh_source(&g) {
                                grh_src.insert(wc.wr_id, ip);
                            }
                        }
                    }
                }
            }
        }
        drop(h);
        work |= !events.is_empty() || !wcs.is_empty();
        for e in events {
            self.cm_event(e);
        }
        work |= !sidr_events.is_empty();
        for e in sidr_events {
            self.sidr_event(e);
        }
        for &(cq, wc) in &wcs {
            self.completion(cq, wc, grh_src.get(&wc.wr_id).copied());
        }
        self.wcs = wcs;
        if !lost.is_empty() {
            self.fail_connections(&lost);
            work = true;
        }
        if work {
            self.idle_steps = 0;
            self.idle_spell.reset();
        } else {
            self.idle_steps = self.idle_steps.saturating_add(1);
        }
        work
    }

    /// Whether the caller of a read that found nothing should give up the CPU (after it
    /// released the engine): once [`idle_yield_after`] progress steps in a row were idle.
    /// Both ends of a connection usually busy-poll on the same few cores, and each side's
    /// ACKs and replies come only from its own progress: spinning on through a scheduler
    /// slice keeps the peer, which has the work, off the CPU.
    /// When due, how: a yield, or a sleep once idle for a millisecond
    /// (`droce_dpdk::runtime::idle`: a thread that only spins and yields can be left unrun for
    /// seconds when pollers outnumber CPUs, and its peers then give it up).
    pub fn idle_give_up(&mut self) -> Option<IdleAction> {
        (self.idle_steps >= idle_yield_after()).then(|| self.idle_spell.give_up(std::time::Instant::now()))
    }
}

/// Idle progress steps before a read yields the CPU: `DROCE_FI_IDLE_YIELD` (0 = never yield), 64 by default.
pub fn idle_yield_after() -> u32 {
    static N: OnceLock<u32> = OnceLock::new();
    *N.get_or_init(|| match parse_idle_yield(std::env::var("DROCE_FI_IDLE_YIELD").ok().as_deref()) {
        Ok(n) => n,
        Err(e) => {
            // as DROCE_IOV_LIMIT: a tuning knob out of range is named on stderr, the default kept
            eprintln!("droce: {e}; it stays 64");
            64
        }
    })
}

fn parse_idle_yield(v: Option<&str>) -> Result<u32, String> {
    match v.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(64),
        Some(t) => match t.parse::<u32>() {
            Ok(0) => Ok(u32::MAX),
            Ok(n) => Ok(n),
            Err(_) => Err(format!("DROCE_FI_IDLE_YIELD='{t}': want a number of idle steps (0: never yield)")),
        },
    }
}

#[cfg(test)]
mod idle_yield_tests {
    use super::parse_idle_yield;

    #[test]
    fn a_bad_idle_yield_is_an_error_not_the_default() {
        assert_eq!(parse_idle_yield(None), Ok(64));
        assert_eq!(parse_idle_yield(Some(" ")), Ok(64));
        assert_eq!(parse_idle_yield(Some("0")), Ok(u32::MAX));
        assert_eq!(parse_idle_yield(Some("10")), Ok(10));
        assert!(parse_idle_yield(Some("ten")).unwrap_err().contains("DROCE_FI_IDLE_YIELD='ten'"));
        assert!(parse_idle_yield(Some("-1")).is_err());
    }
}
