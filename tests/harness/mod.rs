//! Shared by the end-to-end tests (`mod harness;` in each): bounded child processes with
//! captured output, TCP ports reserved across concurrent test runs, and the location of the
//! workspace's provider libraries. `pmd` runs droce-pmd itself (its EAL arguments, file prefix
//! and runtime directory).
//!
//! Every child runs in its own process group; at its deadline the group is sent SIGTERM, then
//! SIGKILL (by the group id of the group this harness created, never by name), so an `mpirun`
//! takes its ranks with it.
//!
//! # Where the provider libraries come from
//! `workspace_cdylib(package, file)` runs `cargo build -p <package>` (same profile as this test,
//! same target directory, a no-op when it is up to date) and returns
//! `<target dir>/<profile>/<file>`. The target directory is the one this test executable lives in
//! (`<target>/<profile>/deps/<test>-<hash>`), so `CARGO_TARGET_DIR` and `--release` are honoured
//! without configuration. `DROCE_FI_PROVIDER_DIR` / `DROCE_UCT_LIB` (checked by the callers)
//! point the tests at an installed copy instead.
#![allow(dead_code)]

pub mod pmd;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

static SEQ: AtomicU32 = AtomicU32::new(0);
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs are serialised: every process busy-polls and the CI machine has two cores.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A name unique to this test process and call.
pub fn unique(tag: &str) -> String {
    format!("{tag}{}x{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

/// Removes the lock files `/tmp/droce-<uid>/<link>.<slot>.lock` of a zero-config link whose
/// processes have ended. Every test names a link of its own (`unique`), so without this each
/// run leaves its files behind (hundreds a day).
pub fn remove_link_locks(link: &str) {
    // SAFETY: getuid has no preconditions
    let dir = PathBuf::from(format!("/tmp/droce-{}", unsafe { libc::getuid() }));
    for s in 0..droce_dpdk::runtime::MESH_MAX {
        let _ = std::fs::remove_file(dir.join(format!("{link}.{s}.lock")));
    }
}

/// Removes its link's lock files when dropped: held by a test function while its processes run.
pub struct LinkLocks(pub String);

impl LinkLocks {
    /// The link named by `DROCE_LINK` in `env`, if any.
    pub fn of(env: &[(String, String)]) -> Option<LinkLocks> {
        env.iter().find(|(k, _)| k == "DROCE_LINK").map(|(_, v)| LinkLocks(v.clone()))
    }
}

impl Drop for LinkLocks {
    fn drop(&mut self) {
        remove_link_locks(&self.0);
    }
}

/// Ports handed out: below the kernel's ephemeral range (32768 on), so that no outgoing
/// connection's local port can take one between the choice and the server's bind.
const PORTS: std::ops::Range<u16> = 20000..32000;

/// A TCP port for one server/client pair, reserved for the life of this test process.
///
/// "Find a free port, bind later" alone lets two test binaries running at the same time pick
/// the same port (seen: two runs both used port 32384, and one droce-pmd read the other
/// program's bytes). Every port handed out is held by a POSIX record lock on its byte of one
/// file shared by all test processes of this user (`/tmp/droce-<uid>/test-ports.lock`);
/// the kernel drops the locks when the process ends, so nothing is left to clean up. A port
/// some other program listens on or holds is passed over.
pub fn free_port() -> u16 {
    static TAKEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let file = port_lock_file();
    let span = u32::from(PORTS.end - PORTS.start);
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    // where the search starts: apart for each process; the same for all with
    // DROCE_TEST_PORT_START (the test that the locks keep concurrent processes apart)
    let first = std::env::var("DROCE_TEST_PORT_START").ok().and_then(|v| v.parse().ok()).unwrap_or(std::process::id().wrapping_mul(7919));
    for i in 0..span {
        let p = PORTS.start + ((first.wrapping_add(i.wrapping_mul(13))) % span) as u16;
        // record locks never conflict within one process: the list keeps this process's own
        if taken.contains(&p) || !lock_byte(file, p) {
            continue;
        }
        taken.push(p);
        if !tcp_listening(p) && std::net::TcpListener::bind(("0.0.0.0", p)).is_ok() {
            return p;
        }
    }
    panic!("no free TCP port in {PORTS:?}");
}

/// The file whose bytes stand for the ports, opened once and kept open: closing any descriptor
/// of it would drop every record lock this process holds on it.
fn port_lock_file() -> &'static std::fs::File {
    static FILE: OnceLock<std::fs::File> = OnceLock::new();
    FILE.get_or_init(|| {
        // SAFETY: getuid has no preconditions
        let dir = PathBuf::from(format!("/tmp/droce-{}", unsafe { libc::getuid() }));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("test-ports.lock");
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
}

/// Takes a write lock on byte `at` of `file` without waiting; false when another process has it.
fn lock_byte(file: &std::fs::File, at: u16) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero `flock` is a valid value of this plain C struct; the fields that
    // matter are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = libc::off_t::from(at);
    fl.l_len = 1;
    // SAFETY: fcntl(F_SETLK) on a descriptor this process keeps open, with a pointer to a live
    // `flock` that the call only reads.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) == 0 }
}

/// Is some socket on this machine (this network namespace) listening on TCP `port`?
/// Reads /proc/net/tcp{,6}: a probe connection would consume a one-shot server's accept.
pub fn tcp_listening(port: u16) -> bool {
    tcp_port_in_state(port, "0A")
}

/// Is a TCP connection to local `port` established (a tool's control socket to its peer)?
pub fn tcp_established(port: u16) -> bool {
    tcp_port_in_state(port, "01")
}

/// Whether /proc/net/tcp{,6} has a socket on local `port` in `state` (kernel hex code).
fn tcp_port_in_state(port: u16, state: &str) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .map(|t| {
                t.lines().skip(1).any(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == state
                })
            })
            .unwrap_or(false)
    })
}

