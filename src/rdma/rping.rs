//! `--test=rping`: librdmacm's `rping` over droce's IB CM (QP1, [`droce_dpdk::roce::cm`]).
//!
//! ```text
//! server: droce-pmd [EAL] -- --test=rping [--ip ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V]
//! client: droce-pmd [EAL] -- --test=rping [--ip ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] SERVER
//! ```
//! (`-s`/`-c` and rping's `-a ADDR` are accepted: `-c -a SERVER`, `-s -a OWN_ADDR`.)
//!
//! The protocol is rping's (docs/interop.md (c)): rdma_cm connect to `SERVER:PORT` (service ID
//! `0x0106 << 16 | PORT`); per ping the client SENDs the 16-byte big-endian info {addr, rkey,
//! size} of its `start_buf` ("rdma-ping-N: " then letters), the server RDMA READs it and SENDs
//! a go-ahead, the client SENDs the info of its `rdma_buf`, the server RDMA WRITEs
//! `strlen + 1` bytes into it and SENDs a go-ahead; after COUNT pings the client disconnects
//! (DREQ). `-v` prints `ping data: ...` (client) / `server ping data: ...` (server) like rping,
//! `-V` has the client compare the two buffers. Exit codes: 0, 1 failure, 2 bad arguments.

use super::dev::{self, check_wc, verb, Buffer, R};
use droce_dpdk::roce::cm::{CmAgentEvent, ConnId, ConnectParams};
use droce_dpdk::runtime::Runtime;
use droce_transport::qp::{QpCap, QpHandle, QpInitAttr, QpType};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{CqHandle, MemoryRegion, RecvWr, SendOpcode, SendWr, Sge, WorkCompletion};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

pub const USAGE: &str = "\
rping (librdmacm) compatible test over droce's IB CM:
  droce-pmd [EAL args] -- --test=rping [options] [SERVER]
  without SERVER: server (listens on the rdma_cm port); with SERVER (its RoCE IPv4): client
  -p PORT        rdma_cm port (default 7174, service ID 0x0106<<16|PORT)
  -C COUNT       pings (client; the server serves until the client disconnects, and waits
                 at most 10 x --timeout for it to connect; default 1 for the client)
  -S SIZE        ping buffer size (default 64, at least 16)
  -v             print the ping data;  -V  verify the data (client)
  --ip ADDR      droce's own RoCE IPv4 address (default 10.77.0.1 server, 10.77.0.2 client)
  -s / -c        server / client (the client needs SERVER or -a)
  -a ADDR        like rping: the server's address (on the server: --ip)
  --timeout SECS bound on every wait (default 10);  --pcap FILE;  --faults SPEC;  --stats
";

#[derive(Debug, Clone)]
pub struct RpingOpts {
    pub server: Option<Ipv4Addr>,
    pub ip: Option<Ipv4Addr>,
    pub port: u16,
    pub count: Option<u64>,
    pub size: usize,
    pub verbose: bool,
    pub validate: bool,
    pub timeout: Duration,
    pub pcap: Option<String>,
    pub faults: Option<String>,
    pub stats: bool,
}

const RPING_MSG_FMT: &str = "rdma-ping-";

