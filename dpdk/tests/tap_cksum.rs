//! Checksum offload where the PMD offers it: net_tap offers IPv4 and UDP TX checksum offload.
//! The test moves itself into a private network namespace first, so the tap interface and
//! every frame it carries stay inside it; a packet socket on the interface reads the frame the
//! kernel got and checks both checksums.

mod common;

use droce_dpdk::*;

fn csum_fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

fn sum16(bytes: &[u8]) -> u32 {
    bytes.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))).sum()
}

const IFACE: &str = "droce_tap0";
const UDP_PORT: u16 = 47_911;

fn frame(src_mac: [u8; 6]) -> Vec<u8> {
    let payload = b"droce checksum offload";
    let udp_len = 8 + payload.len() as u16;
    let ip_len = 20 + udp_len;
    let mut f = vec![0u8; 14 + ip_len as usize];
    f[0..6].copy_from_slice(&[0x02, 0x00, 0x00, 0x00, 0x00, 0x99]);
    f[6..12].copy_from_slice(&src_mac);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 99, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 99, 0, 2]);
    // IPv4 checksum left 0 for the offload; UDP checksum holds the pseudo-header sum, as DPDK wants
    let phdr = sum16(&[10, 99, 0, 1, 10, 99, 0, 2]) + 17 + u32::from(udp_len);
    let udp = &mut f[34..42];
    udp[0..2].copy_from_slice(&UDP_PORT.to_be_bytes());
    udp[2..4].copy_from_slice(&UDP_PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6..8].copy_from_slice(&csum_fold(phdr).to_be_bytes());
    f[42..].copy_from_slice(payload);
    f
}

#[allow(unsafe_code)]
fn packet_socket(ifindex: u32) -> i32 {
    // SAFETY: plain socket/bind/setsockopt calls with valid, initialised arguments.
    unsafe {
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, (libc::ETH_P_ALL as u16).to_be() as i32);
        assert!(fd >= 0, "packet socket: {}", std::io::Error::last_os_error());
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        let r = libc::bind(fd, &sll as *const _ as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_ll>() as u32);
        assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
        let tv = libc::timeval { tv_sec: 0, tv_usec: 200_000 };
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv as *const _ as *const libc::c_void, std::mem::size_of::<libc::timeval>() as u32);
        fd
    }
}

#[allow(unsafe_code)]
fn recv(fd: i32, buf: &mut [u8]) -> isize {
    // SAFETY: buf is valid for buf.len() bytes.
    unsafe { libc::recv(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) }
}

#[test]
#[allow(unsafe_code)]
fn tap_tx_checksum_offload() {
    if !std::path::Path::new("/dev/net/tun").exists() {
        eprintln!("SKIPPED: /dev/net/tun is missing, net_tap cannot run here");
        return;
    }
    // SAFETY: unshare only changes this process's namespace; this test file is its own process.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        eprintln!("SKIPPED: cannot create a network namespace: {}", std::io::Error::last_os_error());
        return;
    }
    let vdev = format!("--vdev=net_tap0,iface={IFACE}");
    // net_tap registers a multi-process action at probe: it needs the shared config
    let args: Vec<String> = common::eal_args(&[vdev.as_str()]).into_iter().filter(|a| a != "--no-shconf").collect();
    let eal = Eal::init(&args).expect("EAL init with net_tap");
    let pool = Mempool::create("tap_pool", &MempoolConfig { n: 4095, cache_size: 0, ..Default::default() }).unwrap();
    let mut port = Port::new(port_by_name("net_tap0").expect("tap port")).unwrap();
    let info = port.info().unwrap();
    assert_eq!(info.driver_name, "net_tap");
    assert!(info.tx_ipv4_cksum() && info.tx_udp_cksum(), "net_tap offers IPv4/UDP TX checksum: {info:?}");

    let plain = port.configure(&PortConfig::new(), &pool).unwrap();
    assert!(!plain.tx_ipv4_cksum() && !plain.tx_udp_cksum(), "off unless asked");
    let conf = port.configure(&PortConfig::new().checksum_offload(true), &pool).unwrap();
    assert!(conf.tx_ipv4_cksum() && conf.tx_udp_cksum(), "{conf:?}");
    assert_eq!(conf.rx_ipv4_cksum(), info.rx_ipv4_cksum());
    port.start().unwrap();

    let c = std::ffi::CString::new(IFACE).unwrap();
    // SAFETY: valid C string.
    let ifindex = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert_ne!(ifindex, 0, "tap interface exists");
    let fd = packet_socket(ifindex);

    let mac = port.mac_addr().unwrap();
    let mut m = pool.alloc_from_slice(&frame(mac.0)).unwrap();
    m.set_tx_ipv4_cksum_offload(14, 20, true, true);
    let mut b: MbufBatch<1> = MbufBatch::new();
    b.push(m).unwrap();
    let (sent, dropped) = port.tx_burst_or_free(QueueId(0), &mut b).unwrap();
    assert_eq!((sent, dropped), (1, 0));

    let mut buf = [0u8; 2048];
    let mut seen = None;
    let t0 = std::time::Instant::now();
    while seen.is_none() && t0.elapsed() < std::time::Duration::from_secs(5) {
        let n = recv(fd, &mut buf);
        if n >= 42 && buf[12..14] == [0x08, 0x00] && buf[23] == 17 && buf[36..38] == UDP_PORT.to_be_bytes() {
            seen = Some(buf[..n as usize].to_vec());
        }
    }
    // SAFETY: fd is our open socket.
    unsafe { libc::close(fd) };
    let got = seen.expect("frame seen on the tap interface");
    let ip = &got[14..34];
    assert_ne!(&ip[10..12], &[0, 0], "IPv4 checksum filled");
    assert_eq!(csum_fold(sum16(ip)), 0xffff, "IPv4 header checksum valid");
    let udp_len = u16::from_be_bytes([got[38], got[39]]) as usize;
    let l4 = &got[34..34 + udp_len];
    let phdr = sum16(&ip[12..20]) + 17 + udp_len as u32;
    assert_eq!(csum_fold(phdr + sum16(l4)), 0xffff, "UDP checksum valid");
    assert_eq!(&got[42..34 + udp_len], b"droce checksum offload");

    port.stop().unwrap();
    port.close().unwrap();
    drop(pool);
    drop(eal);
}
