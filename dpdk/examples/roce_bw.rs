//! Rough engine throughput: two RoceDevices over a memif pair in ONE process, both polled by
//! this thread (manual progress), so the figures are the cost of both ends on one core.
//!
//! `cargo run --release -p droce-dpdk --example roce_bw -- [write|send|pingpong] [SIZE] [SECONDS] [alloc]`
//! (`ROCE_BW_MTU=4096` in the environment: jumbo mbufs and path MTU 4096; default 1024.)
//! (`pingpong`: RC SEND ping-pong, CPU time per round trip of both sides' software path.)
//! Prints goodput (Gbit/s), messages/s, frames/s and the thread's CPU time per message (from
//! /proc/thread-self/schedstat: unlike rates, it hardly moves when other jobs share the CPU).
//! Work requests are reused (`post_send_ref` / `post_recv_ref`, no allocation per post);
//! `alloc` builds a new one per post (`post_send` / `post_recv`) for comparison.

use droce_dpdk::roce::{RoceConfig, RoceDevice};
use droce_dpdk::*;
use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::qp::{PathMtu, QpCap, QpInitAttr, QpType};
use droce_transport::status::WcStatus;
use droce_transport::verbs::{AccessFlags, RecvWr, SendFlags, SendOpcode, SendWr, WorkCompletion};
use droce_transport::{Gid, Psn};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The transport's verb errors are plain enums (no `std::error::Error`): print them.
fn verb<T, E: std::fmt::Debug>(r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("{e:?}"))
}