/// Parses the app arguments; `Ok(None)` when they do not select `--test=rping`.
pub fn parse(app: &[String]) -> Result<Option<RpingOpts>, String> {
    if !app.iter().enumerate().any(|(i, a)| a == "--test=rping" || (a == "--test" && app.get(i + 1).map(String::as_str) == Some("rping"))) {
        return Ok(None);
    }
    let mut o = RpingOpts {
        server: None,
        ip: None,
        port: 7174,
        count: None,
        size: 64,
        verbose: false,
        validate: false,
        timeout: Duration::from_secs(10),
        pcap: None,
        faults: None,
        stats: false,
    };
    let (mut want_server, mut want_client) = (false, false);
    let mut a_addr = None;
    let mut i = 0;
    let next = |i: &mut usize, flag: &str| -> Result<String, String> {
        *i += 1;
        app.get(*i).cloned().ok_or_else(|| format!("{flag} needs a value"))
    };
    let ip = |flag: &str, v: &str| v.parse::<Ipv4Addr>().map_err(|_| format!("{flag} {v}: not an IPv4 address"));
    let num = |flag: &str, v: &str| v.parse::<u64>().map_err(|_| format!("{flag} '{v}' is not a valid number"));
    while i < app.len() {
        let a = app[i].as_str();
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a, None),
        };
        let val = |i: &mut usize| -> Result<String, String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => next(i, flag),
            }
        };
        match flag {
            "--test" => {
                if inline.is_none() {
                    i += 1;
                }
            }
            "-p" | "--port" => {
                let v = val(&mut i)?;
                o.port = u16::try_from(num(flag, &v)?).map_err(|_| format!("-p {v}: at most 65535"))?
            }
            "-C" | "--count" => o.count = Some(num(flag, &val(&mut i)?)?),
            "-S" | "--size" => o.size = num(flag, &val(&mut i)?)? as usize,
            "--ip" => o.ip = Some(ip(flag, &val(&mut i)?)?),
            "-a" => a_addr = Some(ip(flag, &val(&mut i)?)?),
            "-v" => o.verbose = true,
            "-V" => o.validate = true,
            "-s" => want_server = true,
            "-c" => want_client = true,
            "-d" | "-q" | "-P" => {} // debug / quiet / persistent: accepted
            "--timeout" => {
                let v = val(&mut i)?;
                let s: f64 = v.parse().map_err(|_| format!("--timeout '{v}' is not a valid number"))?;
                if !(s > 0.0 && s < 1e6) {
                    return Err(format!("--timeout {v}: must be a positive number of seconds"));
                }
                o.timeout = Duration::from_secs_f64(s);
            }
            "--pcap" => o.pcap = Some(val(&mut i)?),
            "--faults" => o.faults = Some(val(&mut i)?),
            "--stats" => o.stats = true,
            _ if !a.starts_with('-') => {
                if o.server.is_some() {
                    return Err(format!("unexpected argument '{a}': only one SERVER address"));
                }
                o.server = Some(ip("SERVER", a)?);
            }
            _ => return Err(format!("unknown option '{a}' for --test=rping (see droce-pmd -- --test=rping --help)")),
        }
        i += 1;
    }
    if want_server && want_client {
        return Err("-s and -c: choose one".into());
    }
    // rping's -a: the server's address; on the server that is our own (bind) address.
    if let Some(a) = a_addr {
        if want_client || o.server.is_some() {
            o.server = o.server.or(Some(a));
        } else {
            o.ip = o.ip.or(Some(a));
        }
    }
    if want_client && o.server.is_none() {
        return Err("-c needs a SERVER address".into());
    }
    if want_server && o.server.is_some() {
        // `rping -s -a ADDR` style: the address is ours
        o.ip = o.ip.or(o.server.take());
    }
    if o.size < 16 || o.size > 1 << 20 {
        return Err(format!("-S {}: between 16 and 1048576", o.size));
    }
    Ok(Some(o))
}

/// Runs `--test=rping` when `app` selects it; `None` otherwise.
pub fn dispatch(eal: &[String], app: &[String]) -> Option<i32> {
    let help: Vec<String> = app.iter().filter(|a| *a != "-h" && *a != "--help").cloned().collect();
    if help.len() != app.len() && matches!(parse(&help), Ok(Some(_))) {
        print!("{USAGE}");
        return Some(0);
    }
    let o = match parse(app) {
        Ok(Some(o)) => o,
        Ok(None) => return None,
        Err(e) => {
            eprintln!("droce-pmd: error: {e}");
            return Some(2);
        }
    };
    // The device setup of the other RDMA modes, with our address and bounds.
    let client = o.server.is_some();
    let ip = o.ip.unwrap_or(if client { Ipv4Addr::new(10, 77, 0, 2) } else { Ipv4Addr::new(10, 77, 0, 1) });
    let mut args = vec!["--test=rc_pingpong".to_string(), "--ip".into(), ip.to_string(), "--timeout".into(), o.timeout.as_secs_f64().to_string()];
    if let Some(p) = &o.pcap {
        args.extend(["--pcap".to_string(), p.clone()]);
    }
    if let Some(f) = &o.faults {
        args.push(format!("--faults={f}"));
    }
    if client {
        args.push(o.server.map(|s| s.to_string()).unwrap_or_default());
    }
    let po = match super::opts::parse(&args) {
        Ok(Some(po)) => po,
        Ok(None) => return Some(2),
        Err(e) => {
            eprintln!("droce-pmd: error: {e}");
            return Some(2);
        }
    };
    let mut eal_argv = vec!["droce-pmd".to_string()];
    eal_argv.extend(eal.iter().cloned());
    let mut setup = match dev::setup(&eal_argv, &po) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("droce-pmd: error: {e}");
            return Some(1);
        }
    };
    let res = match setup.dev.manual() {
        Ok(d) => run(d, &o),
        Err(e) => Err(e),
    };
    let code = match &res {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("droce-pmd: error: {e}");
            1
        }
    };
    use std::io::Write;
    let _ = std::io::stdout().flush();
    setup.finish(o.stats);
    Some(code)
}

