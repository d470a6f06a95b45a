//! `--test=rping` droce ↔ droce: two droce-pmd processes over one memif wire, rdma_cm
//! connection over QP1 (REQ/REP/RTU), rping's SEND/READ/SEND/SEND/WRITE/SEND per ping with
//! `-v -V`, DREQ/DREP at the end; a client to a port nobody listens on is rejected (REJ 8)
//! and the idle server gives up after its bound. Every process has its own file prefix,
//! runs with `--no-huge`, is killed by PID after its time limit, and its EAL runtime
//! directory and the socket directory are removed.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_droce-pmd");
const LIMIT: Duration = Duration::from_secs(60);

struct Tmp(std::path::PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn runtime_dir(prefix: &str) -> std::path::PathBuf {
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let base = if root {
        std::path::PathBuf::from("/var/run/dpdk")
    } else {
        std::path::PathBuf::from(std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into())).join("dpdk")
    };
    base.join(prefix)
}

struct Proc {
    child: Child,
    prefix: String,
    tmp: std::path::PathBuf,
}

fn spawn(tag: &str, tmp: &std::path::Path, role: &str, app: &[&str]) -> Proc {
    let prefix = format!("{}-{tag}", tmp.file_name().unwrap().to_string_lossy());
    let mut args: Vec<String> = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--no-telemetry"].iter().map(|s| s.to_string()).collect();
    args.push(format!("--file-prefix={prefix}"));
    args.push(format!("--vdev=net_memif0,role={role},socket={}/memif.sock,socket-abstract=no", tmp.display()));
    args.push("--".into());
    args.extend(app.iter().map(|s| s.to_string()));
    let out = std::fs::File::create(tmp.join(format!("{tag}.out"))).unwrap();
    let err = std::fs::File::create(tmp.join(format!("{tag}.err"))).unwrap();
    let child = Command::new(BIN).args(&args).stdin(Stdio::null()).stdout(out).stderr(err).spawn().expect("spawn droce-pmd");
    Proc { child, prefix, tmp: tmp.to_path_buf() }
}

impl Proc {
    /// Exit code, stdout, stderr; killed (by PID) after LIMIT.
    fn wait(mut self, tag: &str) -> (Option<i32>, String, String) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break Some(s);
            }
            if t0.elapsed() > LIMIT {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = std::fs::remove_dir_all(runtime_dir(&self.prefix));
        let out = std::fs::read_to_string(self.tmp.join(format!("{tag}.out"))).unwrap_or_default();
        let err = std::fs::read_to_string(self.tmp.join(format!("{tag}.err"))).unwrap_or_default();
        (status.and_then(|s| s.code()), out, err)
    }
}

/// The memif client must find the server's socket when it starts.
fn wait_socket(tmp: &std::path::Path) {
    let t0 = Instant::now();
    while !tmp.join("memif.sock").exists() {
        assert!(t0.elapsed() < Duration::from_secs(20), "the server's memif socket did not appear");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn tmpdir(tag: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!("droce-rping-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

#[test]
fn rping_droce_to_droce() {
    let t = tmpdir("ok");
    let s = spawn("srv", &t.0, "server", &["--test=rping", "-v", "-C", "5", "--timeout", "10"]);
    wait_socket(&t.0);
    let c = spawn("cli", &t.0, "client", &["--test=rping", "-v", "-V", "-C", "5", "-S", "100", "--timeout", "10", "10.77.0.1"]);
    let (cc, cout, cerr) = c.wait("cli");
    let (sc, sout, serr) = s.wait("srv");
    eprintln!("client:\n{cout}{cerr}\nserver:\n{sout}{serr}");
    assert_eq!(cc, Some(0), "client exit");
    assert_eq!(sc, Some(0), "server exit");
    let pings: Vec<&str> = cout.lines().filter(|l| l.starts_with("ping data: ")).collect();
    assert_eq!(pings.len(), 5);
    for (i, l) in pings.iter().enumerate() {
        let start = (b'A' + i as u8) as char;
        assert!(l.starts_with(&format!("ping data: rdma-ping-{i}: {start}")), "{l}");
        // 100-byte buffer: 99 characters then the NUL
        assert_eq!(l.len() - "ping data: ".len(), 99, "{l}");
    }
    let spings: Vec<&str> = sout.lines().filter(|l| l.starts_with("server ping data: ")).collect();
    assert_eq!(spings.len(), 5);
    for (a, b) in pings.iter().zip(&spings) {
        assert_eq!(a.strip_prefix("ping data: "), b.strip_prefix("server ping data: "));
    }
    assert!(cerr.contains("client DISCONNECT EVENT"), "{cerr}");
    assert!(serr.contains("server DISCONNECT EVENT"), "{serr}");
}

#[test]
fn rping_rejected_and_idle_server_gives_up() {
    let t = tmpdir("rej");
    // A server on another port: the client's REQ gets REJ 8 (invalid service ID).
    let s = spawn("srv", &t.0, "server", &["--test=rping", "-p", "7000", "--timeout", "1.5"]);
    wait_socket(&t.0);
    let c = spawn("cli", &t.0, "client", &["--test=rping", "-p", "7001", "-C", "1", "--timeout", "10", "10.77.0.1"]);
    let (cc, _, cerr) = c.wait("cli");
    assert_eq!(cc, Some(1), "{cerr}");
    assert!(cerr.contains("REJ reason 8"), "{cerr}");
    // The server waits 10 × --timeout for a connect request, then fails.
    let (sc, _, serr) = s.wait("srv");
    assert_eq!(sc, Some(1), "{serr}");
    assert!(serr.contains("no connect request"), "{serr}");
}
