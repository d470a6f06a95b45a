//! The process-wide droce host (`droce_dpdk::runtime::global`) in action: connect to every peer
//! over RC through IB CM, send each a short text and a 200000-byte patterned message, check
//! what arrives, print it.
//!
//! ```text
//! host_pair [--peers IP,IP,...] [--timeout SECS] [--quiet-check | --quiet-away]
//! ```
//! Without `--peers` the peer is `127.0.0.1` resolved by `Runtime::resolve_dst`: the other end of
//! the zero-config memif pair. On the zero-config mesh, `--peers 10.77.0.1,10.77.0.2,10.77.0.3`
//! in three shells connects every process to every other (its own address is left out). The lower address of each pair connects, the higher accepts.
//! Output (stdout), one line each: `role ...`, `got text '...' from IP`, `got 200000 bytes from
//! IP: pattern ok`, `done: N peers`. Errors go to stderr with exit status 1 (2: host not up).
//!
//! `--quiet-check` (two ends) then tests the host's ACK watchdog: the connecting end sends one
//! more message and times its send completion while the accepting end, right after the poll
//! that delivered it, stops polling for [`QUIET`] (lock released, as an application busy
//! elsewhere). The ACK it held must still leave: `quiet peer acknowledged in N ms` (an error
//! when it took [`QUIET_ACK_LIMIT`] or more). `--quiet-away`: the accepting end stops polling
//! as soon as its main exchange is done, and the message comes [`AWAY_SEND_DELAY`] later,
//! while nobody polls: the watchdog must receive it too, not only send an ACK already decided.

use droce_dpdk::runtime::{self, Runtime};
use droce_dpdk::roce::cm::{to_init, CmAgentEvent, ConnId, ConnectParams};
use droce_transport::qp::{QpCap, QpHandle, QpInitAttr, QpType};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{AccessFlags, CqHandle, MemoryRegion, PdHandle, RecvWr, SendOpcode, SendWr};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

const PORT: u16 = 7471;
const AREA: u64 = 512 * 1024;
const SMALL: u64 = 4096;
const LARGE: u32 = 200_000;
const LARGE_OFF: u64 = 64 * 1024;
const PING_OFF: u64 = 2 * SMALL;
/// How long the accepting end of `--quiet-check` stops polling.
pub const QUIET: Duration = Duration::from_millis(1500);
/// A send to the quiet end must complete sooner (the ACK watchdog ticks every millisecond).
pub const QUIET_ACK_LIMIT: Duration = Duration::from_millis(300);
/// `--quiet-away`: how long after its main exchange the connecting end sends, so that the
/// message arrives while the accepting end is away.
pub const AWAY_SEND_DELAY: Duration = Duration::from_millis(200);

/// Which quiet check runs after the main exchange (`--quiet-check`, `--quiet-away`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Quiet {
    Off,
    /// The accepting end stops polling right after the poll that delivered the message.
    AfterReceive,
    /// The accepting end stops polling before the message arrives.
    Away,
}

fn pattern(from: IpAddr, to: IpAddr, n: usize) -> Vec<u8> {
    let s: u32 = format!("{from}>{to}").bytes().fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    (0..n).map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(s) >> 13) as u8).collect()
}

#[derive(Default)]
struct PeerState {
    qp: Option<QpHandle>,
    conn: Option<ConnId>,
    established: bool,
    next_try: Option<Instant>,
    got_text: bool,
    got_large: bool,
    sent: u32,
    /// `--quiet-check`: the extra message arrived (acceptor) / its send completed (connector)
    pinged: bool,
}

impl PeerState {
    /// The main exchange with this peer is complete: both messages in, both sends completed.
    fn exchanged(&self) -> bool {
        self.got_text && self.got_large && self.sent == 2
    }
}

struct App {
    me: IpAddr,
    peers: Vec<IpAddr>,
    st: Vec<PeerState>,
    pd: PdHandle,
    cq: CqHandle,
    mr: MemoryRegion,
    base: u64,
    quiet_check: bool,
    /// The IB CM service port.
    port: u16,
}

