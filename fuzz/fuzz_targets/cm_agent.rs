//! The GSI agent (`cm::agent`) on one device, driven by up to 256 arbitrary steps: CM MADs
//! from a peer (arbitrary bodies behind a CM header, raw bytes, or the agent's own MADs
//! replayed with flipped bits) delivered to QP1 as UD SENDs, API calls (connect, accept,
//! reject, disconnect, listen, SIDR), time jumps and polls. The agent must never panic,
//! every frame the device sends must parse as RoCEv2, and every frame to QP1 must carry a
//! CM MAD that parses.
#![no_main]

mod common;

use arbitrary::{Result, Unstructured};
use droce_transport::cm::agent::{CmAgent, CmAgentConfig, CmAgentEvent, ConnId, ConnectParams, MAD_BUFFER_LEN};
use droce_transport::cm::{CmMad, GSI_QKEY, GSI_QPN, MAD_SIZE};
use droce_transport::qp::{QpCap, QpHandle, QpInitAttr, QpType};
use droce_transport::verbs::*;
use droce_transport::wire::*;
use droce_transport::*;
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

const BASE: u64 = 0x1000_0000;
const MEM: usize = 1 << 17;
const OWN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const PORT: u16 = 7471;
/// CM attributes the agent has layouts for, and two it has not.
const ATTRS: [u16; 13] = [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x01, 0xff];

struct World {
    dev: Device<VecMemory>,
    agent: CmAgent,
    pd: PdHandle,
    cq: CqHandle,
    own: Gid,
    peer: Gid,
    now: u64,
    buf: Vec<u8>,
    /// Connection ids the agent reported, for accept/reject/disconnect.
    ids: Vec<ConnId>,
    /// MADs the agent sent, for replay.
    sent: Vec<[u8; MAD_SIZE]>,
}

fn setup(u: &mut Unstructured) -> Result<World> {
    let own = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1));
    let peer = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 2));
    let cfg = DeviceConfig { mac: OWN_MAC, gids: vec![own], seed: 1, ..DeviceConfig::default() };
    let mut dev = Device::new(cfg, VecMemory::new(BASE, MEM));
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(256).unwrap();
    let mut acfg = CmAgentConfig { seed: u.arbitrary()?, min_rnr_timer: 1, ..CmAgentConfig::default() };
    if u.arbitrary()? {
        acfg.cm_response_timeout = Some(u.int_in_range(0..=31)?);
        acfg.max_cm_retries = Some(u.int_in_range(0..=15)?);
    }
    let mut agent = CmAgent::new(&mut dev, acfg, BASE + (MEM - MAD_BUFFER_LEN) as u64).unwrap();
    agent.listen(PORT);
    agent.sidr_register(PORT, Qpn::new(0x42), QKey(0x1111));
    let buf = vec![0u8; dev.max_frame_len()];
    Ok(World { dev, agent, pd, cq, own, peer, now: 0, buf, ids: Vec::new(), sent: Vec::new() })
}

fn rc_qp(w: &mut World) -> Option<QpHandle> {
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, ..QpCap::default() };
    w.dev.create_qp(QpInitAttr { qp_type: QpType::Rc, pd: w.pd, send_cq: w.cq, recv_cq: w.cq, srq: None, cap, sq_sig_all: false }).ok()
}

