//! UCX over droce: `libuct_droce.so` (package droce-ucx) preloaded into Debian's UCX
//! 1.13.1 tools.
//!
//! - `ucx_info -d` lists the droce memory domain and both transports on device droce0;
//! - `ucx_perftest` between two processes (server and client on this machine, the zero-config
//!   memif pair named by a DROCE_LINK unique to the test): UCT-level am_lat, am_bw, put_lat,
//!   put_bw, get (bcopy and zcopy), add_lat, fadd, swap, cswap (64 and 32 bit) over droce_rc,
//!   am_lat and am_bw over droce_ud; UCP-level tag_lat, tag_bw, ucp_put_bw, ucp_get with
//!   UCX_TLS=droce_rc,droce_ud;
//! - UCP's lanes and `tag_send` rendezvous threshold follow droce's `iface_query` figures
//!   (`ucx_info -e`);
//! - droce_ud delivers every active message in order when frames are dropped (DROCE_FAULTS);
//! - droce_rc runs selective repeat when both ends offer it in their endpoint addresses, and
//!   go-back-N with `DROCE_SELECTIVE_REPEAT=0` (the device counters of `DROCE_UCX_STATS`);
//! - a client whose peer dies ends (RC retries exhausted → error), it does not hang.
//!
//! The MPI jobs (MPICH, Open MPI pml ucx) are in tests/mpi.rs (`mod ucx`).
//! Every process is bounded and killed by its process group at its deadline (tests/harness/mod.rs).
//! Skipped with a message when ucx_perftest / ucx_info are not installed (ucx-utils).

mod harness;

use harness::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(120);

fn lib() -> PathBuf {
    match std::env::var("DROCE_UCT_LIB") {
        Ok(p) => PathBuf::from(p),
        Err(_) => workspace_cdylib("droce-ucx", "libuct_droce.so").unwrap_or_else(|e| panic!("{e}")),
    }
}

fn tools() -> bool {
    if have("ucx_perftest") && have("ucx_info") {
        true
    } else {
        eprintln!("SKIP: ucx_perftest/ucx_info not installed (apt-get install -y ucx-utils)");
        false
    }
}

/// The environment of one droce process pair: the module preloaded, a private memif pair.
fn pair_env(link: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut e = env(&[("LD_PRELOAD", lib().to_str().unwrap()), ("DROCE_LINK", link)]);
    e.extend(env(extra));
    e
}

#[test]
fn ucx_info_lists_droce_md_and_both_transports() {
    if !tools() {
        return;
    }
    let _g = serial();
    let e = pair_env(&unique("ucxinfo"), &[]);
    let _locks = LinkLocks::of(&e);
    let d = run("ucx_info -d", &args("ucx_info -d"), &e, DEADLINE);
    assert!(d.ok(), "{}", d.show());
    for want in ["Memory domain: droce", "Component: droce", "Transport: droce_rc", "Transport: droce_ud", "Device: droce0", "connection: to ep", "connection: to iface"] {
        assert!(d.out.contains(want), "ucx_info -d lacks '{want}':\n{}", d.show());
    }
}

/// The `<lo>..<proto>..<hi>` steps of one `ucx_info -e` protocol line (`tag_send: 0..<egr/short>..
/// 4073..<egr/bcopy>..21209..<rndv>..(inf)`): (protocol, largest size it takes).
fn proto_steps(out: &str, op: &str) -> Vec<(String, String)> {
    let line = out.lines().find_map(|l| l.trim_start_matches('#').trim().strip_prefix(&format!("{op}: ")).map(str::to_string));
    let Some(line) = line else { return Vec::new() };
    let parts: Vec<&str> = line.split("..").collect();
    parts.windows(2).filter_map(|w| w[0].strip_prefix('<').map(|p| (p.trim_end_matches('>').to_string(), w[1].to_string()))).collect()
}

