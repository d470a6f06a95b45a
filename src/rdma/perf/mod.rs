//! The perftest-compatible tests: handshake sequences of perftest 4.5 (docs/interop.md (b)),
//! the test loops, verification and the report.

use super::dev::{check_wc, tsc_secs, verb, Buffer, Ctrl, Dev, Rng, Setup, Stall, R};
use super::exchange::{self, BwReport, KeyMsg, DONE, KEY_MSG_LEN, VERSION_LEN};
use super::opts::{AtomicOp, Opts, Progress, Test, TESTS};
use super::report::{self, address_line, bw_row, check_pattern, fill_pattern, lat_row, lat_stats, BW_COLUMNS, LAT_COLUMNS, LINE};
use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::qp::{PathMtu, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpState, QpType};
use droce_transport::status::WcOpcode;
use droce_transport::verbs::{AccessFlags, CqHandle, MemoryRegion, RecvWr, SendFlags, SendOpcode, SendWr, Sge, UdDest};
use droce_transport::{Gid, Psn, QKey, Qpn, Rkey};
use std::time::{Duration, Instant};

pub const DEF_QKEY: u32 = 0x1111_1111;
pub const GRH: u64 = 40;
/// READ/atomic credits droce announces (`out_reads`); rxe announces 0x80.
const OUT_READS: u16 = 16;
/// Bandwidth tests take a clock stamp every STAMP_STEP completions.
const STAMP_STEP: u64 = 16; // a power of two
/// Bandwidth tests signal one WRITE/SEND in CQ_MOD (perftest's `--cq-mod`, default 100).
const CQ_MOD: u64 = 16;

pub struct QpCtx {
    pub h: QpHandle,
    pub qpn: u32,
    pub psn: u32,
    pub remote: Option<KeyMsg>,
    pub ud: Option<UdDest>,
}

/// Everything a run needs besides the control connection.
pub struct Run {
    pub o: Opts,
    pub mr: MemoryRegion,
    pub cq: CqHandle,
    pub qps: Vec<QpCtx>,
    /// Bytes per slot (message size, +40 GRH area for UD receives, 64-byte aligned).
    pub slot: u64,
    /// Slots of the peer-visible region per QP.
    pub nslots: u64,
    pub tx_slots: u64,
    pub mtu: u32,
    pub side: &'static str,
    pub gid: Gid,
}

