//! ibv_rc_pingpong / ibv_ud_pingpong compatible tests (docs/interop.md (a)).

use super::dev::{check_wc, verb, Buffer, Ctrl, Dev, Rng, Setup, Stall, R};
use super::exchange::{PpMsg, DONE, PP_MSG_LEN};
use super::opts::{Opts, Progress};
use super::perf::{DEF_QKEY, GRH};
use super::report::{check_pattern, fill_pattern};
use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::qp::{PathMtu, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType};
use droce_transport::status::WcOpcode;
use droce_transport::verbs::{AccessFlags, RecvWr, SendOpcode, SendWr, UdDest};
use droce_transport::{Gid, Psn, QKey, Qpn};
use std::time::Instant;

const SEND: u8 = 1;
const RECV: u8 = 2;

pub fn run(setup: &mut Setup, o: &Opts) -> R<()> {
    let client = !o.is_server();
    let side = if client { "client" } else { "server" };
    let ud = o.ud;
    let dev = setup.dev.manual()?;
    let dev_mtu = dev.path_mtu().bytes();
    let mtu = o.mtu.unwrap_or(1024).min(dev_mtu);
    if ud && o.size > dev_mtu as u64 {
        return Err(format!("-s {}: a UD message must fit the port's MTU ({dev_mtu})", o.size));
    }
    let gid = Gid::from_ipv4(o.roce_ip());
    let sgid = dev.gid_index(&gid).ok_or("own GID missing")?;
    let size = o.size;
    let rx_depth = o.rx_depth.unwrap_or(500).max(2) as u64;
    let grh = if ud { GRH } else { 0 };
    let slot = (size + grh).max(64).next_multiple_of(64);
    // slot 0: receives (every receive uses it: strict ping-pong), slot 1: the send source
    let buf: &'static mut Buffer = Box::leak(Box::new(Buffer::new(2 * slot)?));
    let pd = dev.alloc_pd();
    let mr = buf.register(dev, pd)?;
    let (rbuf, sbuf) = (mr.va, mr.va + slot);
    let cq = verb("create_cq", dev.create_cq(rx_depth as usize + 16))?;
    let cap = QpCap { max_send_wr: 1, max_recv_wr: rx_depth as u32, ..QpCap::default() };
    let qp = verb(
        "create_qp",
        dev.create_qp(QpInitAttr {
            qp_type: if ud { QpType::Ud } else { QpType::Rc },
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            sq_sig_all: false,
        }),
    )?;
    let qpn = verb("query_qp", dev.query_qp(qp))?.qp_num.value();
    let psn = Rng::new().psn();
    if ud {
        let d = &mut *dev;
        let a = QpAttr { qp_state: QpState::Init, pkey_index: 0, port_num: 1, qkey: QKey(DEF_QKEY), ..QpAttr::default() };
        verb("modify_qp INIT", d.modify_qp(qp, &a, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY))?;
        let a = QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() };
        verb("modify_qp RTR", d.modify_qp(qp, &a, QpAttrMask::STATE))?;
        let a = QpAttr { qp_state: QpState::Rts, sq_psn: Psn::new(psn), ..QpAttr::default() };
        verb("modify_qp RTS", d.modify_qp(qp, &a, QpAttrMask::STATE | QpAttrMask::SQ_PSN))?;
    } else {
        let (a, m) = init_attr(AccessFlags::ALL);
        verb("modify_qp INIT", dev.modify_qp(qp, &a, m))?;
    }
    let dv = &mut setup.dev;
    if !o.verify {
        dv.write_mem(sbuf + grh, &vec![0x7bu8; size as usize])?;
    }
    let recv = |dv: &mut Dev| dv.post_recv(qp, RecvWr::new(RECV as u64).with_sge(rbuf, (size + grh) as u32, mr.lkey));
    for _ in 0..rx_depth {
        recv(dv)?;
    }
    let me = PpMsg { lid: 0, qpn, psn, gid };
    println!("  local address:  LID 0x0000, QPN {qpn:#08x}, PSN {psn:#08x}, GID {}", gid.to_ipv6());
    let connect = |dv: &mut Dev, peer: &PpMsg| -> R<Option<UdDest>> {
        if peer.gid == Gid::ZERO {
            return Err("the peer sent a zero GID: on RoCE run ibv_*_pingpong with -g 1".into());
        }
        let d = dv.manual()?;
        let mut av = d.av(peer.gid, sgid);
        if ud {
            av.hop_limit = 64;
            // as ibv_create_ah: the peer's MAC known before the first datagram
            d.resolve_av(&av, o.timeout).map_err(|e| format!("UD address of the peer: {e}"))?;
            return Ok(Some(UdDest { av, remote_qpn: Qpn::new(peer.qpn), remote_qkey: QKey(DEF_QKEY) }));
        }
        av.hop_limit = 1;
        let mtu = PathMtu::from_bytes(mtu).ok_or("bad MTU")?;
        let (a, m) = rtr_attr(av, mtu, Qpn::new(peer.qpn), Psn::new(peer.psn), 1, 12);
        verb("modify_qp RTR", d.modify_qp(qp, &a, m))?;
        let (a, m) = rts_attr(Psn::new(psn), o.qp_timeout, 7, 7, 1);
        verb("modify_qp RTS", d.modify_qp(qp, &a, m))?;
        Ok(None)
    };
    let (peer, dest) = if let Some(s) = &o.server {
        let mut c = Ctrl::connect(s, o.tcp_port, o.timeout, dv)?;
        c.write(&me.encode(), dv)?;
        let m = c.read(PP_MSG_LEN, dv, "the server's address")?;
        let peer = PpMsg::decode(&m)?;
        c.write(DONE, dv)?;
        drop(c);
        let d = connect(dv, &peer)?;
        (peer, d)
    } else {
        let mut c = Ctrl::accept(o.tcp_port, o.timeout, dv)?;
        let m = c.read(PP_MSG_LEN, dv, "the client's address")?;
        let peer = PpMsg::decode(&m)?;
        let d = connect(dv, &peer)?;
        c.write(&me.encode(), dv)?;
        c.read(DONE.len(), dv, "\"done\"")?;
        (peer, d)
    };
    println!("  remote address: LID 0x0000, QPN {:#08x}, PSN {:#08x}, GID {}", peer.qpn, peer.psn, peer.gid.to_ipv6());
    if o.progress == Progress::Thread {
        dv.start_thread()?;
    }

    let iters = o.iters;
    let (mut scnt, mut rcnt, mut routs) = (0u64, 0u64, rx_depth);
    let post_send = |dv: &mut Dev, i: u64| -> R<()> {
        if o.verify {
            let mut p = vec![0u8; size as usize];
            fill_pattern(&mut p, 0, i);
            dv.write_mem(sbuf + grh, &p)?;
        }
        let mut w = SendWr::new(SEND as u64, SendOpcode::Send).with_sge(sbuf + grh, size as u32, mr.lkey);
        if let Some(d) = dest {
            w = w.with_ud(d);
        }
        dv.post_send(qp, w)
    };
    let mut pending = RECV;
    let start = Instant::now();
    if client {
        post_send(dv, 0)?;
        pending |= SEND;
    }
    let mut last = Stall::new(o.timeout);
    let mut rbytes = vec![0u8; size as usize];
    while rcnt < iters || scnt < iters {
        if dv.progress() {
            last.reset();
        }
        while let Some(wc) = dv.poll_cq(cq)? {
            last.reset();
            if let Err(e) = check_wc(side, &wc) {
                return Err(format!("Failed status {} for wr_id {} ({e})", super::report::status_name(wc.status), wc.wr_id));
            }
            match wc.opcode {
                WcOpcode::Recv => {
                    if o.verify {
                        dv.read_mem(rbuf + grh, &mut rbytes)?;
                        if let Some(off) = check_pattern(&rbytes, 0, rcnt) {
                            return Err(format!("verify failed at {side}: message {rcnt} byte {off}"));
                        }
                    }
                    rcnt += 1;
                    routs -= 1;
                    if routs <= 1 {
                        while routs < rx_depth {
                            recv(dv)?;
                            routs += 1;
                        }
                    }
                    pending &= !RECV;
                }
                _ => {
                    scnt += 1;
                    pending &= !SEND;
                }
            }
            if pending == 0 && scnt < iters {
                post_send(dv, scnt)?;
                pending = RECV | SEND;
            }
        }
        if last.expired() {
            return Err(format!("timed out after {:?} at {side}: {scnt} sent, {rcnt} received{}", o.timeout, dv.stall_cause()));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = size * iters * 2;
    println!("{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec", bytes as f64 * 8.0 / secs / 1e6);
    println!("{iters} iters in {secs:.2} seconds = {:.2} usec/iter", secs * 1e6 / iters as f64);
    if o.verify {
        println!("Data check: every byte of {rcnt} received messages verified");
    }
    linger(dv, o.qp_timeout);
    Ok(())
}

/// ibv_rc_pingpong exits as soon as its own counts are reached, and the peer's last SEND is
/// complete only once our ACK for it arrives. If that ACK is lost the peer retransmits after
/// its ACK timeout, and nobody would answer: RETRY_EXC_ERR at the peer after a test that
/// succeeded here (seen in the loss test: 1 in 6 runs with 2% drops). So keep answering until
/// the wire has been quiet for two ACK timeouts (4.096 us x 2^timeout; at least 100 ms, at
/// most 3 s in all).
fn linger(dv: &mut Dev, qp_timeout: u8) {
    use std::time::Duration;
    let ack = Duration::from_nanos(4096u64 << qp_timeout.min(31));
    let quiet = (ack * 2).max(Duration::from_millis(100));
    let cap = Instant::now() + Duration::from_secs(3);
    let mut last = Instant::now();
    loop {
        let now = Instant::now();
        if now.duration_since(last) >= quiet || now >= cap {
            break;
        }
        if dv.progress() {
            last = Instant::now();
        }
    }
}