/// What UCP builds from droce's `iface_query` figures (one process, its endpoint to itself):
/// droce_ud is the AM lane (lowest latency), droce_rc the rendezvous (RMA) lane, and the
/// eager/rendezvous threshold of `tag_send` (MPICH's send) falls where UCX's cost model puts it
/// for the measured figures: a 16 KiB message goes eager (five datagrams), one of 32 KiB is
/// one RC READ. With the stale figures (550 / 200 MB/s) the threshold was 5061 B: every
/// message above 5061 B paid a rendezvous round trip and two registrations.
#[test]
fn ucp_lanes_and_rendezvous_threshold_from_the_iface_figures() {
    if !tools() {
        return;
    }
    let _g = serial();
    let e = pair_env(&unique("ucxproto"), &[("UCX_TLS", "droce_rc,droce_ud")]);
    let _locks = LinkLocks::of(&e);
    let d = run("ucx_info -e", &args("ucx_info -e -u t"), &e, DEADLINE);
    assert!(d.ok(), "{}", d.show());
    let lane = |role: &str| {
        d.out.lines().find(|l| l.contains("lane[") && l.split_whitespace().any(|w| w == role)).map(|l| l.contains("droce_ud"))
    };
    assert_eq!(lane("am"), Some(true), "the AM lane is droce_ud:\n{}", d.show());
    assert_eq!(lane("rma_bw#0"), Some(false), "the RMA lane is droce_rc:\n{}", d.show());
    let steps = proto_steps(&d.out, "tag_send");
    let rndv_from = steps.iter().position(|(p, _)| p == "rndv").and_then(|i| i.checked_sub(1)).map(|i| steps[i].1.parse::<usize>());
    let Some(Ok(thresh)) = rndv_from else { panic!("no eager -> rndv step in tag_send: {steps:?}\n{}", d.show()) };
    assert_eq!(steps.last().map(|s| s.0.as_str()), Some("rndv"), "{steps:?}");
    assert!((16 << 10..32 << 10).contains(&thresh), "tag_send's rendezvous threshold {thresh} B is not in 16-32 KiB: {steps:?}");
}

/// A bad value in a DROCE_* variable is named at UCX's default log level (an ERROR line, no
/// UCX_LOG_LEVEL needed) and the droce interfaces do not open: droce never runs with a
/// default the user did not ask for.
#[test]
fn a_bad_droce_cc_is_named_at_the_default_log_level() {
    if !tools() {
        return;
    }
    let _g = serial();
    let e = pair_env(&unique("ucxbadcc"), &[("DROCE_CC", "nonsense")]);
    let _locks = LinkLocks::of(&e);
    let d = run("ucx_info -d", &args("ucx_info -d"), &e, DEADLINE);
    assert!(d.out.contains("ERROR droce: droce config: DROCE_CC='nonsense'"), "{}", d.show());
    assert!(d.out.contains("failed to open interface"), "{}", d.show());
}

/// Figures of ucx_perftest's `Final:` line: iterations, typical latency (us), average
/// latency (us), bandwidth (MB/s, average), message rate (msg/s, average).
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)]
struct Final {
    iters: u64,
    lat_typical: f64,
    lat_avg: f64,
    bw_mbs: f64,
    rate: f64,
}

fn parse_final(out: &str) -> Option<Final> {
    let l = out.lines().rev().find(|l| l.trim_start().starts_with("Final:"))?;
    let v: Vec<f64> = l.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    (v.len() >= 8).then(|| Final { iters: v[0] as u64, lat_typical: v[1], lat_avg: v[2], bw_mbs: v[4], rate: v[6] })
}

/// One ucx_perftest run: server (`server_args`) then client to 127.0.0.1 (`client_args`).
/// Returns the client's figures, or both processes' output on failure.
fn perftest(server_args: &str, client_args: &str, env: &[(String, String)]) -> Result<Final, String> {
    perftest_outputs(server_args, client_args, env, &[]).map(|(f, _)| f)
}

