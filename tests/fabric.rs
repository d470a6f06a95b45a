//! libfabric front end of droce, tested with libfabric's own tools (libfabric-bin 1.17):
//! `fi_info` lists `droce` (FI_EP_MSG, FI_EP_DGRAM) and `droce;ofi_rxm` (FI_EP_RDM, FI_TAGGED),
//! and `fi_pingpong` runs between two processes over msg, dgram and rdm with data checks (-c).
//!
//! The provider is `libdroce_fi.so`, built by `cargo build -p droce-fi` into this test's target
//! directory (tests/harness/mod.rs: `fi_provider_dir`; `DROCE_FI_PROVIDER_DIR` overrides).
//! Each process gets `FI_PROVIDER_PATH=<that dir>`, `FI_PROVIDER=droce` and a `DROCE_LINK` of
//! its own pair (the zero-config memif wire, named so that concurrent pairs on the machine
//! cannot meet); nothing else, except `FI_LOG_LEVEL=info FI_LOG_PROV=ofi_rxm` on rdm runs, whose
//! endpoint-settings line proves the run went through ofi_rxm.
//!
//! The same runners are exercised against libfabric's tcp (msg, rdm via tcp;ofi_rxm) and udp
//! (dgram) providers over loopback (`harness_*` tests): they prove the harness itself works and
//! can fail, independent of droce.
//!
//! Every process is bounded (DEADLINE) and killed by its process group at the deadline; a
//! failure shows the command lines and the output of both processes.

mod harness;

use harness::*;
use std::time::{Duration, Instant};

/// Most one fi_info / fi_pingpong process may take (a loaded 2-core machine stretches tcp's
/// 1 MiB round trips to tens of ms).
const DEADLINE: Duration = Duration::from_secs(120);
/// Round trips per message size (each payload checked).
const ITERS: &str = "20";
/// How long a pingpong server may take to open its control socket.
const SERVER_UP: Duration = Duration::from_secs(20);

/// Which provider a run uses and the environment that selects it.
struct Prov {
    name: &'static str,
    env: Vec<(String, String)>,
}

fn droce() -> Prov {
    let dir = fi_provider_dir();
    let link = unique("fab");
    Prov {
        name: "droce",
        env: env(&[("FI_PROVIDER_PATH", dir.to_str().unwrap()), ("FI_PROVIDER", "droce"), ("DROCE_LINK", &link)]),
    }
}

fn system(name: &'static str) -> Prov {
    Prov { name, env: env(&[("FI_PROVIDER", name)]) }
}

fn need_tools() -> bool {
    if have("fi_info") && have("fi_pingpong") {
        return true;
    }
    // scripts/setup-deps.sh installs libfabric-bin; a machine without it cannot run these
    panic!("fi_info / fi_pingpong not found: install libfabric-bin (scripts/setup-deps.sh)");
}

/// (provider, endpoint type) pairs listed by `fi_info` with the given arguments.
fn fi_info(p: &Prov, extra: &str) -> (Done, Vec<(String, String)>) {
    let mut cmd = args("fi_info");
    cmd.extend(args(extra));
    let _locks = LinkLocks::of(&p.env);
    let d = run("fi_info", &cmd, &p.env, DEADLINE);
    let mut pairs = Vec::new();
    let mut prov = None;
    for l in d.out.lines() {
        let l = l.trim();
        if let Some(v) = l.strip_prefix("provider:") {
            prov = Some(v.trim().to_string());
        } else if let Some(v) = l.strip_prefix("type:") {
            if let Some(p) = prov.take() {
                pairs.push((p, v.trim().to_string()));
            }
        }
    }
    (d, pairs)
}

fn assert_lists(p: &Prov, extra: &str, want: &[(&str, &str)]) {
    let (d, pairs) = fi_info(p, extra);
    assert!(d.ok(), "fi_info {extra} failed:\n{}", d.show());
    for (prov, ty) in want {
        assert!(
            pairs.iter().any(|(a, b)| a == prov && b == ty),
            "fi_info {extra}: no entry with provider {prov} and type {ty}; listed: {pairs:?}\n{}",
            d.show()
        );
    }
}

/// fi_pingpong server + client on `ep`; both must exit 0 and the client must report `sizes`.
fn pingpong(p: &Prov, ep: &str, extra: &str) -> Result<(Done, Done), String> {
    pingpong_env(p, ep, extra, &[])
}