/// A running child whose stdout and stderr are collected (interleaved) by reader threads.
pub struct Proc {
    pub name: String,
    child: Child,
    started: Instant,
    deadline: Duration,
    out: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

#[derive(Debug)]
pub struct Done {
    pub name: String,
    /// Exit code; None when killed by a signal or at the deadline.
    pub code: Option<i32>,
    pub timed_out: bool,
    pub secs: f64,
    pub out: String,
}

impl Done {
    pub fn ok(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }
    /// One block for an assertion message.
    pub fn show(&self) -> String {
        let how = if self.timed_out {
            "KILLED AT ITS DEADLINE".to_string()
        } else {
            match self.code {
                Some(c) => format!("exit code {c}"),
                None => "killed by a signal".to_string(),
            }
        };
        format!("----- {} ({how}, {:.1} s) -----\n{}\n", self.name, self.secs, self.out.trim_end())
    }
}

impl Proc {
    /// Spawns `cmd` (program + args) with `env` added to the inherited environment.
    pub fn spawn(name: &str, cmd: &[String], env: &[(String, String)], deadline: Duration) -> Proc {
        let mut c = Command::new(&cmd[0]);
        c.args(&cmd[1..]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        // own process group: the deadline kill reaches grandchildren (mpirun's ranks)
        c.process_group(0);
        let mut child = c.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", cmd[0]));
        let out = Arc::new(Mutex::new(format!("$ {}{}\n", env_str(env), cmd.join(" "))));
        let mut readers = Vec::new();
        let so: Box<dyn Read + Send> = Box::new(child.stdout.take().unwrap());
        let se: Box<dyn Read + Send> = Box::new(child.stderr.take().unwrap());
        for r in [so, se] {
            readers.push(collect_lines(r, out.clone()));
        }
        Proc { name: name.to_string(), child, started: Instant::now(), deadline, out, readers }
    }

    pub fn output(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn kill_group(&mut self) {
        let pgid = self.child.id() as libc::pid_t; // the group this harness created for it
        // SAFETY: kill(2) with a negative pid signals that process group; no memory is involved.
        unsafe {
            libc::kill(-pgid, libc::SIGTERM);
        }
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(3) {
            if !self.running() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }

    /// Waits for the exit; at the deadline kills the process group.
    pub fn finish(mut self) -> Done {
        let mut timed_out = false;
        let code = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s.code(),
                Ok(None) if self.started.elapsed() > self.deadline => {
                    timed_out = true;
                    self.kill_group();
                    let _ = self.child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => break None,
            }
        };
        // a grandchild that kept the pipes open must not hold the readers forever
        if !timed_out {
            let pgid = self.child.id() as libc::pid_t;
            let t0 = Instant::now();
            while self.readers.iter().any(|r| !r.is_finished()) && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(10));
            }
            if self.readers.iter().any(|r| !r.is_finished()) {
                // SAFETY: kill(2) on the process group this harness created.
                unsafe {
                    libc::kill(-pgid, libc::SIGKILL);
                }
            }
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let secs = self.started.elapsed().as_secs_f64();
        Done { name: self.name.clone(), code, timed_out, secs, out: self.output() }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill_group();
            let _ = self.child.wait();
        }
    }
}

/// Reads `r` to its end on a thread, appending to `out` whole lines only (the last, unterminated
/// one at the end). stdout and stderr are two pipes into one `out`: appended as read, a line the
/// child wrote in pieces (`eprintln!` is one write(2) per formatted argument) could be cut by the
/// other stream's text, and a test looking for it would fail on timing alone.
pub fn collect_lines(mut r: Box<dyn Read + Send>, out: Arc<Mutex<String>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        let mut pending: Vec<u8> = Vec::new();
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            pending.extend_from_slice(&buf[..n]);
            if let Some(end) = pending.iter().rposition(|&b| b == b'\n') {
                let rest = pending.split_off(end + 1);
                out.lock().unwrap().push_str(&String::from_utf8_lossy(&pending));
                pending = rest;
            }
        }
        out.lock().unwrap().push_str(&String::from_utf8_lossy(&pending));
    })
}

