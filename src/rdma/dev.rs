//! The RoCE device of a test run (port setup, manual or engine-thread progress), the test
//! buffer, and the TCP control connection whose waits keep the device polled.

use super::opts::Opts;
use super::report::status_name;
use droce_dpdk as dpdk;
use droce_dpdk::roce::{Command, EngineThread, Event, ProcessMemory, RoceConfig, RoceDevice};
use droce_transport::qp::QpHandle;
use droce_transport::status::WcStatus;
use droce_transport::verbs::{AccessFlags, CqHandle, MemoryRegion, PdHandle, RecvWr, SendWr, WorkCompletion};
use droce_transport::Memory;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
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

/// EAL, port, pool and the RoCE device. Dropped in order by `finish`.
pub struct Setup {
    pub dev: Dev,
    pub port: dpdk::Port,
    pub port_index: u16,
    pub pool: Arc<dpdk::Mempool>,
    pub eal: dpdk::Eal,
}

pub fn setup(eal_argv: &[String], o: &Opts) -> R<Setup> {
    let (res, log) = crate::capture::capture_stdio(|| dpdk::Eal::init(eal_argv));
    let eal = match res {
        Ok(e) => e,
        Err(dpdk::Error::EalInit { errno, .. }) => return Err(crate::capture::eal_failure_line(&log, &dpdk::strerror(errno))),
        Err(e) => return Err(format!("EAL: {e}")),
    };
    let ids = dpdk::port_ids();
    let id = *ids.get(o.port_index).ok_or_else(|| {
        format!(
            "no port {}: give the RoCE port before '--' (e.g. --vdev=net_memif0,role=server,socket=/tmp/m.sock, --vdev=net_af_packet0,iface=veth0)",
            o.port_index
        )
    })?;
    let jumbo = o.mtu == Some(4096);
    let room = if jumbo { 9216 + 128 } else { dpdk::MempoolConfig::default().data_room };
    let pool = Arc::new(
        dpdk::Mempool::create("rdma_pool", &dpdk::MempoolConfig { n: 16383, data_room: room, ..Default::default() })
            .map_err(|e| format!("mbuf pool: {e}"))?,
    );
    let mut port = dpdk::Port::new(id).map_err(|e| format!("port {}: {e}", id.0))?;
    let conf = port.configure(&dpdk::PortConfig::new().rx_desc(1024).tx_desc(1024), &pool).map_err(|e| format!("port {}: configure: {e}", id.0))?;
    port.start().map_err(|e| format!("port {}: start: {e} (a memif client needs its role=server peer running)", id.0))?;
    if !port.wait_link_up(o.timeout).unwrap_or(false) {
        return Err(format!("port {}: link did not come up within {:?} (is the memif peer running?)", id.0, o.timeout));
    }
    let mut c = RoceConfig::new(id, dpdk::QueueId(0));
    c.ipv4 = vec![o.roce_ip()];
    if jumbo {
        c.eth_mtu = Some(9000);
    }
    c.seed = seed();
    c.rx_burst = 64;
    c.tx_burst = 64;
    c.pcap = o.pcap.clone();
    if let Some(f) = &o.faults {
        c.faults = Some(f.parse().map_err(|e| format!("--faults: {e}"))?);
    }
    let dev = RoceDevice::new(c, &conf, pool.clone()).map_err(|e| format!("RoCE device: {e}"))?;
    Ok(Setup { dev: Dev::Manual(dev), port, port_index: id.0, pool, eal })
}

