//! Incast through the simulated fabric: N senders WRITE (or SEND) to one receiver through a
//! switch port whose buffer is too small for all of them, so frames are tail-dropped and the
//! transport recovers. Every byte of every message must arrive (checked where it lands), and
//! every port must account for every frame: enqueued = dequeued + dropped + queued.

use droce_transport::sim::fabric::{Fabric, FabricConfig, Port, StreamOp, StreamSpec};
use droce_transport::sim::RcOpts;
use droce_transport::cc::CcConfig;
use droce_transport::{DeviceConfig, Duration, Instant};

fn conserved(f: &Fabric) {
    for (p, port) in f.ports() {
        let s = port.stats();
        assert_eq!(s.enqueued, s.dequeued + s.dropped + port.len() as u64, "{p:?}: {s:?}");
        assert!(s.queue_bytes <= port.config().queue_bytes, "{p:?} over its buffer");
    }
}

/// `n` senders, `count` messages of `size` each, through a port with `buffer` bytes, with
/// DCQCN (ECT frames, marks, CNPs, pacing) or without; runs to idle checking conservation
/// every millisecond on the way.
fn incast(n: usize, op: StreamOp, size: usize, count: u64, buffer: usize, cc: bool) -> (Fabric, Vec<usize>) {
    let mut cfg = FabricConfig::incast(n);
    cfg.switch.queue_bytes = buffer;
    let cc = if cc { CcConfig::default() } else { CcConfig::off() };
    let mut f = Fabric::new(cfg, |_| DeviceConfig { cc: cc.clone(), ..DeviceConfig::default() });
    let r = f.receiver(0);
    let opts = RcOpts::default();
    let streams: Vec<usize> = (0..n)
        .map(|i| f.add_stream(StreamSpec { from: f.sender(i), to: r, op, size, outstanding: 8, count: Some(count), verify: true }, opts))
        .collect();
    let mut t = Instant::ZERO;
    let mut idle = false;
    for _ in 0..2_000 {
        t = t + Duration::from_millis(1);
        f.run_until(t, 50_000_000);
        conserved(&f);
        if streams.iter().all(|&s| f.stream_stats(s).completed == count) {
            idle = f.run_idle(50_000_000);
            break;
        }
    }
    if !idle {
        for h in 0..f.nodes.len() {
            eprintln!("host {h}: {:?}", f.nodes[h].dev.counters());
        }
        for (p, port) in f.ports() {
            eprintln!("{p:?}: {:?}", port.stats());
        }
        panic!("did not finish in 2 s of simulated time: {:?}", streams.iter().map(|&s| f.stream_stats(s)).collect::<Vec<_>>());
    }
    conserved(&f);
    for (p, port) in f.ports() {
        assert!(port.is_empty() && port.stats().queue_bytes == 0, "{p:?} not drained");
    }
    assert_eq!(f.on_cables(), 0);
    (f, streams)
}

fn all_arrived(f: &Fabric, streams: &[usize], count: u64) {
    for &s in streams {
        let st = f.stream_stats(s);
        assert_eq!((st.posted, st.completed, st.errors), (count, count, 0), "stream {s}");
        // The fabric compared every message where it landed when it completed...
        assert_eq!(st.verified, count, "stream {s}");
        // ...and the last one of each slot is still there to look at.
        for m in count.saturating_sub(9)..count {
            let (h, addr) = f.landing(s, m);
            let want = f.message_bytes(s, m);
            assert!(f.nodes[h].dev.memory().slice(addr, want.len()) == want, "stream {s} message {m}");
        }
    }
}

#[test]
fn writes_survive_tail_drops_8_to_1() {
    // 8 x 8 x 16 KiB outstanding against a 256 KiB buffer: drops are certain.
    let (f, streams) = incast(8, StreamOp::Write, 16 << 10, 300, 256 << 10, false);
    all_arrived(&f, &streams, 300);
    let b = f.port_stats(f.bottleneck());
    let retx: u64 = (0..8).map(|i| f.nodes[f.sender(i)].dev.counters().retransmitted_pkts).sum();
    eprintln!("bottleneck {b:?}\nretransmitted {retx}, virtual time {:?}", f.now);
    assert!(b.dropped > 100, "the test must exercise loss: {b:?}");
    assert!(retx >= b.dropped, "every dropped data frame is sent again");
    assert!(b.max_queue_bytes <= 256 << 10);
    // The receiver got exactly the payload once, at least: the bytes through the port cover it.
    assert!(b.bytes_out >= 8 * 300 * (16 << 10));
}

#[test]
fn sends_survive_tail_drops_4_to_1() {
    let (f, streams) = incast(4, StreamOp::Send, 6000, 400, 24 << 10, false);
    all_arrived(&f, &streams, 400);
    for &s in &streams {
        assert_eq!(f.stream_stats(s).received, 400);
    }
    assert!(f.port_stats(f.bottleneck()).dropped > 0);
}

#[test]
fn no_drops_when_the_buffer_holds_every_window() {
    // 2 senders x 128 PSNs of window (the default max_unacked_psns) fit in 640 KiB.
    let (f, streams) = incast(2, StreamOp::Write, 64 << 10, 100, 640 << 10, false);
    all_arrived(&f, &streams, 100);
    let b = f.port_stats(Port::Egress(f.receiver(0)));
    assert_eq!(b.dropped, 0);
    assert!(b.max_queue_bytes > 100 << 10, "two line-rate senders queue at the port: {b:?}");
    for i in 0..2 {
        assert_eq!(f.nodes[f.sender(i)].dev.counters().retransmitted_pkts, 0);
    }
}

#[test]
fn writes_and_sends_intact_through_marking_with_dcqcn() {
    // With CC the port marks CE (rewriting the IPv4 TOS and checksum, which the ICRC must
    // not mind), the receiver answers with CNPs and the senders slow down; drops may still
    // happen at the start, and nothing may be lost.
    let (f, streams) = incast(8, StreamOp::Write, 16 << 10, 300, 256 << 10, true);
    all_arrived(&f, &streams, 300);
    let b = f.port_stats(f.bottleneck());
    let r = f.receiver(0);
    eprintln!("bottleneck {b:?}\nreceiver {:?}", f.nodes[r].dev.counters());
    assert!(b.marked > 1000, "{b:?}");
    assert_eq!(f.nodes[r].dev.counters().rcvd_icrc_err, 0, "marking must not break the ICRC");
    assert!(f.nodes[r].dev.counters().cnp_sent > 0);
    let (f, streams) = incast(4, StreamOp::Send, 6000, 400, 64 << 10, true);
    all_arrived(&f, &streams, 400);
    assert!(f.port_stats(f.bottleneck()).marked > 0);
}

#[test]
#[should_panic(expected = "landed corrupted")]
fn a_corrupted_landing_is_caught() {
    let cfg = FabricConfig::incast(2);
    let mut f = Fabric::new(cfg, |_| DeviceConfig::default());
    let r = f.receiver(0);
    let s = f.add_stream(StreamSpec { from: 0, to: r, op: StreamOp::Write, size: 64 << 10, outstanding: 4, count: Some(50), verify: true }, RcOpts::default());
    f.run_until(Instant(200_000), 10_000_000);
    // Overwrite every slot while messages are in flight: the next completion must notice.
    let done = f.stream_stats(s).completed;
    for m in done..done + 5 {
        let (h, addr) = f.landing(s, m);
        f.nodes[h].dev.memory_mut().slice_mut(addr, 64 << 10).fill(0xee);
    }
    f.run_idle(10_000_000);
}