/// [`pingpong`] with `server_only` added to the server's environment.
fn pingpong_env(p: &Prov, ep: &str, extra: &str, server_only: &[(String, String)]) -> Result<(Done, Done), String> {
    let _g = serial();
    let _locks = LinkLocks::of(&p.env);
    let port = free_port();
    // -c checks every payload (not -v: with -c it prints a line per verified byte)
    let common = format!("fi_pingpong -p {} -e {ep} -I {ITERS} -c {extra}", p.name);
    let mut env = p.env.clone();
    if ep == "rdm" {
        // ofi_rxm logs its endpoint settings at info level: proof that rdm ran through rxm
        env.extend(harness::env(&[("FI_LOG_LEVEL", "info"), ("FI_LOG_PROV", "ofi_rxm")]));
    }
    let srv_env: Vec<(String, String)> = env.iter().chain(server_only).cloned().collect();
    let server = Proc::spawn("fi_pingpong server", &args(&format!("{common} -B {port}")), &srv_env, DEADLINE);
    let t0 = Instant::now();
    let mut s = server;
    while !tcp_listening(port) {
        if !s.running() || t0.elapsed() > SERVER_UP {
            let sd = s.finish();
            return Err(format!("the server never opened its control port {port}:\n{}", sd.show()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let c = Proc::spawn("fi_pingpong client", &args(&format!("{common} -P {port} 127.0.0.1")), &env, DEADLINE);
    let cd = c.finish();
    let sd = s.finish();
    let both = format!("{}{}", cd.show(), sd.show());
    if !cd.ok() || !sd.ok() {
        return Err(format!("fi_pingpong -e {ep} over {} failed:\n{both}", p.name));
    }
    Ok((sd, cd))
}

/// The client prints one result row per message size: "<size> <iters> <total> <time> ..."
fn sizes_reported(client_out: &str) -> Vec<String> {
    client_out
        .lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            (c.len() >= 6 && c[1] == ITERS && c[0].chars().next().map(|ch| ch.is_ascii_digit()).unwrap_or(false))
                .then(|| c[0].to_string())
        })
        .collect()
}

/// For rdm: both processes opened an ofi_rxm endpoint (over the provider named with -p).
fn check_rxm(ep: &str, r: &(Done, Done)) {
    if ep != "rdm" {
        return;
    }
    for d in [&r.0, &r.1] {
        assert!(d.out.contains("rxm_ep_settings_init"), "fi_pingpong -e rdm: {} opened no ofi_rxm endpoint:\n{}", d.name, d.show());
    }
}

fn check_sizes(ep: &str, r: &(Done, Done), want: &[&str]) {
    let got = sizes_reported(&r.1.out);
    for w in want {
        assert!(got.iter().any(|g| g == w), "fi_pingpong -e {ep}: no result row for {w} B (rows: {got:?})\n{}{}", r.1.show(), r.0.show());
    }
}

fn ok_pingpong(p: &Prov, ep: &str, want: &[&str]) {
    match pingpong(p, ep, "") {
        Ok(r) => {
            check_rxm(ep, &r);
            check_sizes(ep, &r, want)
        }
        Err(e) => panic!("{e}"),
    }
}

// ---------------------------------------------------------------- droce

#[test]
fn fi_info_lists_droce_msg_dgram_and_rxm_rdm() {
    need_tools();
    let p = droce();
    assert_lists(&p, "-p droce", &[("droce", "FI_EP_MSG"), ("droce", "FI_EP_DGRAM"), ("droce;ofi_rxm", "FI_EP_RDM")]);
    // rdm with tagged messages (what Open MPI's mtl ofi asks for)
    assert_lists(&p, "-p droce;ofi_rxm -c FI_TAGGED -t FI_EP_RDM", &[("droce;ofi_rxm", "FI_EP_RDM")]);
}

#[test]
fn fi_pingpong_msg_droce() {
    need_tools();
    ok_pingpong(&droce(), "msg", &["64", "1k", "64k", "1m"]);
}

#[test]
fn fi_pingpong_dgram_droce() {
    need_tools();
    ok_pingpong(&droce(), "dgram", &["64", "256", "1k"]);
}

#[test]
fn fi_pingpong_rdm_droce() {
    need_tools();
    ok_pingpong(&droce(), "rdm", &["64", "1k", "64k", "1m"]);
}

/// Selective repeat between two droce providers, negotiated through the IB CM private data
/// (the CM agent's trailer, offered by the provider): over msg and over rdm (ofi_rxm over
/// msg, with its own connection data in front), with 1 % of the received frames dropped on
/// both sides, the pingpong's large messages are repaired by resending lost packets alone
/// (`sr_held`, `sr_resent_pkts` in the statistics `DROCE_DEBUG` prints at domain close). With
/// `DROCE_SELECTIVE_REPEAT=0` on the server only, both counters stay at 0 (go-back-N) while
/// the same faults hit the run.
#[test]
fn fi_pingpong_negotiates_selective_repeat_under_loss() {
    need_tools();
    for ep in ["msg", "rdm"] {
        let run = |server_only: &[(&str, &str)]| {
            let mut p = droce();
            // A progress thread: with manual progress, a process blocked in fi_pingpong's
            // control-socket exchange answers no retransmission, so a lost last ACK of a
            // message size made its peer's send retry out (seen once in 14 runs: the server
            // sat in its control-socket read while the client's last send went unacknowledged).
            // Only data frames are lost (min_len): fi_pingpong's finalize ends with a 4-byte
            // send each way and a disconnect, and a lost ACK of the last one left its sender
            // flushed by the DREQ (3 runs in 6 under load). No RC peer can repair that, the
            // acknowledging side is gone; what is tested here is the data path's recovery.
            p.env.extend(env(&[("DROCE_FAULTS", "rx:drop=0.01,min_len=512;seed=3"), ("DROCE_DEBUG", "1"), ("DROCE_PROGRESS", "thread")]));
            let r = pingpong_env(&p, ep, "", &env(server_only)).unwrap_or_else(|e| panic!("{e}"));
            check_rxm(ep, &r);
            check_sizes(ep, &r, &["64k", "1m"]);
            format!("{}{}", r.1.show(), r.0.show())
        };
        let on = run(&[]);
        let (held, blocks) = counter(&on, "sr_held");
        let (resent, _) = counter(&on, "sr_resent_pkts");
        eprintln!("{ep}, offered by both: sr_held {held}, sr_resent_pkts {resent} ({blocks} statistics blocks)");
        assert!(blocks >= 2, "a statistics block per process:\n{on}");
        assert!(held > 0 && resent > 0, "{ep}: selective repeat must be in use: sr_held {held}, sr_resent_pkts {resent}\n{on}");
        let off = run(&[("DROCE_SELECTIVE_REPEAT", "0")]);
        let (held, blocks) = counter(&off, "sr_held");
        let (resent, _) = counter(&off, "sr_resent_pkts");
        let (dropped, _) = counter(&off, "rx_fault_drop");
        let (retx, _) = counter(&off, "retransmitted_pkts");
        eprintln!("{ep}, withdrawn by the server: sr_held {held}, sr_resent_pkts {resent}, rx_fault_drop {dropped}, retransmitted_pkts {retx}");
        assert!(blocks >= 2, "{off}");
        assert!(dropped > 0 && retx > 0, "{ep}: the faults must have hit the go-back-N run too\n{off}");
        assert_eq!((held, resent), (0, 0), "{ep}: go-back-N when the server withdraws the offer\n{off}");
    }
}

/// The zero-config promise of the README: two processes on one machine with nothing but
/// `FI_PROVIDER_PATH` and `FI_PROVIDER=droce` set run over the embedded default wire (the
/// host's default memif link, roles by who comes first). The only test on the default link;
/// every other pair names its own.
#[test]
fn fi_pingpong_msg_zero_config_default_link() {
    need_tools();
    for var in ["DROCE_CONF", "DROCE_LINK", "DROCE_RANK", "DROCE_EAL"] {
        assert!(std::env::var_os(var).is_none(), "unset {var} to run the zero-config test");
    }
    let dir = fi_provider_dir();
    let p = Prov { name: "droce", env: env(&[("FI_PROVIDER_PATH", dir.to_str().unwrap()), ("FI_PROVIDER", "droce")]) };
    ok_pingpong(&p, "msg", &["64", "1k", "64k", "1m"]);
}

/// At exit libfabric's destructor dlclose()s its providers while droce's host threads (the
/// ACK watchdog here) still run: the provider pins itself (RTLD_NODELETE). `tests/fabric/
/// exit_app.c` opens and closes a domain and returns; `slow_fini.c`, loaded by EAL as a
/// plugin, keeps the exit going 50 ms after libfabric's destructor. Without the pin every run
/// died of SIGSEGV (fabtests' fi_dom_test did in 2 runs of 12).
#[test]
fn provider_survives_libfabric_exit() {
    need_tools();
    if !have("cc") {
        eprintln!("SKIP: no C compiler (build-essential)");
        return;
    }
    let dir = profile_dir();
    let (app, plugin) = (dir.join("droce_fi_exit_app"), dir.join("droce_slow_fini.so"));
    for cmd in [
        format!("cc -O2 -o {} {} -lfabric", app.display(), repo_path("tests/fabric/exit_app.c").display()),
        format!("cc -O2 -shared -fPIC -o {} {}", plugin.display(), repo_path("tests/fabric/slow_fini.c").display()),
    ] {
        let b = run("cc", &args(&cmd), &[], DEADLINE);
        assert!(b.ok(), "{cmd}:\n{}", b.show());
    }
    let _g = serial();
    for i in 0..3 {
        // each run its own zero-config link (droce() names one)
        let mut env = droce().env;
        let _locks = LinkLocks::of(&env);
        env.extend(harness::env(&[("DROCE_EAL", &format!("-d {}", plugin.display()))]));
        let d = run("exit_app", &[app.display().to_string()], &env, DEADLINE);
        assert!(d.ok() && d.out.contains("exit_app: closed"), "run {i}:\n{}", d.show());
    }
}

/// A killed peer: the survivor's connection fails at once (the zero-config link went down,
/// so the peer process has gone), its posted operations complete in error and fi_pingpong
/// ends with its cq_readerr and a non-zero status, as over the tcp provider; not after the
/// 17 s of transport retries, nor never (a side waiting for a reply has nothing outstanding
/// to retry). Both directions: the server killed, the client killed.
#[test]
fn fi_pingpong_msg_survivor_of_a_killed_peer_ends_at_once() {
    need_tools();
    let _g = serial();
    for victim in ["server", "client"] {
        let mut p = droce();
        let _locks = LinkLocks::of(&p.env);
        // Both capture their frames: a capture past its first 64 KiB buffer proves the
        // ping-pong itself runs. Killed earlier (setup over the link takes seconds on a busy
        // machine), the survivor may still be in fi_pingpong's TCP control exchange and end
        // there ("ctrl/read: no data"), before droce has anything to report.
        let pcaps = std::env::temp_dir().join(unique("fab-kill"));
        std::fs::create_dir_all(&pcaps).unwrap();
        p.env.extend(harness::env(&[("DROCE_PCAP", &format!("{}/{{pid}}.pcap", pcaps.display()))]));
        let port = free_port();
        let common = format!("fi_pingpong -p droce -e msg -I 100000000 -S 64");
        let mut s = Proc::spawn("fi_pingpong server", &args(&format!("{common} -B {port}")), &p.env, DEADLINE);
        let t0 = Instant::now();
        while !tcp_listening(port) && s.running() && t0.elapsed() < SERVER_UP {
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut c = Proc::spawn("fi_pingpong client", &args(&format!("{common} -P {port} 127.0.0.1")), &p.env, DEADLINE);
        let t0 = Instant::now();
        while !tcp_established(port) && c.running() && t0.elapsed() < SERVER_UP {
            std::thread::sleep(Duration::from_millis(20));
        }
        // well into the round trips: both captures hold more than the connection setup
        let captured = |min: u64| {
            let sizes: Vec<u64> = std::fs::read_dir(&pcaps).unwrap().filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).collect();
            sizes.len() == 2 && sizes.iter().all(|&n| n >= min)
        };
        let t0 = Instant::now();
        while !captured(64 << 10) && s.running() && c.running() && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(captured(64 << 10), "no ping-pong traffic within 30 s:\n{}{}", s.output(), c.output());
        assert!(s.running() && c.running(), "both must still run:\n{}{}", s.output(), c.output());
        let (victim_proc, mut survivor) = if victim == "server" { (s, c) } else { (c, s) };
        drop(victim_proc); // SIGTERM, then SIGKILL, to its process group
        let killed = Instant::now();
        while survivor.running() && killed.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let seen = killed.elapsed();
        let d = survivor.finish();
        assert!(d.code.is_some_and(|c| c != 0), "{victim} killed: the survivor must end with an error status:\n{}", d.show());
        assert!(d.out.contains("cq_readerr") || d.out.contains("flushed"), "{victim} killed: no failed completion reported:\n{}", d.show());
        // the retry path takes 17 s; the link watch a few ms (slack for a loaded machine)
        assert!(seen < Duration::from_secs(8), "{victim} killed: the survivor took {seen:?} to end:\n{}", d.show());
        let _ = std::fs::remove_dir_all(&pcaps);
    }
}

/// Three processes on one zero-config mesh: an fi_pingpong pair (slots 0 and 1) and a third
/// process (slot 2, tests/fabric/exit_app.c holding a domain open) linked to both. The third
/// is killed: both pingpong ends see its link go down and go on undisturbed (a loss fails only
/// the connections to that peer; fi_pingpong_msg_survivor_of_a_killed_peer_ends_at_once has
/// the survivor of its own peer).
#[test]
fn fi_pingpong_msg_mesh_a_killed_third_process_fails_no_other_connection() {
    need_tools();
    if !have("cc") {
        eprintln!("SKIP: no C compiler (build-essential)");
        return;
    }
    let app = profile_dir().join("droce_fi_exit_app_hold");
    let cmd = format!("cc -O2 -o {} {} -lfabric", app.display(), repo_path("tests/fabric/exit_app.c").display());
    let bd = run("cc", &args(&cmd), &[], DEADLINE);
    assert!(bd.ok(), "{cmd}:\n{}", bd.show());
    let _g = serial();
    let p = droce();
    let link = p.env.iter().find(|(k, _)| k == "DROCE_LINK").map(|(_, v)| v.clone()).unwrap();
    let _locks = LinkLocks(link);
    let common = "fi_pingpong -p droce -e msg -I 100000000 -S 64";
    let port = free_port();
    // each process takes its slot (at fi_getinfo) before the next one starts
    let mut a = Proc::spawn("fi_pingpong server slot 0", &args(&format!("{common} -B {port}")), &p.env, DEADLINE);
    let t0 = Instant::now();
    while !tcp_listening(port) && a.running() && t0.elapsed() < SERVER_UP {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut b = Proc::spawn("fi_pingpong client slot 1", &args(&format!("{common} -P {port} 127.0.0.1")), &p.env, DEADLINE);
    let t0 = Instant::now();
    while !tcp_established(port) && b.running() && t0.elapsed() < SERVER_UP {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let mut env3 = p.env.clone();
    env3.extend(harness::env(&[("EXIT_APP_HOLD_MS", "60000")]));
    let mut c = Proc::spawn("exit_app slot 2", &[app.display().to_string()], &env3, DEADLINE);
    let t0 = Instant::now();
    while !c.output().contains("exit_app: opened") && c.running() && t0.elapsed() < SERVER_UP {
        std::thread::sleep(Duration::from_millis(20));
    }
    let all = |v: &[&Proc]| v.iter().map(|p| p.output()).collect::<Vec<_>>().join("");
    assert!(c.output().contains("exit_app: opened"), "the third process did not open:\n{}", all(&[&a, &b, &c]));
    std::thread::sleep(Duration::from_millis(1000));
    assert!(a.running() && b.running() && c.running(), "all three must run:\n{}", all(&[&a, &b, &c]));
    drop(c); // SIGTERM, then SIGKILL, to its process group
    // the pair goes on well past the loss
    std::thread::sleep(Duration::from_secs(3));
    let (a_runs, b_runs) = (a.running(), b.running());
    let (oa, ob) = (a.output(), b.output());
    drop(a);
    drop(b);
    for o in [&oa, &ob] {
        assert!(o.contains("the memif link to 10.77.0.3 (zero-config slot 2) went down"), "the loss was not seen:\n{oa}{ob}");
    }
    assert!(a_runs && b_runs, "the pair of slots 0 and 1 must go on:\n{oa}{ob}");
    assert!(!oa.contains("cq_readerr") && !ob.contains("cq_readerr") && !oa.contains("flushed") && !ob.contains("flushed"), "{oa}{ob}");
}

// ---------------------------------------------------------------- harness self-checks

#[test]
fn harness_fi_info_tcp() {
    need_tools();
    assert_lists(&system("tcp"), "-p tcp", &[("tcp", "FI_EP_MSG"), ("tcp;ofi_rxm", "FI_EP_RDM")]);
}

#[test]
fn harness_fi_pingpong_tcp_msg_rdm_udp_dgram() {
    need_tools();
    ok_pingpong(&system("tcp"), "msg", &["64", "1k", "64k", "1m"]);
    ok_pingpong(&system("tcp"), "rdm", &["64", "1k", "64k", "1m"]);
    ok_pingpong(&system("udp"), "dgram", &["64", "256", "1k"]);
}

#[test]
fn harness_reports_a_failing_pingpong() {
    need_tools();
    // tcp has no FI_EP_DGRAM: both processes fail, and the runner must say so with the output
    let e = pingpong(&system("tcp"), "dgram", "").expect_err("fi_pingpong -p tcp -e dgram cannot succeed");
    assert!(e.contains("fi_getinfo") || e.contains("exit code"), "failure report lacks the output:\n{e}");
    // a process that outlives its deadline is killed and reported as such
    let d = run("sleeper", &args("sleep 30"), &[], Duration::from_millis(300));
    assert!(d.timed_out && !d.ok() && d.secs < 10.0, "deadline not enforced: {d:?}");
}
