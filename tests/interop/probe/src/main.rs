//! droce-rxe-probe: the droce transport's RC QP (sans-IO `Device`, no DPDK) as an
//! `ibv_rc_pingpong` peer of Linux rxe, over a raw AF_PACKET socket.
//!
//! usage: droce-rxe-probe IFACE MAC IP PEER_MAC [SERVER_IP] [--ud] [-s SIZE] [-n ITERS] [-p PORT] [-t SECS]
//!   without SERVER_IP: server (listens on TCP PORT, default 18515); with it: client.
//!   --ud: an `ibv_ud_pingpong` peer instead (UD QP, Q_Key 0x11111111, 40-byte GRH area).
//!   --perftest read_lat|atomic_fadd|atomic_cswap|send_lat|write_bw: an `ib_read_lat` /
//!   `ib_send_lat` / `ib_write_bw` / `ib_atomic_lat -A
//!   FETCH_AND_ADD|CMP_AND_SWAP` peer (perftest 4.5 TCP exchange; the client checks that the
//!   atomic results follow the sequence its own operations imply).
//! The TCP exchange is rdma-core's 52-byte "LID:QPN:PSN:GID" message (docs/interop.md (a)).
//! Answers ARP for IP on IFACE; sends RoCE frames to PEER_MAC (the peer's MAC is given, not
//! resolved). Checks every received payload byte (rc_pingpong fills its buffer with 0x7b).
//! Exit 0 after ITERS sends and ITERS receives completed successfully; 1 otherwise.

use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::qp::{PathMtu, QpCap, QpInitAttr, QpType};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::qp::{QpAttr, QpAttrMask, QpState};
use droce_transport::verbs::{AccessFlags, AddressVector, RecvWr, SendOpcode, SendWr, UdDest};
use droce_transport::{Device, DeviceConfig, Gid, Instant, Memory, Psn, QKey, Qpn, VecMemory};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration as StdDuration;

mod perftest;

/// Drives a device over a raw socket (used by the perftest peer).
pub struct Pump {
    sock: RawSock,
    mac: [u8; 6],
    fbuf: Vec<u8>,
    tbuf: Vec<u8>,
    pub rx: u64,
    pub tx: u64,
}

/// Answers ARP requests for `ip` on `iface` from a thread, until the process exits.
pub fn arp_thread(iface: String, mac: [u8; 6], ip: Ipv4Addr) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let s = RawSock::open(&iface);
        let mut b = vec![0u8; 2048];
        loop {
            match s.recv(&mut b) {
                Some(n) => {
                    if let Some(r) = arp_reply(&b[..n], mac, ip) {
                        s.send(&r);
                    }
                }
                None => std::thread::sleep(StdDuration::from_micros(200)),
            }
        }
    })
}

fn die(msg: &str) -> ! {
    eprintln!("droce-rxe-probe: {msg}");
    std::process::exit(1)
}

fn parse_mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s.split(':').filter_map(|b| u8::from_str_radix(b, 16).ok()).collect();
    v.try_into().unwrap_or_else(|_| die(&format!("bad MAC {s}")))
}

/// A raw AF_PACKET socket bound to one interface (non-blocking receive).
pub struct RawSock {
    fd: i32,
    ifindex: i32,
}

impl Drop for RawSock {
    fn drop(&mut self) {
        // SAFETY: fd is our own open socket.
        unsafe { libc::close(self.fd) };
    }
}

