//! The host tests run `examples/host_pair.rs` in child processes: the test binary re-runs
//! itself with `HOST_TEST_CHILD` set, and the `child` test then opens the global host from the
//! environment it was given (EAL inits once per process, so every end is its own process).

#![allow(dead_code)]

#[path = "../../examples/host_pair.rs"]
#[allow(dead_code)]
mod example;

use std::io::{BufRead, BufReader, Read};
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const CHILD: &str = "HOST_TEST_CHILD";

/// Body of the `child` test: does nothing unless this process is a spawned child. Prints the
/// CPU count it may run on before and after the host opened (EAL pins the caller: the host
/// must undo that), runs the example, then holds the host for HOST_TEST_HOLD_MS.
pub fn child_main() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    let peers: Option<Vec<IpAddr>> = std::env::var("HOST_TEST_PEERS").ok().map(|v| v.split(',').map(|s| s.parse().unwrap()).collect());
    let before = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    // HOST_TEST_ROLE_FIRST=<file>: take the zero-config role now (as fi_getinfo does) and open
    // the host only once <file> exists (as fi_domain does later), at most 30 s on
    if let Ok(go) = std::env::var("HOST_TEST_ROLE_FIRST") {
        match droce_dpdk::runtime::RuntimeConfig::from_env() {
            Ok(c) => println!("role taken: {}", c.source),
            Err(e) => {
                eprintln!("host_pair: {e}");
                std::process::exit(2);
            }
        }
        let t0 = std::time::Instant::now();
        while !std::path::Path::new(&go).exists() && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let t_open = std::time::Instant::now();
    if let Err(e) = droce_dpdk::runtime::global() {
        println!("open failed after {} ms", t_open.elapsed().as_millis());
        eprintln!("host_pair: {e}");
        std::process::exit(2);
    }
    println!("open took {} ms", t_open.elapsed().as_millis());
    let after = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    println!("cpus before {before} after {after}");
    // HOST_TEST_OPEN_ONLY=1: open the host and hold it, no traffic (a peer that goes away)
    if std::env::var("HOST_TEST_OPEN_ONLY").is_ok_and(|v| v == "1") {
        println!("opened");
        let hold = std::env::var("HOST_TEST_HOLD_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        std::thread::sleep(Duration::from_millis(hold));
        std::process::exit(0);
    }
    let quiet = match std::env::var("HOST_TEST_QUIET").as_deref() {
        Ok("1") => example::Quiet::AfterReceive,
        Ok("away") => example::Quiet::Away,
        _ => example::Quiet::Off,
    };
    let code = match example::run(peers, Duration::from_secs(30), quiet) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("host_pair: {e}");
            1
        }
    };
    // HOST_TEST_THEN_LOST=<ip> with HOST_TEST_THEN_PEERS=<ip,ip>: once the host reports <ip>
    // gone (at most 30 s on), a second exchange with the given peers (a mesh member exited:
    // the others go on talking)
    let code = match (code, std::env::var("HOST_TEST_THEN_LOST"), std::env::var("HOST_TEST_THEN_PEERS")) {
        (0, Ok(lost), Ok(then)) => second_round(lost.parse().unwrap(), then.split(',').map(|s| s.parse().unwrap()).collect()),
        (c, ..) => c,
    };
    let hold = std::env::var("HOST_TEST_HOLD_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    std::thread::sleep(Duration::from_millis(hold));
    std::process::exit(code);
}