impl App {
    fn recv_area(&self, i: usize) -> u64 {
        self.base + i as u64 * AREA
    }
    fn send_area(&self) -> u64 {
        self.base + self.peers.len() as u64 * AREA
    }

    /// A fresh RC QP in INIT with both receives posted.
    fn new_qp(&mut self, h: &mut Runtime, i: usize) -> Result<QpHandle, String> {
        let dev = h.dev();
        let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, ..QpCap::default() };
        let qp = dev
            .device_mut()
            .create_qp(QpInitAttr { qp_type: QpType::Rc, pd: self.pd, send_cq: self.cq, recv_cq: self.cq, srq: None, cap, sq_sig_all: true })
            .map_err(|e| format!("create_qp: {e:?}"))?;
        to_init(dev, qp).map_err(|e| format!("to_init: {e}"))?;
        let r = self.recv_area(i);
        let k = self.mr.lkey;
        let d = dev.device_mut();
        d.post_recv(qp, RecvWr::new(((i as u64) << 8) | 1).with_sge(r, SMALL as u32, k)).map_err(|e| format!("post_recv: {e:?}"))?;
        d.post_recv(qp, RecvWr::new(((i as u64) << 8) | 2).with_sge(r + LARGE_OFF, LARGE, k)).map_err(|e| format!("post_recv: {e:?}"))?;
        d.post_recv(qp, RecvWr::new(((i as u64) << 8) | 5).with_sge(r + PING_OFF, SMALL as u32, k)).map_err(|e| format!("post_recv: {e:?}"))?;
        Ok(qp)
    }

    fn connect(&mut self, h: &mut Runtime, i: usize) -> Result<(), String> {
        let qp = self.new_qp(h, i)?;
        let (cm, dev) = h.cm_and_dev();
        let id = cm.connect(dev, SocketAddr::new(self.peers[i], self.port), qp, &ConnectParams::rping()).map_err(|e| format!("connect: {e}"))?;
        self.st[i] = PeerState { qp: Some(qp), conn: Some(id), ..Default::default() };
        Ok(())
    }

    fn on_established(&mut self, h: &mut Runtime, i: usize) -> Result<(), String> {
        self.st[i].established = true;
        let qp = self.st[i].qp.unwrap();
        // the path MTU IB CM settled on (the smaller of both ends'): the tests check it
        let mtu = h.dev().device().query_qp(qp).map(|q| q.attr.path_mtu.bytes()).unwrap_or(0);
        println!("connected to {} at path MTU {mtu}", self.peers[i]);
        let text = format!("hello from {} to {}", self.me, self.peers[i]);
        let s = self.send_area();
        let large = pattern(self.me, self.peers[i], LARGE as usize);
        let dev = h.dev();
        dev.write_mem(s + i as u64 * SMALL, text.as_bytes()).map_err(|e| format!("{e:?}"))?;
        let lo = s + 16 * SMALL + i as u64 * (LARGE as u64).next_multiple_of(4096);
        dev.write_mem(lo, &large).map_err(|e| format!("{e:?}"))?;
        let k = self.mr.lkey;
        let d = dev.device_mut();
        d.post_send(qp, SendWr::new(((i as u64) << 8) | 3, SendOpcode::Send).with_sge(s + i as u64 * SMALL, text.len() as u32, k))
            .map_err(|e| format!("post_send: {e:?}"))?;
        d.post_send(qp, SendWr::new(((i as u64) << 8) | 4, SendOpcode::Send).with_sge(lo, LARGE, k)).map_err(|e| format!("post_send: {e:?}"))?;
        Ok(())
    }

    fn done(&self) -> bool {
        self.st.iter().all(|s| s.exchanged() && (!self.quiet_check || s.pinged))
    }
}