/// Buffers of one side (offsets in the registered test buffer).
struct Bufs {
    mr: MemoryRegion,
    recv: u64,
    send: u64,
    rdma: u64,
    start: u64,
}

const INFO_LEN: usize = 16;

/// `struct rping_rdma_info { __be64 buf; __be32 rkey; __be32 size; }`
fn info(addr: u64, rkey: u32, size: u32) -> [u8; INFO_LEN] {
    let mut b = [0u8; INFO_LEN];
    b[..8].copy_from_slice(&addr.to_be_bytes());
    b[8..12].copy_from_slice(&rkey.to_be_bytes());
    b[12..].copy_from_slice(&size.to_be_bytes());
    b
}

fn parse_info(b: &[u8]) -> (u64, u32, u32) {
    (
        u64::from_be_bytes(b[..8].try_into().unwrap_or([0; 8])),
        u32::from_be_bytes(b[8..12].try_into().unwrap_or([0; 4])),
        u32::from_be_bytes(b[12..16].try_into().unwrap_or([0; 4])),
    )
}

/// The client's `start_buf` for ping `ping`: "rdma-ping-N: " then letters from `start`,
/// 'A'..'z' wrapping, last byte 0 (rping_test_client).
pub fn ping_message(ping: u64, start: u8, size: usize) -> Vec<u8> {
    let head = format!("{RPING_MSG_FMT}{ping}: ");
    let mut b = vec![0u8; size];
    let n = head.len().min(size.saturating_sub(1));
    b[..n].copy_from_slice(&head.as_bytes()[..n]);
    let mut c = start;
    for x in b.iter_mut().skip(head.len()) {
        *x = c;
        c += 1;
        if c > 122 {
            c = 65;
        }
    }
    if let Some(l) = b.last_mut() {
        *l = 0;
    }
    b
}

fn cstr(b: &[u8]) -> String {
    let n = b.iter().position(|&x| x == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}

struct Side<'a> {
    dev: &'a mut Runtime,
    cq: CqHandle,
    qp: Option<QpHandle>,
    conn: Option<ConnId>,
    timeout: Duration,
    disconnected: bool,
    /// A receive that completed before the send completion being waited for (completions of
    /// the send and receive queues are not ordered: the peer may answer a SEND before its
    /// ACK reaches us).
    early_recv: Option<WorkCompletion>,
}