/// Waits (bounded) until the host reports `lost` gone, prints `lost <ip> after N ms` and the
/// peers whose links are still up, then exchanges with `peers` again on another CM port.
fn second_round(lost: IpAddr, peers: Vec<IpAddr>) -> i32 {
    let t0 = std::time::Instant::now();
    let mut seen = 0usize;
    let found = loop {
        {
            let mut h = droce_dpdk::runtime::lock_global().unwrap();
            h.progress();
            if h.lost_peers_since(&mut seen).contains(&lost) {
                println!("lost {lost} after {} ms; links up: {:?}", t0.elapsed().as_millis(), h.mesh_peers_up());
                break true;
            }
        }
        if t0.elapsed() > Duration::from_secs(30) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    if !found {
        eprintln!("host_pair: {lost} was never reported lost");
        return 1;
    }
    match example::run_on(Some(peers), Duration::from_secs(30), example::Quiet::Off, 7472) {
        Ok(()) => {
            println!("second round done");
            0
        }
        Err(e) => {
            eprintln!("host_pair: second round: {e}");
            1
        }
    }
}

/// A child process whose stdout lines are collected as they come.
pub struct Proc {
    pub child: Child,
    pub out: Arc<Mutex<Vec<String>>>,
    err_reader: Option<std::thread::JoinHandle<String>>,
}

pub fn spawn(envs: &[(&str, String)]) -> Proc {
    let exe = std::env::current_exe().unwrap();
    let mut c = Command::new(exe);
    c.args(["--exact", "child", "--nocapture", "--test-threads=1"]).env(CHILD, "1").stdout(Stdio::piped()).stderr(Stdio::piped());
    // the children's own config comes only from `envs`
    for v in ["DROCE_CONF", "DROCE_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "DROCE_PROGRESS", "DROCE_LINK", "DROCE_EAL", "DROCE_PCAP", "DROCE_FAULTS"] {
        c.env_remove(v);
    }
    for (k, v) in envs {
        c.env(k, v);
    }
    let mut child = c.spawn().expect("spawn the test binary as a child");
    let out = Arc::new(Mutex::new(Vec::new()));
    let o = out.clone();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            o.lock().unwrap().push(l);
        }
    });
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = Some(std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    }));
    Proc { child, out, err_reader }
}

impl Proc {
    pub fn has_line(&self, pred: impl Fn(&str) -> bool) -> bool {
        self.out.lock().unwrap().iter().any(|l| pred(l))
    }

    /// Waits (bounded) for the exit; returns (status code, stdout lines, stderr). Killed (by
    /// its pid, through the Child handle) after `limit`.
    pub fn finish(mut self, limit: Duration) -> (Option<i32>, Vec<String>, String) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s.code();
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = self.err_reader.take().unwrap().join().unwrap_or_default();
        // the reader thread ends at EOF, right after the exit
        std::thread::sleep(Duration::from_millis(50));
        let out = self.out.lock().unwrap().clone();
        (status, out, err)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits until `pred` holds (bounded).
pub fn wait_until(limit: Duration, mut pred: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if pred() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Checks one end's output: the expected texts and patterned messages from every peer, done,
/// CPU affinity unchanged by the host.
pub fn check_end(name: &str, (code, out, err): &(Option<i32>, Vec<String>, String), me: &str, peers: &[&str]) {
    let all = out.join("\n");
    assert_eq!(*code, Some(0), "{name} exit status; stdout:\n{all}\nstderr:\n{err}");
    for p in peers {
        let t = format!("got text 'hello from {p} to {me}' from {p}");
        assert!(out.contains(&t), "{name}: want '{t}' in:\n{all}");
        let b = format!("got 200000 bytes from {p}: pattern ok");
        assert!(out.contains(&b), "{name}: want '{b}' in:\n{all}");
    }
    assert!(out.iter().any(|l| *l == format!("done: {} peers", peers.len())), "{name}: {all}");
    // the harness prints "test child ... " in front of the child's first line
    let cpus = out.iter().find_map(|l| l.find("cpus before").map(|i| &l[i..])).unwrap_or_else(|| panic!("{name}: no cpus line in {all}"));
    let w: Vec<&str> = cpus.split_whitespace().collect();
    assert_eq!(w[2], w[4], "{name}: the host changed the caller's CPU affinity: {cpus}");
    assert!(!err.contains("memif_") && !err.contains("EAL:"), "{name}: DPDK log lines on stderr: {err}");
}

/// Removes a zero-config link's slot lock files when the test ends (its processes, our
/// children, have ended by then; a lock file of a live process would only be re-created).
pub struct Locks(pub String);

impl Drop for Locks {
    fn drop(&mut self) {
        // SAFETY: getuid has no preconditions
        let dir = std::path::PathBuf::from(format!("/tmp/droce-{}", unsafe { libc::getuid() }));
        for s in 0..droce_dpdk::runtime::MESH_MAX {
            let _ = std::fs::remove_file(dir.join(format!("{}.{s}.lock", self.0)));
        }
    }
}
