//! The RoCE device of a test run (port setup, manual or engine-thread progress), the test
//! buffer, and the TCP control connection whose waits keep the device polled.

use super::opts::Opts;
use super::report::status_name;
use droce_dpdk as dpdk;
use droce_dpdk::runtime::{self, Runtime, RuntimeConfig, RuntimeError};
use droce_transport::qp::QpHandle;
use droce_transport::status::WcStatus;
use droce_transport::verbs::{AccessFlags, CqHandle, MemoryRegion, PdHandle, RecvWr, SendWr, WorkCompletion};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

pub type R<T> = Result<T, String>;

pub fn verb<T, E: std::fmt::Debug>(what: &str, r: Result<T, E>) -> R<T> {
    r.map_err(|e| format!("{what} failed: {e:?}"))
}

/// A failed work completion, in perftest's words plus the IBA status.
pub fn wc_error(side: &str, wc: &WorkCompletion) -> String {
    format!(
        "Completion with error at {side}: status {} ({}), opcode {:?}, wr_id {}, QPN {:#x}",
        status_name(wc.status),
        wc.status.value(),
        wc.opcode,
        wc.wr_id,
        wc.qp_num.value()
    )
}

/// The runtime of a test run (EAL, port, pool, RoCE device, CM agent), under either progress
/// model. Closed by `finish`.
pub struct Setup {
    pub dev: Dev,
    pub port_index: u16,
}

/// A warning when `pace=on` is given to the side of a bandwidth test that sends no data: a
/// pacer shapes what its own side transmits, and the data of read_bw leaves the server (READ
/// responses), that of write_bw/send_bw/atomic_bw the client. That side alone would leave the
/// data unpaced without a word.
fn pace_side_warning(test: super::opts::Test, client: bool, pace: bool) -> Option<String> {
    use super::opts::Test;
    let data_from_client = match test {
        Test::ReadBw => false,
        Test::WriteBw | Test::SendBw | Test::AtomicBw => true,
        _ => return None,
    };
    (pace && client != data_from_client).then(|| {
        let (me, other) = if client { ("client", "server") } else { ("server", "client") };
        format!(
            "warning: --cc pace=on on this {me} paces only what it sends, not the test's data: in this test the data \
             leaves the {other}; give the {other} the same --cc"
        )
    })
}

/// Opens the runtime from the command line: the RoCE port is EAL port `o.port_index`, path MTU
/// 4096 (Ethernet 9000) only when `-m 4096` asks, every ACK leaves within its poll (perftest
/// measures the wire, not an ACK-hold policy), the link must come up within `--timeout`.
pub fn setup(eal_argv: &[String], o: &Opts) -> R<Setup> {
    let mut cfg = RuntimeConfig::new(eal_argv.to_vec(), IpAddr::V4(o.roce_ip()));
    cfg.port_index = o.port_index;
    cfg.eth_mtu = (o.mtu == Some(4096)).then_some(9000);
    cfg.auto_jumbo = false;
    cfg.embedded = false;
    cfg.hold_acks = false;
    cfg.mbufs = 16383;
    cfg.link_wait = Some(o.timeout);
    cfg.pcap = o.pcap.clone();
    if let Some(c) = &o.cc {
        (cfg.cc, cfg.cc_line_rate_given) = droce_dpdk::runtime::parse_cc(c).map_err(|e| format!("--cc: {e}"))?;
        if let Some(w) = pace_side_warning(o.test, o.server.is_some(), cfg.cc.pace) {
            eprintln!("{w}");
        }
    }
    if let Some(f) = &o.faults {
        cfg.faults = Some(f.parse().map_err(|e| format!("--faults: {e}"))?);
    }
    cfg.source = "from the command line".into();
    // outside the capture, so that a removal is named on stderr
    droce_dpdk::runtime::remove_stale_memif_sockets(&cfg.eal_args);
    let (res, log) = crate::capture::capture_stdio(|| Runtime::open(cfg));
    // droce's own notices (a bad DROCE_* value, a stale socket removed) were captured with
    // EAL's chatter: show them, whatever the outcome
    for l in log.lines().filter(|l| l.starts_with("droce: ")) {
        eprintln!("{l}");
    }
    let rt = match res {
        Ok(rt) => rt,
        Err(RuntimeError::Eal(m)) => return Err(crate::capture::eal_failure_line(&log, &m)),
        Err(RuntimeError::Port(m)) if m.starts_with("no port ") || m.starts_with("EAL found no port") => {
            return Err(format!(
                "no port {}: give the RoCE port before '--' (e.g. --vdev=net_memif0,role=server,socket=/tmp/m.sock, --vdev=net_af_packet0,iface=veth0)",
                o.port_index
            ))
        }
        Err(e) => return Err(e.to_string()),
    };
    let port_index = rt.port_id().0;
    Ok(Setup { dev: Dev::Manual(rt), port_index })
}

