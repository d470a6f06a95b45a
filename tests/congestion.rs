//! End to end through droce-pmd's `switch` forwarding mode: one switch process, the memif
//! server of four links, and two droce-pmd RDMA pairs (client A -> server A, client B ->
//! server B), each process a memif client on its own link; ARP and RoCE of both pairs cross
//! the switch. Run plain, and through an emulated bottleneck that both streams share.
//!
//! Every child is bounded by a deadline and killed by its PID; the switch is ended with
//! SIGTERM (by PID) once both pairs are done, and prints its statistics on the way out. A
//! pcap replay checks the marks and the pacing frame by frame.

mod harness;

use harness::pmd::{Done, Pmd};
use harness::{args as v, free_port, serial, unique};

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Most any one process may take before the test kills it.
const DEADLINE: Duration = Duration::from_secs(90);

/// droce-pmd on `lcore` with `vdevs`.
fn spawn(lcore: u32, vdevs: &[String], app: &[String]) -> Pmd {
    Pmd::spawn(None, lcore, vdevs, app, DEADLINE)
}

/// A directory for the four memif sockets of one run.
struct Sockets {
    dir: PathBuf,
}

impl Sockets {
    fn new() -> Sockets {
        let dir = std::env::temp_dir().join(unique("sw"));
        std::fs::create_dir_all(&dir).unwrap();
        Sockets { dir }
    }
    fn path(&self, link: usize) -> PathBuf {
        self.dir.join(format!("{link}.sock"))
    }
    /// The switch's end of link `link` (the memif server) or the RDMA process's (the client).
    fn vdev(&self, link: usize, server: bool) -> String {
        let id = if server { link } else { 0 };
        format!(
            "net_memif{id},role={},socket={},socket-abstract=no",
            if server { "server" } else { "client" },
            self.path(link).display()
        )
    }
    fn wait_all(&self, n: usize) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            if (0..n).all(|l| self.path(l).exists()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Sockets {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Run {
    switch: Done,
    /// (server, client) of pair A, then of pair B.
    pairs: Vec<(Done, Done)>,
}

/// The switch on links 0..4 with `switch_args`; pair A on links 0 (client) and 1 (server),
/// pair B on links 2 (client) and 3 (server), every RDMA process with its own RoCE address.
fn two_pairs_through_switch(switch_args: &str, test: &str) -> Run {
    let _g = serial();
    let socks = Sockets::new();
    let vdevs: Vec<String> = (0..4).map(|l| socks.vdev(l, true)).collect();
    let sw = spawn(0, &vdevs, &v(&format!("--forward-mode=switch --auto-start --run-time=120 {switch_args}")));
    assert!(socks.wait_all(4), "the switch never created its memif sockets:\n{}", sw.output());
    // -u 17: the ACK timeout (0.54 s) rides out scheduling stalls of five busy-polling processes
    // on a small machine; a frame the bottleneck drops is recovered by a NAK before that.
    const LINKS: [(usize, usize); 2] = [(0, 1), (2, 3)]; // (client link, server link) per pair
    let ports: Vec<u16> = LINKS.iter().map(|_| free_port()).collect();
    let common = |pair: usize| format!("{test} -p {} --timeout 30 -u 17", ports[pair]);
    let servers: Vec<Pmd> = LINKS
        .iter()
        .enumerate()
        .map(|(pair, &(_, sv))| spawn(1, &[socks.vdev(sv, false)], &v(&format!("{} --ip 10.77.{pair}.1", common(pair)))))
        .collect();
    // the clients connect once their servers listen on TCP
    for (s, &port) in servers.iter().zip(&ports) {
        let t0 = Instant::now();
        while !harness::tcp_listening(port) && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(harness::tcp_listening(port), "server never listened on TCP {port}:\n{}", s.output());
    }
    let clients: Vec<Pmd> = LINKS
        .iter()
        .enumerate()
        .map(|(pair, &(cl, _))| spawn(0, &[socks.vdev(cl, false)], &v(&format!("{} --ip 10.77.{pair}.2 127.0.0.1", common(pair)))))
        .collect();
    let mut pairs = Vec::new();
    for (s, c) in servers.into_iter().zip(clients) {
        let c = c.finish();
        let s = s.finish();
        pairs.push((s, c));
    }
    // both pairs are done: the switch prints its statistics on the way out
    let stopping = Instant::now();
    sw.terminate();
    assert!(sw.wait_for("Port 3 is closed", Duration::from_secs(30)), "the switch did not stop on SIGTERM:\n{}", sw.output());
    let switch = sw.finish();
    assert!(stopping.elapsed() < Duration::from_secs(30));
    Run { switch, pairs }
}

/// `name: value` pairs of a statistics line, summed over every occurrence in `out`.
fn counter(out: &str, name: &str) -> u64 {
    harness::counter(out, name).0
}

fn assert_pairs_verified(run: &Run) {
    for (i, (s, c)) in run.pairs.iter().enumerate() {
        let name = ["A", "B"][i];
        assert_eq!(c.code, Some(0), "client {name} failed:\n{}\n--- server {name}:\n{}\n--- switch:\n{}", c.out, s.out, run.switch.out);
        assert_eq!(s.code, Some(0), "server {name} failed:\n{}\n--- client {name}:\n{}\n--- switch:\n{}", s.out, c.out, run.switch.out);
        assert!(c.out.contains("every byte of every message verified"), "client {name}:\n{}", c.out);
        assert!(s.out.contains("Data check at server: OK"), "server {name}:\n{}", s.out);
        // each side resolved its peer by ARP across the switch (the broadcast was flooded)
        assert!(counter(&c.out, "arp_replies_rx") + counter(&s.out, "arp_replies_rx") > 0, "no ARP reply crossed the switch:\n{}", c.out);
    }
    assert_eq!(run.switch.code, Some(0), "switch:\n{}", run.switch.out);
    assert_eq!(run.switch.signal, None, "switch:\n{}", run.switch.out);
}

#[test]
fn two_pairs_through_a_plain_switch() {
    let run = two_pairs_through_switch("--stats-period=1", "--test=write_bw -s 65536 -n 200 --verify");
    assert_pairs_verified(&run);
    let sw = &run.switch.out;
    // the periodic statistics carry the switch's block too (the run outlasts a period: four
    // EAL start-ups and two TCP exchanges happen while it runs), and the exit prints it again
    assert!(sw.contains("Port statistics ====") && sw.contains("NIC statistics for port 3"), "{sw}");
    assert!(sw.matches("Switch statistics").count() >= 2, "{sw}");
    assert!(!sw.contains("Bottleneck statistics"), "no bottleneck configured:\n{sw}");
    assert!(sw.contains("Signal received, preparing to exit"), "{sw}");
    // from here on, the final statistics only
    let fin = sw.rsplit("Telling cores to stop").next().unwrap_or("");
    // four RDMA processes behind four ports
    assert_eq!(counter(fin, "MACs-learnt"), 4, "{sw}");
    assert!(counter(fin, "Flooded") >= 2, "the ARP requests were not flooded:\n{sw}");
    // every port received and sent (a few frames refused by a full memif ring, when the
    // process behind it was not scheduled, are possible and recovered: not asserted)
    let blocks: Vec<&str> = fin.split("Forward statistics for port ").skip(1).collect();
    assert_eq!(blocks.len(), 4, "{sw}");
    for b in &blocks {
        assert!(counter(b, "RX-packets") > 0 && counter(b, "TX-packets") > 0, "{b}");
    }
    // the 200 x 64 KiB of each pair crossed the switch (1024-byte packets, 64 per message)
    let roce_in: u64 = run.pairs.iter().map(|(s, _)| counter(&s.out, "rcvd_pkts")).sum();
    assert!(roce_in >= 2 * 200 * 64, "{roce_in}");
}

/// The bottleneck's counters from the switch's block for `what` ("all ports (scope switch)",
/// "port 1"): (enqueued, dropped, marked, dequeued, bytes out).
fn bottleneck(sw: &str, what: &str) -> (u64, u64, u64, u64, u64) {
    let head = format!("Bottleneck statistics for {what} ");
    let block = sw.split(&head).nth(1).unwrap_or_else(|| panic!("no '{head}' block:\n{sw}"));
    let block = block.split("\n\n").next().unwrap_or("");
    let c = |n| counter(block, n);
    (c("Offered"), c("Dropped"), c("Marked"), c("Dequeued"), c("Bytes-out"))
}

/// "BW average[MB/sec]" of a perftest bw report.
fn bw_average(out: &str) -> f64 {
    let line = out.lines().skip_while(|l| !l.contains("BW average[MB/sec]")).nth(1).unwrap_or_else(|| panic!("no bw line:\n{out}"));
    line.split_whitespace().nth(3).and_then(|x| x.parse().ok()).unwrap_or_else(|| panic!("bad bw line {line:?}"))
}

/// 500 Mbit/s: about a fifth of what one pair reaches through the plain switch here, and a
/// 128 KiB buffer, less than two 64 KiB messages in flight: the queue overflows.
const BOTTLENECK: &str = "--bottleneck=rate=500m,queue=128k,kmin=16k,kmax=64k,pmax=0.2,seed=1";
const RATE_MB_S: f64 = 500e6 / 8.0 / 1e6;

#[test]
fn two_pairs_share_one_bottleneck() {
    let run = two_pairs_through_switch(&format!("{BOTTLENECK} --bottleneck-scope=switch"), "--test=write_bw -s 65536 -n 100 --verify");
    assert_pairs_verified(&run);
    let sw = &run.switch.out;
    assert!(sw.contains("bottleneck shared by all ports (scope switch): rate=500m queue=131072 B kmin=16384 B kmax=65536 B pmax=0.2 seed=1"), "{sw}");
    let (offered, dropped, marked, deq, bytes) = bottleneck(sw, "all ports (scope switch)");
    // the bottleneck bit: frames were dropped at the full queue (or marked, for ECN-capable ones)
    assert!(dropped + marked > 0, "the bottleneck never bit:\n{sw}");
    // every forwarded frame went through the one queue, and it drained: nothing held back
    assert_eq!(offered, deq + dropped, "{sw}");
    let acc = sw.split("Accumulated").nth(1).unwrap_or("");
    assert_eq!(deq, counter(acc, "TX-packets") + counter(acc, "TX-dropped"), "{sw}");
    // both pairs' data crossed it (200 x 64 KiB at least, retransmissions on top)
    assert!(bytes >= 2 * 100 * 65536, "{bytes}:\n{sw}");
    assert!(run.pairs.iter().all(|(_, c)| counter(&c.out, "retransmitted_pkts") > 0), "drops without retransmissions?");
    for (s, c) in &run.pairs {
        eprintln!(
            "pair: {:.2} MB/s, server ecn_ce_rcvd {} cnp_sent {}, client cnp_rcvd {} cc_rate_cuts {} retransmitted_pkts {}",
            bw_average(&c.out),
            counter(&s.out, "ecn_ce_rcvd"),
            counter(&s.out, "cnp_sent"),
            counter(&c.out, "cnp_rcvd"),
            counter(&c.out, "cc_rate_cuts"),
            counter(&c.out, "retransmitted_pkts")
        );
    }
    eprintln!("bottleneck: offered {offered} dropped {dropped} marked {marked}");
    // congestion control is on by default: ECT frames were marked, the servers answered with
    // CNPs, the clients cut their rates
    assert!(marked > 0, "droce's frames carry ECT(0): the bottleneck marks them:\n{sw}");
    for (s, c) in &run.pairs {
        assert!(counter(&s.out, "ecn_ce_rcvd") > 0 && counter(&s.out, "cnp_sent") > 0, "{}", s.out);
        assert!(counter(&c.out, "cnp_rcvd") > 0 && counter(&c.out, "cc_rate_cuts") > 0, "{}", c.out);
    }
}

/// `--cc=off` on both pairs: Not-ECT frames, so the same bottleneck only drops; no CNP, no cut.
#[test]
fn without_congestion_control_the_bottleneck_only_drops() {
    let run = two_pairs_through_switch(&format!("{BOTTLENECK} --bottleneck-scope=switch"), "--test=write_bw -s 65536 -n 40 --verify --cc=off");
    assert_pairs_verified(&run);
    let sw = &run.switch.out;
    let (_, dropped, marked, _, _) = bottleneck(sw, "all ports (scope switch)");
    assert!(dropped > 0 && marked == 0, "dropped {dropped} marked {marked}:\n{sw}");
    for (s, c) in &run.pairs {
        for k in ["ecn_ce_rcvd", "cnp_sent", "cnp_rcvd", "cc_rate_cuts"] {
            assert_eq!(counter(&s.out, k) + counter(&c.out, k), 0, "{k}:\n{}\n{}", s.out, c.out);
        }
    }
    // the two streams together got no more than the line rate
    let sum: f64 = run.pairs.iter().map(|(_, c)| bw_average(&c.out)).sum();
    assert!(sum <= RATE_MB_S * 1.05, "{sum} MB/s through a {RATE_MB_S} MB/s bottleneck");
}

#[test]
fn a_bottleneck_on_each_egress_port() {
    let run = two_pairs_through_switch(&format!("{BOTTLENECK} --bottleneck-scope=port"), "--test=write_bw -s 65536 -n 60 --verify");
    assert_pairs_verified(&run);
    let sw = &run.switch.out;
    assert!(sw.contains("bottleneck on each egress port: rate=500m"), "{sw}");
    // the data flows towards the servers (links 1 and 3): their queues overflowed; the ACKs
    // towards the clients (links 0 and 2) are small and few
    for p in [1, 3] {
        let (offered, dropped, _, deq, bytes) = bottleneck(sw, &format!("port {p}"));
        assert!(dropped > 0, "port {p}:\n{sw}");
        assert_eq!(offered, deq + dropped, "port {p}:\n{sw}");
        assert!(bytes >= 60 * 65536, "port {p}:\n{sw}");
    }
    for p in [0, 2] {
        let (offered, dropped, _, deq, _) = bottleneck(sw, &format!("port {p}"));
        assert!(offered > 0 && offered == deq && dropped == 0, "port {p}:\n{sw}");
    }
    for (_, c) in &run.pairs {
        assert!(bw_average(&c.out) <= RATE_MB_S * 1.05, "{}", c.out);
    }
}

#[test]
fn bad_bottleneck_arguments_are_named() {
    let socks = Sockets::new();
    for (args, want) in [
        ("--forward-mode=io --bottleneck=rate=1g", "--bottleneck works in the switch mode only"),
        ("--forward-mode=switch --bottleneck=rate=1x", "bottleneck 'rate': '1x' is not a rate"),
        ("--forward-mode=switch --bottleneck-scope=port", "--bottleneck-scope needs --bottleneck=SPEC"),
    ] {
        let d = spawn(0, &[socks.vdev(0, true)], &v(args)).finish();
        assert_eq!(d.code, Some(2), "{args}: {}", d.out);
        assert!(d.out.contains(want), "{args}: {}", d.out);
        assert_eq!(d.out.lines().count(), 1, "{args}: one line, before EAL starts:\n{}", d.out);
    }
}

/// A pcap file (microsecond or nanosecond timestamps) of `frames`.
fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    let mut b = Vec::new();
    for x in [0xa1b2c3d4u32.to_le_bytes().as_slice(), &2u16.to_le_bytes(), &4u16.to_le_bytes(), &[0; 8], &65535u32.to_le_bytes(), &1u32.to_le_bytes()] {
        b.extend_from_slice(x);
    }
    for f in frames {
        for x in [0u32, 0, f.len() as u32, f.len() as u32] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b.extend_from_slice(f);
    }
    std::fs::write(path, b).unwrap();
}

/// The (timestamp in ns, frame) records of a pcap file.
fn read_pcap(path: &std::path::Path) -> Vec<(u64, Vec<u8>)> {
    let b = std::fs::read(path).unwrap();
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    let scale = match u32_at(0) {
        0xa1b2c3d4 => 1000,
        0xa1b23c4d => 1,
        m => panic!("not a little-endian pcap: magic {m:#x}"),
    };
    let mut out = Vec::new();
    let mut i = 24;
    while i + 16 <= b.len() {
        let ts = u64::from(u32_at(i)) * 1_000_000_000 + u64::from(u32_at(i + 4)) * scale;
        let len = u32_at(i + 8) as usize;
        out.push((ts, b[i + 16..i + 16 + len].to_vec()));
        i += 16 + len;
    }
    out
}

/// One's-complement sum of `b` folded to 16 bits (RFC 1071); 0xffff over a valid IPv4 header.
fn ones_sum(b: &[u8]) -> u16 {
    let mut s: u32 = b.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))).sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

