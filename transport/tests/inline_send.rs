//! INLINE sends: the payload is copied once, at post time, into a buffer the WQE keeps until
//! it retires; posts reuse retired buffers (no allocation per post once warm); a lossy link
//! makes the requester resend from that buffer, and the receiver gets the bytes as posted.

use droce_transport::device::PostSendError;
use droce_transport::qp::{PathMtu, QpCap};
use droce_transport::sim::{LinkConfig, Pair, RcOpts, MEM_BASE};
use droce_transport::status::WcStatus;
use droce_transport::verbs::{RecvWr, SendFlags, SendOpcode, SendWr};
use droce_transport::Memory;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts the allocations of the current thread (tests run on threads of their own).
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from System.alloc with `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: as for alloc; `p` came from this allocator with `l`.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

const MEM: usize = 1 << 20;
const RECV: u64 = MEM_BASE + 0x8_0000;
const SLOT: u64 = 0x1000;

/// Message `i` of `len` bytes: every message differs.
fn msg(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i.wrapping_mul(131).wrapping_add(k as u64 * 7) >> 1) as u8).collect()
}

/// Runs `n` inline sends, each posted by `post` while up to `window` are outstanding, and
/// checks that every one arrives with its own bytes, in order. Returns the allocations made
/// inside the posts after the first `window` messages (the warm-up).
fn run(p: &mut Pair, opts: RcOpts, n: u64, window: u64, len: impl Fn(u64) -> usize, mut post: impl FnMut(&mut Pair, droce_transport::qp::QpHandle, u64, &[u8]) -> Result<(), PostSendError>) -> u64 {
    let (qa, qb) = p.rc_pair(opts);
    let lb = p.b.mr.lkey;
    let slots = 2 * window;
    let (mut posted, mut sent_done, mut recv_done, mut warm_allocs) = (0u64, 0u64, 0u64, 0u64);
    for i in 0..slots.min(n) {
        p.b.dev.post_recv(qb, RecvWr::new(i).with_sge(RECV + (i % slots) * SLOT, SLOT as u32, lb)).unwrap();
    }
    let mut recv_posted = slots.min(n);
    let mut steps = 0u64;
    while recv_done < n {
        steps += 1;
        assert!(steps < 5_000_000, "stuck: posted {posted} sent {sent_done} received {recv_done}");
        while posted < n && posted - sent_done < window {
            let data = msg(posted, len(posted));
            let before = allocs();
            post(p, qa, posted, &data).expect("post");
            if posted >= window {
                warm_allocs += allocs() - before;
            }
            posted += 1;
        }
        if !p.step() && posted == n && sent_done == n {
            break;
        }
        while let Some(w) = p.a.poll() {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            assert_eq!(w.wr_id, sent_done, "send completions in order");
            sent_done += 1;
        }
        while let Some(w) = p.b.poll() {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            assert_eq!(w.wr_id, recv_done, "receives in order");
            let want = msg(recv_done, len(recv_done));
            assert_eq!(w.byte_len as usize, want.len());
            let got = p.b.dev.memory().slice(RECV + (recv_done % slots) * SLOT, want.len());
            assert_eq!(got, &want[..], "message {recv_done}");
            recv_done += 1;
            if recv_posted < n {
                p.b.dev.post_recv(qb, RecvWr::new(recv_posted).with_sge(RECV + (recv_posted % slots) * SLOT, SLOT as u32, lb)).unwrap();
                recv_posted += 1;
            }
        }
    }
    assert_eq!(recv_done, n);
    p.run_until(1_000_000, |p| {
        while let Some(w) = p.a.poll() {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            sent_done += 1;
        }
        sent_done == n
    });
    assert_eq!(sent_done, n, "every send completed");
    warm_allocs
}

/// `post_send_inline_with`: the caller writes the payload into the WQE's buffer.
fn post_with(p: &mut Pair, qa: droce_transport::qp::QpHandle, i: u64, data: &[u8]) -> Result<(), PostSendError> {
    let wr = SendWr::new(i, SendOpcode::Send).with_flags(SendFlags::SIGNALED);
    p.a.dev.post_send_inline_with(qa, &wr, data.len(), |out| out.copy_from_slice(data))
}

#[test]
fn inline_posts_allocate_nothing_once_warm() {
    let mut p = Pair::new(LinkConfig::PERFECT, 21, MEM);
    let warm = run(&mut p, RcOpts::default(), 2000, 8, |i| 1 + (i as usize * 37) % 256, post_with);
    assert_eq!(warm, 0, "allocations in post_send_inline_with after warm-up");

    // The gather form (INLINE flag, data read from registered memory) uses the same buffers.
    let mut p = Pair::new(LinkConfig::PERFECT, 22, MEM);
    let la = p.a.mr.lkey;
    let src = MEM_BASE;
    let mut wr = SendWr::new(0, SendOpcode::Send);
    let warm = run(&mut p, RcOpts::default(), 2000, 8, |i| 1 + (i as usize * 37) % 256, |p, qa, i, data| {
        p.a.dev.memory_mut().write(src, data).unwrap();
        wr.wr_id = i;
        wr.flags = SendFlags::SIGNALED | SendFlags::INLINE;
        wr.sg_list.clear();
        // two SGEs, so the gather crosses an SGE boundary
        let h = data.len() / 2;
        wr.sg_list.push(droce_transport::verbs::Sge { addr: src, length: h as u32, lkey: la });
        wr.sg_list.push(droce_transport::verbs::Sge { addr: src + h as u64, length: (data.len() - h) as u32, lkey: la });
        let r = p.a.dev.post_send_ref(qa, &wr);
        // captured at post time: the source may change at once
        p.a.dev.memory_mut().write(src, &[0xEE; 256][..data.len()]).unwrap();
        r
    });
    assert_eq!(warm, 0, "allocations in post_send_ref (INLINE) after warm-up");
}

#[test]
fn inline_sends_survive_loss_and_retransmission() {
    // Path MTU 256 and 1000-byte inline sends: a message is 4 packets, so a resend reads the
    // WQE's buffer at an offset.
    let cap = QpCap { max_inline_data: 1024, ..QpCap::default() };
    let opts = RcOpts { mtu: PathMtu::Mtu256, timeout: 6, cap, ..RcOpts::default() };
    for (seed, link) in [(31, LinkConfig { loss: 0.1, ..LinkConfig::PERFECT }), (32, LinkConfig::LOSSY)] {
        let mut p = Pair::new(link, seed, MEM);
        run(&mut p, opts, 600, 16, |i| 1 + (i as usize * 97) % 1000, post_with);
        let c = p.a.dev.counters();
        assert!(p.stats.dropped > 20, "seed {seed}: the link dropped frames ({:?})", p.stats);
        assert!(c.completer_retry_err + c.rcvd_seq_err > 0, "seed {seed}: the requester resent ({c:?})");
    }
}

#[test]
fn inline_with_rejects_before_filling() {
    let mut p = Pair::new(LinkConfig::PERFECT, 41, MEM);
    let (qa, _qb) = p.rc_pair(RcOpts::default());
    let la = p.a.mr.lkey;
    let wr = SendWr::new(1, SendOpcode::Send);
    let mut called = false;
    assert_eq!(p.a.dev.post_send_inline_with(qa, &wr, 257, |_| called = true), Err(PostSendError::InlineTooLong));
    let with_sge = SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 8, la);
    assert_eq!(p.a.dev.post_send_inline_with(qa, &with_sge, 8, |_| called = true), Err(PostSendError::TooManySges));
    let read = SendWr::new(1, SendOpcode::Read).with_remote(MEM_BASE, p.b.mr.rkey);
    assert_eq!(p.a.dev.post_send_inline_with(qa, &read, 8, |_| called = true), Err(PostSendError::InlineTooLong));
    assert!(!called, "fill ran for a refused post");
    // A zero-length inline send is a valid SEND of nothing.
    assert_eq!(p.a.dev.post_send_inline_with(qa, &wr, 0, |b| assert!(b.is_empty())), Ok(()));
}