impl Side<'_> {
    fn pump(&mut self) -> bool {
        self.dev.progress()
    }

    /// Next CM event, pumping; bounded by the timeout (reset by device activity).
    fn cm_event(&mut self, what: &str) -> R<CmAgentEvent> {
        let mut last = Instant::now();
        loop {
            if self.pump() {
                last = Instant::now();
            }
            if let Some(e) = self.dev.poll_cm_event() {
                return Ok(e);
            }
            if last.elapsed() > self.timeout {
                return Err(format!("timed out after {:?} waiting for {what}", self.timeout));
            }
        }
    }

    /// One completion on our CQ, or an error if the connection went down.
    fn wc(&mut self, what: &str) -> R<WorkCompletion> {
        let mut last = Instant::now();
        loop {
            if self.pump() {
                last = Instant::now();
            }
            if let Some(wc) = verb("poll_cq", self.dev.poll_cq_one(self.cq))? {
                if wc.status == WcStatus::WrFlushErr && self.conn_down() {
                    // the CM moved the QP to ERROR (DREQ/DREP): the posted receive is flushed
                    self.disconnected = true;
                    return Err("disconnected".into());
                }
                check_wc(what, &wc)?;
                return Ok(wc);
            }
            while let Some(e) = self.dev.poll_cm_event() {
                match e {
                    CmAgentEvent::Disconnected { id } if Some(id) == self.conn => {
                        self.disconnected = true;
                        return Err("disconnected".into());
                    }
                    CmAgentEvent::ConnectRequest { id, .. } => {
                        let _ = self.dev.reject(id, b"busy");
                    }
                    _ => {}
                }
            }
            if last.elapsed() > self.timeout {
                return Err(format!("timed out after {:?} waiting for {what} (peer gone?)", self.timeout));
            }
        }
    }

    /// Pumps the CM briefly: true once our connection is reported down.
    fn conn_down(&mut self) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(100) {
            self.pump();
            while let Some(e) = self.dev.poll_cm_event() {
                if let CmAgentEvent::Disconnected { id } | CmAgentEvent::TimedOut { id } = e {
                    if Some(id) == self.conn {
                        return true;
                    }
                }
            }
        }
        false
    }

    fn post_recv(&mut self, b: &Bufs) -> R<()> {
        let qp = self.qp.ok_or("no QP")?;
        verb("post_recv", self.dev.post_recv(qp, RecvWr::new(1).with_sge(b.recv, INFO_LEN as u32, b.mr.lkey)))
    }

    fn post(&mut self, op: SendOpcode, local: u64, len: u32, lkey: droce_transport::Lkey, remote: Option<(u64, u32)>) -> R<()> {
        let qp = self.qp.ok_or("no QP")?;
        let mut wr = SendWr::new(2, op);
        wr.sg_list.push(Sge { addr: local, length: len, lkey });
        if let Some((addr, rkey)) = remote {
            wr.remote_addr = addr;
            wr.rkey = droce_transport::Rkey(rkey);
        }
        verb("post_send", self.dev.post_send(qp, wr))
    }

    /// Waits for our own completion of kind `want` (a receive may come first: it is kept).
    fn wait_send(&mut self, what: &str) -> R<()> {
        loop {
            let wc = self.wc(what)?;
            if wc.opcode != WcOpcode::Recv {
                return Ok(());
            }
            if self.early_recv.is_some() {
                return Err(format!("unexpected second receive while waiting for {what}"));
            }
            self.early_recv = Some(wc);
        }
    }

    fn wait_recv(&mut self, b: &Bufs, what: &str) -> R<(u64, u32, u32)> {
        let wc = match self.early_recv.take() {
            Some(wc) => wc,
            None => self.wc(what)?,
        };
        if wc.opcode != WcOpcode::Recv {
            return Err(format!("unexpected {:?} completion while waiting for {what}", wc.opcode));
        }
        if (wc.byte_len as usize) < INFO_LEN {
            return Err(format!("{what}: received {} bytes, want {INFO_LEN}", wc.byte_len));
        }
        let mut m = [0u8; INFO_LEN];
        verb("read_mem", self.dev.read_mem(b.recv, &mut m))?;
        // re-post right away, as rping does
        self.post_recv(b)?;
        Ok(parse_info(&m))
    }
}

fn run(dev: &mut Runtime, o: &RpingOpts) -> R<()> {
    // The server's rdma_buf takes what the client advertises (up to the -S bound of 1 MiB).
    let size = if o.server.is_none() { 1 << 20 } else { o.size as u64 };
    let mut buf = Buffer::new(8192 + 2 * size.next_multiple_of(4096))?;
    let pd = dev.alloc_pd();
    let mr = buf.register(dev, pd)?;
    let b = Bufs { mr, recv: buf.base, send: buf.base + 64, rdma: buf.base + 4096, start: buf.base + 4096 + size.next_multiple_of(4096) };
    let cq = verb("create_cq", dev.create_cq(64))?;
    let mut s = Side { dev, cq, qp: None, conn: None, timeout: o.timeout, disconnected: false, early_recv: None };
    let new_qp = |s: &mut Side| -> R<QpHandle> {
        let cap = QpCap { max_send_wr: 16, max_recv_wr: 2, ..QpCap::default() };
        let qp = verb(
            "create_qp",
            s.dev.create_qp(QpInitAttr { qp_type: QpType::Rc, pd, send_cq: s.cq, recv_cq: s.cq, srq: None, cap, sq_sig_all: true }),
        )?;
        s.dev.qp_to_init(qp).map_err(|e| e.to_string())?;
        Ok(qp)
    };
    let res = match o.server {
        None => server(&mut s, &b, o, new_qp),
        Some(ip) => client(&mut s, &b, o, ip, new_qp),
    };
    // Let the last CM MADs (DREP, ...) and ACKs leave.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(100) {
        s.pump();
    }
    res
}

