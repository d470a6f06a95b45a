//! Helpers for the RoceDevice tests: a memif server+client pair in one process (the two
//! ends of one wire), buffers, RC/UD bring-up and bounded progress loops.

#![allow(dead_code)]

use droce_dpdk::roce::{RoceConfig, RoceDevice};
use droce_dpdk::*;
use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::qp::{PathMtu, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpState, QpType};
use droce_transport::verbs::{AccessFlags, AddressVector, CqHandle, MemoryRegion, PdHandle, WorkCompletion};
use droce_transport::{Gid, Psn, QKey};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../common.rs"]
mod common;
pub use common::{eal_args, TempDir};

/// A RoceDevice sending zero-copy (`TX_ZERO_COPY_MIN`) on the started port `id` as `ip`
/// with MAC `mac`, `peer` a static neighbour at `peer_mac`, and an RC QP to `peer` (QPN
/// `remote_qpn`, expecting PSN 1, sending from `sq_psn`, path MTU 1024) over resources in `buf`.
/// The net_ring tests read the frames it sends back out of the loopback ring.
#[allow(clippy::too_many_arguments)]
pub fn zero_copy_rc(
    configured: &ConfiguredPort,
    pool: &Arc<Mempool>,
    id: PortId,
    (ip, mac): (std::net::Ipv4Addr, [u8; 6]),
    (peer, peer_mac): (std::net::Ipv4Addr, [u8; 6]),
    remote_qpn: u32,
    sq_psn: u32,
    buf: &mut Buf,
) -> (RoceDevice, Res, QpHandle) {
    let mut cfg = RoceConfig::new(id, QueueId(0));
    cfg.ipv4 = vec![ip];
    cfg.mac = Some(mac);
    cfg.neighbours = vec![(std::net::IpAddr::V4(peer), peer_mac)];
    cfg.tx_zero_copy = Some(droce_dpdk::roce::TX_ZERO_COPY_MIN);
    let mut dev = RoceDevice::new(cfg, configured, pool.clone()).expect("RoceDevice");
    let r = resources(&mut dev, buf);
    let qp = create_qp(&mut dev, &r, QpType::Rc);
    rc_up(&mut dev, qp, 1, Gid::from_ipv4(peer), droce_transport::Qpn::new(remote_qpn), Psn::new(1), Psn::new(sq_psn), PathMtu::Mtu1024);
    (dev, r, qp)
}

/// Stops and closes `port` and checks that no mbuf of `pool` leaked or was freed twice (call
/// after dropping the devices and their buffers), then ends EAL.
pub fn close_checking_pool(port: Port, pool: Arc<Mempool>, eal: Eal) {
    port.stop().unwrap();
    port.close().unwrap();
    assert_pool_whole(&pool);
    drop(pool);
    drop(eal);
}

/// Every mbuf of `pool` is back in it, and only once: none leaked (the in-use count), none
/// freed twice (a double free puts one mbuf in the pool twice, which the count, capped at the
/// pool's size, does not show: taking every mbuf out then gives the same one twice, or one
/// more than the pool has).
pub fn assert_pool_whole(pool: &Mempool) {
    assert_eq!(pool.in_use_count(), 0, "no mbuf leaked");
    let size = pool.size() as usize;
    let mut seen = std::collections::HashSet::new();
    let mut taken = Vec::with_capacity(size + 1);
    while taken.len() <= size {
        let Ok(m) = pool.alloc() else { break };
        assert!(seen.insert(m.as_ptr() as usize), "mbuf {:p} came out of the pool twice: it was freed twice", m.as_ptr());
        taken.push(m);
    }
    assert_eq!(taken.len(), size, "mbufs in the pool");
}

/// Two memif ports wired to each other, configured and started.
pub struct Wire {
    pub pool: Arc<Mempool>,
    pub ports: [Port; 2],
    pub configured: [ConfiguredPort; 2],
    pub tmp: TempDir,
    pub eal: Eal,
}

impl Wire {
    pub fn memif(tag: &str, mtu: Option<u16>) -> Wire {
        let tmp = TempDir::new(tag);
        let sock = tmp.0.join("memif.sock");
        let s = format!("--vdev=net_memif0,role=server,socket={},socket-abstract=no", sock.display());
        let c = format!("--vdev=net_memif1,role=client,socket={},socket-abstract=no", sock.display());
        let eal = Eal::init(&eal_args(&[s.as_str(), c.as_str()])).expect("EAL init with memif");
        let ids = [port_by_name("net_memif0").expect("server"), port_by_name("net_memif1").expect("client")];
        let room = if mtu.unwrap_or(1500) > 1500 { 9216 + 128 } else { MempoolConfig::default().data_room };
        let pool =
            Arc::new(Mempool::create(&format!("{tag}_pool"), &MempoolConfig { n: 8191, data_room: room, ..Default::default() }).unwrap());
        let mut ports = [Port::new(ids[0]).unwrap(), Port::new(ids[1]).unwrap()];
        let mut pc = PortConfig::new();
        if let Some(m) = mtu {
            pc = pc.mtu(m);
        }
        let c0 = ports[0].configure(&pc, &pool).unwrap();
        let c1 = ports[1].configure(&pc, &pool).unwrap();
        for p in &ports {
            p.start().unwrap();
        }
        let t0 = Instant::now();
        while !(ports[0].link().unwrap().up && ports[1].link().unwrap().up) {
            assert!(t0.elapsed() < Duration::from_secs(10), "memif link did not come up");
            std::thread::sleep(Duration::from_millis(10));
        }
        Wire { pool, ports, configured: [c0, c1], tmp, eal }
    }

    pub fn config(&self, i: usize) -> RoceConfig {
        RoceConfig::new(self.ports[i].id(), QueueId(0))
    }

