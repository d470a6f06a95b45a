//! A perftest 4.5 (`ib_read_lat`, `ib_atomic_lat`) peer: the TCP startup and key exchange of
//! docs/interop.md (b), then the droce transport's RC QP as requester (client) or passive
//! responder (server).

use crate::{arp_thread, die, Pump, RawSock};
use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::qp::{PathMtu, QpCap, QpInitAttr, QpType};
use droce_transport::status::WcStatus;
use droce_transport::verbs::{AccessFlags, AddressVector, SendOpcode, SendWr};
use droce_transport::{Device, DeviceConfig, Gid, Memory, Psn, Qpn, Rkey, VecMemory};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Test {
    ReadLat,
    FetchAdd,
    CmpSwap,
    SendLat,
    WriteBw,
}

/// Our `out_reads` (perftest: the device's max_qp_rd_atom for READ/ATOMIC tests).
const OUT_READS: u32 = 16;
const KEY_LEN: usize = 108;

struct Key {
    out_reads: u32,
    qpn: u32,
    psn: u32,
    rkey: u32,
    vaddr: u64,
    gid: Gid,
}

/// perftest's KEY_PRINT_FMT_GID message: 107 characters + NUL.
fn key_msg(k: &Key) -> [u8; KEY_LEN] {
    let mut s = format!("{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:", 0, k.out_reads, k.qpn, k.psn, k.rkey, k.vaddr);
    for b in k.gid.0 {
        s += &format!("{b:02x}:");
    }
    s += &format!("{:08x}:", 0);
    assert_eq!(s.len(), KEY_LEN - 1);
    let mut m = [0u8; KEY_LEN];
    m[..KEY_LEN - 1].copy_from_slice(s.as_bytes());
    m
}

fn parse_key(m: &[u8]) -> Key {
    let s = std::str::from_utf8(&m[..KEY_LEN - 1]).unwrap_or_else(|_| die("perftest key message is not text"));
    let f: Vec<u64> = s.split(':').filter(|x| !x.is_empty()).map(|x| u64::from_str_radix(x, 16).unwrap_or_else(|_| die(&format!("bad key field {x:?} in {s:?}")))).collect();
    if f.len() != 23 {
        die(&format!("perftest key message has {} fields: {s:?}", f.len()));
    }
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = f[6 + i] as u8;
    }
    Key { out_reads: f[1] as u32, qpn: f[2] as u32, psn: f[3] as u32, rkey: f[4] as u32, vaddr: f[5], gid: Gid(g) }
}

/// ctx_xchg_data: the client writes then reads, the server reads then writes.
fn xchg(s: &mut TcpStream, client: bool, mine: &[u8]) -> Vec<u8> {
    let mut theirs = vec![0u8; mine.len()];
    if client {
        s.write_all(mine).unwrap_or_else(|e| die(&format!("TCP write: {e}")));
        s.read_exact(&mut theirs).unwrap_or_else(|e| die(&format!("TCP read of {} bytes: {e}", mine.len())));
    } else {
        s.read_exact(&mut theirs).unwrap_or_else(|e| die(&format!("TCP read of {} bytes: {e}", mine.len())));
        s.write_all(mine).unwrap_or_else(|e| die(&format!("TCP write: {e}")));
    }
    theirs
}

