//! ARP and IPv6 ND against the Linux kernel: a RoceDevice on net_af_packet over one end of a
//! veth pair, the kernel's stack on the other end (addresses 10.5.0.1, fd00:5::1), all inside
//! a network namespace this test process makes for itself. The kernel resolves us (its ARP
//! request / NS answered by our reply / NA, which it must accept: checksums and flags as Linux
//! wants them; we learn the kernel from them) and we resolve other kernel addresses (our
//! request / NS answered by Linux).

mod roce_util;

use droce_dpdk::roce::{RoceConfig, RoceDevice};
use droce_dpdk::*;
use droce_transport::qp::QpType;
use droce_transport::verbs::{SendOpcode, SendWr, UdDest};
use droce_transport::{Gid, QKey, Qpn};
use roce_util::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn ip(args: &[&str]) -> bool {
    std::process::Command::new("ip").args(args).status().map(|s| s.success()).unwrap_or(false)
}

fn ip_out(args: &[&str]) -> String {
    let o = std::process::Command::new("ip").args(args).output().expect("ip");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

fn poll_until(dev: &mut RoceDevice, what: &str, mut done: impl FnMut(&mut RoceDevice) -> bool) {
    let t0 = Instant::now();
    while !done(dev) {
        dev.poll();
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out: {what}");
    }
}

#[test]
#[allow(unsafe_code)]
fn arp_and_nd_with_the_linux_kernel() {
    // SAFETY: unshare only changes this process's namespace; this test file is its own process.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        eprintln!("SKIPPED: cannot create a network namespace: {}", std::io::Error::last_os_error());
        return;
    }
    if !ip(&["link", "add", "dk0", "type", "veth", "peer", "name", "dd0"]) {
        eprintln!("SKIPPED: `ip link add ... type veth` failed (iproute2 or veth missing)");
        return;
    }
    // dd0 belongs to DPDK: no kernel IPv6 on it (its link-local would collide with ours)
    let _ = std::fs::write("/proc/sys/net/ipv6/conf/dd0/disable_ipv6", "1");
    assert!(ip(&["addr", "add", "10.5.0.1/24", "dev", "dk0"]));
    assert!(ip(&["-6", "addr", "add", "fd00:5::1/64", "dev", "dk0", "nodad"]));
    // second kernel addresses that never talk to us first: we must resolve them ourselves
    assert!(ip(&["addr", "add", "10.5.0.3/24", "dev", "dk0"]));
    assert!(ip(&["-6", "addr", "add", "fd00:5::3/64", "dev", "dk0", "nodad"]));
    assert!(ip(&["link", "set", "dd0", "up"]) && ip(&["link", "set", "dk0", "up"]));
    let kernel_mac = {
        // (sysfs still shows the original namespace: ask ip)
        let s = ip_out(&["-o", "link", "show", "dk0"]);
        let hex = s.split("link/ether ").nth(1).and_then(|r| r.split_whitespace().next()).expect("dk0 MAC");
        let v: Vec<u8> = hex.split(':').map(|h| u8::from_str_radix(h, 16).unwrap()).collect();
        <[u8; 6]>::try_from(v).unwrap()
    };
    let eal = Eal::init(&eal_args(&["--vdev=net_af_packet0,iface=dd0"])).expect("EAL init with af_packet");
    let pool = Arc::new(Mempool::create("kn_pool", &MempoolConfig { n: 4095, ..Default::default() }).unwrap());
    let mut port = Port::new(port_by_name("net_af_packet0").unwrap()).unwrap();
    let configured = port.configure(&PortConfig::new(), &pool).unwrap();
    port.start().unwrap();
    let (me4, me6) = (Ipv4Addr::new(10, 5, 0, 2), "fd00:5::2".parse::<Ipv6Addr>().unwrap());
    let (k4, k6) = (Ipv4Addr::new(10, 5, 0, 3), "fd00:5::3".parse::<Ipv6Addr>().unwrap());
    let mut cfg = RoceConfig::new(port.id(), QueueId(0));
    cfg.ipv4 = vec![me4];
    cfg.ipv6 = vec![me6];
    let mut dev = RoceDevice::new(cfg, &configured, pool.clone()).unwrap();
    let my_mac = mac_str(dev.mac());

    // 1. the kernel resolves us: a UDP datagram from the kernel's stack to each of our addresses
    let s4 = UdpSocket::bind("10.5.0.1:0").unwrap();
    s4.send_to(b"hello", (me4, 9)).unwrap();
    let s6 = UdpSocket::bind("[fd00:5::1]:0").unwrap();
    s6.send_to(b"hello", (me6, 9)).unwrap();
    poll_until(&mut dev, "kernel's ARP request and NS answered, datagrams received", |d| {
        let c = d.counters();
        c.neigh.arp_replies_tx >= 1 && c.neigh.nd_adverts_tx >= 1 && c.non_roce_drops >= 2
    });
    let n4 = ip_out(&["neigh", "show", "to", "10.5.0.2", "dev", "dk0"]);
    assert!(n4.contains(&my_mac) && !n4.contains("FAILED") && !n4.contains("INCOMPLETE"), "kernel ARP entry: {n4:?}");
    let n6 = ip_out(&["-6", "neigh", "show", "to", "fd00:5::2", "dev", "dk0"]);
    assert!(n6.contains(&my_mac) && !n6.contains("FAILED") && !n6.contains("INCOMPLETE"), "kernel ND entry (our NA accepted): {n6:?}");
    // and we learned the kernel's senders from its request and solicitation (RFC 826 / 4861 7.2.3)
    let n = dev.neighbours();
    assert!(n.contains(&(IpAddr::V4(Ipv4Addr::new(10, 5, 0, 1)), kernel_mac, false)), "{n:?}");
    assert!(n.contains(&(IpAddr::V6("fd00:5::1".parse().unwrap()), kernel_mac, false)), "{n:?}");

    // 2. we resolve the kernel: UD SENDs to its IPv4 and IPv6 addresses (it ignores the RoCE
    //    datagram itself: no rxe here)
    let pd = dev.device_mut().alloc_pd();
    let mut buf = Buf::new(4096);
    let base = buf.addr();
    // SAFETY: `buf` outlives `dev` (dropped after it) and is only used by the device.
    let mr = unsafe { dev.reg_mr(pd, base as *mut u8, 4096, droce_transport::verbs::AccessFlags::ALL) }.unwrap();
    let cq = dev.device_mut().create_cq(64).unwrap();
    let res = Res { pd, mr: mr.clone(), cq, base };
    let ud = create_qp(&mut dev, &res, QpType::Ud);
    ud_up(&mut dev, ud, QKey(1));
    for (gid, sgid) in [(Gid::from_ipv4(k4), 1u8), (Gid::from_ipv6(k6), 2u8)] {
        let dest = UdDest { av: dev.av(gid, sgid), remote_qpn: Qpn::new(0x11), remote_qkey: QKey(1) };
        dev.device_mut().post_send(ud, SendWr::new(1, SendOpcode::Send).with_sge(base, 64, mr.lkey).with_ud(dest)).unwrap();
    }
    poll_until(&mut dev, "the kernel answered our ARP request and NS", |d| {
        let n = d.neighbours();
        n.contains(&(IpAddr::V4(k4), kernel_mac, false)) && n.contains(&(IpAddr::V6(k6), kernel_mac, false))
    });
    let c = dev.counters().clone();
    assert_eq!((c.neigh.arp_requests_tx, c.neigh.nd_solicits_tx), (1, 1), "{c:?}");
    assert!(c.neigh.arp_replies_rx >= 1 && c.neigh.nd_adverts_rx >= 1, "{c:?}");
    poll_until(&mut dev, "both UD sends left", |d| d.device().counters().sent_pkts >= 2);
    drop(dev);
    drop(buf);
    port.stop().unwrap();
    port.close().unwrap();
    assert_eq!(pool.in_use_count(), 0);
    drop(pool);
    drop(eal);
}
