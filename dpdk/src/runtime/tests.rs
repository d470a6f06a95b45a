use super::config::*;
use super::zeroconf::*;
use super::*;

fn p(text: &str, rank: Option<u32>) -> Result<RuntimeConfig, RuntimeError> {
    RuntimeConfig::parse(text, rank)
}

fn eal_has(c: &RuntimeConfig, w: &str) -> bool {
    c.eal_args.iter().any(|a| a == w)
}

#[test]
fn ranks_conf_templating() {
    let text = "# comment\nvdev = net_af_packet0,iface=droce{rank}  # inline\nip = 10.78.0.{rank+1}\nprogress = thread\n";
    let c = p(text, Some(3)).unwrap();
    assert_eq!(c.ip, "10.78.0.4".parse::<IpAddr>().unwrap());
    assert_eq!(c.port.as_deref(), Some("net_af_packet0"));
    assert!(eal_has(&c, "--vdev=net_af_packet0,iface=droce3"), "{:?}", c.eal_args);
    assert_eq!(c.eal_args[0], "droce");
    for w in ["--no-huge", "--no-pci", "--no-shconf", "--no-telemetry", "--log-level=error", "-l"] {
        assert!(eal_has(&c, w), "{w} in {:?}", c.eal_args);
    }
    assert!(c.eal_args.iter().any(|a| a.starts_with(&format!("--file-prefix=droce-{}-", std::process::id()))));
    assert_eq!(c.progress, Progress::Thread);
    assert_eq!(c.rank, Some(3));
    let c0 = p(text, Some(0)).unwrap();
    assert_eq!(c0.ip, "10.78.0.1".parse::<IpAddr>().unwrap());
    assert_ne!(c.eal_args, c0.eal_args);
}

#[test]
fn every_key() {
    let text = "vdev = net_memif0,role=server\nvdev=net_ring0\nallow = 0000:01:00.0\nport = net_ring0\nip = fd00::{rank}\n\
                peer = fd00::9\nneighbour = fd00::9 02:00:00:00:00:09\nneighbor = 10.0.0.1 2:0:0:0:0:a\nmtu = 9000\n\
                hugepages = yes\nhold-acks = no\nselective-repeat = no\nlcore = 1\nmbufs = 4095\nlog-level = lib.eal:debug\nfaults = rx:drop=0.5;seed=3\npcap = /tmp/x{pid}.pcap\n\
                eal = --in-memory  -n 4\n";
    let c = p(text, Some(7)).unwrap();
    assert_eq!(c.ip, "fd00::7".parse::<IpAddr>().unwrap());
    assert_eq!(c.peer, Some("fd00::9".parse().unwrap()));
    assert_eq!(c.port.as_deref(), Some("net_ring0"));
    assert_eq!(c.neighbours.len(), 2);
    assert_eq!(c.neighbours[1].1, [2, 0, 0, 0, 0, 0xa]);
    assert_eq!(c.eth_mtu, Some(9000));
    assert_eq!(c.mbufs, 4095);
    assert!(!c.hold_acks);
    assert!(!c.selective_repeat);
    assert!(c.faults.unwrap().rx.drop == 0.5 && c.faults.unwrap().seed == 3);
    assert_eq!(c.pcap, Some(PathBuf::from(format!("/tmp/x{}.pcap", std::process::id()))));
    assert!(!eal_has(&c, "--no-huge") && !eal_has(&c, "--no-pci"));
    let s = c.eal_args.join(" ");
    assert!(s.contains("-l 1 --vdev=net_memif0,role=server --vdev=net_ring0 -a 0000:01:00.0 --in-memory -n 4"), "{s}");
    assert!(s.contains("--log-level=lib.eal:debug"));
    let c = p("vdev = net_ring0\nip = 1.2.3.4\nmemory = 128\neal = --lcores=0@1\n", None).unwrap();
    let s = c.eal_args.join(" ");
    assert!(s.contains("--no-huge -m 128 --no-pci") && !s.contains(" -l "), "{s}");
    assert!(c.hold_acks, "ACKs are held by default");
    assert!(c.selective_repeat, "selective repeat is offered by default");
    assert!(c.cc.ecn && c.cc.dcqcn && !c.cc_line_rate_given, "congestion control is on by default, at the port's speed");
    let c = p("vdev = net_ring0\nip = 1.2.3.4\ncc = off\n", None).unwrap();
    assert_eq!(c.cc, droce_transport::cc::CcConfig::off());
    let c = p("vdev = net_ring0\nip = 1.2.3.4\ncc = line_rate=25g, rpg_ai_rate=10\n", None).unwrap();
    assert!(c.cc_line_rate_given && c.cc.line_rate_bps == 25_000_000_000 && c.cc.rpg_ai_rate == 10);
}