impl Setup {
    /// Stops the progress thread if any, prints the stats block, closes the port.
    pub fn finish(self, print_stats: bool) {
        let Setup { mut dev, port_index } = self;
        let finish = |rt: &mut Runtime| {
            rt.flush_pcap();
            if print_stats {
                print!("{}", droce_dpdk::roce::format_roce_stats(port_index, &rt.stats()));
                println!();
            }
            // parks DPDK's interrupt thread for good first (see Port::close_at_exit). Not
            // rte_eal_cleanup: the process exits right after this, and that releases everything
            // rte_eal_cleanup would, faster.
            rt.close_for_exit();
        };
        match &mut dev {
            Dev::Manual(rt) => finish(rt),
            Dev::Thread(m) => {
                runtime::stop_progress_thread();
                finish(&mut m.lock().unwrap_or_else(PoisonError::into_inner));
            }
            Dev::Gone => {}
        }
    }
}

pub fn seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
    t ^ (std::process::id() as u64).rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15
}

/// A cheap stall detector for the polling loops (TSC, not a system call per poll).
/// Reads the clock once per 256 checks only (rdtsc can trap in a VM).
pub struct Stall {
    last: u64,
    limit: u64,
    calls: u32,
    active: bool,
}

impl Stall {
    pub fn new(timeout: Duration) -> Stall {
        let hz = dpdk::tsc_hz().max(1_000_000);
        Stall { last: dpdk::rdtsc(), limit: (timeout.as_secs_f64() * hz as f64) as u64, calls: 0, active: false }
    }
    /// Something happened: the stall clock restarts at the next clock read.
    #[inline]
    pub fn reset(&mut self) {
        self.active = true;
    }
    #[inline]
    pub fn expired(&mut self) -> bool {
        self.calls += 1;
        if self.calls < 256 {
            return false;
        }
        self.calls = 0;
        let now = dpdk::rdtsc();
        if self.active {
            self.active = false;
            self.last = now;
            return false;
        }
        now.wrapping_sub(self.last) > self.limit
    }
}

/// Seconds since `t0` (a TSC value).
pub fn tsc_secs(t0: u64, t: u64) -> f64 {
    t.wrapping_sub(t0) as f64 / dpdk::tsc_hz().max(1) as f64
}

