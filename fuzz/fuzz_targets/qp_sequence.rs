//! Arbitrary packet sequences into a device with a connected RC QP and a UD QP, mixed with
//! timer expiries, transmission, posts and state changes: the device must never panic, and
//! every frame it transmits must parse as a valid RoCEv2 frame.
#![no_main]

mod common;

use arbitrary::{Result, Unstructured};
use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::qp::{
    PathMtu, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpState, QpType,
};
use droce_transport::verbs::*;
use droce_transport::wire::*;
use droce_transport::*;
use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;

const BASE: u64 = 0x1000_0000;
const MEM: usize = 1 << 16;
const OWN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const PEER_QPN: u32 = 0x99;
const RQ_PSN: u32 = 0x200;
const SQ_PSN: u32 = 0xfffff0; // wraps soon

struct World {
    dev: Device<VecMemory>,
    rc: QpHandle,
    ud: QpHandle,
    mr: MemoryRegion,
    own: Gid,
    peer: Gid,
    now: u64,
    buf: Vec<u8>,
}

fn setup(u: &mut Unstructured) -> Result<World> {
    let own = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1));
    let peer = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 2));
    let cfg = DeviceConfig {
        mac: OWN_MAC,
        gids: vec![own],
        seed: 1,
        ..DeviceConfig::default()
    };
    let mut dev = Device::new(cfg, VecMemory::new(BASE, MEM));
    let pd = dev.alloc_pd();
    let mr = dev.reg_mr(pd, BASE, MEM as u64, AccessFlags::ALL).unwrap();
    let cq = dev.create_cq(u.int_in_range(1..=64)?).unwrap();
    let srq = if u.arbitrary()? {
        Some(dev.create_srq(pd, 8, 2).unwrap())
    } else {
        None
    };
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        ..QpCap::default()
    };
    let rc = dev
        .create_qp(QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq,
            cap,
            sq_sig_all: u.arbitrary()?,
        })
        .unwrap();
    let ud = dev
        .create_qp(QpInitAttr {
            qp_type: QpType::Ud,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            sq_sig_all: false,
        })
        .unwrap();
    let av = AddressVector {
        dgid: peer,
        dmac: PEER_MAC,
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    };
    let (a, m) = init_attr(AccessFlags::ALL);
    dev.modify_qp(rc, &a, m).unwrap();
    let (a, m) = rtr_attr(
        av,
        PathMtu::Mtu256,
        Qpn::new(PEER_QPN),
        Psn::new(RQ_PSN),
        u.int_in_range(0..=4)?,
        u.int_in_range(0..=31)?,
    );
    dev.modify_qp(rc, &a, m).unwrap();
    let (a, m) = rts_attr(
        Psn::new(SQ_PSN),
        u.int_in_range(0..=3)?,
        u.int_in_range(0..=7)?,
        u.int_in_range(0..=7)?,
        u.int_in_range(0..=4)?,
    );
    dev.modify_qp(rc, &a, m).unwrap();
    let a = QpAttr {
        qp_state: QpState::Init,
        qkey: QKey(0x1111),
        ..QpAttr::default()
    };
    dev.modify_qp(
        ud,
        &a,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
    )
    .unwrap();
    dev.modify_qp(
        ud,
        &QpAttr {
            qp_state: QpState::Rtr,
            ..QpAttr::default()
        },
        QpAttrMask::STATE,
    )
    .unwrap();
    dev.modify_qp(
        ud,
        &QpAttr {
            qp_state: QpState::Rts,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::SQ_PSN,
    )
    .unwrap();
    let buf = vec![0u8; dev.max_frame_len()];
    Ok(World {
        dev,
        rc,
        ud,
        mr,
        own,
        peer,
        now: 0,
        buf,
    })
}

fn small_va(u: &mut Unstructured, _w: &World) -> Result<u64> {
    Ok(if u.ratio(7, 8)? {
        BASE + u.int_in_range(0..=MEM as u64 + 64)?
    } else {
        u.arbitrary()?
    })
}