fn err(text: &str, rank: Option<u32>) -> String {
    let e = p(text, rank).unwrap_err();
    assert!(matches!(e, RuntimeError::Config(_)));
    let s = e.to_string();
    assert!(!s.contains('\n'), "one line: {s}");
    s
}

#[test]
fn clear_errors() {
    let s = err("vdev = net_ring0\nip = 10.0.0.{rank}\n", None);
    assert!(s.contains("line 2") && s.contains("'ip'") && s.contains("DROCE_RANK"), "{s}");
    let s = err("vdev = net_ring0\nip = 10.0.0.1\nfoo = 3\n", None);
    assert!(s.contains("line 3") && s.contains("unknown key 'foo'"), "{s}");
    let s = err("vdev = net_ring0\nip = 10.0.0.300\n", None);
    assert!(s.contains("line 2") && s.contains("not an IPv4 or IPv6"), "{s}");
    let s = err("vdev = net_ring0\nip = 10.0.0.1\nip = 10.0.0.2\n", None);
    assert!(s.contains("line 3") && s.contains("given twice (first on line 2)"), "{s}");
    let s = err("vdev = net_ring0\n", None);
    assert!(s.contains("no `ip = ...`"), "{s}");
    let s = err("ip = 10.0.0.1\n", None);
    assert!(s.contains("no port"), "{s}");
    let s = err("vdev = net_ring0\nip = 10.0.0.1\njust words\n", None);
    assert!(s.contains("line 3") && s.contains("key = value"), "{s}");
    let s = err("vdev = x{rank+z}\nip = 10.0.0.1\n", Some(1));
    assert!(s.contains("line 1") && s.contains("rank+z"), "{s}");
    let s = err("vdev = x{host}\nip = 10.0.0.1\n", Some(1));
    assert!(s.contains("unknown placeholder '{host}'"), "{s}");
    let s = err("vdev = x\nip = 10.0.0.1\nneighbour = 10.0.0.2 zz:00:00:00:00:00\n", None);
    assert!(s.contains("line 3") && s.contains("MAC"), "{s}");
    let s = err("vdev = x\nip = 10.0.0.1\nprogress = sometimes\n", None);
    assert!(s.contains("line 3") && s.contains("manual or thread"), "{s}");
    let s = err("vdev = x\nip = 10.0.0.1\nhold-acks = later\n", None);
    assert!(s.contains("line 3") && s.contains("'hold-acks'") && s.contains("yes or no"), "{s}");
    let s = err("vdev = x\nip = 10.0.0.1\nfaults = rx:explode=1\n", None);
    assert!(s.contains("line 3") && s.contains("'faults'"), "{s}");
    let s = err("vdev = x\nip = 10.0.0.1\ncc = dcqcn=maybe\n", None);
    assert!(s.contains("line 3") && s.contains("'cc'") && s.contains("'maybe' is not on or off"), "{s}");
    let s = err("vdev = x\nip = 10.0.0.1\nmtu = 100000\n", None);
    assert!(s.contains("line 3"), "{s}");
}

#[test]
fn memif_client_socket_from_args() {
    let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let args = a(&["droce", "--vdev=net_memif0,role=client,socket=/x/y.sock,socket-abstract=no", "--vdev=net_memif1,role=client"]);
    assert_eq!(memif_client_socket(&args, "net_memif0"), Some(MemifSocket { path: "/x/y.sock".into(), abstract_: false }));
    assert_eq!(memif_client_socket(&args, "net_memif1"), Some(MemifSocket { path: "/run/memif.sock".into(), abstract_: true }));
    assert_eq!(memif_client_socket(&a(&["--vdev=net_memif0,role=server"]), "net_memif0"), None);
    assert!(!MemifSocket { path: format!("/droce-none-{}", std::process::id()), abstract_: true }.listening());
}