/// A small xorshift for PSNs (perftest: `lrand48() & 0xffffff`).
pub struct Rng(u64);
impl Rng {
    pub fn new() -> Rng {
        Rng(seed() | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn psn(&mut self) -> u32 {
        (self.next() & 0xff_ffff) as u32
    }
}

/// The runtime under either progress model: the test's own thread polls it (manual), or the
/// runtime's progress thread does and the test takes its lock for each verb (thread).
pub enum Dev {
    Manual(Runtime),
    Thread(&'static Mutex<Runtime>),
    Gone,
}

impl Dev {
    /// The runtime, for the setup verbs (before [`Dev::start_thread`]).
    pub fn manual(&mut self) -> R<&mut Runtime> {
        match self {
            Dev::Manual(d) => Ok(d),
            _ => Err("internal: verb needs manual progress".into()),
        }
    }

    /// Runs `f` on the runtime (under its lock with the progress thread).
    #[inline]
    fn with<T>(&mut self, f: impl FnOnce(&mut Runtime) -> T) -> R<T> {
        match self {
            Dev::Manual(d) => Ok(f(d)),
            Dev::Thread(m) => Ok(f(&mut m.lock().unwrap_or_else(PoisonError::into_inner))),
            Dev::Gone => Err("device gone".into()),
        }
    }

    /// Hands the runtime to its progress thread (after the setup verbs).
    pub fn start_thread(&mut self) -> R<()> {
        let Dev::Manual(_) = self else { return Ok(()) };
        let Dev::Manual(rt) = std::mem::replace(self, Dev::Gone) else { unreachable!() };
        let m = runtime::install_global(rt, true).map_err(|e| format!("progress thread: {e}"))?;
        *self = Dev::Thread(m);
        Ok(())
    }

    /// One round of progress; true when frames arrived, the sign that the peer is alive which
    /// the waits bounded by `--timeout` reset their clock on (this side's own timers and
    /// transmissions are not: a server whose client died in the middle of a lossy test kept
    /// sending selective-repeat reminders and waited forever). With the progress thread: lets
    /// it run, and says no.
    pub fn progress(&mut self) -> bool {
        match self {
            Dev::Manual(d) => d.progress_datapath_rx(),
            Dev::Thread(m) => {
                // the progress thread may share this lcore's CPU (threads inherit the main
                // lcore's affinity): let it run
                std::thread::yield_now();
                // what it received counts as the peer's activity, as a manual poll's frames do
                // (else a bounded wait expires in a healthy test longer than --timeout): a look
                // every 256 calls, never waiting for the lock
                static CALLS: AtomicU32 = AtomicU32::new(0);
                if CALLS.fetch_add(1, Ordering::Relaxed) % 256 != 0 {
                    return false;
                }
                m.try_lock().map(|mut g| g.received_since_last_look()).unwrap_or(false)
            }
            Dev::Gone => false,
        }
    }

    pub fn post_send(&mut self, qp: QpHandle, wr: SendWr) -> R<()> {
        verb("post_send", self.with(|d| d.post_send(qp, wr))?)
    }

    /// [`post_send`](Self::post_send) of a work request the caller keeps and reuses (no
    /// allocation per post).
    pub fn post_send_ref(&mut self, qp: QpHandle, wr: &SendWr) -> R<()> {
        verb("post_send", self.with(|d| d.post_send_ref(qp, wr))?)
    }

    /// [`post_recv`](Self::post_recv) of a work request the caller keeps and reuses.
    pub fn post_recv_ref(&mut self, qp: QpHandle, wr: &RecvWr) -> R<()> {
        verb("post_recv", self.with(|d| d.post_recv_ref(qp, wr))?)
    }

    pub fn post_recv(&mut self, qp: QpHandle, wr: RecvWr) -> R<()> {
        verb("post_recv", self.with(|d| d.post_recv(qp, wr))?)
    }

    pub fn poll_cq(&mut self, cq: CqHandle) -> R<Option<WorkCompletion>> {
        verb("poll_cq", self.with(|d| d.poll_cq_one(cq))?)
    }

    pub fn read_mem(&self, addr: u64, buf: &mut [u8]) -> R<()> {
        match self {
            Dev::Manual(d) => verb("read_mem", d.read_mem(addr, buf)),
            Dev::Thread(m) => verb("read_mem", m.lock().unwrap_or_else(PoisonError::into_inner).read_mem(addr, buf)),
            Dev::Gone => Err("device gone".into()),
        }
    }

    /// Sends held ACKs now (before a closing handshake).
    pub fn flush(&mut self) {
        let _ = self.with(|d| d.flush());
    }

    pub fn write_mem(&mut self, addr: u64, data: &[u8]) -> R<()> {
        verb("write_mem", self.with(|d| d.write_mem(addr, data))?)
    }

    /// Why a wait bounded by `--timeout` saw its peer move nothing on, for its error (after a
    /// tenth of a second more of polling, to see what still arrives): the peer is there but
    /// its SENDs or this side's meet no receive (RNR NAKs, which rnr_retry 7 repeats for ever:
    /// the two sides ran different `-n`), else the peer may be gone.
    pub fn stall_cause(&mut self) -> &'static str {
        fn rnr(d: &mut Dev) -> (u64, u64) {
            d.with(|rt| {
                let c = rt.dev().device().counters();
                (c.send_rnr_err, c.rcvd_rnr_err)
            })
            .unwrap_or((0, 0))
        }
        let (sent, rcvd) = rnr(self);
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(100) {
            self.progress();
        }
        let (sent2, rcvd2) = rnr(self);
        if sent2 > sent {
            " (the peer is alive but keeps sending SENDs this side has no receive posted for, answered with RNR NAKs: did it run more iterations, a larger -n, than this side?)"
        } else if rcvd2 > rcvd {
            " (the peer is alive but answers every SEND with an RNR NAK, having no receive posted: did it run fewer iterations, a smaller -n, than this side?)"
        } else {
            " (peer gone?)"
        }
    }

    /// Polls `cq` (keeping the device going) until one completion, or `timeout` without any
    /// device activity.
    pub fn wait_wc(&mut self, cq: CqHandle, timeout: Duration, what: &str) -> R<WorkCompletion> {
        let mut last = Stall::new(timeout);
        loop {
            if self.progress() {
                last.reset();
            }
            if let Some(wc) = self.poll_cq(cq)? {
                return Ok(wc);
            }
            if last.expired() {
                return Err(format!("timed out after {timeout:?} waiting for {what}{}", self.stall_cause()));
            }
        }
    }
}

/// The test buffer: 4 KiB aligned, registered once with every access right.
pub struct Buffer {
    mem: Vec<u8>,
    pub base: u64,
    pub len: u64,
}

impl Buffer {
    pub fn new(len: u64) -> R<Buffer> {
        let len = len.max(4096).next_multiple_of(4096);
        let mut mem = Vec::new();
        mem.try_reserve_exact(len as usize + 4096).map_err(|_| format!("cannot allocate a {len}-byte test buffer"))?;
        mem.resize(len as usize + 4096, 0);
        let base = (mem.as_ptr() as u64).next_multiple_of(4096);
        Ok(Buffer { mem, base, len })
    }

    /// Registers the buffer with the runtime (manual progress, during setup).
    pub fn register(&mut self, dev: &mut Runtime, pd: PdHandle) -> R<MemoryRegion> {
        let off = (self.base - self.mem.as_ptr() as u64) as usize;
        let ptr = self.mem[off..].as_mut_ptr();
        reg(dev, pd, ptr, self.len as usize)
    }
}

#[allow(unsafe_code)]
fn reg(dev: &mut Runtime, pd: PdHandle, ptr: *mut u8, len: usize) -> R<MemoryRegion> {
    // SAFETY: the range is inside the Buffer's Vec, which the run keeps alive (and never
    // touches except through the device's memory accessors) until the device is dropped.
    verb("reg_mr", unsafe { dev.reg_mr(pd, ptr, len, AccessFlags::ALL) })
}

/// The TCP control connection. Every wait polls the device and is bounded by `timeout`
/// (reset by device activity, so a long run of the peer does not trip it).
pub struct Ctrl {
    s: TcpStream,
    pub timeout: Duration,
    pub client: bool,
    /// Calls of [`peer_closed`](Self::peer_closed) since it last looked at the socket.
    watch_calls: u32,
}

impl Ctrl {
    pub fn connect(server: &str, port: u16, timeout: Duration, dev: &mut Dev) -> R<Ctrl> {
        let addr: SocketAddr = format!("{server}:{port}")
            .parse()
            .or_else(|_| std::net::ToSocketAddrs::to_socket_addrs(&(server, port)).map_err(|e| e.to_string()).and_then(|mut a| a.find(|a| a.is_ipv4()).ok_or("no IPv4 address".into())))
            .map_err(|e| format!("server address '{server}': {e}"))?;
        let t0 = Instant::now();
        loop {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Ok(s) => return Ctrl::new(s, timeout, true),
                Err(e) if t0.elapsed() > timeout => return Err(format!("couldn't connect to {addr}: {e} (no server within {timeout:?})")),
                Err(_) => {
                    // keep answering ARP while the server starts
                    let t1 = Instant::now();
                    while t1.elapsed() < Duration::from_millis(50) {
                        dev.progress();
                    }
                }
            }
        }
    }

    pub fn accept(port: u16, timeout: Duration, dev: &mut Dev) -> R<Ctrl> {
        let l = TcpListener::bind(("0.0.0.0", port)).map_err(|e| format!("couldn't listen on TCP port {port}: {e}"))?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        // a server waits for its client as long as the client's own timeout allows it to come:
        // bound it generously but finitely
        let wait = timeout.max(Duration::from_secs(30)) * 2;
        let t0 = Instant::now();
        loop {
            match l.accept() {
                Ok((s, _)) => return Ctrl::new(s, timeout, false),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if t0.elapsed() > wait {
                        return Err(format!("no client connected to TCP port {port} within {wait:?}"));
                    }
                    dev.progress();
                }
                Err(e) => return Err(format!("accept on TCP port {port}: {e}")),
            }
        }
    }