impl RawSock {
    pub fn open(iface: &str) -> RawSock {
        let proto = (libc::ETH_P_ALL as u16).to_be() as i32;
        // SAFETY: plain socket/bind calls with checked results and valid local storage.
        unsafe {
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto);
            if fd < 0 {
                die(&format!("socket(AF_PACKET): {}", std::io::Error::last_os_error()));
            }
            let name = std::ffi::CString::new(iface).unwrap();
            let ifindex = libc::if_nametoindex(name.as_ptr()) as i32;
            if ifindex == 0 {
                die(&format!("no interface {iface}"));
            }
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto as u16;
            sll.sll_ifindex = ifindex;
            if libc::bind(fd, &sll as *const _ as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_ll>() as u32) < 0 {
                die(&format!("bind({iface}): {}", std::io::Error::last_os_error()));
            }
            // a large receive buffer: under TCG the probe can fall behind a burst of WRITEs
            let sz: libc::c_int = 8 << 20;
            libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &sz as *const _ as *const libc::c_void, std::mem::size_of::<libc::c_int>() as u32);
            RawSock { fd, ifindex }
        }
    }
    /// One received frame (not our own outgoing ones), or None.
    fn recv(&self, buf: &mut [u8]) -> Option<usize> {
        // SAFETY: buf and sll are valid for the sizes given.
        unsafe {
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            let mut sl = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            let n = libc::recvfrom(self.fd, buf.as_mut_ptr() as *mut _, buf.len(), libc::MSG_DONTWAIT, &mut sll as *mut _ as *mut libc::sockaddr, &mut sl);
            if n <= 0 || sll.sll_pkttype == libc::PACKET_OUTGOING {
                return None;
            }
            Some(n as usize)
        }
    }
    fn send(&self, frame: &[u8]) {
        // SAFETY: frame is valid for its length; sll is a valid address.
        unsafe {
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_ifindex = self.ifindex;
            sll.sll_halen = 6;
            sll.sll_addr[..6].copy_from_slice(&frame[..6]);
            let n = libc::sendto(self.fd, frame.as_ptr() as *const _, frame.len(), 0, &sll as *const _ as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_ll>() as u32);
            if n < 0 {
                eprintln!("droce-rxe-probe: sendto: {}", std::io::Error::last_os_error());
            }
        }
    }
}

/// An ARP reply when `f` is an ARP request for `ip`.
fn arp_reply(f: &[u8], mac: [u8; 6], ip: Ipv4Addr) -> Option<Vec<u8>> {
    if f.len() < 42 || f[12..14] != [0x08, 0x06] || f[20..22] != [0, 1] || f[38..42] != ip.octets() {
        return None;
    }
    let mut r = vec![0u8; 42];
    r[0..6].copy_from_slice(&f[6..12]);
    r[6..12].copy_from_slice(&mac);
    r[12..14].copy_from_slice(&[0x08, 0x06]);
    r[14..20].copy_from_slice(&[0, 1, 0x08, 0, 6, 4]);
    r[20..22].copy_from_slice(&[0, 2]);
    r[22..28].copy_from_slice(&mac);
    r[28..32].copy_from_slice(&ip.octets());
    r[32..42].copy_from_slice(&f[22..32]);
    Some(r)
}

fn gid_hex(g: Gid) -> String {
    g.0.iter().map(|b| format!("{b:02x}")).collect()
}

/// rdma-core's pingpong message: "%04x:%06x:%06x:%s" + NUL = 52 bytes.
fn msg(qpn: Qpn, psn: u32, gid: Gid) -> [u8; 52] {
    let s = format!("{:04x}:{:06x}:{:06x}:{}", 0, qpn.value(), psn, gid_hex(gid));
    let mut m = [0u8; 52];
    m[..51].copy_from_slice(s.as_bytes());
    m
}

fn parse_msg(m: &[u8]) -> (Qpn, u32, Gid) {
    let s = std::str::from_utf8(&m[..51]).unwrap_or_else(|_| die("peer message is not text"));
    let f: Vec<&str> = s.split(':').collect();
    if f.len() != 4 || f[3].len() != 32 {
        die(&format!("bad peer message {s:?}"));
    }
    let qpn = u32::from_str_radix(f[1], 16).unwrap_or_else(|_| die("bad QPN"));
    let psn = u32::from_str_radix(f[2], 16).unwrap_or_else(|_| die("bad PSN"));
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&f[3][2 * i..2 * i + 2], 16).unwrap_or_else(|_| die("bad GID"));
    }
    (Qpn::new(qpn), psn, Gid(g))
}