impl Run {
    fn region(&self, q: usize) -> u64 {
        self.mr.va + q as u64 * (self.nslots + self.tx_slots) * self.slot
    }
    /// Slot `k` of QP `q`'s peer-visible region (receives, remote WRITE target, READ/atomic source).
    pub fn rslot(&self, q: usize, k: u64) -> u64 {
        self.region(q) + (k % self.nslots) * self.slot
    }
    /// Slot `k` of QP `q`'s local region (send source, READ/atomic destination).
    pub fn tslot(&self, q: usize, k: u64) -> u64 {
        self.region(q) + self.nslots * self.slot + (k % self.tx_slots) * self.slot
    }
    fn tx_depth(&self) -> u64 {
        self.tx_slots
    }
    fn remote(&self, q: usize) -> &KeyMsg {
        self.qps[q].remote.as_ref().expect("connected")
    }
    fn rkey(&self, q: usize) -> Rkey {
        let k = self.remote(q).rkey;
        Rkey(if self.o.bad_rkey { k ^ 0x5a5a_0000 ^ 0xff } else { k })
    }
    /// Where the peer wants our WRITE/READ/atomic: its vaddr (slot 0 of its region) + slot.
    fn raddr(&self, q: usize, k: u64) -> u64 {
        self.remote(q).vaddr + (k % self.nslots) * self.slot
    }
    fn key(&self, q: usize) -> KeyMsg {
        KeyMsg {
            lid: 0,
            out_reads: if matches!(self.o.test, Test::ReadLat | Test::ReadBw | Test::AtomicLat | Test::AtomicBw) { OUT_READS } else { 1 },
            qpn: self.qps[q].qpn,
            psn: self.qps[q].psn,
            rkey: self.mr.rkey.0,
            vaddr: self.rslot(q, 0),
            gid: self.gid,
            srqn: 0,
        }
    }
    /// Data of message `i` on QP `q` (write_lat: the last byte is perftest's iteration marker;
    /// UD: the message starts with its number, `udcheck`).
    fn payload(&self, q: usize, i: u64) -> Vec<u8> {
        let mut v = vec![0u8; self.o.size as usize];
        if self.o.ud {
            udcheck::fill(&mut v, q, i);
            return v;
        }
        fill_pattern(&mut v, q, i);
        if self.o.test == Test::WriteLat {
            if let Some(l) = v.last_mut() {
                *l = marker(i);
            }
        }
        v
    }
    fn check(&self, dev: &Dev, addr: u64, q: usize, i: u64, what: &str) -> R<()> {
        let mut v = vec![0u8; self.o.size as usize];
        dev.read_mem(addr, &mut v)?;
        if self.o.ud {
            // send_lat: one message at a time, so the one that came must be `i`
            let want = self.payload(q, i);
            if let Some(off) = v.iter().zip(&want).position(|(a, b)| a != b) {
                return Err(format!("verify failed at {}: UD {what} {i} on QP {q}: byte {off} is {:#04x}, expected {:#04x}", self.side, v[off], want[off]));
            }
            return Ok(());
        }
        let n = if self.o.test == Test::WriteLat { v.len().saturating_sub(1) } else { v.len() };
        if let Some(off) = check_pattern(&v[..n], q, i) {
            return Err(format!(
                "verify failed at {}: {what} {i} on QP {q}: byte {off} is {:#04x}, expected {:#04x}",
                self.side,
                v[off],
                report::pattern_byte(q, i, off)
            ));
        }
        Ok(())
    }
}

/// perftest's write_lat marker: the last payload byte of WRITE `i` is `(char)++scnt`, i.e.
/// 1, 2, .., 255, 0, 1, .. (consecutive values always differ).
fn marker(i: u64) -> u8 {
    (i + 1) as u8
}

fn peer_mode(o: &Opts) -> exchange::PeerMode {
    let test = TESTS.iter().position(|(_, t)| *t == o.test).unwrap_or(0) as u8;
    let atomic = matches!(o.test, Test::AtomicLat | Test::AtomicBw);
    exchange::PeerMode { test, ud: o.ud, cmp_swap: atomic && o.atomic == AtomicOp::CmpSwap, size: o.size.min(u32::MAX as u64) as u32 }
}

fn describe_mode(m: exchange::PeerMode) -> String {
    let name = TESTS.get(m.test as usize).map(|(n, _)| *n).unwrap_or("an unknown test");
    let atomic = if name.starts_with("atomic") { if m.cmp_swap { " -A CMP_AND_SWAP" } else { " -A FETCH_AND_ADD" } } else { "" };
    format!("--test={name} -c {}{atomic} -s {}", if m.ud { "UD" } else { "RC" }, m.size)
}

/// The registered test buffer of a run: `qps` x (`tx_slots` + `nslots`) slots of `slot` bytes.
pub struct BufferPlan {
    pub tx_slots: u64,
    pub nslots: u64,
    pub slot: u64,
    pub total: u64,
}

/// The buffer `run` allocates for these options at path MTU `mtu` (UD messages are cut to it).
pub fn buffer_plan(o: &Opts, mtu: u32) -> BufferPlan {
    let bw = !o.test.is_lat();
    let tx_slots = o.tx_depth.unwrap_or(if bw { 128 } else { 1 }).max(1) as u64;
    let tx_slots = if o.test == Test::SendLat { tx_slots.max(8) } else { tx_slots };
    let size = if o.ud { o.size.min(mtu as u64) } else { o.size };
    let slot = (size + if o.ud { GRH } else { 0 }).max(8).next_multiple_of(64);
    let cap_slots = ((64u64 << 20) / (slot * o.qps as u64)).max(1);
    let nslots = match o.test {
        Test::SendBw => o.rx_depth.unwrap_or(512).max(1) as u64,
        Test::SendLat => o.rx_depth.unwrap_or(16).max(2) as u64,
        Test::WriteBw | Test::ReadBw | Test::ReadLat if o.verify => o.iters.min(cap_slots),
        _ => 1,
    };
    BufferPlan { tx_slots, nslots, slot, total: o.qps as u64 * (nslots + tx_slots) * slot }
}