    pub fn device(&self, i: usize, cfg: RoceConfig) -> RoceDevice {
        RoceDevice::new(cfg, &self.configured[i], self.pool.clone()).expect("RoceDevice::new")
    }

    /// Stop and close the ports, then check that no mbuf leaked or was freed twice. Call after
    /// dropping devices.
    pub fn finish(self) {
        let Wire { pool, ports, tmp, eal, .. } = self;
        for p in &ports {
            p.stop().unwrap();
        }
        for p in ports {
            p.close().unwrap();
        }
        assert_pool_whole(&pool);
        drop(pool);
        drop(tmp);
        drop(eal);
    }
}

/// An 8-byte aligned buffer the devices register.
pub struct Buf(pub Vec<u64>);

impl Buf {
    pub fn new(bytes: usize) -> Buf {
        Buf(vec![0u64; bytes.div_ceil(8)])
    }
    pub fn addr(&mut self) -> u64 {
        self.0.as_mut_ptr() as u64
    }
    pub fn len(&self) -> usize {
        self.0.len() * 8
    }
}

/// PD, one MR over `buf`, a CQ.
pub struct Res {
    pub pd: PdHandle,
    pub mr: MemoryRegion,
    pub cq: CqHandle,
    pub base: u64,
}

pub fn resources(dev: &mut RoceDevice, buf: &mut Buf) -> Res {
    let pd = dev.device_mut().alloc_pd();
    let base = buf.addr();
    // SAFETY: every test keeps `buf` alive until the device is dropped and reads it only
    // through the device after completions.
    #[allow(unsafe_code)]
    let mr = unsafe { dev.reg_mr(pd, base as *mut u8, buf.len(), AccessFlags::ALL) }.expect("reg_mr");
    let cq = dev.device_mut().create_cq(4096).expect("cq");
    Res { pd, mr, cq, base }
}

pub fn create_qp(dev: &mut RoceDevice, r: &Res, t: QpType) -> QpHandle {
    let cap = QpCap { max_send_wr: 1024, max_recv_wr: 1024, ..QpCap::default() };
    dev.device_mut()
        .create_qp(QpInitAttr { qp_type: t, pd: r.pd, send_cq: r.cq, recv_cq: r.cq, srq: None, cap, sq_sig_all: false })
        .expect("create_qp")
}

pub fn qpn(dev: &RoceDevice, qp: QpHandle) -> droce_transport::Qpn {
    dev.device().query_qp(qp).unwrap().qp_num
}

/// RESET → INIT → RTR → RTS like ibv_rc_pingpong, to `peer_gid`/`peer_qpn` from our GID `sgid`.
#[allow(clippy::too_many_arguments)]
pub fn rc_up(
    dev: &mut RoceDevice,
    qp: QpHandle,
    sgid: u8,
    peer_gid: Gid,
    peer_qpn: droce_transport::Qpn,
    rq_psn: Psn,
    sq_psn: Psn,
    mtu: PathMtu,
) {
    let av: AddressVector = dev.av(peer_gid, sgid);
    let d = dev.device_mut();
    let (a, m) = init_attr(AccessFlags::ALL);
    d.modify_qp(qp, &a, m).expect("INIT");
    let (a, m) = rtr_attr(av, mtu, peer_qpn, rq_psn, 16, 1);
    d.modify_qp(qp, &a, m).expect("RTR");
    let (a, m) = rts_attr(sq_psn, 8, 7, 7, 16);
    d.modify_qp(qp, &a, m).expect("RTS");
}

pub fn ud_up(dev: &mut RoceDevice, qp: QpHandle, qkey: QKey) {
    let d = dev.device_mut();
    let a = QpAttr { qp_state: QpState::Init, pkey_index: 0, port_num: 1, qkey, ..QpAttr::default() };
    d.modify_qp(qp, &a, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY).expect("UD INIT");
    let a = QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() };
    d.modify_qp(qp, &a, QpAttrMask::STATE).expect("UD RTR");
    let a = QpAttr { qp_state: QpState::Rts, sq_psn: Psn::new(0x2849f1), ..QpAttr::default() };
    d.modify_qp(qp, &a, QpAttrMask::STATE | QpAttrMask::SQ_PSN).expect("UD RTS");
}

/// Poll both devices (manual progress) until `which` (0 = a) has a completion on `cq`.
pub fn wait_wc(a: &mut RoceDevice, b: &mut RoceDevice, which: usize, cq: CqHandle, timeout: Duration) -> WorkCompletion {
    let t0 = Instant::now();
    loop {
        a.poll();
        b.poll();
        let d = if which == 0 { &mut *a } else { &mut *b };
        if let Some(wc) = d.device_mut().poll_cq_one(cq).expect("poll_cq") {
            return wc;
        }
        assert!(t0.elapsed() < timeout, "no completion on device {which} within {timeout:?}");
    }
}

/// Poll both devices for `d`.
pub fn pump(a: &mut RoceDevice, b: &mut RoceDevice, d: Duration) {
    let t0 = Instant::now();
    while t0.elapsed() < d {
        a.poll();
        b.poll();
    }
}

pub fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed).wrapping_add((i >> 8) as u8)).collect()
}

pub fn read(dev: &RoceDevice, addr: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    dev.read_mem(addr, &mut v).expect("read_mem");
    v
}

/// tshark's frame count of a pcap, or None (with a message) when tshark is not installed.
pub fn tshark_count(path: &std::path::Path) -> Option<usize> {
    let out = match std::process::Command::new("tshark").arg("-r").arg(path).arg("-T").arg("fields").arg("-e").arg("frame.number").output()
    {
        Ok(o) => o,
        Err(_) => {
            eprintln!("tshark not installed: skipping the tshark check");
            return None;
        }
    };
    assert!(out.status.success(), "tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count())
}