fn server(s: &mut Side, b: &Bufs, o: &RpingOpts, new_qp: impl Fn(&mut Side) -> R<QpHandle>) -> R<()> {
    s.dev.listen(o.port);
    // Wait for a connect request as long as the server runs (rping waits forever; we are
    // bounded by 10 × --timeout so a forgotten server ends).
    let t0 = Instant::now();
    let id = loop {
        s.pump();
        if let Some(CmAgentEvent::ConnectRequest { id, .. }) = s.dev.poll_cm_event() {
            break id;
        }
        if t0.elapsed() > o.timeout * 10 {
            return Err(format!("no connect request within {:?}", o.timeout * 10));
        }
    };
    let qp = new_qp(s)?;
    s.qp = Some(qp);
    s.conn = Some(id);
    s.post_recv(b)?;
    s.dev.accept(id, qp, &ConnectParams::rping()).map_err(|e| format!("rdma_accept: {e}"))?;
    loop {
        match s.cm_event("the RTU")? {
            CmAgentEvent::Established { id: e, .. } if e == id => break,
            CmAgentEvent::ConnectRequest { id: other, .. } => {
                let _ = s.dev.reject(other, b"busy");
            }
            CmAgentEvent::TimedOut { .. } => return Err("connection timed out (no RTU)".into()),
            e => return Err(format!("unexpected CM event while accepting: {e:?}")),
        }
    }
    let mut pings = 0u64;
    loop {
        // Wait for the client's start info (or its disconnect).
        let (addr, rkey, len) = match s.wait_recv(b, "the client's source info") {
            Ok(x) => x,
            Err(_) if s.disconnected => break,
            Err(e) => return Err(e),
        };
        let len = len.min(1 << 20);
        s.post(SendOpcode::Read, b.rdma, len, b.mr.lkey, Some((addr, rkey)))?;
        s.wait_send("RDMA READ")?;
        let mut data = vec![0u8; len as usize];
        verb("read_mem", s.dev.read_mem(b.rdma, &mut data))?;
        if o.verbose {
            println!("server ping data: {}", cstr(&data));
        }
        s.post(SendOpcode::Send, b.send, INFO_LEN as u32, b.mr.lkey, None)?;
        s.wait_send("go-ahead SEND")?;
        let (addr, rkey, _len) = s.wait_recv(b, "the client's sink info")?;
        let wlen = data.iter().position(|&x| x == 0).map_or(data.len(), |n| n + 1) as u32;
        s.post(SendOpcode::Write, b.rdma, wlen, b.mr.lkey, Some((addr, rkey)))?;
        s.wait_send("RDMA WRITE")?;
        s.post(SendOpcode::Send, b.send, INFO_LEN as u32, b.mr.lkey, None)?;
        s.wait_send("go-ahead SEND")?;
        pings += 1;
    }
    eprintln!("server DISCONNECT EVENT...");
    if let Some(c) = o.count {
        if pings < c {
            return Err(format!("client disconnected after {pings} of {c} pings"));
        }
    }
    Ok(())
}

