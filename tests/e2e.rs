//! End-to-end tests of droce-pmd: real DPDK on virtual ports (net_ring, net_null in one process;
//! net_memif between two processes), the prompt driven over stdin, and bad input.
//!
//! Every process gets its own `--file-prefix` and socket path, runs with `--no-huge`, ends by
//! itself (`--run-time` or `quit`), and is killed by PID if it outlives its time limit.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_droce-pmd");
/// Upper bound for one droce-pmd process (runs last 1-3 s; the rest is slack for a loaded CI box).
const LIMIT: Duration = Duration::from_secs(90);

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A name unique to this test process and call, for file prefixes and sockets.
fn unique(tag: &str) -> String {
    format!("droce-t{}-{}-{}", std::process::id(), tag, SEQ.fetch_add(1, Ordering::Relaxed))
}

/// EAL arguments for a process on virtual ports only: no hugepages, no PCI, own prefix.
fn eal(tag: &str) -> Vec<String> {
    ["--no-huge", "-m", "256", "--no-pci", "--no-shconf"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("--file-prefix={}", unique(tag))])
        .collect()
}

struct Out {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
}

struct Proc {
    child: Child,
    /// EAL runtime directory of the child, removed after it ends (a crashed child leaves it).
    runtime_dir: Option<std::path::PathBuf>,
    stdin: Option<std::process::ChildStdin>,
    started: Instant,
    out: Option<std::thread::JoinHandle<String>>,
    /// Stdout so far, for waiting on a line while the process runs.
    live: std::sync::Arc<std::sync::Mutex<String>>,
    err: Option<std::thread::JoinHandle<String>>,
}

/// Where EAL keeps a process's runtime files for `--file-prefix=prefix`.
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

/// A process whose stdin the test writes line by line (`Proc::send`).
fn spawn_interactive(args: &[String]) -> Proc {
    let mut p = spawn(args, Some(""));
    p.stdin = p.child.stdin.take();
    p
}

fn spawn(args: &[String], stdin: Option<&str>) -> Proc {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn droce-pmd");
    if let Some(text) = stdin.filter(|t| !t.is_empty()) {
        let mut si = child.stdin.take().unwrap();
        let text = text.to_string();
        // A line `#pause` (a comment to droce-pmd) makes the writer wait, so that forwarding
        // started by the lines before it has time to move packets.
        std::thread::spawn(move || {
            for line in text.split_inclusive('\n') {
                if line.trim() == "#pause" {
                    std::thread::sleep(Duration::from_millis(700));
                }
                if si.write_all(line.as_bytes()).is_err() {
                    break;
                }
                let _ = si.flush();
            }
        });
    }
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let live = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let live2 = live.clone();
    let out = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match so.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => live2.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
        let s = live2.lock().unwrap().clone();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let runtime_dir = args.iter().find_map(|a| a.strip_prefix("--file-prefix=")).map(runtime_dir);
    Proc { child, runtime_dir, stdin: None, started: Instant::now(), out: Some(out), live, err: Some(err) }
}

