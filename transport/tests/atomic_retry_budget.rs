//! atomic_lat under heavy loss: is RETRY_EXC_ERR the retry budget doing what IB specifies, or a
//! lost atomic that cannot be recovered?
//!
//! One FETCH_AND_ADD outstanding at a time (perftest's atomic_lat), go-back-N, retry_cnt 7: an
//! attempt fails when its request or its response is lost, and only the retransmit timer
//! recovers it (nothing follows a lone request to trigger a NAK). If every retry is a fresh
//! chance (a duplicate atomic is answered from the responder's replay cache, not executed
//! again and not ignored), an operation ends in RETRY_EXC_ERR with probability
//! q^(retry_cnt+1), q = 1 - (1-p)^2 for a per-frame loss p. A defect that leaves a lost
//! response unrecoverable would fail about p of the operations instead.
//!
//! droce-pmd's `--faults=both:drop=0.15` on both processes drops a frame at the sender's TX
//! and again at the receiver's RX: p = 1 - 0.85^2 = 0.2775 per frame, q = 0.478, and
//! q^8 = 0.27 % of operations; a 1000-iteration atomic_lat then ends in RETRY_EXC_ERR in
//! 1 - (1 - 0.0027)^1000 = 93 % of runs. With 15 % per frame end to end (p = 0.15), q^8 = 3.5e-5
//! and 3.4 % of 1000-operation runs fail.

use droce_transport::sim::{LinkConfig, Pair, RcOpts, MEM_BASE};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{SendOpcode, SendWr};

const COUNTER: u64 = MEM_BASE + 4096;
const RESULT: u64 = MEM_BASE;

struct Tally {
    ops: u64,
    failed: u64,
    /// Successful operations whose result was not the counter's value before them (an atomic
    /// executed twice or not at all).
    wrong: u64,
}

/// `n` sequential fetch-adds at per-frame loss `p`, a fresh QP pair after each RETRY_EXC_ERR.
fn run(p: f64, n: u64, seed: u64) -> Tally {
    let link = LinkConfig { loss: p, duplicate: 0.0, reorder: 0.0, bit_flip: 0.0, ..LinkConfig::PERFECT };
    let mut pr = Pair::new(link, seed, 64 * 1024);
    let opts = RcOpts { timeout: 4, retry_cnt: 7, max_rd_atomic: 1, ..RcOpts::default() };
    let (mut qa, _) = pr.rc_pair(opts);
    let (la, rkb) = (pr.a.mr.lkey, pr.b.mr.rkey);
    let mut t = Tally { ops: 0, failed: 0, wrong: 0 };
    for i in 0..n {
        let before = u64::from_ne_bytes(pr.b.dev.memory().slice(COUNTER, 8).try_into().unwrap());
        let wr = SendWr::new(i, SendOpcode::FetchAdd).with_sge(RESULT, 8, la).with_remote(COUNTER, rkb).with_atomic(1, 0);
        pr.a.dev.post_send(qa, wr).unwrap();
        let mut wc = None;
        assert!(pr.run_until(1_000_000, |pr| {
            wc = pr.a.poll();
            wc.is_some()
        }));
        let wc = wc.unwrap();
        t.ops += 1;
        match wc.status {
            WcStatus::Success => {
                assert_eq!(wc.opcode, WcOpcode::FetchAdd);
                let got = u64::from_ne_bytes(pr.a.dev.memory().slice(RESULT, 8).try_into().unwrap());
                t.wrong += u64::from(got != before);
            }
            WcStatus::RetryExcErr => {
                t.failed += 1;
                pr.run_idle(1_000_000);
                qa = pr.rc_pair(opts).0;
            }
            s => panic!("op {i}: {s:?}"),
        }
    }
    // every fetch-add the responder executed is in the counter exactly once: the successful
    // ones, plus failed ones whose request got through before all responses were lost
    let counter = u64::from_ne_bytes(pr.b.dev.memory().slice(COUNTER, 8).try_into().unwrap());
    assert!(counter >= t.ops - t.failed && counter <= t.ops, "counter {counter}, ops {}, failed {}", t.ops, t.failed);
    t
}

#[test]
fn atomic_retry_exhaustion_is_the_ib_retry_budget() {
    // p = 0.2775: droce-pmd's both:drop=0.15 on both ends
    let p: f64 = 1.0 - 0.85 * 0.85;
    let q = 1.0 - (1.0 - p) * (1.0 - p);
    let n = 40_000;
    let t = run(p, n, 0xa70);
    let want = n as f64 * q.powi(8);
    eprintln!("p {p:.4}: {} of {} fetch-adds ended in RETRY_EXC_ERR, q^8 x n = {want:.1}; {} wrong results", t.failed, t.ops, t.wrong);
    assert_eq!(t.wrong, 0, "an atomic executed twice or lost its result");
    // binomial(n, q^8): mean 110, sd 10.5; a lost response that cannot be recovered would
    // fail p = 28 % of them (over 10 000)
    assert!((t.failed as f64 - want).abs() < 5.0 * want.sqrt(), "{} failures, expected {want:.1}", t.failed);

    // 15 % per frame end to end: q^8 = 3.5e-5, 1.4 expected failures in 40 000
    let p = 0.15f64;
    let t = run(p, n, 0xa71);
    let q: f64 = 1.0 - 0.85 * 0.85;
    eprintln!("p {p:.2}: {} of {} ended in RETRY_EXC_ERR, q^8 x n = {:.1}", t.failed, t.ops, n as f64 * q.powi(8));
    assert_eq!(t.wrong, 0);
    assert!(t.failed <= 8, "{} failures, expected 1.4", t.failed);
}