fn check(wc: &WorkCompletion) -> Result<(), String> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(format!("completion error {:?}", wc.status))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("write").to_string();
    let size: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(65536);
    let secs: f64 = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(3.0);
    let alloc = args.get(4).is_some_and(|a| a == "alloc");
    let dir = std::env::temp_dir().join(format!("droce-roce-bw-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let sock = dir.join("memif.sock");
    let eal_args: Vec<String> = vec![
        "roce_bw".into(),
        "--no-huge".into(),
        "-m".into(),
        "1024".into(),
        "--no-pci".into(),
        "--no-shconf".into(),
        format!("--file-prefix=roce-bw-{}", std::process::id()),
        "--no-telemetry".into(),
        "--log-level=lib.eal:error".into(),
        format!("--vdev=net_memif0,role=server,socket={},socket-abstract=no", sock.display()),
        format!("--vdev=net_memif1,role=client,socket={},socket-abstract=no", sock.display()),
    ];
    let eal = droce_dpdk::runtime::start_eal(&eal_args, false)?;
    let mtu = match std::env::var("ROCE_BW_MTU").ok().as_deref() {
        None | Some("1024") => PathMtu::Mtu1024,
        Some("4096") => PathMtu::Mtu4096,
        Some(v) => return Err(format!("ROCE_BW_MTU={v}: want 1024 or 4096").into()),
    };
    let jumbo = mtu == PathMtu::Mtu4096;
    let data_room = if jumbo { 9216 + 128 } else { MempoolConfig::default().data_room };
    let pool = Arc::new(Mempool::create("bw_pool", &MempoolConfig { n: 16383, data_room, ..Default::default() })?);
    let ids = [port_by_name("net_memif0").ok_or("no memif0")?, port_by_name("net_memif1").ok_or("no memif1")?];
    let mut ports = [Port::new(ids[0])?, Port::new(ids[1])?];
    let cfg = PortConfig::new().rx_desc(1024).tx_desc(1024);
    let conf = [ports[0].configure(&cfg, &pool)?, ports[1].configure(&cfg, &pool)?];
    for p in &ports {
        p.start()?;
    }
    let t0 = Instant::now();
    while !(ports[0].link()?.up && ports[1].link()?.up) {
        if t0.elapsed() > Duration::from_secs(10) {
            return Err("memif link down".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let ips = [Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 0, 2)];
    let mut devs: Vec<RoceDevice> = (0..2)
        .map(|i| {
            let mut c = RoceConfig::new(ids[i], QueueId(0));
            c.ipv4 = vec![ips[i]];
            c.rx_burst = 64;
            c.tx_burst = 64;
            c.eth_mtu = jumbo.then_some(9000);
            RoceDevice::new(c, &conf[i], pool.clone())
        })
        .collect::<Result<_, _>>()?;
    let len = 1 << 22;
    let mut bufs = [vec![0u64; len / 8], vec![0u64; len / 8]];
    let mut res = Vec::new();
    for (d, b) in devs.iter_mut().zip(bufs.iter_mut()) {
        let pd = d.device_mut().alloc_pd();
        // SAFETY: the buffers live until the end of main, after the devices are dropped.
        #[allow(unsafe_code)]
        let mr = verb(unsafe { d.reg_mr(pd, b.as_mut_ptr() as *mut u8, len, AccessFlags::ALL) })?;
        let cq = verb(d.device_mut().create_cq(8192))?;
        let cap = QpCap { max_send_wr: 4096, max_recv_wr: 4096, ..QpCap::default() };
        let qp = verb(d.device_mut().create_qp(QpInitAttr { qp_type: QpType::Rc, pd, send_cq: cq, recv_cq: cq, srq: None, cap, sq_sig_all: false }))?;
        res.push((mr, cq, qp));
    }
    let qpns = [verb(devs[0].device().query_qp(res[0].2))?.qp_num, verb(devs[1].device().query_qp(res[1].2))?.qp_num];
    for i in 0..2 {
        let j = 1 - i;
        let av = devs[i].av(Gid::from_ipv4(ips[j]), 1);
        let d = devs[i].device_mut();
        let (a, m) = init_attr(AccessFlags::ALL);
        verb(d.modify_qp(res[i].2, &a, m))?;
        let (a, m) = rtr_attr(av, mtu, qpns[j], Psn::new(j as u32 * 1000), 16, 1);
        verb(d.modify_qp(res[i].2, &a, m))?;
        let (a, m) = rts_attr(Psn::new(i as u32 * 1000), 14, 7, 7, 16);
        verb(d.modify_qp(res[i].2, &a, m))?;
    }
    let (mr0, cq0, qp0) = (res[0].0.clone(), res[0].1, res[0].2);
    let (mr1, cq1, qp1) = (res[1].0.clone(), res[1].1, res[1].2);
    let window = if mode == "send" { 512 } else { 32 };
    let mut outstanding = 0usize;
    let (mut done, mut posted) = (0u64, 0u64);
    let mut recvs = 0usize;
    let mut swr = if mode == "send" { SendWr::new(0, SendOpcode::Send) } else { SendWr::new(0, SendOpcode::Write) }
        .with_sge(0, size as u32, mr0.lkey)
        .with_flags(SendFlags::SIGNALED);
    let mut rwr = RecvWr::new(0).with_sge(0, size as u32, mr1.lkey);
    if mode == "pingpong" {
        return pingpong(&mut devs, [(mr0, cq0, qp0), (mr1, cq1, qp1)], size, secs).map(|()| {
            drop(devs);
            drop(bufs);
            drop(pool);
            drop(eal);
            let _ = std::fs::remove_dir_all(&dir);
        });
    }
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    let deadline = Duration::from_secs_f64(secs);
    while start.elapsed() < deadline {
        if mode == "send" {
            while recvs < 2048 {
                let a = mr1.va + ((recvs % 512) * size.max(64)) as u64;
                if alloc {
                    verb(devs[1].device_mut().post_recv(qp1, RecvWr::new(0).with_sge(a, size as u32, mr1.lkey)))?;
                } else {
                    rwr.sg_list[0].addr = a;
                    verb(devs[1].device_mut().post_recv_ref(qp1, &rwr))?;
                }
                recvs += 1;
            }
        }
        while outstanding < window {
            let off = (posted as usize % 32) * size;
            let src = mr0.va + (off % (len / 2)) as u64;
            let dst = mr1.va + (off % (len / 2)) as u64;
            if alloc {
                let wr = if mode == "send" {
                    SendWr::new(posted, SendOpcode::Send).with_sge(src, size as u32, mr0.lkey)
                } else {
                    SendWr::new(posted, SendOpcode::Write).with_sge(src, size as u32, mr0.lkey).with_remote(dst, mr1.rkey)
                };
                verb(devs[0].device_mut().post_send(qp0, wr.with_flags(SendFlags::SIGNALED)))?;
            } else {
                swr.wr_id = posted;
                swr.sg_list[0].addr = src;
                swr.remote_addr = dst;
                swr.rkey = mr1.rkey;
                verb(devs[0].device_mut().post_send_ref(qp0, &swr))?;
            }
            outstanding += 1;
            posted += 1;
        }
        devs[0].poll();
        devs[1].poll();
        while let Some(wc) = verb(devs[0].device_mut().poll_cq_one(cq0))? {
            check(&wc)?;
            outstanding -= 1;
            done += 1;
        }
        while let Some(wc) = verb(devs[1].device_mut().poll_cq_one(cq1))? {
            check(&wc)?;
            recvs -= 1;
        }
    }
    let el = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_ns().saturating_sub(cpu0);
    let s0 = devs[0].stats();
    let s1 = devs[1].stats();
    let frames = s0.engine.tx_roce + s1.engine.tx_roce;
    println!(
        "{mode} {size} B{}: {:.2} Gbit/s goodput, {:.0} msg/s, {:.0} frames/s (both directions, both ends on one core), CPU {:.0} ns/msg {:.0} ns/frame ({:.0}% of wall), retransmitted {}",
        if alloc { " (alloc)" } else { "" },
        done as f64 * size as f64 * 8.0 / el / 1e9,
        done as f64 / el,
        frames as f64 / el,
        cpu as f64 / done.max(1) as f64,
        cpu as f64 / frames.max(1) as f64,
        cpu as f64 / el / 1e7,
        s0.transport.retransmitted_pkts + s1.transport.retransmitted_pkts
    );
    drop(devs);
    drop(bufs);
    for p in &ports {
        p.stop()?;
    }
    for p in ports {
        p.close()?;
    }
    drop(pool);
    drop(eal);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// RC SEND ping-pong of `size` bytes between the two devices on this thread (each polled
/// once per loop turn, like two busy-polling processes interleaved): the CPU time per round
/// trip is the software cost of both sides' critical path plus their idle polls.
fn pingpong(devs: &mut [RoceDevice], res: [(droce_transport::verbs::MemoryRegion, droce_transport::verbs::CqHandle, droce_transport::qp::QpHandle); 2], size: usize, secs: f64) -> Result<(), Box<dyn std::error::Error>> {
    let mut swr: Vec<SendWr> = (0..2).map(|i| SendWr::new(0, SendOpcode::Send).with_sge(res[i].0.va, size as u32, res[i].0.lkey)).collect();
    let rwr: Vec<RecvWr> = (0..2).map(|i| RecvWr::new(0).with_sge(res[i].0.va + 4096, size as u32, res[i].0.lkey)).collect();
    for i in 0..2 {
        for _ in 0..4 {
            verb(devs[i].device_mut().post_recv_ref(res[i].2, &rwr[i]))?;
        }
    }
    let (mut rtts, mut polls) = (0u64, 0u64);
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    let deadline = Duration::from_secs_f64(secs);
    verb(devs[0].device_mut().post_send_ref(res[0].2, &swr[0]))?;
    while start.elapsed() < deadline {
        for _ in 0..64 {
            for i in 0..2 {
                devs[i].poll();
                polls += 1;
                while let Some(wc) = verb(devs[i].device_mut().poll_cq_one(res[i].1))? {
                    check(&wc)?;
                    if wc.opcode == droce_transport::status::WcOpcode::Recv {
                        verb(devs[i].device_mut().post_recv_ref(res[i].2, &rwr[i]))?;
                        if i == 0 {
                            rtts += 1;
                        }
                        swr[i].wr_id += 1;
                        verb(devs[i].device_mut().post_send_ref(res[i].2, &swr[i]))?;
                    }
                }
            }
        }
    }
    let el = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_ns().saturating_sub(cpu0);
    println!(
        "pingpong {size} B: {rtts} round trips, {:.0} ns CPU per round trip (both sides, {:.1} polls each), wall {:.0} ns per round trip",
        cpu as f64 / rtts.max(1) as f64,
        polls as f64 / rtts.max(1) as f64,
        el * 1e9 / rtts.max(1) as f64
    );
    Ok(())
}

/// CPU time of the calling thread in ns (first field of /proc/thread-self/schedstat).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}