impl Proc {
    /// Waits until stdout holds `text` `count` times or more (bounded by `limit`).
    fn wait_for(&self, text: &str, count: usize, limit: Duration) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if self.live.lock().unwrap().matches(text).count() >= count {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    fn send(&mut self, line: &str) {
        let si = self.stdin.as_mut().expect("interactive process");
        si.write_all(line.as_bytes()).expect("write to droce-pmd stdin");
        si.flush().expect("flush");
    }

    fn take_out(&mut self) -> String {
        self.out.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default()
    }

    fn take_err(&mut self) -> String {
        self.err.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default()
    }

    /// Waits up to LIMIT; kills the child (by its PID) and fails the test past that.
    fn wait(mut self) -> Out {
        drop(self.stdin.take());
        loop {
            match self.child.try_wait().expect("try_wait") {
                Some(st) => {
                    return Out { code: st.code(), signal: std::os::unix::process::ExitStatusExt::signal(&st), stdout: self.take_out(), stderr: self.take_err() };
                }
                None if self.started.elapsed() > LIMIT => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    let so = self.take_out();
                    let se = self.take_err();
                    panic!("droce-pmd did not end within {LIMIT:?}\nstdout:\n{so}\nstderr:\n{se}");
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Only reached with the child still running if the test failed: never leave it behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(d) = self.runtime_dir.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Sends SIGTERM to our own child (by its PID).
fn sigterm(p: &Proc) {
    let pid = p.child.id() as libc::pid_t;
    // SAFETY: kill(2) on the PID of a child this test spawned and has not reaped yet.
    let r = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(r, 0, "kill -TERM {pid}");
}

fn run(args: &[String], stdin: Option<&str>) -> Out {
    spawn(args, stdin).wait()
}

fn args(eal: Vec<String>, more_eal: &[&str], app: &[&str]) -> Vec<String> {
    let mut v = eal;
    v.extend(more_eal.iter().map(|s| s.to_string()));
    v.push("--".into());
    v.extend(app.iter().map(|s| s.to_string()));
    v
}

/// RX-packets, RX-dropped, TX-packets, TX-dropped of a forward statistics block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Fwd {
    rx: u64,
    rx_dropped: u64,
    tx: u64,
    tx_dropped: u64,
}

fn field(line: &str, name: &str) -> u64 {
    let i = line.find(name).unwrap_or_else(|| panic!("no {name} in {line:?}")) + name.len();
    line[i..].split_whitespace().next().unwrap().parse().unwrap()
}

fn parse_block(lines: &[&str]) -> Fwd {
    let rx = lines.iter().find(|l| l.trim_start().starts_with("RX-packets:")).unwrap();
    let tx = lines.iter().find(|l| l.trim_start().starts_with("TX-packets:")).unwrap();
    Fwd { rx: field(rx, "RX-packets:"), rx_dropped: field(rx, "RX-dropped:"), tx: field(tx, "TX-packets:"), tx_dropped: field(tx, "TX-dropped:") }
}

/// Forward statistics of each port (in order), and the accumulated block, of the last `stop`.
fn fwd_stats(stdout: &str) -> (Vec<Fwd>, Fwd) {
    let lines: Vec<&str> = stdout.lines().collect();
    let last_acc = lines.iter().rposition(|l| l.contains("Accumulated forward statistics for all ports")).unwrap_or_else(|| panic!("no forward statistics in:\n{stdout}"));
    let mut ports = Vec::new();
    let mut i = 0;
    while i < last_acc {
        if lines[i].contains("Forward statistics for port") {
            ports.push(parse_block(&lines[i + 1..(i + 5).min(lines.len())]));
        }
        i += 1;
    }
    // Keep only the blocks of the last stop (one per port, right before the accumulated block).
    let acc = parse_block(&lines[last_acc + 1..(last_acc + 5).min(lines.len())]);
    (ports, acc)
}

fn assert_ok(o: &Out) {
    assert_eq!(o.code, Some(0), "exit code (signal {:?})\nstdout:\n{}\nstderr:\n{}", o.signal, o.stdout, o.stderr);
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
}

#[test]
fn embedded_default_demo_runs_and_ends() {
    let o = run(&[], None);
    assert_ok(&o);
    assert!(o.stdout.contains("embedded demo"), "{}", o.stdout);
    assert!(o.stdout.contains("NIC statistics for port 0"), "{}", o.stdout);
    let (ports, acc) = fwd_stats(&o.stdout);
    assert_eq!(ports.len(), 2);
    // io forwarding with one first burst per port: packets circulate port 0 <-> port 1.
    assert!(acc.rx > 10_000, "{acc:?}");
    assert!(acc.tx >= acc.rx && acc.tx - acc.rx <= 2 * 32, "in flight at most the first bursts: {acc:?}");
    assert_eq!(acc.tx_dropped, 0);
    // the frames still in the rings at the end go back to the pool before it is dropped: a
    // newcomer's first run ends without a leak warning
    assert!(!o.stderr.contains("in use") && !o.stdout.contains("in use"), "{}", o.stderr);
}

#[test]
fn ring_io_pairs_ports() {
    let o = run(&args(eal("ringio"), &["-l", "0", "--vdev=net_ring0", "--vdev=net_ring1"], &["--forward-mode=io", "--tx-first", "--run-time=1", "--burst=16"]), None);
    assert_ok(&o);
    let (ports, acc) = fwd_stats(&o.stdout);
    assert_eq!(ports.len(), 2);
    for p in &ports {
        assert!(p.rx > 1000 && p.tx > 1000, "{ports:?}");
    }
    // Packets received on port 0 leave on port 1 and vice versa; only the 2 x 16 first-burst
    // packets can be in a ring at stop.
    assert!(ports[0].rx <= ports[1].tx && ports[1].tx - ports[0].rx <= 32, "{ports:?}");
    assert!(ports[1].rx <= ports[0].tx && ports[0].tx - ports[1].rx <= 32, "{ports:?}");
    assert_eq!(acc.tx_dropped, 0);
}

#[test]
fn ring_txonly_fills_the_ring_then_drops() {
    let o = run(&args(eal("ringtx"), &["-l", "0", "--vdev=net_ring0"], &["--forward-mode=txonly", "--run-time=1"]), None);
    assert_ok(&o);
    let (ports, _) = fwd_stats(&o.stdout);
    assert_eq!(ports.len(), 1);
    // Nothing drains a single net_ring port in txonly: the ring takes what fits, the rest is
    // counted as dropped (and freed).
    assert!(ports[0].tx > 0 && ports[0].tx < 70_000, "{ports:?}");
    assert!(ports[0].tx_dropped > 0, "{ports:?}");
    assert_eq!(ports[0].rx, 0);
}

#[test]
fn null_modes_count_sensibly() {
    for (mode, rx, tx) in [("txonly", false, true), ("rxonly", true, false), ("io", true, true), ("mac", true, true), ("macswap", true, true)] {
        let o = run(&args(eal("null"), &["-l", "0", "--vdev=net_null0"], &[&format!("--forward-mode={mode}"), "--run-time=1", "--stats-period=1"]), None);
        assert_ok(&o);
        let (ports, acc) = fwd_stats(&o.stdout);
        assert_eq!(ports.len(), 1, "{mode}");
        assert_eq!(acc.rx > 0, rx, "{mode}: {acc:?}");
        assert_eq!(acc.tx > 0, tx, "{mode}: {acc:?}");
        if rx && tx {
            // net_null takes every packet: everything received is sent.
            assert_eq!(acc.rx, acc.tx + acc.tx_dropped, "{mode}: {acc:?}");
        }
        assert!(o.stdout.contains("Throughput (since last show)"), "{mode}");
    }
}

/// txonly in one process -> memif -> rxonly in another: the receiver must count exactly what
/// the sender's PMD accepted.
///
/// Order matters: DPDK 22.11's memif unmaps its rings on disconnect while the peer may still be
/// inside rx_burst (a SIGSEGV in the peer). So the sender runs at the prompt: `start`, wait,
/// `stop` (nothing more enters the ring), wait for the receiver to drain, end the receiver
/// (SIGTERM: it stops polling, then closes), and only then `quit` the sender.
fn memif_pair(txpkts: &str) {
    let sock = format!("/tmp/{}.sock", unique("memif"));
    let _ = std::fs::remove_file(&sock);
    let rx = spawn(
        &args(eal("mrx"), &["-l", "0", &format!("--vdev=net_memif0,role=server,socket={sock}")], &["--forward-mode=rxonly", "--stats-period=1"]),
        None,
    );
    assert!(rx.wait_for("Port 0:", 1, Duration::from_secs(30)), "memif server did not start");
    let mut tx = spawn_interactive(&args(
        eal("mtx"),
        &["-l", "1", &format!("--vdev=net_memif0,role=client,socket={sock}")],
        &["-i", "--forward-mode=txonly", &format!("--txpkts={txpkts}")],
    ));
    // Wait for the memif link: ask for port info until it says "up".
    let mut up = false;
    for i in 1..=40 {
        tx.send("show port info 0\n");
        if tx.wait_for("Device name: net_memif0", i, Duration::from_secs(10)) && tx.live.lock().unwrap().contains("Link status: up") {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(up, "memif link never came up");
    tx.send("start\n");
    std::thread::sleep(Duration::from_millis(1000));
    tx.send("stop\n");
    std::thread::sleep(Duration::from_millis(700));
    sigterm(&rx);
    let rx = rx.wait();
    tx.send("quit\n");
    let tx = tx.wait();
    let _ = std::fs::remove_file(&sock);
    assert_ok(&tx);
    assert_ok(&rx);
    let (_, sent) = fwd_stats(&tx.stdout);
    let (_, got) = fwd_stats(&rx.stdout);
    assert!(sent.tx > 10_000, "sender sent too little: {sent:?}\n{}", tx.stdout);
    assert_eq!(got.rx, sent.tx, "receiver RX {got:?} vs sender TX {sent:?}");
    assert_eq!(got.tx, 0);
    assert_eq!(sent.rx, 0);
}

#[test]
fn memif_two_processes_txonly_to_rxonly_64() {
    memif_pair("64");
}

#[test]
fn memif_two_processes_txonly_to_rxonly_1500() {
    memif_pair("1500");
}

#[test]
fn prompt_over_stdin() {
    let script = "help\nshow port info all\nshow config fwd\nset fwd txonly\nstart\n#pause\nshow port stats all\nfrobnicate now\nshow port stats 7\nstart\nstop\nshow fwd stats all\nclear port stats all\nshow port stats 0\nshow port xstats 0\nset promisc all off\nshow port info 0\nquit\n";
    let o = run(&args(eal("prompt"), &["-l", "0", "--vdev=net_null0"], &["-i"]), Some(script));
    assert_ok(&o);
    let errs: Vec<&str> = o.stderr.lines().filter(|l| l.starts_with("droce-pmd: error:")).collect();
    assert_eq!(
        errs,
        vec![
            "droce-pmd: error: unknown command 'frobnicate now'; type 'help' for the list of commands",
            "droce-pmd: error: port 7 out of range: valid ports are 0 or 'all'",
            "droce-pmd: error: packet forwarding already started; type 'stop' first",
            // net_null cannot leave promiscuous mode: the PMD's refusal is one line too.
            "droce-pmd: error: port 0: rte_eth_promiscuous_disable failed: Operation not supported (errno 95)",
        ],
        "stderr:\n{}",
        o.stderr
    );
    // Commands after the errors still ran: the stop printed forward statistics with traffic.
    assert!(o.stdout.contains("Set txonly packet forwarding mode"));
    assert!(o.stdout.contains("Device name: net_null0"));
    assert!(o.stdout.contains("NIC statistics for port 0 cleared"));
    assert!(o.stdout.contains("NIC extended statistics for port 0"));
    assert!(o.stdout.contains("Promiscuous mode: enabled"));
    let (_, acc) = fwd_stats(&o.stdout);
    assert!(acc.tx > 0, "{acc:?}");
    assert!(o.stdout.trim_end().ends_with("Done"), "{}", o.stdout);
}

#[test]
fn switch_mode_at_the_prompt_shows_its_bottlenecks() {
    // net_null ports receive endless frames: enough for the switch to learn, forward, filter
    let script = "show config fwd\nstart\n#pause\nshow port stats 1\nstop\nset fwd io\nstart\nstop\nquit\n";
    let o = run(
        &args(eal("swp"), &["-l", "0", "--vdev=net_null0", "--vdev=net_null1"], &["-i", "--forward-mode=switch", "--bottleneck=rate=1g,queue=64k"]),
        Some(script),
    );
    assert_ok(&o);
    assert!(o.stdout.contains("switch packet forwarding - ports=2 - cores=1 - streams=1 - topology=learning"), "{}", o.stdout);
    assert!(o.stdout.contains("  RX P=0,1/Q=0 -> TX learnt port, flood to the others"), "{}", o.stdout);
    assert!(o.stdout.contains("  bottleneck on each egress port: rate=1g queue=65536 B kmin=40960 B kmax=163840 B pmax=0.2 seed=1"), "{}", o.stdout);
    // `show port stats 1` adds port 1's bottleneck block, and only that one
    let shown = o.stdout.split("NIC statistics for port 1").nth(1).and_then(|r| r.split("Telling cores to stop").next()).unwrap_or("");
    assert!(shown.contains("Bottleneck statistics for port 1 "), "{}", o.stdout);
    assert!(!shown.contains("Bottleneck statistics for port 0 "), "{}", o.stdout);
    // stop prints the switch's block and both ports' bottleneck blocks
    let stopped = o.stdout.split("Telling cores to stop").nth(1).unwrap_or("");
    // ... and a later io run's stop does not repeat them
    let io_run = o.stdout.split("Telling cores to stop").nth(2).unwrap_or("");
    assert!(io_run.contains("Accumulated forward statistics") && !io_run.contains("Switch statistics"), "{}", o.stdout);
    for want in ["Switch statistics", "MACs-learnt: ", "Bottleneck statistics for port 0 ", "Bottleneck statistics for port 1 ", "Offered: "] {
        assert!(stopped.contains(want), "'{want}' missing:\n{}", o.stdout);
    }
    assert!(o.stdout.contains("Note: --bottleneck applies to the switch mode only; io runs without it"), "{}", o.stdout);
}

#[test]
fn prompt_ends_on_end_of_input() {
    let o = run(&args(eal("eof"), &["-l", "0", "--vdev=net_null0"], &["-i", "-a"]), Some("show port stats all\n"));
    assert_ok(&o);
    assert!(o.stdout.contains("Forward statistics for port 0"), "{}", o.stdout);
}

#[test]
fn sigterm_ends_a_batch_run_cleanly() {
    let p = spawn(&args(eal("sig"), &["-l", "0", "--vdev=net_null0"], &["--forward-mode=rxonly", "--stats-period=1"]), None);
    std::thread::sleep(Duration::from_millis(1500));
    sigterm(&p);
    let o = p.wait();
    assert_ok(&o);
    assert!(o.stdout.contains("Signal received"), "{}", o.stdout);
    assert!(fwd_stats(&o.stdout).1.rx > 0);
}

#[test]
fn config_file_with_extra_args() {
    let path = std::env::temp_dir().join(format!("{}.conf", unique("conf")));
    std::fs::write(&path, "# test\n--no-huge -m 256 --no-pci --no-shconf --file-prefix=droce-tconf-{pid}\n-l 0 --vdev=net_null0\n--\n--forward-mode=txonly\n").unwrap();
    let o = run(&[ "--config".into(), path.display().to_string(), "--".into(), "--run-time=1".into(), "--txpkts=128".into()], None);
    let _ = std::fs::remove_file(&path);
    assert_ok(&o);
    assert!(o.stdout.contains("packet len=128"), "{}", o.stdout);
    assert!(fwd_stats(&o.stdout).1.tx > 0);
}

#[test]
fn help_exits_zero() {
    for a in [vec!["--help".to_string()], vec!["--".into(), "-h".into()]] {
        let o = run(&a, None);
        assert_ok(&o);
        assert!(o.stdout.contains("--forward-mode=MODE"));
    }
}

/// Bad input: exit non-zero, exactly one line on stderr that names the problem, no panic.
#[test]
fn bad_input_is_one_line_and_non_zero() {
    let no_ports = args(eal("bad"), &["-l", "0"], &["--run-time=1"]);
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--bogus".into()], "unknown EAL option '--bogus'"),
        (vec!["-l".into(), "x".into(), "--".into(), "-i".into()], "EAL option -l 'x'"),
        (vec!["--no-hugepages".into()], "unknown EAL option"),
        (args(eal("bad"), &[], &["--frobnicate"]), "unknown app option '--frobnicate'"),
        (args(eal("bad"), &[], &["--forward-mode=flowgen"]), "choose one of io, mac, macswap, rxonly, txonly"),
        (args(eal("bad"), &[], &["--txpkts=20"]), "--txpkts=20"),
        (args(eal("bad"), &[], &["--burst=1000"]), "--burst=1000"),
        (args(eal("bad"), &[], &["--run-time=soon"]), "--run-time=soon"),
        (args(eal("bad"), &["--vdev=net_bogus0"], &["--run-time=1"]), "net_bogus0"),
        (args(eal("bad"), &["--vdev=net_memif0,role=sideways,socket=/tmp/droce-never.sock"], &["--run-time=1"]), "Unknown role"),
        (args(eal("bad"), &["-l", "0-63", "--vdev=net_null0"], &["--run-time=1"]), "core list"),
        (args(eal("bad"), &["--vdev=net_memif0,role=server,socket=/nonexistent/droce/x.sock"], &["--run-time=1"]), "socket directory"),
        (args(eal("bad"), &["--vdev=net_pcap0,rx_pcap=/nonexistent/droce.pcap"], &["--run-time=1"]), "/nonexistent/droce.pcap"),
        (args(eal("bad"), &["-l", "0", "--vdev=net_null0"], &["--nb-cores=2", "--run-time=1"]), "--nb-cores=2"),
        (no_ports, "no ports found"),
        (args(eal("bad"), &["-l", "0", "--socket-mem=abc", "--vdev=net_null0"], &["--run-time=1"]), "invalid parameters for --socket-mem"),
        (args(eal("bad"), &["-l", "0", "--vdev=net_null0"], &["--eth-peer=3,02:00:00:00:00:09", "--run-time=1"]), "port 3 out of range: valid ports are 0"),
        (vec!["--config".into(), "/nonexistent/droce.conf".into()], "cannot read config file"),
    ];
    for (a, want) in cases {
        let o = run(&a, None);
        assert!(matches!(o.code, Some(c) if c != 0), "{a:?}: exit {:?}\n{}", o.code, o.stderr);
        let lines: Vec<&str> = o.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{a:?}: stderr must be one line:\n{}", o.stderr);
        assert!(lines[0].starts_with("droce-pmd: error: ") && lines[0].contains(want), "{a:?}: {}", lines[0]);
    }
}