fn packet(u: &mut Unstructured, w: &mut World) -> Result<()> {
    let opcode = *u.choose(Opcode::ALL)?;
    let psn = match u.int_in_range(0..=3)? {
        0 => RQ_PSN.wrapping_add(u.int_in_range(0..=40)?),
        1 => SQ_PSN.wrapping_add(u.int_in_range(0..=40)?),
        2 => RQ_PSN.wrapping_sub(u.int_in_range(0..=8)?),
        _ => u.arbitrary()?,
    };
    let dest_qp = match u.int_in_range(0..=3)? {
        0 | 1 => w
            .dev
            .query_qp(w.rc)
            .map(|i| i.qp_num)
            .unwrap_or(Qpn::new(0)),
        2 => w
            .dev
            .query_qp(w.ud)
            .map(|i| i.qp_num)
            .unwrap_or(Qpn::new(0)),
        _ => Qpn::new(u.arbitrary()?),
    };
    let rkey = if u.ratio(7, 8)? {
        w.mr.rkey
    } else {
        Rkey(u.arbitrary()?)
    };
    let eth = EthernetRepr {
        src_addr: EthernetAddress(PEER_MAC),
        dst_addr: EthernetAddress(OWN_MAC),
        ethertype: EtherType::Ipv4,
    };
    let ip = IpRepr::from_gids(w.peer, w.own, 0, 64, 0).unwrap();
    let bth = BthRepr {
        opcode,
        solicited: u.arbitrary()?,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: PKey::DEFAULT,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: u.arbitrary()?,
        psn: Psn::new(psn),
    };
    let mut r = RoceRepr::new(
        eth,
        ip,
        UdpRepr {
            src_port: 0xc000,
            dst_port: ROCE_V2_PORT,
        },
        bth,
    );
    let info = opcode.info();
    if info.has_reth() {
        let len = if u.ratio(3, 4)? {
            u.int_in_range(0..=2048)?
        } else {
            u.arbitrary()?
        };
        r.ext.reth = Some(RethRepr {
            va: small_va(u, w)?,
            rkey,
            len,
        });
    }
    if info.has_aeth() {
        let syndrome =
            AethSyndrome::from_u8(u.arbitrary()?).unwrap_or(AethSyndrome::Ack { credits: 31 });
        r.ext.aeth = Some(AethRepr {
            syndrome,
            msn: Msn::new(u.arbitrary()?),
        });
    }
    if info.has_deth() {
        let qkey = if u.arbitrary()? {
            QKey(0x1111)
        } else {
            QKey(u.arbitrary()?)
        };
        r.ext.deth = Some(DethRepr {
            qkey,
            src_qp: Qpn::new(u.arbitrary()?),
        });
    }
    if info.has_atomic_eth() {
        r.ext.atomic = Some(AtomicEthRepr {
            va: small_va(u, w)? & !if u.arbitrary()? { 7 } else { 0 },
            rkey,
            swap_add: u.arbitrary()?,
            compare: u.arbitrary()?,
        });
    }
    if info.has_atomic_ack_eth() {
        r.ext.atomic_ack = Some(AtomicAckEthRepr {
            orig: u.arbitrary()?,
        });
    }
    if info.has_immdt() {
        r.ext.immdt = Some(u.arbitrary()?);
    }
    if info.has_ieth() {
        r.ext.ieth = Some(Rkey(u.arbitrary()?));
    }
    let plen = if info.has_payload() {
        u.int_in_range(0..=300usize)?
    } else {
        0
    };
    let payload = vec![0xa5u8; plen];
    let mut frame = vec![0u8; r.frame_len(plen)];
    r.emit(&payload, &mut frame);
    if u.ratio(1, 16)? {
        // corrupt it: ICRC must catch it (or the outer headers reject it)
        let i = u.choose_index(frame.len())?;
        frame[i] ^= 1 << u.int_in_range(0..=7)?;
    }
    w.dev.handle_rx(Instant(w.now), &mut frame);
    Ok(())
}