#[allow(clippy::too_many_arguments)]
pub fn run(test: Test, iface: &str, mac: [u8; 6], ip: Ipv4Addr, peer_mac: [u8; 6], server: Option<Ipv4Addr>, size: usize, iters: u32, port: u16, secs: u64) {
    let client = server.is_some();
    let _arp = arp_thread(iface.to_string(), mac, ip);
    let sock = RawSock::open(iface);
    let my_gid = Gid::from_ipv4(ip);
    let size = if matches!(test, Test::FetchAdd | Test::CmpSwap) { 8 } else { size.max(1) };
    let slot = size.div_ceil(4096) as u64 * 4096;
    let base = 0x2000_0000u64;
    let seed = std::process::id() as u64 ^ 0xbeef;
    let cfg = DeviceConfig { mac, gids: vec![my_gid], seed, ..DeviceConfig::default() };
    let mut dev = Device::new(cfg, VecMemory::new(base, 2 * slot as usize));
    let pd = dev.alloc_pd();
    let mr = dev.reg_mr(pd, base, 2 * slot, AccessFlags::ALL).unwrap();
    let cq = dev.create_cq(256).unwrap();
    let qp = dev
        .create_qp(QpInitAttr { qp_type: QpType::Rc, pd, send_cq: cq, recv_cq: cq, srq: None, cap: QpCap { max_send_wr: 64, max_recv_wr: 64, ..QpCap::default() }, sq_sig_all: true })
        .unwrap_or_else(|e| die(&format!("create_qp: {e:?}")));
    let (a, m) = init_attr(AccessFlags::ALL);
    dev.modify_qp(qp, &a, m).unwrap_or_else(|e| die(&format!("INIT: {e:?}")));
    // The remotely accessible half: a byte pattern for READs, 0 for atomics.
    let exposed = base + slot;
    let pattern: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    dev.memory_mut().write(exposed, if matches!(test, Test::FetchAdd | Test::CmpSwap) { &[0u8; 8] } else { &pattern }).unwrap();
    dev.memory_mut().write(base, &pattern).unwrap();
    let me = Key {
        out_reads: OUT_READS,
        qpn: dev.query_qp(qp).unwrap().qp_num.value(),
        psn: (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as u32 & 0xff_ffff,
        rkey: mr.rkey.0,
        vaddr: exposed,
        gid: my_gid,
    };

    // Startup (version, sys data, MTU), the key hand shakes, connect.
    let mut s = match server {
        Some(srv) => TcpStream::connect_timeout(&(srv, port).into(), Duration::from_secs(10)).unwrap_or_else(|e| die(&format!("connect {srv}:{port}: {e}"))),
        None => {
            let l = TcpListener::bind(("0.0.0.0", port)).unwrap_or_else(|e| die(&format!("listen :{port}: {e}")));
            println!("listening on TCP port {port}");
            l.accept().unwrap_or_else(|e| die(&format!("accept: {e}"))).0
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(secs))).unwrap();
    let mut v = [0u8; 16];
    v[..4].copy_from_slice(b"6.06");
    let rv = xchg(&mut s, client, &v);
    let rv = String::from_utf8_lossy(&rv).trim_end_matches('\0').to_string();
    println!("peer perftest version {rv:?}");
    let _ = xchg(&mut s, client, &4096u32.to_be_bytes());
    let _ = xchg(&mut s, client, &64u32.to_be_bytes());
    let rmtu = xchg(&mut s, client, b"3\0");
    println!("peer MTU code {:?}", String::from_utf8_lossy(&rmtu[..1]));
    let mine = key_msg(&me);
    // Hand shakes before connecting: lat READ/ATOMIC tests 2 (HS, HS x N), SEND and bw tests 1.
    let lat_ra = matches!(test, Test::ReadLat | Test::FetchAdd | Test::CmpSwap);
    if lat_ra {
        let _ = xchg(&mut s, client, &mine);
    }
    let peer = parse_key(&xchg(&mut s, client, &mine));
    let av = AddressVector { dgid: peer.gid, dmac: peer_mac, sgid_index: 0, hop_limit: 0xff, traffic_class: 0, flow_label: 0 };
    let (a, m) = rtr_attr(av, PathMtu::Mtu1024, Qpn::new(peer.qpn), Psn::new(peer.psn), OUT_READS as u8, 12);
    dev.modify_qp(qp, &a, m).unwrap_or_else(|e| die(&format!("RTR: {e:?}")));
    // ACK timeout 17 rather than perftest's 14: see main.rs (TCG stalls)
    let (a, m) = rts_attr(Psn::new(me.psn), 17, 7, 7, peer.out_reads.min(OUT_READS) as u8);
    dev.modify_qp(qp, &a, m).unwrap_or_else(|e| die(&format!("RTS: {e:?}")));
    let _ = xchg(&mut s, client, &mine);
    let _ = xchg(&mut s, client, &mine);
    if test == Test::SendLat {
        // receives first, then the hand shake "so the client won't send before the server posted"
        for k in 0..32u64 {
            dev.post_recv(qp, droce_transport::verbs::RecvWr::new(k).with_sge(exposed, size as u32, mr.lkey)).unwrap();
        }
        let _ = xchg(&mut s, client, &mine);
    }
    println!("  local address:  QPN 0x{:06x}, PSN 0x{:06x}, RKey 0x{:08x}, VAddr 0x{:016x}, out_reads {}", me.qpn, me.psn, me.rkey, me.vaddr, me.out_reads);
    println!("  remote address: QPN 0x{:06x}, PSN 0x{:06x}, RKey 0x{:08x}, VAddr 0x{:016x}, out_reads {}, GID {}", peer.qpn, peer.psn, peer.rkey, peer.vaddr, peer.out_reads, peer.gid);

    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(secs);
    let mut pump = Pump::new(sock, mac, &dev);
    if test == Test::SendLat {
        send_lat(&mut dev, &mut pump, qp, cq, client, base, exposed, size, mr.lkey, iters, t0, deadline, &pattern);
        let _ = xchg(&mut s, client, &mine);
        let _ = s.write_all(b"done\0");
        pump.linger(&mut dev, t0, 300);
        return;
    }
    if test == Test::WriteBw && client {
        let bw = write_bw(&mut dev, &mut pump, qp, cq, base, size, mr.lkey, iters, t0, deadline, &peer);
        let _ = xchg(&mut s, true, &mine);
        xchg_report(&mut s, true, size, iters, bw);
        let _ = xchg(&mut s, true, &mine);
        let _ = s.write_all(b"done\0");
        pump.linger(&mut dev, t0, 300);
        return;
    }
    if client {
        // Requester: one operation at a time, as ib_read_lat / ib_atomic_lat.
        let mut expect = 0u64; // atomics: what we believe the peer's word holds after the first op
        let mut bad = 0u32;
        let mut lat = Vec::with_capacity(iters as usize);
        for i in 0..iters {
            let wr = SendWr::new(u64::from(i), match test { Test::FetchAdd => SendOpcode::FetchAdd, Test::CmpSwap => SendOpcode::CmpSwap, _ => SendOpcode::Read })
                .with_sge(base, size as u32, mr.lkey)
                .with_remote(peer.vaddr, Rkey(peer.rkey));
            let wr = match test {
                Test::ReadLat | Test::SendLat | Test::WriteBw => wr,
                Test::FetchAdd => wr.with_atomic(1, 0),
                Test::CmpSwap => wr.with_atomic(expect, expect.wrapping_add(1)),
            };
            let ts = Instant::now();
            dev.post_send(qp, wr).unwrap_or_else(|e| die(&format!("post_send: {e:?}")));
            let wc = loop {
                if Instant::now() > deadline {
                    die(&format!("timeout after {secs} s at operation {i} of {iters}; frames rx {} tx {}; counters {:?}", pump.rx, pump.tx, dev.counters()));
                }
                pump.step(&mut dev, t0);
                if let Some(wc) = dev.poll_cq_one(cq).unwrap() {
                    break wc;
                }
            };
            lat.push(ts.elapsed());
            if wc.status != WcStatus::Success {
                die(&format!("operation {i}: completion status {:?}", wc.status));
            }
            if test != Test::ReadLat {
                let mut b = [0u8; 8];
                dev.memory().read(base, &mut b).unwrap();
                let orig = u64::from_ne_bytes(b);
                if i > 0 && orig != expect {
                    bad += 1;
                    if bad <= 3 {
                        eprintln!("operation {i}: original value {orig:#x}, expected {expect:#x}");
                    }
                }
                // FETCH_ADD adds 1; CMP_SWAP swaps in compare+1 when the word equals compare
                // (our `expect`), else leaves it unchanged (only the first one may miss).
                let swapped = test == Test::FetchAdd || orig == expect;
                expect = if swapped { orig.wrapping_add(1) } else { orig };
            }
        }
        lat.sort();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]");
        println!(" {size:<6} {iters:<11} {:>13.2} {:>13.2} {:>13.2}", us(lat[0]), us(lat[lat.len() - 1]), us(lat[lat.len() / 2]));
        println!("frames rx {} tx {}", pump.rx, pump.tx);
        // close: hand shake + "done"
        let _ = xchg(&mut s, true, &mine);
        let _ = s.write_all(b"done\0");
        pump.linger(&mut dev, t0, 200);
        if bad != 0 {
            die(&format!("{bad} atomic results did not follow the expected sequence"));
        }
    } else {
        // Passive responder: serve requests until the client's closing hand shake arrives.
        s.set_nonblocking(true).unwrap();
        let mut got = Vec::new();
        let mut b = [0u8; KEY_LEN];
        while got.len() < KEY_LEN {
            if Instant::now() > deadline {
                die(&format!("timeout after {secs} s waiting for the client's closing hand shake; frames rx {} tx {}; counters {:?}", pump.rx, pump.tx, dev.counters()));
            }
            match s.read(&mut b[..KEY_LEN - got.len()]) {
                Ok(0) => die("the client closed the TCP connection before its closing hand shake"),
                Ok(n) => got.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => die(&format!("TCP read: {e}")),
            }
            pump.step(&mut dev, t0);
        }
        s.set_nonblocking(false).unwrap();
        let _ = s.write_all(&mine);
        if test == Test::WriteBw {
            // xchg_bw_reports (server: read then write), then close (hand shake + "done")
            xchg_report(&mut s, false, size, iters, 0.0);
            let _ = xchg(&mut s, false, &mine);
            let mut w = vec![0u8; size];
            dev.memory().read(exposed, &mut w).unwrap();
            println!("last WRITE landed: {}", if w == pattern_of(size) { "payload as expected" } else { "payload differs" });
        }
        let _ = s.write_all(b"done\0");
        let mut w = [0u8; 8];
        dev.memory().read(exposed, &mut w).unwrap();
        println!("frames rx {} tx {}; exposed word now {:#x}; counters {:?}", pump.rx, pump.tx, u64::from_ne_bytes(w), dev.counters());
        pump.linger(&mut dev, t0, 300);
    }
}