fn client(s: &mut Side, b: &Bufs, o: &RpingOpts, server: Ipv4Addr, new_qp: impl Fn(&mut Side) -> R<QpHandle>) -> R<()> {
    let qp = new_qp(s)?;
    s.qp = Some(qp);
    s.post_recv(b)?;
    let id = s.dev.connect(SocketAddr::new(server.into(), o.port), qp, &ConnectParams::rping()).map_err(|e| format!("rdma_connect: {e}"))?;
    s.conn = Some(id);
    // The CM retries the REQ for up to ~95 s (rdma_cm's 15 × 6.3 s); our bound is the timeout
    // per wait, reset by CM retransmissions.
    match s.cm_event("the connection")? {
        CmAgentEvent::Established { .. } => {}
        CmAgentEvent::Rejected { reason, .. } => return Err(format!("connect rejected by {server}:{} (REJ reason {})", o.port, reason.0)),
        CmAgentEvent::TimedOut { .. } => return Err(format!("connect to {server}:{} timed out", o.port)),
        e => return Err(format!("unexpected CM event while connecting: {e:?}")),
    }
    let size = o.size;
    let count = o.count.unwrap_or(1);
    let mut start = 65u8;
    for ping in 0..count {
        let msg = ping_message(ping, start, size);
        start += 1;
        if start > 122 {
            start = 65;
        }
        verb("write_mem", s.dev.write_mem(b.start, &msg))?;
        verb("write_mem", s.dev.write_mem(b.send, &info(b.start, b.mr.rkey.0, size as u32)))?;
        s.post(SendOpcode::Send, b.send, INFO_LEN as u32, b.mr.lkey, None)?;
        s.wait_send("source info SEND")?;
        s.wait_recv(b, "the server's go-ahead after its READ")?;
        verb("write_mem", s.dev.write_mem(b.send, &info(b.rdma, b.mr.rkey.0, size as u32)))?;
        s.post(SendOpcode::Send, b.send, INFO_LEN as u32, b.mr.lkey, None)?;
        s.wait_send("sink info SEND")?;
        s.wait_recv(b, "the server's go-ahead after its WRITE")?;
        let mut got = vec![0u8; size];
        verb("read_mem", s.dev.read_mem(b.rdma, &mut got))?;
        if o.validate && got != msg {
            return Err(format!("data mismatch in ping {ping}: sent '{}', got back '{}'", cstr(&msg), cstr(&got)));
        }
        if o.verbose {
            println!("ping data: {}", cstr(&got));
        }
    }
    s.dev.disconnect(id).map_err(|e| format!("rdma_disconnect: {e}"))?;
    loop {
        match s.cm_event("the DREP") {
            Ok(CmAgentEvent::Disconnected { id: e }) if e == id => break,
            Ok(_) => {}
            Err(e) => return Err(e),
        }
    }
    eprintln!("client DISCONNECT EVENT...");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Option<RpingOpts>, String> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn options() {
        let o = p("--test=rping -C 3 -S 100 -v 192.168.77.10").unwrap().unwrap();
        assert_eq!((o.count, o.size, o.verbose, o.port), (Some(3), 100, true, 7174));
        assert_eq!(o.server, Some(Ipv4Addr::new(192, 168, 77, 10)));
        let o = p("--test rping -s -a 10.0.0.1 -p 9000").unwrap().unwrap();
        assert_eq!((o.server, o.ip, o.port), (None, Some(Ipv4Addr::new(10, 0, 0, 1)), 9000));
        let o = p("--test=rping -c -a 10.0.0.1 --ip 10.0.0.2").unwrap().unwrap();
        assert_eq!((o.server, o.ip), (Some(Ipv4Addr::new(10, 0, 0, 1)), Some(Ipv4Addr::new(10, 0, 0, 2))));
        assert!(p("--test=write_bw").unwrap().is_none());
        for (l, want) in [("--test=rping -S 8", "between 16"), ("--test=rping -c", "needs a SERVER"), ("--test=rping --x", "unknown option")] {
            assert!(p(l).unwrap_err().contains(want), "{l}");
        }
    }

    #[test]
    fn messages_like_rping() {
        let m = ping_message(0, 65, 64);
        assert_eq!(m.len(), 64);
        assert_eq!(&m[..15], b"rdma-ping-0: AB");
        assert_eq!(m[63], 0);
        // letters wrap after 'z' back to 'A'
        let m = ping_message(7, 120, 32);
        assert_eq!(&m[..17], b"rdma-ping-7: xyzA");
        assert_eq!(info(0x1122334455667788, 0xaabbccdd, 64), [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 64]);
        assert_eq!(parse_info(&info(5, 6, 7)), (5, 6, 7));
    }
}