fn env_str(env: &[(String, String)]) -> String {
    env.iter().map(|(k, v)| format!("{k}={v} ")).collect()
}

/// Runs one command to completion (bounded).
pub fn run(name: &str, cmd: &[String], env: &[(String, String)], deadline: Duration) -> Done {
    Proc::spawn(name, cmd, env, deadline).finish()
}

pub fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

pub fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}

/// `<target dir>/<profile>` of this test executable.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test exe dir");
    if deps.file_name().map(|n| n == "deps").unwrap_or(false) {
        deps.parent().expect("profile dir").to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

/// Builds workspace package `package` (a cdylib) with the same profile into the same target
/// directory as this test and returns the path of `file` there. Built once per test process.
pub fn workspace_cdylib(package: &str, file: &str) -> Result<PathBuf, String> {
    static BUILT: OnceLock<Mutex<Vec<(String, Result<PathBuf, String>)>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut b = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, r)) = b.iter().find(|(p, _)| p == package) {
        return r.clone();
    }
    let r = build_cdylib(package, file);
    b.push((package.to_string(), r.clone()));
    r
}

fn build_cdylib(package: &str, file: &str) -> Result<PathBuf, String> {
    let prof = profile_dir();
    let target = prof.parent().ok_or("no target dir")?.to_path_buf();
    let profile = prof.file_name().and_then(|n| n.to_str()).unwrap_or("debug").to_string();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
    let mut c = Command::new(cargo);
    c.current_dir(env!("CARGO_MANIFEST_DIR")).args(["build", "--quiet", "-p", package]);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            c.arg("--release");
        }
        other => {
            c.args(["--profile", other]);
        }
    }
    c.env("CARGO_TARGET_DIR", &target);
    let o = c.output().map_err(|e| format!("cargo build -p {package}: {e}"))?;
    if !o.status.success() {
        return Err(format!("cargo build -p {package} failed:\n{}", String::from_utf8_lossy(&o.stderr)));
    }
    let p = prof.join(file);
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("cargo build -p {package} succeeded but {} does not exist", p.display()))
    }
}

/// Directory of the built libfabric provider (`libdroce_fi.so`): `DROCE_FI_PROVIDER_DIR` if set,
/// else built from the workspace.
pub fn fi_provider_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("DROCE_FI_PROVIDER_DIR") {
        return PathBuf::from(d);
    }
    match workspace_cdylib("droce-fi", "libdroce_fi.so") {
        Ok(p) => p.parent().unwrap().to_path_buf(),
        Err(e) => panic!("{e}"),
    }
}

pub fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

pub fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The sum over every `name: value` of the device statistics blocks in `out` (`show roce
/// stats` form, which the frontends print at close: `DROCE_UCX_STATS`, `DROCE_DEBUG` for the
/// libfabric provider; one block per process), and how many blocks named it.
pub fn counter(out: &str, name: &str) -> (u64, usize) {
    let key = format!("{name}:");
    let mut sum = 0;
    let mut seen = 0;
    for l in out.lines() {
        let mut w = l.split_whitespace();
        while let Some(k) = w.next() {
            if k == key {
                if let Some(v) = w.next().and_then(|v| v.parse::<u64>().ok()) {
                    sum += v;
                    seen += 1;
                }
            }
        }
    }
    (sum, seen)
}