    fn new(s: TcpStream, timeout: Duration, client: bool) -> R<Ctrl> {
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(Ctrl { s, timeout, client, watch_calls: 0 })
    }

    /// Whether the peer has closed the connection, for the data phase of a test, when nothing
    /// is read from it until the test ends: the peer exited (killed, or failed on its QP's
    /// error). Without it a receiver learns that only when its `--timeout` runs out. Looks at
    /// the socket (one non-consuming read) once per [`WATCH_EVERY`](Self::WATCH_EVERY) calls,
    /// so it can sit in a poll loop.
    pub fn peer_closed(&mut self) -> bool {
        self.watch_calls += 1;
        if self.watch_calls < Self::WATCH_EVERY {
            return false;
        }
        self.watch_calls = 0;
        let mut b = [0u8; 1];
        match self.s.peek(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted),
        }
    }

    /// Poll-loop calls per look at the socket in [`peer_closed`](Self::peer_closed): a
    /// system call per few hundred microseconds of polling, a closed peer noticed well
    /// within a millisecond or so.
    pub const WATCH_EVERY: u32 = 1024;

    pub fn write(&mut self, data: &[u8], dev: &mut Dev) -> R<()> {
        let mut off = 0;
        let mut last = Instant::now();
        while off < data.len() {
            match self.s.write(&data[off..]) {
                Ok(0) => return Err("peer closed the TCP connection".into()),
                Ok(n) => off += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if dev.progress() {
                        last = Instant::now();
                    }
                    if last.elapsed() > self.timeout {
                        return Err(format!("TCP write to the peer stalled for {:?}", self.timeout));
                    }
                }
                Err(e) => return Err(format!("TCP write to the peer: {e}")),
            }
        }
        Ok(())
    }

    /// Reads exactly `n` bytes. `what` names the message in errors.
    pub fn read(&mut self, n: usize, dev: &mut Dev, what: &str) -> R<Vec<u8>> {
        /// Device polls per socket read while waiting (an idle poll is well under 1 us, so
        /// the peer's message waits tens of microseconds at most).
        const SOCKET_EVERY: u32 = 256;
        let mut buf = vec![0u8; n];
        let mut off = 0;
        let mut last = Instant::now();
        while off < n {
            // A passive side waits here while the peer's test runs (write_bw's server does all
            // of the receive work in these polls): one socket read per SOCKET_EVERY polls,
            // busy or idle. A read after every idle poll took half the receiver's CPU in
            // write_bw (recv system calls between bursts) and made it the bottleneck.
            let mut busy = false;
            for _ in 0..SOCKET_EVERY {
                busy |= dev.progress();
            }
            if busy {
                last = Instant::now();
            }
            match self.s.read(&mut buf[off..]) {
                Ok(0) => return Err(format!("peer closed the TCP connection (waiting for {what}): the peer exited or crashed")),
                Ok(k) => {
                    off += k;
                    last = Instant::now();
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if last.elapsed() > self.timeout {
                        return Err(format!("timed out after {:?} waiting for {what} from the peer{}", self.timeout, dev.stall_cause()));
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("TCP read ({what}): {e}")),
            }
        }
        Ok(buf)
    }

    /// Whether the peer has sent something not yet read (or closed the connection), without
    /// waiting or consuming it: a UD receiver learns this way that the sender's test is over.
    pub fn peer_has_sent(&self) -> bool {
        let mut b = [0u8; 1];
        match self.s.peek(&mut b) {
            Ok(_) => true,
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted),
        }
    }

    /// perftest's `ctx_xchg_data`: client writes then reads; server reads then writes.
    pub fn xchg(&mut self, mine: &[u8], dev: &mut Dev, what: &str) -> R<Vec<u8>> {
        if self.client {
            self.write(mine, dev)?;
            self.read(mine.len(), dev, what)
        } else {
            let r = self.read(mine.len(), dev, what)?;
            self.write(mine, dev)?;
            Ok(r)
        }
    }
}

/// Checks a completion: success or the IBA status as an error.
pub fn check_wc(side: &str, wc: &WorkCompletion) -> R<()> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(wc_error(side, wc))
    }
}

#[cfg(test)]
mod tests {
    use super::super::opts::Test;
    use super::pace_side_warning;

    #[test]
    fn pace_on_the_side_without_data_is_named() {
        let w = pace_side_warning(Test::ReadBw, true, true).expect("read_bw client");
        assert!(w.contains("this client") && w.contains("leaves the server"), "{w}");
        assert!(pace_side_warning(Test::WriteBw, false, true).is_some_and(|w| w.contains("leaves the client")));
        assert!(pace_side_warning(Test::SendBw, false, true).is_some());
        // the data side, pace off, and the latency tests (both sides send) say nothing
        assert_eq!(pace_side_warning(Test::ReadBw, false, true), None);
        assert_eq!(pace_side_warning(Test::WriteBw, true, true), None);
        assert_eq!(pace_side_warning(Test::ReadBw, true, false), None);
        assert_eq!(pace_side_warning(Test::WriteLat, true, true), None);
    }
}