impl Pump {
    pub fn new(sock: RawSock, mac: [u8; 6], dev: &Device<VecMemory>) -> Pump {
        Pump { sock, mac, fbuf: vec![0u8; 16384], tbuf: vec![0u8; dev.max_frame_len()], rx: 0, tx: 0 }
    }
    /// One round: received frames into the device, due timers, frames out.
    pub fn step(&mut self, dev: &mut Device<VecMemory>, t0: Instant) {
        let now = || droce_transport::Instant(t0.elapsed().as_nanos() as u64);
        let mut idle = true;
        while let Some(n) = self.sock.recv(&mut self.fbuf) {
            idle = false;
            if self.fbuf[..6] == self.mac && n >= 42 {
                self.rx += 1;
                dev.handle_rx(now(), &mut self.fbuf[..n]);
            }
        }
        if let Some(t) = dev.poll_timeout() {
            if now() >= t {
                dev.handle_timeout(now());
            }
        }
        while let Some(n) = dev.poll_transmit(now(), &mut self.tbuf) {
            idle = false;
            self.tx += 1;
            self.sock.send(&self.tbuf[..n]);
        }
        if idle {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    pub fn linger(&mut self, dev: &mut Device<VecMemory>, t0: Instant, ms: u64) {
        let end = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < end {
            self.step(dev, t0);
        }
    }
}

fn pattern_of(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i % 251) as u8).collect()
}