/// [`perftest`] with `server_only` added to the server's environment, also returning both
/// processes' output (client first).
fn perftest_outputs(server_args: &str, client_args: &str, env: &[(String, String)], server_only: &[(String, String)]) -> Result<(Final, String), String> {
    let _g = serial();
    let _locks = LinkLocks::of(env);
    let port = free_port();
    let srv_cmd = args(&format!("ucx_perftest -p {port} {server_args}"));
    let srv_env: Vec<(String, String)> = env.iter().chain(server_only).cloned().collect();
    let mut srv = Proc::spawn("ucx_perftest server", &srv_cmd, &srv_env, DEADLINE);
    let t0 = Instant::now();
    while !tcp_listening(port) {
        if !srv.running() || t0.elapsed() > Duration::from_secs(20) {
            return Err(format!("server did not listen on {port}:\n{}", srv.finish().show()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let cli_cmd = args(&format!("ucx_perftest 127.0.0.1 -p {port} {client_args}"));
    let cli = run("ucx_perftest client", &cli_cmd, env, DEADLINE);
    let srv = srv.finish();
    match parse_final(&cli.out) {
        Some(f) if cli.ok() && srv.ok() && f.iters > 0 => Ok((f, format!("{}{}", cli.show(), srv.show()))),
        _ => Err(format!("ucx_perftest pair failed:\n{}{}", cli.show(), srv.show())),
    }
}

/// UCT level: `-d droce0 -x <tl>` on both sides.
fn uct(tl: &str, test: &str, extra: &str) -> Final {
    let e = pair_env(&unique("ucxpt"), &[]);
    let dev = format!("-d droce0 -x {tl}");
    perftest(&dev, &format!("{dev} -t {test} {extra}"), &e).unwrap_or_else(|m| panic!("{tl} {test} {extra}: {m}"))
}

/// UCP level with UCX_TLS=droce_rc,droce_ud.
fn ucp(test: &str, extra: &str) -> Final {
    let e = pair_env(&unique("ucxpt"), &[("UCX_TLS", "droce_rc,droce_ud")]);
    perftest("", &format!("-t {test} {extra}"), &e).unwrap_or_else(|m| panic!("UCP {test} {extra}: {m}"))
}

/// Iterations: debug builds on a loaded 2-core machine run a ping-pong at 50-500 us.
const N: &str = "-n 500 -w 50";

#[test]
fn uct_rc_am_lat_and_am_bw() {
    if !tools() {
        return;
    }
    let l = uct("droce_rc", "am_lat", N);
    assert!(l.lat_typical > 0.0, "{l:?}");
    let b = uct("droce_rc", "am_bw", &format!("{N} -s 1024"));
    assert!(b.bw_mbs > 0.0, "{b:?}");
    let z = uct("droce_rc", "am_bw", &format!("{N} -D zcopy -s 4000"));
    assert!(z.bw_mbs > 0.0, "{z:?}");
}

#[test]
fn uct_rc_put_lat_and_put_bw() {
    if !tools() {
        return;
    }
    uct("droce_rc", "put_lat", N);
    uct("droce_rc", "put_bw", &format!("{N} -D bcopy -s 4096"));
    let z = uct("droce_rc", "put_bw", "-n 200 -w 20 -D zcopy -s 65536");
    assert!(z.bw_mbs > 0.0, "{z:?}");
}

#[test]
fn uct_rc_get_bcopy_and_zcopy() {
    if !tools() {
        return;
    }
    uct("droce_rc", "get", &format!("{N} -D bcopy -s 4096"));
    uct("droce_rc", "get", "-n 200 -w 20 -D zcopy -s 65536");
}

#[test]
fn uct_rc_atomics_64_and_32_bit() {
    if !tools() {
        return;
    }
    for t in ["add_lat", "fadd", "swap", "cswap"] {
        uct("droce_rc", t, "-n 300 -w 20 -s 8");
        uct("droce_rc", t, "-n 300 -w 20 -s 4");
    }
}

#[test]
fn uct_ud_am_lat_and_am_bw() {
    if !tools() {
        return;
    }
    uct("droce_ud", "am_lat", N);
    uct("droce_ud", "am_bw", &format!("{N} -s 512"));
}

/// UCP with droce_ud as its only transport (wire-up, tag matching and rendezvous control all in
/// UD active messages) on a wire that drops 2% of the received frames in both processes.
#[test]
fn ucp_tag_lat_over_droce_ud_only_survives_frame_loss() {
    if !tools() {
        return;
    }
    let e = pair_env(&unique("ucxudtag"), &[("UCX_TLS", "droce_ud"), ("DROCE_FAULTS", "rx:drop=0.02;seed=5")]);
    let f = perftest("", "-t tag_lat -n 300 -w 20 -s 8", &e).unwrap_or_else(|m| panic!("UCP tag_lat over droce_ud with 2% loss: {m}"));
    assert!(f.iters > 0, "{f:?}");
}

/// Both MPICH ranks flood each other with 2000 eager 800-byte messages at once, 5 rounds,
/// contents checked (tests/ucx/flood.c). UCP carries them as active messages on droce_ud: every
/// send slot of both ends fills with unacknowledged datagrams, and only a retransmission can
/// carry the acknowledgement the other side waits for. A retransmission that carried its stale
/// header made both ends wait out the reliable-UD give-up time (`Config::fail_after`: endpoint timeout, then a UCP abort).
#[test]
fn mpich_bidirectional_flood_over_droce_ud() {
    if !tools() || !have("mpicc.mpich") || !have("mpiexec.mpich") {
        eprintln!("SKIP: mpicc.mpich / mpiexec.mpich not installed (mpich libmpich-dev)");
        return;
    }
    let _g = serial();
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("droce_ucx_flood");
    let src = repo_path("tests/ucx/flood.c");
    let b = run("mpicc.mpich", &args(&format!("mpicc.mpich -O2 -o {} {}", exe.display(), src.display())), &[], DEADLINE);
    assert!(b.ok(), "{}", b.show());
    for tls in ["droce_rc,droce_ud,self", "droce_ud,self"] {
        let e = env(&[("LD_PRELOAD", lib().to_str().unwrap()), ("UCX_TLS", tls)]);
        let link = unique("ucxflood");
        let _locks = LinkLocks(link.clone());
        let cmd = args(&format!(
            "mpiexec.mpich -n 2 -genv LD_PRELOAD {} -genv UCX_TLS {tls} -genv DROCE_LINK {link} {} 2000 800 5",
            lib().display(),
            exe.display()
        ));
        let d = run("mpiexec flood", &cmd, &e, DEADLINE);
        assert!(d.ok() && d.out.contains("flood ok"), "UCX_TLS={tls}:\n{}", d.show());
    }
}

/// A droce_ud peer that dies: the client's datagrams go unacknowledged, the endpoint fails
/// after 4 s and droce says so (a UCX warning naming the endpoint timeout; UCX_LOG_FILE=stderr so
/// that the line is not lost in stdout's buffer when the stalled client is ended by the test).
#[test]
fn failed_ud_peer_surfaces_as_endpoint_timeout() {
    if !tools() {
        return;
    }
    peer_death_fails_the_endpoint("ucxuddie", "droce_ud", "-t am_bw -s 512", &[("UCX_LOG_FILE", "stderr")]);
}

/// droce_ud is reliable: with 3% of the received frames dropped on both sides (DROCE_FAULTS),
/// a ping-pong and a stream of active messages still complete (lost datagrams are sent again
/// after the retransmission timeout, duplicates are dropped). Without the reliability layer the
/// first lost datagram stalls am_lat for good and the pair hits its deadline.
#[test]
fn uct_ud_survives_dropped_datagrams() {
    if !tools() {
        return;
    }
    for (test, extra) in [("am_lat", "-n 400 -w 20"), ("am_bw", "-n 3000 -w 100 -s 512")] {
        let e = pair_env(&unique("ucxudloss"), &[("DROCE_FAULTS", "rx:drop=0.03;seed=11")]);
        let dev = "-d droce0 -x droce_ud";
        let f = perftest(dev, &format!("{dev} -t {test} {extra}"), &e).unwrap_or_else(|m| panic!("droce_ud {test} with 3% loss: {m}"));
        assert!(f.iters > 0, "{f:?}");
    }
}

/// droce_rc negotiates selective repeat in its endpoint addresses: with 1 % of the received
/// frames dropped on both sides, a put_bw stream of 64 KiB messages is repaired by resending
/// the lost packets alone (the responder holds what came after a gap: `sr_held`; the requester
/// resends single packets: `sr_resent_pkts`). With `DROCE_SELECTIVE_REPEAT=0` on the server only, the
/// pair agrees on go-back-N and neither counter moves, though the same faults hit it.
#[test]
fn uct_rc_negotiates_selective_repeat_under_loss() {
    if !tools() {
        return;
    }
    let dev = "-d droce0 -x droce_rc";
    // data frames only: a lost ACK of the last message at teardown has no repair (fabric.rs)
    let faults = ("DROCE_FAULTS", "rx:drop=0.01,min_len=512;seed=3");
    let run = |server_only: &[(&str, &str)]| {
        // A progress thread: a process blocked in ucx_perftest's socket exchange would answer
        // no retransmission of a lost last ACK (as in tests/fabric.rs).
        let e = pair_env(&unique("ucxsr"), &[faults, ("DROCE_UCX_STATS", "1"), ("DROCE_PROGRESS", "thread")]);
        perftest_outputs(dev, &format!("{dev} -t put_bw -n 300 -w 20 -s 65536 -D zcopy"), &e, &env(server_only))
            .unwrap_or_else(|m| panic!("droce_rc put_bw with 1% loss: {m}"))
            .1
    };
    let on = run(&[]);
    let (held, blocks) = counter(&on, "sr_held");
    let (resent, _) = counter(&on, "sr_resent_pkts");
    eprintln!("selective repeat offered by both: sr_held {held}, sr_resent_pkts {resent}");
    assert_eq!(blocks, 2, "one statistics block per process:\n{on}");
    assert!(held > 0 && resent > 0, "selective repeat must be in use: sr_held {held}, sr_resent_pkts {resent}\n{on}");
    let off = run(&[("DROCE_SELECTIVE_REPEAT", "0")]);
    let (held, blocks) = counter(&off, "sr_held");
    let (resent, _) = counter(&off, "sr_resent_pkts");
    let (dropped, _) = counter(&off, "rx_fault_drop");
    let (retx, _) = counter(&off, "retransmitted_pkts");
    eprintln!("withdrawn by the server: sr_held {held}, sr_resent_pkts {resent}, rx_fault_drop {dropped}, retransmitted_pkts {retx}");
    assert_eq!(blocks, 2, "{off}");
    assert!(dropped > 0 && retx > 0, "the faults must have hit the go-back-N run too: {dropped} dropped, {retx} retransmitted\n{off}");
    assert_eq!((held, resent), (0, 0), "go-back-N when one side withdraws the offer\n{off}");
}

#[test]
fn ucp_tag_lat_tag_bw_put_bw_get() {
    if !tools() {
        return;
    }
    ucp("tag_lat", N);
    ucp("tag_bw", "-n 200 -w 20 -s 65536");
    ucp("ucp_put_bw", "-n 200 -w 20 -s 65536");
    ucp("ucp_get", "-n 200 -w 20 -s 65536");
    ucp("tag_lat", "-n 50 -w 5 -s 1000000");
}

/// The `droce Rc|Ud: <calls> progress calls, <polls> device polls (<busy> with work)` lines
/// of `DROCE_UCX_STATS`, in output order: (transport, calls, polls, busy).
fn progress_stats(out: &str) -> Vec<(String, u64, u64, u64)> {
    out.lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("droce ")?;
            let (tl, rest) = rest.split_once(": ")?;
            let w: Vec<&str> = rest.split_whitespace().collect();
            if w.len() < 8 || w[1] != "progress" || w[5] != "polls" {
                return None;
            }
            Some((tl.to_string(), w[0].parse().ok()?, w[3].parse().ok()?, w[6].trim_start_matches('(').parse().ok()?))
        })
        .collect()
}

/// An idle UCP progress round polls the device once: UCP progresses droce_rc and droce_ud one
/// after the other, and a poll fills both interfaces' completion queues, so after a poll that
/// found nothing the second interface only takes its completions (two polls per round cost
/// every idle round a second RX burst, TX flush and timer check). After a poll that found
/// work the second polls too. The data still arrives (tag_bw with 1 MiB rendezvous messages,
/// then tag_lat on the eager path).
#[test]
fn ucp_polls_the_device_once_per_idle_progress_round() {
    if !tools() {
        return;
    }
    for (test, extra) in [("tag_bw", "-n 100 -w 10 -s 1048576"), ("tag_lat", "-n 20000 -w 100 -s 8")] {
        let e = pair_env(&unique("ucxpoll"), &[("UCX_TLS", "droce_rc,droce_ud"), ("DROCE_UCX_STATS", "1")]);
        let (_, out) = perftest_outputs("", &format!("-t {test} {extra}"), &e, &[]).unwrap_or_else(|m| panic!("UCP {test}: {m}"));
        let st = progress_stats(&out);
        assert_eq!(st.len(), 4, "one line per interface and process:\n{out}");
        for p in st.chunks(2) {
            let mut tls: Vec<&str> = p.iter().map(|s| s.0.as_str()).collect();
            tls.sort();
            assert_eq!(tls, ["Rc", "Ud"], "{out}");
            let calls = p.iter().map(|s| s.1).max().unwrap();
            let polls: u64 = p.iter().map(|s| s.2).sum();
            let busy: u64 = p.iter().map(|s| s.3).sum();
            eprintln!("{test}: {p:?}");
            assert!(p.iter().all(|s| s.1 * 10 >= calls * 9), "both interfaces progress: {p:?}");
            // One poll per round, one more after each poll that found work, and droce_ud's own
            // acknowledgements and retransmissions (a few per message), hence the margin.
            assert!(calls > 1000 && polls <= calls + busy + calls / 50 + 200, "{test}: {polls} device polls ({busy} with work) in {calls} progress rounds: {p:?}");
        }
    }
}

/// The harness reports a failing pair (a transport that does not exist).
#[test]
fn perftest_failure_is_reported() {
    if !tools() {
        return;
    }
    let e = pair_env(&unique("ucxpt"), &[]);
    let r = perftest("-d droce0 -x droce_nosuch", "-d droce0 -x droce_nosuch -t am_lat -n 10", &e);
    assert!(r.is_err(), "a transport that does not exist must fail: {r:?}");
}

/// A peer that dies mid-test: the client's RC operations exhaust their retries (7 x 0.54 s ACK
/// timeout), the endpoint fails and every later operation returns "Endpoint timeout" (UCT
/// perftest logs it and keeps trying, so the client is then ended by this test).
#[test]
fn failed_peer_surfaces_as_endpoint_timeout() {
    if !tools() {
        return;
    }
    peer_death_fails_the_endpoint("ucxdie", "droce_rc", "-t put_bw -s 65536 -D zcopy", &[]);
}

/// A ucx_perftest pair over transport `tl`, the client streaming `test`; the server is killed
/// once the client runs. The client must see "Endpoint timeout" within 15 s and end by itself
/// with status 1.
fn peer_death_fails_the_endpoint(tag: &str, tl: &str, test: &str, env: &[(&str, &str)]) {
    let _g = serial();
    let e = pair_env(&unique(tag), env);
    let _locks = LinkLocks::of(&e);
    let port = free_port();
    let mut srv = Proc::spawn("server", &args(&format!("ucx_perftest -p {port} -d droce0 -x {tl}")), &e, DEADLINE);
    let t0 = Instant::now();
    while !tcp_listening(port) && srv.running() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let cmd = args(&format!("ucx_perftest 127.0.0.1 -p {port} -d droce0 -x {tl} {test} -n 100000000"));
    let mut cli = Proc::spawn("client", &cmd, &e, Duration::from_secs(60));
    let t0 = Instant::now();
    while !cli.output().contains("Message size") && cli.running() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    drop(srv); // SIGTERM, then SIGKILL, to the server's process group
    let killed = Instant::now();
    while cli.running() && killed.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen = killed.elapsed();
    let d = cli.finish();
    assert!(d.out.contains("Endpoint timeout"), "no endpoint failure reported {seen:?} after the peer died:\n{}", d.show());
    // nobody handles endpoint errors in UCT-level perftest: the process ends, status 1, no core
    // (UCX's RDMA transports abort here, its tcp transport waits forever)
    assert_eq!(d.code, Some(1), "the survivor must end by itself with status 1:\n{}", d.show());
    assert!(d.out.contains("the application handles no endpoint errors"), "{}", d.show());
    assert!(seen < Duration::from_secs(15), "the failure took {seen:?}");
}

/// Three processes on one zero-config mesh: a ucx_perftest pair over droce_rc (slots 0 and 1)
/// and a third process (slot 2, tests/fabric/exit_app.c holding a libfabric domain open)
/// linked to both. The third is killed: both perftest ends see its link go down, and no
/// endpoint of the pair fails (a loss fails only the endpoints to that peer;
/// failed_peer_surfaces_as_endpoint_timeout has the survivor of its own peer).
#[test]
fn a_killed_third_process_on_the_mesh_fails_no_endpoint_of_the_pair() {
    if !tools() {
        return;
    }
    if !(have("cc") && have("fi_info")) {
        eprintln!("SKIP: no C compiler or libfabric (build-essential, libfabric-dev)");
        return;
    }
    let app = profile_dir().join("droce_fi_exit_app_hold_ucx");
    let cmd = format!("cc -O2 -o {} {} -lfabric", app.display(), repo_path("tests/fabric/exit_app.c").display());
    let bd = run("cc", &args(&cmd), &[], DEADLINE);
    assert!(bd.ok(), "{cmd}:\n{}", bd.show());
    let _g = serial();
    let link = unique("ucxmesh");
    let e = pair_env(&link, &[]);
    let port = free_port();
    let mut srv = Proc::spawn("server slot 0", &args(&format!("ucx_perftest -p {port} -d droce0 -x droce_rc")), &e, DEADLINE);
    let t0 = Instant::now();
    while !tcp_listening(port) && srv.running() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let cmd = args(&format!("ucx_perftest 127.0.0.1 -p {port} -d droce0 -x droce_rc -t put_bw -s 4096 -D zcopy -n 100000000"));
    let mut cli = Proc::spawn("client slot 1", &cmd, &e, DEADLINE);
    let t0 = Instant::now();
    while !cli.output().contains("Message size") && cli.running() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let dir = fi_provider_dir();
    let e3 = env(&[("DROCE_LINK", &link), ("FI_PROVIDER_PATH", dir.to_str().unwrap()), ("FI_PROVIDER", "droce"), ("EXIT_APP_HOLD_MS", "60000")]);
    let mut third = Proc::spawn("exit_app slot 2", &[app.display().to_string()], &e3, DEADLINE);
    let t0 = Instant::now();
    while !third.output().contains("exit_app: opened") && third.running() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let outs = |v: &[&Proc]| v.iter().map(|p| p.output()).collect::<Vec<_>>().join("");
    assert!(third.output().contains("exit_app: opened"), "the third process did not open:\n{}", outs(&[&srv, &cli, &third]));
    std::thread::sleep(Duration::from_millis(1000));
    assert!(srv.running() && cli.running(), "the pair must run:\n{}", outs(&[&srv, &cli, &third]));
    drop(third); // SIGTERM, then SIGKILL, to its process group
    std::thread::sleep(Duration::from_secs(3));
    let (s_runs, c_runs) = (srv.running(), cli.running());
    let (os, oc) = (srv.output(), cli.output());
    // our own processes, by their process groups
    drop(cli);
    drop(srv);
    remove_link_locks(&link);
    for o in [&os, &oc] {
        assert!(o.contains("the memif link to 10.77.0.3 (zero-config slot 2) went down"), "the loss was not seen:\n{os}{oc}");
    }
    assert!(s_runs && c_runs, "the pair must go on:\n{os}{oc}");
    assert!(!os.contains("Endpoint timeout") && !oc.contains("Endpoint timeout"), "{os}{oc}");
}