fn post(u: &mut Unstructured, w: &mut World) -> Result<()> {
    let lk = if u.ratio(7, 8)? {
        w.mr.lkey
    } else {
        Lkey(u.arbitrary()?)
    };
    let addr = small_va(u, w)?;
    let len: u32 = u.int_in_range(0..=1500)?;
    if u.arbitrary()? {
        let q = if u.arbitrary()? { w.rc } else { w.ud };
        let _ = w
            .dev
            .post_recv(q, RecvWr::new(u.arbitrary()?).with_sge(addr, len, lk));
        return Ok(());
    }
    let ops = [
        SendOpcode::Send,
        SendOpcode::SendImm,
        SendOpcode::SendInv,
        SendOpcode::Write,
        SendOpcode::WriteImm,
        SendOpcode::Read,
        SendOpcode::CmpSwap,
        SendOpcode::FetchAdd,
    ];
    let op = *u.choose(&ops)?;
    let flags = SendFlags(u.int_in_range(0..=15)?);
    let mut wr = SendWr::new(u.arbitrary()?, op)
        .with_sge(addr, if op.is_atomic() { 8 } else { len }, lk)
        .with_flags(flags);
    wr = wr
        .with_remote(small_va(u, w)?, Rkey(u.arbitrary()?))
        .with_atomic(u.arbitrary()?, u.arbitrary()?);
    let q = if u.ratio(3, 4)? { w.rc } else { w.ud };
    if q == w.ud {
        let av = AddressVector {
            dgid: w.peer,
            dmac: PEER_MAC,
            ..Default::default()
        };
        wr = wr.with_ud(UdDest {
            av,
            remote_qpn: Qpn::new(u.arbitrary()?),
            remote_qkey: QKey(u.arbitrary()?),
        });
    }
    let _ = w.dev.post_send(q, wr);
    Ok(())
}

fn transmit(u: &mut Unstructured, w: &mut World) -> Result<()> {
    let n = u.int_in_range(1..=64)?;
    for _ in 0..n {
        let Some(len) = w.dev.poll_transmit(Instant(w.now), &mut w.buf) else {
            break;
        };
        // Everything we send must be a well-formed RoCEv2 frame with a valid ICRC.
        assert!(
            RoceRepr::parse(&w.buf[..len]).is_ok(),
            "device emitted an unparsable frame"
        );
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
        match u.int_in_range(0..=9)? {
            0 => {
                let n = u.int_in_range(0..=1600)?;
                let mut raw = u.bytes(n.min(u.len()))?.to_vec();
                w.dev.handle_rx(Instant(w.now), &mut raw);
            }
            1..=4 => packet(&mut u, &mut w)?,
            5 => {
                let jump = common::clock_jump(&mut u, w.now, || w.dev.poll_timeout().map(|t| t.0), 2_000_000)?;
                w.now = w.now.saturating_add(jump);
                w.dev.handle_timeout(Instant(w.now));
            }
            6 => transmit(&mut u, &mut w)?,
            7 => post(&mut u, &mut w)?,
            8 => {
                let q = if u.arbitrary()? { w.rc } else { w.ud };
                let states = QpState::ALL;
                let a = QpAttr {
                    qp_state: *u.choose(&states)?,
                    sq_psn: Psn::new(u.arbitrary()?),
                    qkey: QKey(u.arbitrary()?),
                    ..QpAttr::default()
                };
                let _ = w
                    .dev
                    .modify_qp(q, &a, QpAttrMask(u.arbitrary::<u32>()? & 0x1f_ffff));
            }
            _ => {
                let cq = droce_transport::verbs::CqHandle(0);
                let mut out = [WorkCompletion {
                    wr_id: 0,
                    status: droce_transport::status::WcStatus::Success,
                    opcode: droce_transport::status::WcOpcode::Send,
                    byte_len: 0,
                    imm_data: 0,
                    qp_num: Qpn::new(0),
                    src_qp: Qpn::new(0),
                    wc_flags: WcFlags::default(),
                    pkey_index: 0,
                }; 8];
                let _ = w.dev.poll_cq(cq, &mut out);
                while w.dev.poll_event().is_some() {}
            }
        }
    }
    transmit(&mut u, &mut w).ok();
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