/// xchg_bw_reports: one ctx_xchg_data per field (size, iters: 8 bytes each; bw_peak, bw_avg,
/// msgRate: doubles as big-endian 64-bit integers).
fn xchg_report(s: &mut TcpStream, client: bool, size: usize, iters: u32, gbps: f64) {
    let mut fields = vec![(size as u64).to_be_bytes(), u64::from(iters).to_be_bytes()];
    for d in [gbps, gbps, gbps * 1e9 / 8.0 / size as f64 / 1e6] {
        fields.push(d.to_bits().to_be_bytes());
    }
    let theirs: Vec<u64> = fields.iter().map(|f| u64::from_be_bytes(xchg(s, client, f).try_into().unwrap())).collect();
    println!("peer report: size {} iters {} bw_avg {:.6} Gb/s", theirs[0], theirs[1], f64::from_bits(theirs[3]));
}

fn wait_wc(dev: &mut Device<VecMemory>, pump: &mut Pump, cq: droce_transport::verbs::CqHandle, t0: Instant, deadline: Instant, what: &str) -> droce_transport::verbs::WorkCompletion {
    loop {
        if let Some(wc) = dev.poll_cq_one(cq).unwrap() {
            if wc.status != WcStatus::Success {
                die(&format!("{what}: completion {:?} status {:?}", wc.opcode, wc.status));
            }
            return wc;
        }
        if Instant::now() > deadline {
            die(&format!("timeout in {what}; frames rx {} tx {}; counters {:?}", pump.rx, pump.tx, dev.counters()));
        }
        pump.step(dev, t0);
    }
}

