//! droce-pmd as a test child: the EAL arguments of a hugepage-free, PCI-free process with a file
//! prefix of its own, optionally inside a network namespace, its stdout and stderr collected in
//! whole lines, a deadline after which the test kills it, and its DPDK runtime directory removed
//! when it is done.
//!
//! Only our own child is ever signalled, by its PID.

use super::{collect_lines, is_root, unique};

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_droce-pmd");

/// Where DPDK keeps the runtime files of the process started with `--file-prefix=prefix`.
fn runtime_dir(prefix: &str) -> PathBuf {
    if is_root() {
        PathBuf::from("/var/run/dpdk").join(prefix)
    } else {
        PathBuf::from(std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into())).join("dpdk").join(prefix)
    }
}

/// A running droce-pmd child whose output is collected by reader threads.
pub struct Pmd {
    child: Child,
    prefix: String,
    started: Instant,
    deadline: Duration,
    out: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

/// How a droce-pmd child ended, and all it printed.
#[derive(Debug)]
pub struct Done {
    /// Exit code; None when a signal ended it (then `signal`) or the deadline did.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Its stdout and stderr, with a last line from the harness when a signal or the deadline
    /// ended it.
    pub out: String,
}

impl Pmd {
    /// Starts droce-pmd on lcore `lcore` with one `--vdev` per entry of `vdevs` and `app` after
    /// the `--`, inside network namespace `netns` when given (`ip netns exec`, which execs, so
    /// the PID is droce-pmd's). The test kills it once `deadline` has passed.
    pub fn spawn(netns: Option<&str>, lcore: u32, vdevs: &[String], app: &[String], deadline: Duration) -> Pmd {
        Pmd::spawn_eal(netns, lcore, &[], vdevs, app, deadline)
    }

    /// As [`Pmd::spawn`] with `eal` added to the EAL arguments (e.g. `--single-file-segments`).
    pub fn spawn_eal(netns: Option<&str>, lcore: u32, eal: &[&str], vdevs: &[String], app: &[String], deadline: Duration) -> Pmd {
        let prefix = unique("droce-pmd-");
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, BIN]);
                c
            }
            None => Command::new(BIN),
        };
        cmd.args(["--no-huge", "-m", "512", "--no-pci", "--no-shconf", "--no-telemetry", "--log-level=lib.eal:error"]);
        cmd.arg(format!("-l{lcore}")).arg(format!("--file-prefix={prefix}")).args(eal);
        for d in vdevs {
            cmd.arg(format!("--vdev={d}"));
        }
        cmd.arg("--").args(app).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn droce-pmd");
        let out = Arc::new(Mutex::new(String::new()));
        let so: Box<dyn Read + Send> = Box::new(child.stdout.take().unwrap());
        let se: Box<dyn Read + Send> = Box::new(child.stderr.take().unwrap());
        let readers = vec![collect_lines(so, out.clone()), collect_lines(se, out.clone())];
        Pmd { child, prefix, started: Instant::now(), deadline, out, readers }
    }

    pub fn output(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// Whether `text` appears in the output within `limit`.
    pub fn wait_for(&self, text: &str, limit: Duration) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if self.output().contains(text) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// CPU time (user + system) the child has used so far, from /proc/PID/stat; None once it
    /// has exited.
    pub fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15
        let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        if f.first() == Some(&"Z") {
            // exited (not yet reaped): it will use no more
            return None;
        }
        let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        // SAFETY: sysconf has no preconditions
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Some(Duration::from_millis(ticks * 1000 / hz))
    }

    /// Waits until the child has run for `cpu` more CPU time than now (a busy-polling process
    /// makes progress only while it is on a CPU: on a loaded host a wall-clock sleep can pass
    /// with the child hardly scheduled), until it exits, or until `limit` of wall time; true
    /// when it has.
    pub fn wait_cpu(&self, cpu: Duration, limit: Duration) -> bool {
        let (t0, c0) = (Instant::now(), self.cpu_time().unwrap_or_default());
        while t0.elapsed() < limit {
            match self.cpu_time() {
                Some(c) if c >= c0 + cpu => return true,
                Some(_) => {}
                None => return false,
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// SIGKILL to our own child, by PID.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Sends `sig` to our own child, by PID (SIGSTOP: a peer that stays connected but silent).
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on the PID of a child we spawned and have not reaped yet.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, sig);
        }
    }

    /// Asks our own child, by PID, to stop (a batch run prints its statistics on SIGTERM).
    pub fn terminate(&self) {
        // SAFETY: kill(2) on the PID of a child we spawned and have not reaped yet.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
    }

    /// Waits for the exit, killing the child at its deadline.
    pub fn finish(mut self) -> Done {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if self.started.elapsed() > self.deadline => {
                    self.kill();
                    let _ = self.child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => break None,
            }
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let _ = std::fs::remove_dir_all(runtime_dir(&self.prefix));
        let mut out = self.output();
        let code = status.and_then(|s| s.code());
        let signal = status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s));
        match (status, signal) {
            (None, _) => out.push_str("\n[test harness: killed at the deadline]\n"),
            (Some(_), Some(sig)) => out.push_str(&format!("\n[test harness: process killed by signal {sig}]\n")),
            (Some(_), None) => {}
        }
        Done { code, signal, out }
    }
}

impl Drop for Pmd {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(runtime_dir(&self.prefix));
    }
}