#[test]
fn the_bottleneck_marks_ect_frames_in_place_and_paces_them() {
    // 200 RoCEv2-like 1000-byte IPv4 frames with ECT(0), arriving at once on port 0 (a pcap
    // replay) towards an unknown MAC: flooded to port 1, whose 100 Mbit/s bottleneck (80 us per
    // frame) queues 64 KiB, marks from 8 KiB and marks everything from 32 KiB
    let dir = Sockets::new();
    let frames: Vec<Vec<u8>> = (0..200u16)
        .map(|i| {
            let mut f = vec![0u8; 1000];
            f[0..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xbb, 2, 0, 0, 0, 0, 0xaa]);
            f[12..14].copy_from_slice(&[8, 0]);
            let ip = &mut f[14..34];
            ip.copy_from_slice(&[0x45, 0x02, 0x03, 0xda, (i >> 8) as u8, i as u8, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
            let c = !ones_sum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f[34..38].copy_from_slice(&[0xc0, 0, 0x12, 0xb7]);
            f
        })
        .collect();
    let (input, out0, out1) = (dir.dir.join("in.pcap"), dir.dir.join("out0.pcap"), dir.dir.join("out1.pcap"));
    write_pcap(&input, &frames);
    let vdevs = [
        format!("net_pcap0,rx_pcap={},tx_pcap={}", input.display(), out0.display()),
        format!("net_pcap1,tx_pcap={}", out1.display()),
    ];
    let d = spawn(0, &vdevs, &v("--forward-mode=switch --bottleneck=rate=100m,queue=64k,kmin=8k,kmax=32k --run-time=1")).finish();
    assert_eq!((d.code, d.signal), (Some(0), None), "{}", d.out);
    let (offered, dropped, marked, deq, bytes) = bottleneck(&d.out, "port 1");
    assert_eq!(offered, 200, "{}", d.out);
    assert!(dropped > 0 && marked > 0, "{}", d.out);
    assert_eq!((offered - dropped, bytes), (deq, deq * 1000), "{}", d.out);
    let sent = read_pcap(&out1);
    assert_eq!(sent.len() as u64, deq, "{}", d.out);
    // the marks are in the frames that left: CE instead of ECT(0), header checksum still valid
    let ecn: Vec<u8> = sent.iter().map(|(_, f)| f[15] & 3).collect();
    assert!(ecn.iter().all(|&e| e == 0b10 || e == 0b11), "{ecn:?}");
    assert_eq!(ecn.iter().filter(|&&e| e == 0b11).count() as u64, marked, "{ecn:?}");
    assert!(sent.iter().all(|(_, f)| ones_sum(&f[14..34]) == 0xffff), "a mark broke an IPv4 header checksum");
    // below kmin nothing is marked: the first 8 frames found at most 7000 B queued ahead
    // (fewer if some had left meanwhile)
    assert!(ecn[..8].iter().all(|&e| e == 0b10), "{ecn:?}");
    // paced at the line rate: back to back, N frames take (N - 1) x 80 us from the first to
    // the last; half of that leaves room for a scheduling stall before the first TX burst
    // (the frames due meanwhile then leave together), and no room for an unpaced switch,
    // which sends them all within microseconds
    let span = sent.last().unwrap().0 - sent[0].0;
    assert!(span >= (deq - 1) * 80_000 / 2, "{deq} frames in {span} ns");
}