/// Refuses, before EAL and the port come up, options whose test buffer cannot fit in memory.
pub fn check_plan(o: &Opts) -> R<()> {
    if o.test.is_pingpong() {
        return Ok(());
    }
    let BufferPlan { tx_slots, nslots, slot, total } = buffer_plan(o, o.mtu.unwrap_or(4096));
    check_memory(total, &format!("{} QP(s) x ({tx_slots} send + {nslots} receive/target slots) x {slot} B for -s {}", o.qps, o.size))
}

/// The test buffer must fit in memory: a 1 GiB `-s` with 128 send slots asked the allocator
/// for 138 GB and failed with a bare "cannot allocate". Refuse before allocating, saying why.
fn check_memory(bytes: u64, what: &str) -> R<()> {
    let avail = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| t.lines().find(|l| l.starts_with("MemAvailable:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok()))
        .map(|kb| kb * 1024);
    match avail {
        Some(a) if bytes > a / 2 => Err(format!(
            "the test buffer needs {} ({what}), more than half of the {} of memory available: lower -s, -t (send depth) or -q",
            human(bytes),
            human(a)
        )),
        _ => Ok(()),
    }
}

fn human(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b => format!("{b} B"),
    }
}

fn mtu_of(p: PathMtu) -> u32 {
    p.bytes()
}

pub fn run(setup: &mut Setup, o: &Opts) -> R<()> {
    let client = !o.is_server();
    let side = if client { "client" } else { "server" };
    let dev = setup.dev.manual()?;
    // The test loops keep polling (the TCP exchanges progress the device too, and close()
    // flushes): ACKs may wait one poll, behind the replies (the transport's ACK-hold policy).
    dev.set_hold_acks(true);
    let dev_mtu = mtu_of(dev.path_mtu());
    let want = o.mtu.unwrap_or(dev_mtu.min(1024)).min(dev_mtu);
    let local_code = exchange::mtu_code(want).ok_or("bad MTU")?;
    let gid = Gid::from_ipv4(o.roce_ip());
    let sgid = dev.gid_index(&gid).ok_or("own GID missing from the GID table")?;

    // resources
    let size = if o.ud && o.size > want as u64 {
        // perftest does the same, and says so ("Max msg size in UD is MTU ...")
        eprintln!("droce-pmd: warning: -c UD -s {}: a UD message is at most the path MTU; sending {want}-byte messages", o.size);
        want as u64
    } else {
        o.size
    };
    let BufferPlan { tx_slots, nslots, slot, total } = buffer_plan(o, want);
    check_memory(total, &format!("{} QP(s) x ({tx_slots} send + {nslots} receive/target slots) x {slot} B for -s {size}", o.qps))?;
    // the device may write into the buffer until it is dropped (after this function, in
    // Setup::finish, or in the engine thread): the buffer lives as long as the process
    let buf: &'static mut Buffer = Box::leak(Box::new(Buffer::new(total)?));
    let pd = dev.alloc_pd();
    let mr = buf.register(dev, pd)?;
    let cq_depth = (o.qps as u64 * (nslots + tx_slots) + 64).min(1 << 20) as usize;
    let cq = verb("create_cq", dev.create_cq(cq_depth))?;
    let mut rng = Rng::new();
    let mut qps = Vec::new();
    for _ in 0..o.qps {
        let cap = QpCap { max_send_wr: tx_slots as u32 + 16, max_recv_wr: nslots as u32 + 16, ..QpCap::default() };
        let t = if o.ud { QpType::Ud } else { QpType::Rc };
        let h = verb("create_qp", dev.create_qp(QpInitAttr { qp_type: t, pd, send_cq: cq, recv_cq: cq, srq: None, cap, sq_sig_all: false }))?;
        let qpn = verb("query_qp", dev.query_qp(h))?.qp_num.value();
        qps.push(QpCtx { h, qpn, psn: rng.psn(), remote: None, ud: None });
    }
    let mut r = Run { o: o.clone(), mr, cq, qps, slot, nslots, tx_slots, mtu: want, side, gid };
    r.o.size = size;

    // sources the peer reads: slot k of QP q holds pattern(q, k); atomic targets start at 0
    if matches!(o.test, Test::ReadBw | Test::ReadLat) {
        for q in 0..o.qps {
            for k in 0..nslots {
                let p = r.payload(q, k);
                setup.dev.write_mem(r.rslot(q, k), &p)?;
            }
        }
    }

    // TCP and the perftest startup exchange
    let mut ctrl = match &o.server {
        Some(s) => Ctrl::connect(s, o.tcp_port, o.timeout, &mut setup.dev)?,
        None => Ctrl::accept(o.tcp_port, o.timeout, &mut setup.dev)?,
    };
    let dv = &mut setup.dev;
    let mine = peer_mode(o);
    let offer = exchange::Features { selective_repeat: o.selective_repeat && !o.ud };
    let shape = exchange::Shape { qps: o.qps.min(255) as u8, verify: o.verify };
    let v = ctrl.xchg(&exchange::version_msg_full(mine, offer, shape), dv, "the perftest version")?;
    let Some(rv) = exchange::parse_version(&v[..VERSION_LEN]).filter(|&rv| rv > 0.0) else {
        let shown: String = v[..VERSION_LEN].iter().take_while(|&&b| b != 0).map(|&b| if b.is_ascii_graphic() || b == b' ' { b as char } else { '.' }).collect();
        return Err(format!(
            "the peer on TCP port {} does not speak perftest's exchange (its first bytes: \"{shown}\"): is it a droce-pmd or perftest server?",
            o.tcp_port
        ));
    };
    if rv < 5.70 {
        return Err(format!("peer's perftest version {rv:.2} is older than 5.70: not compatible"));
    }
    if let Some(theirs) = exchange::parse_mode(&v[..VERSION_LEN]) {
        if theirs != mine {
            return Err(format!(
                "the peer runs {}, this side {}: run the same test, connection type and size on both sides",
                describe_mode(theirs),
                describe_mode(mine)
            ));
        }
    }
    if let Some(theirs) = exchange::parse_shape(&v[..VERSION_LEN]) {
        if theirs.qps != shape.qps {
            return Err(format!("the peer runs -q {}, this side -q {}: give both sides the same -q", theirs.qps, shape.qps));
        }
        if theirs.verify != shape.verify {
            let (with, without) = if theirs.verify { ("the peer", "this side") } else { ("this side", "the peer") };
            return Err(format!(
                "{with} runs with --verify and {without} without: give both sides --verify or neither (the sender writes the pattern the receiver checks)"
            ));
        }
    }
    // From here on: whether the QPs use it (both sides offered it; never with perftest).
    r.o.selective_repeat = offer.common(exchange::parse_features(&v[..VERSION_LEN])).selective_repeat;
    ctrl.xchg(&4096u32.to_be_bytes(), dv, "the cycle buffer size")?;
    ctrl.xchg(&64u32.to_be_bytes(), dv, "the cache line size")?;
    let m = ctrl.xchg(&exchange::mtu_msg(local_code), dv, "the MTU")?;
    let code = exchange::parse_mtu_msg(&m).map(|c| c.min(local_code)).unwrap_or(local_code);
    r.mtu = exchange::mtu_bytes(code).unwrap_or(want);
    if o.ud && r.o.size > r.mtu as u64 {
        eprintln!("droce-pmd: warning: -c UD -s {}: the peer's MTU is {}; sending {}-byte messages", r.o.size, r.mtu, r.mtu);
        r.o.size = r.mtu as u64;
    }

    let hs_all = |r: &mut Run, ctrl: &mut Ctrl, dv: &mut Dev| -> R<()> {
        for q in 0..r.qps.len() {
            let k = ctrl.xchg(&r.key(q).encode(), dv, "the peer's QP keys")?;
            let k = KeyMsg::decode(&k[..KEY_MSG_LEN])?;
            if k.gid == Gid::ZERO {
                return Err("the peer sent a zero GID: RoCE needs a GID (run perftest with -x 1)".into());
            }
            r.qps[q].remote = Some(k);
        }
        Ok(())
    };
    let hs = |r: &Run, ctrl: &mut Ctrl, dv: &mut Dev, what: &str| -> R<()> {
        ctrl.xchg(&r.key(0).encode(), dv, what).map(|_| ())
    };
    let print_addrs = |r: &Run| {
        for q in 0..r.qps.len() {
            let k = r.key(q);
            print!("{}", address_line("local", k.qpn, k.psn, k.rkey, k.vaddr, &k.gid));
        }
        for q in 0..r.qps.len() {
            let k = r.remote(q);
            print!("{}", address_line("remote", k.qpn, k.psn, k.rkey, k.vaddr, &k.gid));
        }
        println!("{LINE}");
    };
    let conn = if o.ud { "UD" } else { "RC" };
    let mut extra = Vec::new();
    if matches!(o.test, Test::AtomicLat | Test::AtomicBw) {
        extra.push(("Atomic Operation".to_string(), if o.atomic == AtomicOp::FetchAdd { "FETCH_AND_ADD" } else { "CMP_AND_SWAP" }.to_string()));
    }
    if matches!(o.test, Test::ReadLat | Test::ReadBw | Test::AtomicBw | Test::AtomicLat) {
        extra.push(("Outstand reads".to_string(), OUT_READS.to_string()));
    }
    extra.push(("Progress".to_string(), if o.progress == Progress::Thread { "engine thread" } else { "manual" }.to_string()));
    if o.verify {
        extra.push(("Data check".to_string(), "ON (every byte)".to_string()));
    }
    let title = match (o.test, o.atomic) {
        (Test::AtomicLat, AtomicOp::CmpSwap) => "Atomic CMP_AND_SWAP Latency Test",
        (Test::AtomicBw, AtomicOp::CmpSwap) => "Atomic CMP_AND_SWAP BW Test",
        (t, _) => t.title(),
    };
    let print_header = |r: &Run| {
        print!(
            "{}",
            report::header(&report::Header {
                title,
                qps: r.qps.len(),
                conn,
                mtu: r.mtu,
                tx_depth: r.tx_depth() as usize,
                gid_index: sgid,
                device: "droce0",
                extra: extra.clone(),
            })
        );
    };

    // The RDMA tests' bring-up, in perftest's order: keys, RTR/RTS, keys again, the banner, one
    // handshake after RTR; then the progress thread if asked for.
    let rdma_up = |r: &mut Run, ctrl: &mut Ctrl, dv: &mut Dev| -> R<()> {
        hs_all(r, ctrl, dv)?;
        connect(r, dv, sgid)?;
        hs_all(r, ctrl, dv)?;
        print_header(r);
        print_addrs(r);
        hs(r, ctrl, dv, "the handshake after RTR")?;
        if o.progress == Progress::Thread {
            dv.start_thread()?;
        }
        Ok(())
    };
    match o.test {
        Test::WriteBw | Test::ReadBw | Test::AtomicBw => {
            rdma_up(&mut r, &mut ctrl, dv)?;
            if client {
                let (stats, secs) = bw_client(&mut r, dv, &mut ctrl)?;
                let _ = secs;
                hs(&r, &mut ctrl, dv, "the handshake after the test")?;
                let rep = BwReport { size: r.o.size, iters: o.iters, bw_peak: stats.peak_mbs, bw_avg: stats.avg_mbs, msg_rate: stats.mpps };
                xchg_reports(&mut ctrl, dv, &rep)?;
                close(&r, &mut ctrl, dv)?;
                println!("{BW_COLUMNS}");
                println!("{}", bw_row(r.o.size, o.iters, &stats));
                println!("{LINE}");
            } else {
                // passive: the client's test runs while we wait in this handshake
                hs(&r, &mut ctrl, dv, "the end of the client's test")?;
                let zero = BwReport { size: r.o.size, iters: o.iters, bw_peak: 0.0, bw_avg: 0.0, msg_rate: 0.0 };
                let theirs = xchg_reports(&mut ctrl, dv, &zero)?;
                close(&r, &mut ctrl, dv)?;
                println!("{BW_COLUMNS}");
                let s = report::BwStats { peak_mbs: theirs.bw_peak, avg_mbs: theirs.bw_avg, mpps: theirs.msg_rate };
                println!("{}", bw_row(theirs.size, theirs.iters, &s));
                println!("{LINE}");
                if o.verify {
                    verify_server(&r, dv, o.iters, false)?;
                }
            }
        }
        Test::WriteLat | Test::ReadLat | Test::AtomicLat => {
            hs(&r, &mut ctrl, dv, "the first handshake")?;
            rdma_up(&mut r, &mut ctrl, dv)?;
            if o.test == Test::WriteLat {
                let samples = write_lat(&mut r, dv, &mut ctrl, client)?;
                print_lat(&r, &samples);
            } else if client {
                let samples = read_atomic_lat(&mut r, dv)?;
                close(&r, &mut ctrl, dv)?;
                print_lat(&r, &samples);
            } else {
                close(&r, &mut ctrl, dv)?;
                if o.verify && matches!(o.test, Test::AtomicLat) {
                    verify_server(&r, dv, o.iters, true)?;
                }
                println!(" droce server: the client's test finished");
                println!("{LINE}");
            }
        }
        Test::SendLat | Test::SendBw => {
            hs_all(&mut r, &mut ctrl, dv)?;
            connect(&r, dv, sgid)?;
            hs(&r, &mut ctrl, dv, "the handshake after RTR")?;
            hs_all(&mut r, &mut ctrl, dv)?;
            if o.ud {
                for q in 0..r.qps.len() {
                    let k = *r.remote(q);
                    let mut av = dv.manual()?.av(k.gid, sgid);
                    av.hop_limit = 64;
                    // as ibv_create_ah: the peer's MAC known before the first datagram
                    dv.manual()?.resolve_av(&av, o.timeout).map_err(|e| format!("UD address of the peer: {e}"))?;
                    r.qps[q].ud = Some(UdDest { av, remote_qpn: Qpn::new(k.qpn), remote_qkey: QKey(DEF_QKEY) });
                }
            }
            print_header(&r);
            print_addrs(&r);
            let receiver = o.test == Test::SendLat || !client;
            if receiver {
                for q in 0..r.qps.len() {
                    for k in 0..r.nslots {
                        post_recv(&r, dv, q, k)?;
                    }
                }
            }
            hs(&r, &mut ctrl, dv, "the peer's receives posted")?;
            if o.progress == Progress::Thread {
                dv.start_thread()?;
            }
            if o.test == Test::SendLat {
                let samples = send_lat(&mut r, dv, &mut ctrl, client)?;
                close(&r, &mut ctrl, dv)?;
                print_lat(&r, &samples);
            } else if client {
                let (stats, _) = bw_client(&mut r, dv, &mut ctrl)?;
                close(&r, &mut ctrl, dv)?;
                println!("{BW_COLUMNS}");
                println!("{}", bw_row(r.o.size, o.iters, &stats));
                println!("{LINE}");
            } else {
                let stats = send_bw_server(&mut r, dv, &mut ctrl)?;
                close(&r, &mut ctrl, dv)?;
                println!("{BW_COLUMNS}");
                println!("{}", bw_row(r.o.size, o.iters, &stats));
                println!("{LINE}");
            }
        }
        Test::RcPingpong | Test::UdPingpong => unreachable!("pingpong runs elsewhere"),
    }
    if o.verify {
        // UD loses datagrams by design: the server counted them (" UD: received ...")
        println!(" Data check: every byte of every message {}verified", if o.ud { "that arrived " } else { "" });
    }
    Ok(())
}

fn print_lat(r: &Run, samples: &[f64]) {
    if let Some(l) = lat_stats(samples) {
        println!("{LAT_COLUMNS}");
        println!("{}", lat_row(r.o.size, samples.len() as u64, &l));
        println!("{LINE}");
    }
}

fn xchg_reports(ctrl: &mut Ctrl, dv: &mut Dev, mine: &BwReport) -> R<BwReport> {
    let parts = mine.parts();
    let mut got = [[0u8; 8]; 5];
    for (i, p) in parts.iter().enumerate() {
        let v = ctrl.xchg(p, dv, "the bandwidth report")?;
        got[i].copy_from_slice(&v[..8]);
    }
    Ok(BwReport::from_parts(&got))
}

/// `ctx_close_connection`: one more handshake, then "done".
fn close(r: &Run, ctrl: &mut Ctrl, dv: &mut Dev) -> R<()> {
    dv.flush();
    ctrl.xchg(&r.key(0).encode(), dv, "the closing handshake")?;
    ctrl.write(DONE, dv)
}

fn connect(r: &Run, dv: &mut Dev, sgid: u8) -> R<()> {
    let d = dv.manual()?;
    let mtu = PathMtu::from_bytes(r.mtu).ok_or("bad MTU")?;
    for q in &r.qps {
        let k = q.remote.as_ref().ok_or("no remote keys")?;
        if r.o.ud {
            let dd = &mut *d;
            let a = QpAttr { qp_state: QpState::Init, pkey_index: 0, port_num: 1, qkey: QKey(DEF_QKEY), ..QpAttr::default() };
            verb("modify_qp INIT", dd.modify_qp(q.h, &a, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY))?;
            let a = QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() };
            verb("modify_qp RTR", dd.modify_qp(q.h, &a, QpAttrMask::STATE))?;
            let a = QpAttr { qp_state: QpState::Rts, sq_psn: Psn::new(q.psn), ..QpAttr::default() };
            verb("modify_qp RTS", dd.modify_qp(q.h, &a, QpAttrMask::STATE | QpAttrMask::SQ_PSN))?;
        } else {
            let mut av = d.av(k.gid, sgid);
            av.hop_limit = 0xff;
            // as ibv_modify_qp to RTR on RoCE: the peer's MAC known before the first request.
            // Otherwise the first window waits in the hold queue behind the first ARP request,
            // and when that is lost (a corrupted frame, a full ring) all but its first 256
            // frames are dropped there and cost a go-back-N after the ACK timeout.
            d.resolve_av(&av, r.o.timeout).map_err(|e| format!("RC address of the peer: {e}"))?;
            let own_reads = if matches!(r.o.test, Test::ReadLat | Test::ReadBw | Test::AtomicLat | Test::AtomicBw) { OUT_READS } else { 1 };
            let dd = &mut *d;
            let (a, m) = init_attr(AccessFlags::ALL);
            verb("modify_qp INIT", dd.modify_qp(q.h, &a, m))?;
            let (mut a, mut m) = rtr_attr(av, mtu, Qpn::new(k.qpn), Psn::new(k.psn), own_reads as u8, 12);
            if r.o.selective_repeat {
                a.selective_repeat = true;
                m = m | QpAttrMask::SELECTIVE_REPEAT;
            }
            verb("modify_qp RTR", dd.modify_qp(q.h, &a, m))?;
            let (a, m) = rts_attr(Psn::new(q.psn), r.o.qp_timeout, 7, 7, k.out_reads.clamp(1, OUT_READS) as u8);
            verb("modify_qp RTS", dd.modify_qp(q.h, &a, m))?;
        }
    }
    Ok(())
}