impl Setup {
    /// Stops the engine thread if any, prints the stats block, closes the port.
    pub fn finish(self, print_stats: bool) {
        let Setup { dev, port, port_index, pool, eal } = self;
        let dev = dev.into_device();
        if let Some(mut d) = dev {
            d.flush_pcap();
            if print_stats {
                print!("{}", droce_dpdk::roce::format_roce_stats(port_index, &d.stats()));
                println!();
            }
            drop(d);
        }
        // parks DPDK's interrupt thread for good first (see Port::close_at_exit)
        let _ = port.close_at_exit();
        drop(pool);
        // Not `drop(eal)`: the process exits right after this, and that releases everything
        // rte_eal_cleanup would, faster.
        eal.release_for_exit();
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

/// The device under either progress model (one per process: the size of the manual variant
/// does not matter).
#[allow(clippy::large_enum_variant)]
pub enum Dev {
    Manual(RoceDevice),
    Thread { eng: EngineThread, mem: ProcessMemory, wcs: VecDeque<WorkCompletion>, err: Option<String> },
    Gone,
}

impl Dev {
    pub fn manual(&mut self) -> R<&mut RoceDevice> {
        match self {
            Dev::Manual(d) => Ok(d),
            _ => Err("internal: verb needs manual progress".into()),
        }
    }

    /// Hands the device to an engine thread (after the setup verbs). `buf`: the registered
    /// buffer, accessed from here through the same bounds-checked memory as the engine.
    pub fn start_thread(&mut self, cq: CqHandle, buf: (u64, u64)) -> R<()> {
        let Dev::Manual(_) = self else { return Ok(()) };
        let Dev::Manual(d) = std::mem::replace(self, Dev::Gone) else { unreachable!() };
        let mut mem = ProcessMemory::new();
        add_region(&mut mem, buf.0, buf.1)?;
        let eng = EngineThread::spawn(d, vec![cq]).map_err(|e| format!("engine thread: {e}"))?;
        *self = Dev::Thread { eng, mem, wcs: VecDeque::new(), err: None };
        Ok(())
    }

    pub fn into_device(self) -> Option<RoceDevice> {
        match self {
            Dev::Manual(d) => Some(d),
            Dev::Thread { eng, .. } => eng.stop(),
            Dev::Gone => None,
        }
    }

    /// One round of progress; true when something happened (manual progress only knows).
    pub fn progress(&mut self) -> bool {
        match self {
            Dev::Manual(d) => !d.poll().is_idle(),
            Dev::Thread { eng, wcs, err, .. } => {
                let mut any = false;
                while let Some(e) = eng.poll_event() {
                    any = true;
                    match e {
                        Event::Wc { wc, .. } => wcs.push_back(wc),
                        Event::Done { result: Err(e), .. } => {
                            err.get_or_insert(format!("verb failed in the engine thread: {e:?}"));
                        }
                        _ => {}
                    }
                }
                if !any {
                    // the engine thread may share this lcore's CPU (threads inherit the main
                    // lcore's affinity): let it run
                    std::thread::yield_now();
                }
                any
            }
            Dev::Gone => false,
        }
    }

    pub fn post_send(&mut self, qp: QpHandle, wr: SendWr) -> R<()> {
        match self {
            Dev::Manual(d) => verb("post_send", d.device_mut().post_send(qp, wr)),
            Dev::Thread { eng, .. } => verb("post_send", eng.submit(Command::PostSend { qp, wr }).map(|_| ())),
            Dev::Gone => Err("device gone".into()),
        }
    }

    /// [`post_send`](Self::post_send) of a work request the caller keeps and reuses (no
    /// allocation per post with manual progress).
    pub fn post_send_ref(&mut self, qp: QpHandle, wr: &SendWr) -> R<()> {
        match self {
            Dev::Manual(d) => verb("post_send", d.device_mut().post_send_ref(qp, wr)),
            Dev::Thread { eng, .. } => verb("post_send", eng.submit(Command::PostSend { qp, wr: wr.clone() }).map(|_| ())),
            Dev::Gone => Err("device gone".into()),
        }
    }

    /// [`post_recv`](Self::post_recv) of a work request the caller keeps and reuses.
    pub fn post_recv_ref(&mut self, qp: QpHandle, wr: &RecvWr) -> R<()> {
        match self {
            Dev::Manual(d) => verb("post_recv", d.device_mut().post_recv_ref(qp, wr)),
            Dev::Thread { eng, .. } => verb("post_recv", eng.submit(Command::PostRecv { qp, wr: wr.clone() }).map(|_| ())),
            Dev::Gone => Err("device gone".into()),
        }
    }

    pub fn post_recv(&mut self, qp: QpHandle, wr: RecvWr) -> R<()> {
        match self {
            Dev::Manual(d) => verb("post_recv", d.device_mut().post_recv(qp, wr)),
            Dev::Thread { eng, .. } => verb("post_recv", eng.submit(Command::PostRecv { qp, wr }).map(|_| ())),
            Dev::Gone => Err("device gone".into()),
        }
    }

    pub fn poll_cq(&mut self, cq: CqHandle) -> R<Option<WorkCompletion>> {
        match self {
            Dev::Manual(d) => verb("poll_cq", d.device_mut().poll_cq_one(cq)),
            Dev::Thread { .. } => {
                self.progress();
                let Dev::Thread { wcs, err, .. } = self else { unreachable!() };
                if let Some(e) = err.take() {
                    return Err(e);
                }
                Ok(wcs.pop_front())
            }
            Dev::Gone => Err("device gone".into()),
        }
    }

    pub fn read_mem(&self, addr: u64, buf: &mut [u8]) -> R<()> {
        match self {
            Dev::Manual(d) => verb("read_mem", d.read_mem(addr, buf)),
            Dev::Thread { mem, .. } => verb("read_mem", mem.read(addr, buf)),
            Dev::Gone => Err("device gone".into()),
        }
    }

    pub fn write_mem(&mut self, addr: u64, data: &[u8]) -> R<()> {
        match self {
            Dev::Manual(d) => verb("write_mem", d.write_mem(addr, data)),
            Dev::Thread { mem, .. } => verb("write_mem", mem.write(addr, data)),
            Dev::Gone => Err("device gone".into()),
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
                return Err(format!("timed out after {timeout:?} waiting for {what} (peer gone?)"));
            }
        }
    }
}

#[allow(unsafe_code)]
fn add_region(mem: &mut ProcessMemory, addr: u64, len: u64) -> R<()> {
    // SAFETY: `addr..addr+len` is the run's test buffer (a Vec owned by `Buffer`), which lives
    // until after the device and the engine thread are gone (`Setup::finish` runs first).
    unsafe { mem.add_region(addr, len) }.map_err(|_| "test buffer range rejected".to_string())
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

    /// Registers the buffer with `dev` (manual progress, during setup).
    pub fn register(&mut self, dev: &mut RoceDevice, pd: PdHandle) -> R<MemoryRegion> {
        let off = (self.base - self.mem.as_ptr() as u64) as usize;
        let ptr = self.mem[off..].as_mut_ptr();
        reg(dev, pd, ptr, self.len as usize)
    }
}

#[allow(unsafe_code)]
fn reg(dev: &mut RoceDevice, pd: PdHandle, ptr: *mut u8, len: usize) -> R<MemoryRegion> {
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
        Ok(Ctrl { s, timeout, client })
    }

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
                        return Err(format!("timed out after {:?} waiting for {what} from the peer", self.timeout));
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("TCP read ({what}): {e}")),
            }
        }
        Ok(buf)
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
