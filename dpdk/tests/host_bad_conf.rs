//! A bad DROCE_CONF gives one clear line naming the file, the line and the key, and the
//! global host keeps returning that same error (sticky); a bad EAL argument from the conf is
//! one line too. Then a Runtime opened by hand on net_ring: loopback aliases, progress, drop, and
//! a second open refused in one line (EAL inits once per process).

use droce_dpdk::runtime::{self, Runtime, RuntimeConfig, RuntimeError};

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn child() {
    // re-run by the main test to see what the process writes to stdout
    if std::env::var("HOST_BAD_EAL_CHILD").is_err() {
        return;
    }
    let cfg = RuntimeConfig::from_env().unwrap();
    let e = Runtime::open(cfg).unwrap_err();
    let s = e.to_string();
    assert!(matches!(e, RuntimeError::Eal(_)) && !s.contains('\n') && s.contains("--no-such-eal-option"), "{s}");
    println!("CHILD-OK");
}

#[test]
fn bad_conf_is_one_clear_sticky_error() {
    let dir = std::env::temp_dir().join(format!("droce-host-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for v in ["DROCE_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "DROCE_PROGRESS", "DROCE_EAL", "DROCE_LINK"] {
        std::env::remove_var(v);
    }
    let cases = [
        ("rank.conf", "vdev = net_ring0\nip = 10.0.0.{rank+1}\n", &["line 2", "key 'ip'", "DROCE_RANK"][..]),
        ("key.conf", "vdev = net_ring0\nip = 10.0.0.1\nmtu = 1500\nspeed = fast\n", &["line 4", "unknown key 'speed'"][..]),
        ("ip.conf", "# x\n\nvdev = net_ring0\nip = 10.0.0.256\n", &["line 4", "key 'ip'", "'10.0.0.256'"][..]),
        ("noport.conf", "ip = 10.0.0.1\n", &["no port"][..]),
    ];
    for (name, text, want) in cases {
        let path = write(&dir, name, text);
        std::env::set_var("DROCE_CONF", &path);
        let e = RuntimeConfig::from_env().unwrap_err();
        let s = e.to_string();
        assert!(matches!(e, RuntimeError::Config(_)), "{s}");
        assert!(!s.contains('\n'), "one line: {s}");
        assert!(s.starts_with(&format!("droce config: DROCE_CONF={path}: ")), "{s}");
        for w in want {
            assert!(s.contains(w), "'{w}' in: {s}");
        }
    }
    std::env::set_var("DROCE_CONF", dir.join("missing.conf"));
    let s = RuntimeConfig::from_env().unwrap_err().to_string();
    assert!(s.contains("missing.conf: cannot read the file") && !s.contains('\n'), "{s}");
    std::env::set_var("DROCE_CONF", write(&dir, "ok.conf", "vdev = net_ring0\nip = 10.0.0.1\n"));
    std::env::set_var("PMIX_RANK", "three");
    let s = RuntimeConfig::from_env().unwrap_err().to_string();
    assert!(s.contains("PMIX_RANK='three' is not a rank number"), "{s}");
    std::env::remove_var("PMIX_RANK");
    std::env::set_var("DROCE_PROGRESS", "sometimes");
    assert!(RuntimeConfig::from_env().unwrap_err().to_string().contains("DROCE_PROGRESS='sometimes'"));
    std::env::remove_var("DROCE_PROGRESS");

    // a conf whose EAL argument EAL rejects: one line from Runtime::open, and EAL's usage text
    // goes to stderr, not to the application's stdout (checked in a child process)
    let eal_conf = write(&dir, "eal.conf", "vdev = net_ring0\nip = 10.0.0.1\neal = --no-such-eal-option\n");
    let o = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("HOST_BAD_EAL_CHILD", "1")
        .env("DROCE_CONF", &eal_conf)
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && out.contains("CHILD-OK"), "child: {out} {err}");
    assert!(!out.contains("EAL") && !out.contains("Usage"), "EAL text on stdout: {out}");
    assert!(err.contains("Usage"), "EAL's usage text on stderr: {err}");

    // global(): the first error sticks, even after the environment is fixed
    let bad = write(&dir, "key.conf", "vdev = net_ring0\nip = 10.0.0.1\nspeed = fast\n");
    std::env::set_var("DROCE_CONF", &bad);
    let e1 = runtime::global().unwrap_err();
    std::env::set_var("DROCE_CONF", dir.join("ok.conf"));
    let e2 = runtime::global().unwrap_err();
    assert_eq!(e1, e2);
    assert!(e1.to_string().contains("unknown key 'speed'"));
    assert!(runtime::lock_global().is_err());

    // a Runtime of our own (EAL was never initialised in this process: the errors above came first)
    std::env::set_var("DROCE_CONF", write(&dir, "ring.conf", "vdev = net_ring0\nip = 10.0.0.1\npeer = 10.0.0.2\nprogress = thread\n"));
    let cfg = RuntimeConfig::from_env().unwrap();
    assert_eq!(cfg.progress, runtime::Progress::Thread);
    let mut h = Runtime::open(cfg).unwrap_or_else(|e| panic!("{e}"));
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    assert_eq!(h.local_ip(), ip("10.0.0.1"));
    assert_eq!(h.resolve_src(ip("127.0.0.1")), ip("10.0.0.1"));
    assert_eq!(h.resolve_dst(ip("127.0.0.1")), ip("10.0.0.2"));
    assert_eq!(h.resolve_dst(ip("10.0.0.9")), ip("10.0.0.9"));
    assert_eq!(h.local_gid_index(), 1);
    assert_eq!(h.dev().gid(1), Some(droce_transport::Gid::from_ipv4("10.0.0.1".parse().unwrap())));
    assert_eq!(droce_dpdk::port_name(h.port_id()).unwrap(), "net_ring0");
    for _ in 0..100 {
        h.progress();
    }
    drop(h);
    let e = Runtime::open(RuntimeConfig::from_env().unwrap()).unwrap_err();
    assert!(matches!(e, RuntimeError::Eal(_)) && !e.to_string().contains('\n'), "{e}");

    // zero-config: peek_env reports the slot without taking it; from_env takes it for good
    std::env::remove_var("DROCE_CONF");
    let link = format!("peek-{}", std::process::id());
    std::env::set_var("DROCE_LINK", &link);
    for _ in 0..2 {
        let c = RuntimeConfig::peek_env().unwrap();
        assert!(c.source.contains("mesh slot 0: 10.77.0.1") && c.link.as_ref().unwrap().slot == 0, "{}", c.source);
    }
    let c = RuntimeConfig::from_env().unwrap();
    assert!(c.link.as_ref().unwrap().slot == 0 && c.ip == ip("10.77.0.1") && c.peer == Some(ip("10.77.0.2")));
    let l = c.link.unwrap();
    let lock = l.lock_dir.join(format!("{link}.0.lock"));
    assert_eq!(std::fs::read_to_string(&lock).unwrap().trim(), std::process::id().to_string());
    // the lock is really held: flock(1) from another process cannot take it
    let st = std::process::Command::new("flock").args(["-n", lock.to_str().unwrap(), "true"]).status();
    if let Ok(st) = st {
        assert!(!st.success(), "slot lock not held");
    }
    assert_eq!(RuntimeConfig::peek_env().unwrap().link.unwrap().slot, 0, "own slot once taken");
    let _ = std::fs::remove_file(&lock);
    let _ = std::fs::remove_dir_all(&dir);
}