fn post_recv(r: &Run, dv: &mut Dev, q: usize, k: u64) -> R<()> {
    post_recv_with(r, dv, q, k, &mut RecvWr::new(0))
}

/// [`post_recv`] through a receive work request the loop keeps (no allocation per message).
fn post_recv_with(r: &Run, dv: &mut Dev, q: usize, k: u64, wr: &mut RecvWr) -> R<()> {
    let len = r.o.size + if r.o.ud { GRH } else { 0 };
    wr.wr_id = wrid(q, k);
    wr.sg_list.clear();
    wr.sg_list.push(Sge { addr: r.rslot(q, k), length: len as u32, lkey: r.mr.lkey });
    dv.post_recv_ref(r.qps[q].h, wr)
}

fn wrid(q: usize, i: u64) -> u64 {
    (q as u64) << 40 | (i & ((1 << 40) - 1))
}
fn wr_q(id: u64) -> usize {
    (id >> 40) as usize
}
fn wr_i(id: u64) -> u64 {
    id & ((1 << 40) - 1)
}

/// Builds the requester's work request `i` on QP `q` (data already in place).
fn request(r: &Run, q: usize, i: u64, atomic_n: u64) -> SendWr {
    let mut w = SendWr::new(0, SendOpcode::Send);
    request_into(r, q, i, atomic_n, &mut w);
    w
}