fn read_exact(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    s.read_exact(&mut b).unwrap_or_else(|e| die(&format!("TCP read of {n} bytes: {e}")));
    b
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut pos, mut size, mut iters, mut port, mut secs, mut ud) = (Vec::new(), 64usize, 100u32, 18515u16, 60u64, false);
    let mut perf: Option<perftest::Test> = None;
    let mut i = 0;
    while i < args.len() {
        let next = |i: usize| args.get(i + 1).unwrap_or_else(|| die("option needs a value")).clone();
        match args[i].as_str() {
            "-s" => { size = next(i).parse().unwrap_or_else(|_| die("bad -s")); i += 1; }
            "-n" => { iters = next(i).parse().unwrap_or_else(|_| die("bad -n")); i += 1; }
            "-p" => { port = next(i).parse().unwrap_or_else(|_| die("bad -p")); i += 1; }
            "--ud" => ud = true,
            "--perftest" => {
                perf = Some(match next(i).as_str() {
                    "read_lat" => perftest::Test::ReadLat,
                    "atomic_fadd" => perftest::Test::FetchAdd,
                    "atomic_cswap" => perftest::Test::CmpSwap,
                    "send_lat" => perftest::Test::SendLat,
                    "write_bw" => perftest::Test::WriteBw,
                    t => die(&format!("unknown --perftest {t}")),
                });
                i += 1;
            }
            "-t" => { secs = next(i).parse().unwrap_or_else(|_| die("bad -t")); i += 1; }
            a => pos.push(a.to_string()),
        }
        i += 1;
    }
    if pos.len() < 4 {
        die("usage: droce-rxe-probe IFACE MAC IP PEER_MAC [SERVER_IP] [-s SIZE] [-n ITERS] [-p PORT] [-t SECS]");
    }
    let (iface, mac, ip, peer_mac) = (&pos[0], parse_mac(&pos[1]), pos[2].parse::<Ipv4Addr>().unwrap_or_else(|_| die("bad IP")), parse_mac(&pos[3]));
    let server: Option<Ipv4Addr> = pos.get(4).map(|s| s.parse().unwrap_or_else(|_| die("bad SERVER_IP")));
    if let Some(t) = perf {
        perftest::run(t, iface, mac, ip, peer_mac, server, size, iters, port, secs);
        return;
    }
    let sock = RawSock::open(iface);
    let my_gid = Gid::from_ipv4(ip);

    // Device: one RC QP, one buffer (send half, receive ring), as rc_pingpong.
    let base = 0x1000_0000u64;
    let rx_depth = 64u32;
    const GRH: usize = 40;
    let grh = if ud { GRH } else { 0 };
    let slot = (size + grh).max(1) as u64;
    let mem_len = (slot * (rx_depth as u64 + 1)) as usize;
    let seed = std::process::id() as u64 ^ 0x5eed;
    let cfg = DeviceConfig { mac, gids: vec![my_gid], seed, ..DeviceConfig::default() };
    let mut dev = Device::new(cfg, VecMemory::new(base, mem_len));
    let pd = dev.alloc_pd();
    let mr = dev.reg_mr(pd, base, mem_len as u64, AccessFlags::ALL).unwrap();
    let cq = dev.create_cq(1024).unwrap();
    let qp = dev
        .create_qp(QpInitAttr { qp_type: if ud { QpType::Ud } else { QpType::Rc }, pd, send_cq: cq, recv_cq: cq, srq: None, cap: QpCap { max_send_wr: 16, max_recv_wr: rx_depth, ..QpCap::default() }, sq_sig_all: true })
        .unwrap_or_else(|e| die(&format!("create_qp: {e:?}")));
    let my_qpn = dev.query_qp(qp).unwrap().qp_num;
    let my_psn = (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as u32 & 0xff_ffff;
    dev.memory_mut().write(base, &vec![0x7b; size]).unwrap();
    const UD_QKEY: QKey = QKey(0x1111_1111);
    if ud {
        let a = QpAttr { qp_state: QpState::Init, pkey_index: 0, port_num: 1, qkey: UD_QKEY, ..QpAttr::default() };
        dev.modify_qp(qp, &a, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY).unwrap_or_else(|e| die(&format!("UD INIT: {e:?}")));
        let a = QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() };
        dev.modify_qp(qp, &a, QpAttrMask::STATE).unwrap_or_else(|e| die(&format!("UD RTR: {e:?}")));
        let a = QpAttr { qp_state: QpState::Rts, sq_psn: Psn::new(my_psn), ..QpAttr::default() };
        dev.modify_qp(qp, &a, QpAttrMask::STATE | QpAttrMask::SQ_PSN).unwrap_or_else(|e| die(&format!("UD RTS: {e:?}")));
    } else {
        let (a, m) = init_attr(AccessFlags::NONE);
        dev.modify_qp(qp, &a, m).unwrap_or_else(|e| die(&format!("INIT: {e:?}")));
    }
    let rx_addr = |k: u64| base + slot * (1 + k % rx_depth as u64);
    let mut posted = 0u64;
    for _ in 0..rx_depth {
        dev.post_recv(qp, RecvWr::new(posted).with_sge(rx_addr(posted), (size + grh) as u32, mr.lkey)).unwrap();
        posted += 1;
    }

    // TCP exchange (rc_pingpong order: client writes, server reads+connects+writes, client writes "done").
    let connect = |dev: &mut Device<VecMemory>, peer_qpn: Qpn, peer_psn: u32, peer_gid: Gid| {
        if ud {
            return; // UD: the address goes into every send (below)
        }
        let av = AddressVector { dgid: peer_gid, dmac: peer_mac, sgid_index: 0, hop_limit: 64, traffic_class: 0, flow_label: 0 };
        let (a, m) = rtr_attr(av, PathMtu::Mtu1024, peer_qpn, Psn::new(peer_psn), 1, 12);
        dev.modify_qp(qp, &a, m).unwrap_or_else(|e| die(&format!("RTR: {e:?}")));
        // ACK timeout 17 (0.54 s, x 7 retries) rather than rc_pingpong's 14 (67 ms): a TCG VM
        // on a loaded host can stall for more than 7 x 67 ms (seen: 0.56 s -> RetryExcErr)
        let (a, m) = rts_attr(Psn::new(my_psn), 17, 7, 7, 1);
        dev.modify_qp(qp, &a, m).unwrap_or_else(|e| die(&format!("RTS: {e:?}")));
    };
    let my_msg = msg(my_qpn, my_psn, my_gid);
    // rxe resolves our MAC (ARP for IP) inside ibv_modify_qp(RTR), i.e. in the middle of the
    // TCP exchange: answer ARP from a second socket while the exchange blocks.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let arp_thread = {
        let (stop, iface) = (stop.clone(), iface.clone());
        std::thread::spawn(move || {
            let s = RawSock::open(&iface);
            let mut b = vec![0u8; 2048];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match s.recv(&mut b) {
                    Some(n) => {
                        if let Some(r) = arp_reply(&b[..n], mac, ip) {
                            s.send(&r);
                        }
                    }
                    None => std::thread::sleep(StdDuration::from_micros(200)),
                }
            }
        })
    };
    let peer = match server {
        Some(srv) => {
            let mut s = TcpStream::connect_timeout(&(srv, port).into(), StdDuration::from_secs(10)).unwrap_or_else(|e| die(&format!("connect {srv}:{port}: {e}")));
            s.write_all(&my_msg).unwrap();
            let p = parse_msg(&read_exact(&mut s, 52));
            s.write_all(b"done\0").unwrap();
            connect(&mut dev, p.0, p.1, p.2);
            p
        }
        None => {
            let l = TcpListener::bind(("0.0.0.0", port)).unwrap_or_else(|e| die(&format!("listen :{port}: {e}")));
            println!("listening on TCP port {port}");
            let (mut s, from) = l.accept().unwrap();
            let p = parse_msg(&read_exact(&mut s, 52));
            connect(&mut dev, p.0, p.1, p.2);
            s.write_all(&my_msg).unwrap();
            let _ = read_exact(&mut s, 5);
            eprintln!("exchange with {from} done");
            p
        }
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    arp_thread.join().unwrap();
    println!("  local address:  QPN 0x{:06x}, PSN 0x{my_psn:06x}, GID {}", my_qpn.value(), my_gid);
    println!("  remote address: QPN 0x{:06x}, PSN 0x{:06x}, GID {}", peer.0.value(), peer.1, peer.2);

    // The ping-pong loop (rc_pingpong's parse_single_wc logic).
    let t0 = std::time::Instant::now();
    let now = || Instant(t0.elapsed().as_nanos() as u64);
    let deadline = t0 + StdDuration::from_secs(secs);
    let (mut scnt, mut rcnt, mut bad_bytes) = (0u32, 0u32, 0u64);
    const SEND: u8 = 1;
    const RECV: u8 = 2;
    let ud_dest = UdDest {
        av: AddressVector { dgid: peer.2, dmac: peer_mac, sgid_index: 0, hop_limit: 64, traffic_class: 0, flow_label: 0 },
        remote_qpn: peer.0,
        remote_qkey: UD_QKEY,
    };
    let post_send = |dev: &mut Device<VecMemory>, n: u32| {
        let wr = SendWr::new(u64::from(n) | 1 << 63, SendOpcode::Send).with_sge(base, size as u32, mr.lkey);
        let wr = if ud { wr.with_ud(ud_dest) } else { wr };
        dev.post_send(qp, wr).unwrap_or_else(|e| die(&format!("post_send: {e:?}")));
    };
    let mut pending = RECV;
    if server.is_some() {
        post_send(&mut dev, 0);
        pending = SEND | RECV;
    }
    let mut fbuf = vec![0u8; 16384];
    let mut tbuf = vec![0u8; dev.max_frame_len()];
    let (mut frames_rx, mut frames_tx) = (0u64, 0u64);
    while scnt < iters || rcnt < iters {
        if std::time::Instant::now() > deadline {
            die(&format!("timeout after {secs} s: {scnt} sends and {rcnt} receives of {iters} completed; frames rx {frames_rx} tx {frames_tx}; counters {:?}", dev.counters()));
        }
        let mut idle = true;
        while let Some(n) = sock.recv(&mut fbuf) {
            idle = false;
            let f = &mut fbuf[..n];
            if let Some(r) = arp_reply(f, mac, ip) {
                sock.send(&r);
            } else if f[..6] == mac {
                frames_rx += 1;
                dev.handle_rx(now(), f);
            }
        }
        if let Some(t) = dev.poll_timeout() {
            if now() >= t {
                dev.handle_timeout(now());
            }
        }
        while let Some(n) = dev.poll_transmit(now(), &mut tbuf) {
            idle = false;
            frames_tx += 1;
            sock.send(&tbuf[..n]);
        }
        while let Some(wc) = dev.poll_cq_one(cq).unwrap() {
            idle = false;
            if wc.status != WcStatus::Success {
                die(&format!("completion {:?} status {:?} (wr_id {:#x}) after {scnt} sends, {rcnt} receives", wc.opcode, wc.status, wc.wr_id));
            }
            match wc.opcode {
                WcOpcode::Send => { scnt += 1; pending &= !SEND; }
                WcOpcode::Recv => {
                    let mut got = vec![0u8; wc.byte_len as usize];
                    dev.memory().read(rx_addr(wc.wr_id), &mut got).unwrap();
                    let data = got.get(grh..).unwrap_or(&[]);
                    bad_bytes += data.iter().filter(|&&b| b != 0x7b).count() as u64 + ((size + grh) as u64).abs_diff(u64::from(wc.byte_len));
                    rcnt += 1;
                    pending &= !RECV;
                    dev.post_recv(qp, RecvWr::new(posted).with_sge(rx_addr(posted), (size + grh) as u32, mr.lkey)).unwrap();
                    posted += 1;
                }
                op => die(&format!("unexpected completion {op:?}")),
            }
            if pending == 0 && scnt < iters {
                post_send(&mut dev, scnt);
                pending = SEND | RECV;
            }
        }
        if idle {
            std::thread::sleep(StdDuration::from_micros(50));
        }
    }
    let secs_taken = t0.elapsed().as_secs_f64();
    println!("{} bytes in {secs_taken:.2} seconds = {:.2} Mbit/sec", size as u64 * iters as u64 * 2, size as f64 * iters as f64 * 2.0 * 8.0 / secs_taken / 1e6);
    println!("{iters} iters in {secs_taken:.2} seconds = {:.2} usec/iter", secs_taken * 1e6 / iters as f64);
    println!("frames rx {frames_rx} tx {frames_tx}; payload bytes not 0x7b: {bad_bytes}");
    // Linger briefly so the last ACK reaches the peer, answering its retransmissions.
    let end = std::time::Instant::now() + StdDuration::from_millis(300);
    while std::time::Instant::now() < end {
        while let Some(n) = sock.recv(&mut fbuf) {
            let f = &mut fbuf[..n];
            if let Some(r) = arp_reply(f, mac, ip) { sock.send(&r); } else if f[..6] == mac { dev.handle_rx(now(), f); }
        }
        if let Some(t) = dev.poll_timeout() { if now() >= t { dev.handle_timeout(now()); } }
        while let Some(n) = dev.poll_transmit(now(), &mut tbuf) { sock.send(&tbuf[..n]); }
        std::thread::sleep(StdDuration::from_micros(200));
    }
    if bad_bytes != 0 {
        die(&format!("{bad_bytes} received payload bytes differ from 0x7b"));
    }
}