/// ib_send_lat's ping-pong: the client sends first; each side sends after each receive.
#[allow(clippy::too_many_arguments)]
fn send_lat(dev: &mut Device<VecMemory>, pump: &mut Pump, qp: droce_transport::qp::QpHandle, cq: droce_transport::verbs::CqHandle, client: bool, base: u64, rbuf: u64, size: usize, lkey: droce_transport::Lkey, iters: u32, t0: Instant, deadline: Instant, pattern: &[u8]) {
    use droce_transport::status::WcOpcode;
    let (mut sent, mut rcvd, mut posted_rx, mut bad, mut scomp) = (0u32, 0u32, 32u64, 0u32, 0u32);
    let post = |dev: &mut Device<VecMemory>, i: u32| dev.post_send(qp, SendWr::new(u64::from(i) | 1 << 62, SendOpcode::Send).with_sge(base, size as u32, lkey)).unwrap_or_else(|e| die(&format!("post_send: {e:?}")));
    if client {
        post(dev, 0);
        sent = 1;
    }
    let mut lat = Vec::new();
    let mut ts = Instant::now();
    while rcvd < iters || scomp < iters {
        let wc = wait_wc(dev, pump, cq, t0, deadline, &format!("send_lat after {sent} sends, {rcvd} receives"));
        if wc.opcode == WcOpcode::Send {
            scomp += 1;
        }
        if wc.opcode == WcOpcode::Recv {
            rcvd += 1;
            let mut got = vec![0u8; wc.byte_len as usize];
            dev.memory().read(rbuf, &mut got).unwrap();
            if wc.byte_len as usize != size {
                bad += 1;
            }
            let _ = pattern;
            dev.post_recv(qp, droce_transport::verbs::RecvWr::new(posted_rx).with_sge(rbuf, size as u32, lkey)).unwrap();
            posted_rx += 1;
            lat.push(ts.elapsed());
            if sent < iters {
                ts = Instant::now();
                post(dev, sent);
                sent += 1;
            }
        }
    }
    lat.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec] (round trips seen by this side)");
    println!(" {size:<6} {iters:<11} {:>13.2} {:>13.2} {:>13.2}", us(lat[0]), us(lat[lat.len() - 1]), us(lat[lat.len() / 2]));
    println!("frames rx {} tx {}", pump.rx, pump.tx);
    if bad != 0 {
        die(&format!("{bad} receives had a length other than {size}"));
    }
}

/// ib_write_bw's client: a window of WRITEs of `size` to the peer's buffer.
#[allow(clippy::too_many_arguments)]
fn write_bw(dev: &mut Device<VecMemory>, pump: &mut Pump, qp: droce_transport::qp::QpHandle, cq: droce_transport::verbs::CqHandle, base: u64, size: usize, lkey: droce_transport::Lkey, iters: u32, t0: Instant, deadline: Instant, peer: &Key) -> f64 {
    let (mut posted, mut done) = (0u32, 0u32);
    let window = 16u32;
    let ts = Instant::now();
    while done < iters {
        while posted < iters && posted - done < window {
            let wr = SendWr::new(u64::from(posted), SendOpcode::Write).with_sge(base, size as u32, lkey).with_remote(peer.vaddr, Rkey(peer.rkey));
            dev.post_send(qp, wr).unwrap_or_else(|e| die(&format!("post_send: {e:?}")));
            posted += 1;
        }
        let _ = wait_wc(dev, pump, cq, t0, deadline, &format!("write_bw after {done} of {iters} WRITEs"));
        done += 1;
    }
    let secs = ts.elapsed().as_secs_f64();
    let gbps = size as f64 * f64::from(iters) * 8.0 / secs / 1e9;
    println!(" #bytes     #iterations    BW average[Gb/sec]   MsgRate[Mpps]");
    println!(" {size:<10} {iters:<14} {gbps:.6}   {:.6}", f64::from(iters) / secs / 1e6);
    println!("frames rx {} tx {}", pump.rx, pump.tx);
    gbps
}