/// [`request`] into a work request the loop keeps: every field rewritten, the gather list's
/// allocation reused (posted with `post_send_ref`, no allocation per message).
fn request_into(r: &Run, q: usize, i: u64, atomic_n: u64, w: &mut SendWr) {
    let src = r.tslot(q, i);
    let size = r.o.size as u32;
    let (opcode, len, remote, (add, swap)) = match r.o.test {
        Test::WriteBw | Test::WriteLat => (SendOpcode::Write, size, Some(r.raddr(q, i)), (0, 0)),
        Test::ReadBw | Test::ReadLat => (SendOpcode::Read, size, Some(r.raddr(q, i)), (0, 0)),
        Test::AtomicBw | Test::AtomicLat => match r.o.atomic {
            AtomicOp::FetchAdd => (SendOpcode::FetchAdd, 8, Some(r.raddr(q, 0)), (1, 0)),
            AtomicOp::CmpSwap => (SendOpcode::CmpSwap, 8, Some(r.raddr(q, 0)), (atomic_n, atomic_n + 1)),
        },
        _ => (SendOpcode::Send, size, None, (0, 0)),
    };
    w.wr_id = wrid(q, i);
    w.opcode = opcode;
    w.flags = SendFlags::SIGNALED;
    w.imm_data = 0;
    w.sg_list.clear();
    w.sg_list.push(Sge { addr: src, length: len, lkey: r.mr.lkey });
    match remote {
        Some(a) => (w.remote_addr, w.rkey) = (a, r.rkey(q)),
        None => (w.remote_addr, w.rkey) = (0, Rkey(0)),
    }
    (w.compare_add, w.swap) = (add, swap);
    w.ud = if opcode == SendOpcode::Send { r.qps[q].ud } else { None };
}

/// Checks what a completed READ / atomic brought back.
fn check_response(r: &Run, dv: &Dev, q: usize, i: u64, n: u64) -> R<()> {
    match r.o.test {
        Test::ReadBw | Test::ReadLat => r.check(dv, r.tslot(q, i), q, i % r.nslots, "READ"),
        Test::AtomicBw | Test::AtomicLat => {
            let mut v = [0u8; 8];
            dv.read_mem(r.tslot(q, i), &mut v)?;
            let got = u64::from_ne_bytes(v);
            if got != n {
                return Err(format!("verify failed at client: atomic {i} on QP {q} returned {got}, expected {n}"));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

mod loops;
use loops::*;
mod udcheck;