#[test]
fn stale_memif_server_socket_is_removed_live_one_kept() {
    let dir = std::env::temp_dir().join(format!("droce-stale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (stale, live, plain) = (dir.join("stale.sock"), dir.join("live.sock"), dir.join("plain.sock"));
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap()); // a server that is gone
    let _l = std::os::unix::net::UnixListener::bind(&live).unwrap();
    std::fs::write(&plain, b"").unwrap();
    let vdev = |i: u32, p: &std::path::Path, role: &str| format!("--vdev=net_memif{i},{role}socket={},socket-abstract=no", p.display());
    let args = vec![
        "droce".to_string(),
        vdev(0, &stale, "role=server,"),
        vdev(1, &live, ""), // DPDK's default role: server
        vdev(2, &plain, "role=server,"),
        vdev(3, &stale, "role=client,"),
    ];
    assert_eq!(remove_stale_memif_sockets(&args), vec![stale.display().to_string()]);
    assert!(!stale.exists() && live.exists() && plain.exists());
    // EAL's other spelling, `--vdev X`, is read the same
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let spaced = vec!["droce".to_string(), "--vdev".to_string(), format!("net_memif0,role=server,socket={},socket-abstract=no", stale.display())];
    assert_eq!(remove_stale_memif_sockets(&spaced), vec![stale.display().to_string()]);
    // a client never removes its server's file
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(remove_stale_memif_sockets(&args[4..]).is_empty() && stale.exists());
    // nor does a server whose path DPDK refuses (relative): the same stale file, named from
    // the current directory, is EAL init's error, not removed first
    let up = std::env::current_dir().unwrap().components().count() - 1;
    let rel = format!("{}{}", "../".repeat(up), stale.display().to_string().trim_start_matches('/'));
    assert!(std::path::Path::new(&rel).exists(), "{rel}");
    let relative = vec!["droce".to_string(), format!("--vdev=net_memif0,role=server,socket={rel},socket-abstract=no")];
    assert!(remove_stale_memif_sockets(&relative).is_empty() && stale.exists(), "{rel} removed");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A starting server has bound its socket and not yet called listen(): connect() is refused
/// exactly as for a dead server's file, and removing it left the server listening on a
/// path nobody could reach. The file is kept; once that socket is closed, it is stale.
#[test]
#[allow(unsafe_code)]
fn memif_socket_bound_but_not_listening_is_kept() {
    let dir = std::env::temp_dir().join(format!("droce-bound-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.sock");
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a fresh AF_UNIX stream socket bound to a path that fits sun_path, never
    // listening; closed below. The sockaddr is zeroed and filled within its size.
    let fd = unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let mut sa: libc::sockaddr_un = std::mem::zeroed();
        sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let b = c_path.as_bytes_with_nul();
        assert!(b.len() <= sa.sun_path.len());
        for (d, s) in sa.sun_path.iter_mut().zip(b) {
            *d = *s as libc::c_char;
        }
        let r = libc::bind(fd, &sa as *const libc::sockaddr_un as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t);
        assert_eq!(r, 0, "bind");
        fd
    };
    let refused = std::os::unix::net::UnixStream::connect(&path).map_err(|e| e.kind());
    assert_eq!(refused.err(), Some(std::io::ErrorKind::ConnectionRefused), "bound, not listening: refused like a stale file");
    let args = vec!["droce".to_string(), format!("--vdev=net_memif0,role=server,socket={},socket-abstract=no", path.display())];
    let t = std::time::Instant::now();
    assert!(remove_stale_memif_sockets(&args).is_empty() && path.exists(), "a starting server's socket was removed");
    // SAFETY: fd is the socket made above, closed once.
    unsafe { libc::close(fd) };
    assert_eq!(remove_stale_memif_sockets(&args), vec![path.display().to_string()]);
    assert!(!path.exists());
    // the re-checks are short (a generous bound for a loaded machine)
    assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn jumbo_default_only_where_frames_fit() {
    let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let args = a(&["droce", "--vdev=net_memif0,role=client,bsize=8192", "--vdev=net_memif1,role=server"]);
    assert_eq!(memif_bsize(&args, "net_memif0"), 8192);
    assert_eq!(memif_bsize(&args, "net_memif1"), 2048);
    assert_eq!(default_eth_mtu("net_memif", memif_bsize(&args, "net_memif0")), Some(9000));
    assert_eq!(default_eth_mtu("net_memif", memif_bsize(&args, "net_memif1")), None);
    assert_eq!(default_eth_mtu("net_ring", 0), Some(9000));
    for d in ["net_af_packet", "net_af_xdp", "net_tap", "mlx5_pci", "net_i40e"] {
        assert_eq!(default_eth_mtu(d, 8192), None, "{d}");
    }
    // the zero-config pair (8 KiB buffers) qualifies: tests/host_pair.rs sees path MTU 4096
    assert!(memif_bsize(&a(&["--vdev=net_memif0,role=server,id=0,bsize=8192,mac=x"]), "net_memif0") >= MEMIF_JUMBO_BSIZE);
}

#[test]
fn memif_path_mtu_only_as_large_as_one_buffer_holds() {
    // -m 4096 (Ethernet 9000) over DPDK's default 2 KiB buffers: path MTU 1024, said once
    let (m, line) = memif_mtu_clamp("net_memif0", 9000, 2048).expect("4205-byte frames do not fit 2048-byte buffers");
    assert_eq!((m, PathMtu::for_eth_mtu(m as u32)), (1500, PathMtu::Mtu1024));
    assert!(!line.contains('\n') && line.starts_with("droce: warning: net_memif0: path MTU 4096 needs 4205-byte frames"), "{line}");
    assert!(line.contains("using path MTU 1024") && line.contains("bsize=8192"), "names the outcome and the fix: {line}");
    // what one buffer holds: the 4096 default's bsize and up keep 4096, 4 KiB buffers 2048
    assert_eq!(memif_mtu_clamp("p", 9000, MEMIF_JUMBO_BSIZE), None);
    assert_eq!(memif_mtu_clamp("p", 9000, 8192), None);
    let (m, _) = memif_mtu_clamp("p", 9000, 4096).unwrap();
    assert_eq!(PathMtu::for_eth_mtu(m as u32), PathMtu::Mtu2048);
    assert!(max_frame_len(PathMtu::Mtu2048) <= 4096);
    // the port's own 1500 fits 2 KiB buffers; it does not fit 1 KiB ones (then 512)
    assert_eq!(memif_mtu_clamp("p", 1500, 2048), None);
    let (m, _) = memif_mtu_clamp("p", 1500, 1024).unwrap();
    assert_eq!(PathMtu::for_eth_mtu(m as u32), PathMtu::Mtu512);
    // a clamped MTU never asks for more than the buffer, and is never raised
    for bsize in [256, 400, 700, 1024, 1133, 1200, 2048, 2157, 3000, 4096, 4205, 9000] {
        for eth in [576u16, 1024, 1500, 2200, 4200, 9000] {
            match memif_mtu_clamp("p", eth, bsize) {
                None => {
                    let pm = PathMtu::for_eth_mtu(eth as u32);
                    assert!(max_frame_len(pm) <= bsize as usize || pm == PathMtu::Mtu256, "{eth} {bsize}")
                }
                Some((m, _)) => {
                    let pm = PathMtu::for_eth_mtu(m as u32);
                    assert!(m < eth && pm < PathMtu::for_eth_mtu(eth as u32), "{eth} {bsize} -> {m}");
                    assert!(max_frame_len(pm) <= bsize as usize || pm == PathMtu::Mtu256, "{eth} {bsize} -> {m}");
                }
            }
        }
    }
}

#[test]
fn template_forms() {
    assert_eq!(template("a{rank}b{rank+10}c{ rank + 2 }", Some(5), 9).unwrap(), "a5b15c7");
    assert_eq!(template("p{pid}", None, 42).unwrap(), "p42");
    assert!(template("x{rank", Some(1), 1).is_err());
    assert_eq!(template("plain", None, 1).unwrap(), "plain");
}

#[test]
fn loopback_aliases() {
    let is_lb = |s: &str| is_loopback(s.parse().unwrap());
    assert!(is_lb("127.0.0.1") && is_lb("127.1.2.3") && is_lb("::1") && is_lb("::ffff:127.0.0.1"));
    assert!(!is_lb("10.77.0.1") && !is_lb("::ffff:10.0.0.1") && !is_lb("fd00::1"));
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let (own, peer) = (ip("10.77.0.1"), ip("10.77.0.2"));
    for lb in ["127.0.0.1", "::1", "127.0.0.5"] {
        assert_eq!(resolve_src(ip(lb), own), own);
        assert_eq!(resolve_dst(ip(lb), own, Some(peer)), peer);
        assert_eq!(resolve_dst(ip(lb), own, None), own, "no peer: loopback is this process");
    }
    assert_eq!(resolve_src(ip("0.0.0.0"), own), own);
    assert_eq!(resolve_src(ip("::"), own), own);
    assert_eq!(resolve_dst(ip("0.0.0.0"), own, Some(peer)), ip("0.0.0.0"), "unspecified is no destination alias");
    assert_eq!(resolve_src(ip("10.9.9.9"), own), ip("10.9.9.9"));
    assert_eq!(resolve_dst(ip("10.9.9.9"), own, Some(peer)), ip("10.9.9.9"));
}

#[test]
fn slot_lock_states() {
    let dir = std::env::temp_dir().join(format!("droce-slot-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lock = dir.join("default.3.lock");
    assert_eq!(slot_state(&lock), SlotState::Free, "no file");
    std::fs::write(&lock, format!("{}\n", std::process::id())).unwrap();
    assert_eq!(slot_state(&lock), SlotState::Alive { pid: std::process::id(), ready: false });
    std::fs::write(&lock, format!("{} ready\n", std::process::id())).unwrap();
    assert_eq!(slot_state(&lock), SlotState::Alive { pid: std::process::id(), ready: true });
    // pid_max is at most 2^22 on Linux: this pid cannot exist
    std::fs::write(&lock, "4194305 ready\n").unwrap();
    assert_eq!(slot_state(&lock), SlotState::Free, "left by a process that has gone");
    std::fs::write(&lock, "").unwrap();
    assert_eq!(slot_state(&lock), SlotState::Free);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mesh_addresses_and_vdevs() {
    assert_eq!(mesh_ip(0), DEFAULT_SERVER_IP);
    assert_eq!(mesh_ip(1), DEFAULT_CLIENT_IP);
    assert_eq!(mesh_ip(15), Ipv4Addr::new(10, 77, 0, 16));
    assert_eq!(mesh_ip(250), Ipv4Addr::new(10, 77, 1, 1));
    assert_eq!(mesh_mac(0), [0x02, 0x64, 0x72, 0x63, 0x00, 0x01], "the pair's MACs are unchanged");
    assert_eq!(mesh_mac(1), [0x02, 0x64, 0x72, 0x63, 0x00, 0x02]);
    // one link per pair of slots: the lower serves on its own socket, the id is the client's slot
    assert_eq!(mesh_vdev(7, "x", 1, 3), "net_memif3,role=server,id=3,socket=/droce-7-x-1,socket-abstract=yes,bsize=8192,mac=02:64:72:63:00:02");
    assert_eq!(mesh_vdev(7, "x", 3, 1), "net_memif1,role=client,id=3,socket=/droce-7-x-1,socket-abstract=yes,bsize=8192,mac=02:64:72:63:00:04");
    let a = vec!["droce".to_string(), format!("--vdev={}", mesh_vdev(7, "x", 0, 1))];
    assert!(memif_bsize(&a, "net_memif1") >= MEMIF_JUMBO_BSIZE, "path MTU 4096 on every mesh link");
}

#[test]
fn shipped_confs_parse() {
    for (f, rank) in [("ranks.conf", Some(2)), ("real-nic-lib.conf", Some(0))] {
        let path = format!("{}/../conf/{f}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let c = p(&text, rank).unwrap_or_else(|e| panic!("{f}: {e}"));
        if f == "ranks.conf" {
            assert_eq!(c.ip, "10.78.0.3".parse::<IpAddr>().unwrap());
            assert!(eal_has(&c, "--vdev=net_af_packet0,iface=droce2"), "{:?}", c.eal_args);
        } else {
            assert!(!eal_has(&c, "--no-huge") && eal_has(&c, "-a"), "{:?}", c.eal_args);
        }
    }
}