pub fn run(peers_arg: Option<Vec<IpAddr>>, timeout: Duration, quiet: Quiet) -> Result<(), String> {
    run_on(peers_arg, timeout, quiet, PORT)
}

/// [`run`] with the IB CM service port to listen on and connect to (a second exchange in the
/// same process uses another).
pub fn run_on(peers_arg: Option<Vec<IpAddr>>, timeout: Duration, quiet: Quiet, port: u16) -> Result<(), String> {
    let quiet_check = quiet != Quiet::Off;
    let g = runtime::global().map_err(|e| e.to_string())?;
    let mut h = g.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let me = h.local_ip();
    let peers = match peers_arg {
        Some(p) => p.into_iter().filter(|p| *p != me).collect::<Vec<_>>(),
        None => {
            let p = h.resolve_dst("127.0.0.1".parse().unwrap());
            if p == me {
                return Err("no peer: the config has no `peer`; give --peers".into());
            }
            vec![p]
        }
    };
    println!("role {}: ip {me}, rank {:?}, peers {peers:?}", h.config().source, h.config().rank);
    let n = peers.len();
    let len = (n as u64 + 1) * AREA + 16 * SMALL + n as u64 * (LARGE as u64).next_multiple_of(4096);
    let mut buf = vec![0u8; (len + 4096) as usize];
    let base = (buf.as_mut_ptr() as u64).next_multiple_of(4096);
    let dev = h.dev();
    let pd = dev.device_mut().alloc_pd();
    // SAFETY: `buf` is never touched directly after this and lives until the process exits
    // (this function ends with process::exit through main, never dropping it while in use:
    // it is leaked below).
    let mr = unsafe { dev.reg_mr(pd, base as *mut u8, len as usize, AccessFlags::ALL) }.map_err(|e| format!("reg_mr: {e:?}"))?;
    std::mem::forget(buf);
    let cq = dev.device_mut().create_cq(256).map_err(|e| format!("create_cq: {e:?}"))?;
    h.cm().listen(port);
    if quiet_check && peers.len() != 1 {
        return Err("--quiet-check wants exactly one peer".into());
    }
    let mut app = App { me, st: peers.iter().map(|_| PeerState::default()).collect(), peers, pd, cq, mr, base, quiet_check, port };
    // --quiet-away: the accepting end has been away / when the connecting end's exchange was done
    let (mut went_away, mut exchanged_at) = (false, None::<Instant>);
    // the connecting end's extra send, once its main exchange is complete: when it was posted
    let mut ping_posted: Option<Instant> = None;
    for i in 0..n {
        if me < app.peers[i] {
            app.connect(&mut h, i)?;
        }
    }
    let t0 = Instant::now();
    // QPs given up after a reject or timeout: their flushed receives still come out of the CQ
    let mut abandoned: Vec<droce_transport::Qpn> = Vec::new();
    let mut conns: BTreeMap<ConnId, usize> = app.st.iter().enumerate().filter_map(|(i, s)| s.conn.map(|c| (c, i))).collect();
    while !app.done() {
        if t0.elapsed() > timeout {
            let state: Vec<String> = app
                .st
                .iter()
                .zip(&app.peers)
                .map(|(s, p)| format!("{p}: established {} text {} large {} sent {}", s.established, s.got_text, s.got_large, s.sent))
                .collect();
            let e = h.dev().counters().clone();
            let eng: Vec<String> = e.iter().filter(|(_, v)| *v != 0).map(|(k, v)| format!("{k}={v}")).collect();
            let cmc = *h.cm().counters();
            let epc = *h.cm().endpoint().counters();
            return Err(format!(
                "timed out after {timeout:?}: {}; engine: {}; cm: {cmc:?} {epc:?}; neighbours: {:?}",
                state.join("; "),
                eng.join(" "),
                h.dev().neighbours()
            ));
        }
        h.progress();
        for i in 0..n {
            if let Some(t) = app.st[i].next_try {
                if Instant::now() >= t {
                    app.connect(&mut h, i)?;
                    conns.insert(app.st[i].conn.unwrap(), i);
                }
            }
        }
        while let Some(ev) = h.cm().poll_event() {
            match ev {
                CmAgentEvent::ConnectRequest { id, src, .. } => {
                    let Some(i) = app.peers.iter().position(|p| *p == src.ip()).filter(|&i| app.st[i].conn.is_none()) else {
                        h.cm().reject(id, b"unexpected").map_err(|e| format!("reject: {e}"))?;
                        continue;
                    };
                    let qp = app.new_qp(&mut h, i)?;
                    let (cm, dev) = h.cm_and_dev();
                    cm.accept(dev, id, qp, &ConnectParams::rping()).map_err(|e| format!("accept: {e}"))?;
                    app.st[i].qp = Some(qp);
                    app.st[i].conn = Some(id);
                    conns.insert(id, i);
                }
                CmAgentEvent::Established { id, .. } => {
                    let i = *conns.get(&id).ok_or("Established for an unknown connection")?;
                    app.on_established(&mut h, i)?;
                }
                CmAgentEvent::Rejected { id, .. } | CmAgentEvent::TimedOut { id } => {
                    // the peer is not listening yet: try again shortly with a new QP
                    let i = *conns.get(&id).ok_or("Rejected for an unknown connection")?;
                    if let Some(qp) = app.st[i].qp.take() {
                        if let Ok(a) = h.dev().device().query_qp(qp) {
                            abandoned.push(a.qp_num);
                        }
                        let _ = h.dev().device_mut().destroy_qp(qp);
                    }
                    app.st[i] = PeerState { next_try: Some(Instant::now() + Duration::from_millis(100)), ..Default::default() };
                }
                CmAgentEvent::Disconnected { id } => {
                    let i = conns.get(&id).copied();
                    if !i.map(|i| app.st[i].got_text && app.st[i].got_large).unwrap_or(true) {
                        return Err(format!("peer {:?} disconnected early", i.map(|i| app.peers[i])));
                    }
                }
            }
        }
        while let Some(wc) = h.dev().device_mut().poll_cq_one(app.cq).map_err(|e| format!("poll_cq: {e:?}"))? {
            let i = (wc.wr_id >> 8) as usize;
            if wc.status == WcStatus::WrFlushErr && abandoned.contains(&wc.qp_num) {
                continue;
            }
            if wc.status != WcStatus::Success {
                return Err(format!("completion with error: {:?} wr_id {:#x} (peer {})", wc.status, wc.wr_id, app.peers[i]));
            }
            match (wc.wr_id & 0xff, wc.opcode) {
                (1, WcOpcode::Recv) => {
                    let mut t = vec![0u8; wc.byte_len as usize];
                    h.dev().read_mem(app.recv_area(i), &mut t).map_err(|e| format!("{e:?}"))?;
                    let t = String::from_utf8_lossy(&t).into_owned();
                    let want = format!("hello from {} to {}", app.peers[i], me);
                    if t != want {
                        return Err(format!("text from {}: got '{t}', want '{want}'", app.peers[i]));
                    }
                    println!("got text '{t}' from {}", app.peers[i]);
                    app.st[i].got_text = true;
                }
                (2, WcOpcode::Recv) => {
                    let mut d = vec![0u8; wc.byte_len as usize];
                    h.dev().read_mem(app.recv_area(i) + LARGE_OFF, &mut d).map_err(|e| format!("{e:?}"))?;
                    if d != pattern(app.peers[i], me, LARGE as usize) {
                        return Err(format!("{} bytes from {}: pattern mismatch", d.len(), app.peers[i]));
                    }
                    println!("got {} bytes from {}: pattern ok", d.len(), app.peers[i]);
                    app.st[i].got_large = true;
                }
                (3 | 4, WcOpcode::Send) => app.st[i].sent += 1,
                (5, WcOpcode::Recv) => {
                    // the accepting end of --quiet-check: the ACK for this message is held for
                    // the next poll, which now does not come for QUIET; the host's watchdog
                    // thread must send it
                    app.st[i].pinged = true;
                    if quiet == Quiet::AfterReceive {
                        println!("got the quiet-check message: not polling for {} ms", QUIET.as_millis());
                        drop(h);
                        std::thread::sleep(QUIET);
                        h = g.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    } else {
                        println!("got the quiet-check message");
                    }
                }
                (6, WcOpcode::Send) => {
                    let t = ping_posted.map(|t| t.elapsed()).unwrap_or_default();
                    println!("quiet peer acknowledged in {} ms", t.as_millis());
                    if t >= QUIET_ACK_LIMIT {
                        return Err(format!("the quiet peer's ACK took {t:?} (limit {QUIET_ACK_LIMIT:?}): held ACKs are not flushed"));
                    }
                    app.st[i].pinged = true;
                }
                (k, op) => return Err(format!("unexpected completion kind {k} {op:?}")),
            }
        }
        if quiet == Quiet::Away && !went_away && me > app.peers[0] && app.st[0].exchanged() {
            // the accepting end of --quiet-away: the message comes while nobody polls; the
            // host's watchdog thread must receive it and acknowledge it
            went_away = true;
            println!("main exchange done: not polling for {} ms", QUIET.as_millis());
            drop(h);
            std::thread::sleep(QUIET);
            h = g.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        if quiet == Quiet::Away && me < app.peers[0] && app.st[0].exchanged() {
            exchanged_at.get_or_insert_with(Instant::now);
        }
        let send_now = quiet != Quiet::Away || exchanged_at.is_some_and(|t| t.elapsed() >= AWAY_SEND_DELAY);
        if quiet_check && send_now && ping_posted.is_none() && me < app.peers[0] && app.st[0].exchanged() {
            let qp = app.st[0].qp.ok_or("no QP")?;
            let s = app.send_area() + 15 * SMALL;
            h.dev().write_mem(s, b"quiet?").map_err(|e| format!("{e:?}"))?;
            let k = app.mr.lkey;
            h.dev().device_mut().post_send(qp, SendWr::new(6, SendOpcode::Send).with_sge(s, 6, k)).map_err(|e| format!("post_send: {e:?}"))?;
            ping_posted = Some(Instant::now());
        }
        // the progress thread (DROCE_PROGRESS=thread) needs the lock too
        if h.config().progress == runtime::Progress::Thread {
            drop(h);
            std::thread::yield_now();
            h = g.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
    // our last ACKs may still be coalescing: keep the engine going a little before exiting
    let t1 = Instant::now();
    while t1.elapsed() < Duration::from_millis(1000) {
        h.progress();
    }
    println!("done: {n} peers");
    Ok(())
}

fn main() {
    let mut peers = None;
    let mut timeout = Duration::from_secs(30);
    let mut quiet = Quiet::Off;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--peers" => {
                let v = args.next().unwrap_or_default();
                let p: Result<Vec<IpAddr>, _> = v.split(',').map(|s| s.trim().parse()).collect();
                match p {
                    Ok(p) => peers = Some(p),
                    Err(_) => {
                        eprintln!("host_pair: --peers wants IP,IP,... (got '{v}')");
                        std::process::exit(1);
                    }
                }
            }
            "--timeout" => timeout = Duration::from_secs(args.next().and_then(|s| s.parse().ok()).unwrap_or(30)),
            "--quiet-check" => quiet = Quiet::AfterReceive,
            "--quiet-away" => quiet = Quiet::Away,
            _ => {
                eprintln!("usage: host_pair [--peers IP,IP,...] [--timeout SECS] [--quiet-check | --quiet-away]");
                std::process::exit(1);
            }
        }
    }
    if let Err(e) = runtime::global() {
        eprintln!("host_pair: {e}");
        std::process::exit(2);
    }
    match run(peers, timeout, quiet) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("host_pair: {e}");
            std::process::exit(1);
        }
    }
}