/// 256 bytes for QP1: a CM header with an arbitrary body, raw bytes, or a replayed MAD.
fn mad_bytes(u: &mut Unstructured, w: &World) -> Result<[u8; MAD_SIZE]> {
    let mut m = [0u8; MAD_SIZE];
    u.fill_buffer(&mut m)?;
    match u.int_in_range(0..=3)? {
        0 => {}
        1 if !w.sent.is_empty() => {
            m = *u.choose(&w.sent)?;
            for _ in 0..u.int_in_range(0..=4)? {
                let i = u.choose_index(MAD_SIZE)?;
                m[i] ^= 1 << u.int_in_range(0..=7)?;
            }
        }
        _ => {
            // base version 1, class CM, class version 2, method Send, status 0
            m[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
            m[4..6].fill(0);
            m[16..18].copy_from_slice(&u.choose(&ATTRS)?.to_be_bytes());
        }
    }
    Ok(m)
}

fn deliver(u: &mut Unstructured, w: &mut World) -> Result<()> {
    let mad = mad_bytes(u, w)?;
    let eth = EthernetRepr { src_addr: EthernetAddress(PEER_MAC), dst_addr: EthernetAddress(OWN_MAC), ethertype: EtherType::Ipv4 };
    let ip = IpRepr::from_gids(w.peer, w.own, 0, 64, 0).unwrap();
    let bth = BthRepr {
        opcode: Opcode::UdSendOnly,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: PKey::DEFAULT,
        fecn: false,
        becn: false,
        dest_qp: Qpn::new(GSI_QPN),
        ack_req: false,
        psn: Psn::new(u.arbitrary()?),
    };
    let mut r = RoceRepr::new(eth, ip, UdpRepr { src_port: 0xc000, dst_port: ROCE_V2_PORT }, bth);
    let src_qp = if u.ratio(7, 8)? { GSI_QPN } else { u.arbitrary()? };
    r.ext.deth = Some(DethRepr { qkey: QKey(GSI_QKEY), src_qp: Qpn::new(src_qp) });
    let len = if u.ratio(7, 8)? { MAD_SIZE } else { u.int_in_range(0..=MAD_SIZE)? };
    let mut frame = vec![0u8; r.frame_len(len)];
    r.emit(&mad[..len], &mut frame);
    w.dev.handle_rx(Instant(w.now), &mut frame);
    Ok(())
}

fn transmit(w: &mut World) {
    for _ in 0..256 {
        let Some(len) = w.dev.poll_transmit(Instant(w.now), &mut w.buf) else { break };
        let mut f = w.buf[..len].to_vec();
        let (repr, range) = RoceRepr::parse_in_place(&mut f).expect("device emitted an unparsable frame");
        if repr.bth.dest_qp == Qpn::new(GSI_QPN) {
            let payload = &f[range];
            assert!(CmMad::parse(payload).is_ok(), "agent sent a MAD that does not parse");
            if w.sent.len() < 64 {
                let mut m = [0u8; MAD_SIZE];
                m.copy_from_slice(&payload[..MAD_SIZE]);
                w.sent.push(m);
            }
        }
    }
}

fn poll(w: &mut World) {
    w.agent.poll(&mut w.dev, Instant(w.now));
    while let Some(e) = w.agent.poll_event() {
        if let CmAgentEvent::ConnectRequest { id, .. } | CmAgentEvent::Established { id, .. } = e {
            if w.ids.len() < 64 {
                w.ids.push(id);
            }
        }
    }
    while w.agent.poll_sidr_event().is_some() {}
    while w.dev.poll_cq_one(w.cq).ok().flatten().is_some() {}
}

fn call(u: &mut Unstructured, w: &mut World) -> Result<()> {
    let now = Instant(w.now);
    let id = if !w.ids.is_empty() && u.ratio(3, 4)? { *u.choose(&w.ids)? } else { ConnId(u.int_in_range(0..=8)?) };
    let p = ConnectParams {
        private_data: vec![0x5a; u.int_in_range(0..=200)?],
        responder_resources: u.arbitrary()?,
        initiator_depth: u.arbitrary()?,
        retry_count: u.int_in_range(0..=7)?,
        rnr_retry_count: u.int_in_range(0..=7)?,
        selective_repeat: u.arbitrary()?,
    };
    let dst = SocketAddr::new(if u.ratio(7, 8)? { IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)) } else { IpAddr::V6("fd00::2".parse().unwrap()) }, PORT);
    match u.int_in_range(0..=6)? {
        0 => {
            if let Some(qp) = rc_qp(w) {
                let _ = w.agent.connect(&mut w.dev, now, dst, qp, &p);
            }
        }
        1 => {
            if let Some(qp) = rc_qp(w) {
                let _ = w.agent.accept(&mut w.dev, now, id, qp, &p);
            }
        }
        2 => {
            let _ = w.agent.reject(id, &p.private_data);
        }
        3 => {
            let _ = w.agent.disconnect(&mut w.dev, now, id);
        }
        4 => {
            let _ = w.agent.sidr_resolve(&mut w.dev, now, dst);
        }
        5 => {
            let _ = w.agent.listen(u.arbitrary()?);
        }
        _ => w.agent.unlisten_service(droce_transport::cm::rdma_cm::service_id(droce_transport::cm::rdma_cm::PortSpace::TCP, PORT)),
    }
    Ok(())
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let mut w = setup(&mut u)?;
    for _ in 0..256 {
        if u.is_empty() {
            break;
        }
        match u.int_in_range(0..=7)? {
            0..=2 => deliver(&mut u, &mut w)?,
            3 => {
                let jump = common::clock_jump(&mut u, w.now, || w.agent.poll_timeout().map(|t| t.0), 5_000_000_000)?;
                w.now = w.now.saturating_add(jump);
                w.dev.handle_timeout(Instant(w.now));
            }
            4 => transmit(&mut w),
            5 => call(&mut u, &mut w)?,
            _ => poll(&mut w),
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
