//! Header prediction on the receive path ([`RoceRepr::parse_predicted`]) against the full
//! parser ([`RoceRepr::parse_without_icrc`]): whatever the prediction accepts, the full parser
//! accepts with the same record and payload range, on the frames Linux rxe sent, on simulated
//! streams of every payload opcode over a lossy, bit-flipping link, on every truncation and
//! on single-byte mutations of the headers; and the prediction does take the common frames,
//! so the receive path's shortcut cannot silently fall out of use.
//!
//! `Device::handle_rx` uses the prediction's record in place of the full parser's and nothing
//! else of it, so equal records mean equal effects (memory, completions, counters).

use droce_transport::pcap;
use droce_transport::qp::PathMtu;
use droce_transport::sim::{LinkConfig, Pair, RcOpts, MEM_BASE};
use droce_transport::verbs::{RecvWr, SendOpcode, SendWr};
use droce_transport::wire::{EtherType, IpRepr, RoceRepr};
use droce_transport::{DeviceConfig, Duration, Memory};
use std::cell::RefCell;
use std::rc::Rc;

mod common;
use common::vectors_dir;

mod rng;
use rng::pattern;

/// The prediction agrees with the full parser on `f`; returns whether it took the frame.
fn agrees(f: &[u8], what: &str) -> bool {
    match RoceRepr::parse_predicted(f) {
        Some(p) => {
            let full = RoceRepr::parse_without_icrc(f);
            assert_eq!(full.as_ref().ok(), Some(&p), "{what}: predicted {p:?}, full parser {full:?}");
            true
        }
        None => false,
    }
}

/// Frames the prediction must take: the full parser accepts them, IPv4, and the opcode's
/// extension headers are none or a RETH.
fn predictable(f: &[u8]) -> bool {
    let Ok((r, _)) = RoceRepr::parse_without_icrc(f) else { return false };
    let info = r.bth.opcode.info();
    matches!(r.ip, IpRepr::Ipv4(_))
        && r.eth.ethertype == EtherType::Ipv4
        && info.header_len() == 12 + if info.has_reth() { 16 } else { 0 }
}

/// Every single-bit flip (and a whole-byte flip) of the first `n` bytes and of the last
/// four (ICRC), every truncation, and Ethernet padding after the IP packet.
fn mutations(f: &[u8], n: usize, what: &str) {
    let mut m = f.to_vec();
    for i in (0..n.min(f.len())).chain(f.len().saturating_sub(4)..f.len()) {
        for x in [0x01u8, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xff] {
            m[i] ^= x;
            agrees(&m, &format!("{what}, byte {i} ^ {x:#x}"));
            m[i] ^= x;
        }
    }
    for len in 0..f.len() {
        agrees(&f[..len], &format!("{what}, truncated to {len}"));
    }
    let mut padded = f.to_vec();
    padded.extend_from_slice(&[0u8; 9]);
    assert_eq!(agrees(&padded, &format!("{what}, padded")), predictable(f), "{what}: Ethernet padding changes the prediction");
}

#[test]
fn prediction_matches_the_full_parser_on_the_rxe_captures() {
    let mut paths: Vec<_> = std::fs::read_dir(vectors_dir()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "pcap")).collect();
    paths.sort();
    assert!(paths.len() >= 17, "expected the 17 vector captures, found {}", paths.len());
    let (mut frames, mut taken) = (0, 0);
    for p in paths {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let file = std::fs::read(&p).unwrap();
        for (k, fr) in pcap::read(&file).unwrap().iter().enumerate() {
            let f = &fr.data[..];
            let what = format!("{name} frame {k}");
            let took = agrees(f, &what);
            assert_eq!(took, predictable(f), "{what}: prediction {took}, a predictable frame: {}", predictable(f));
            frames += 1;
            taken += took as usize;
            // mutations of the first frames of each capture (the headers up to a RETH)
            if k < 12 {
                mutations(f, 14 + 20 + 8 + 12 + 16 + 2, &what);
            }
        }
    }
    assert!(taken * 2 > frames, "the prediction took only {taken} of {frames} captured frames");
}

/// Every payload-carrying RC opcode at sizes around the MTU over a link that loses,
/// duplicates, reorders and flips bits (retransmissions, duplicates): every frame sent, and
/// a copy of it with one bit flipped, through both parsers.
#[test]
fn prediction_matches_the_full_parser_on_simulated_streams() {
    for (eth_mtu, mtu) in [(1500, 1024usize), (9000, 4096)] {
        let link = LinkConfig { loss: 0.02, duplicate: 0.02, reorder: 0.02, reorder_window: Duration::from_micros(30), bit_flip: 0.2, ..LinkConfig::PERFECT };
        let mut p = Pair::with_config(link, 5, 1 << 20, DeviceConfig { eth_mtu, ..DeviceConfig::default() });
        let log = Rc::new(RefCell::new(Vec::<Vec<u8>>::new()));
        let l = log.clone();
        p.filter = Some(Box::new(move |_, f| {
            l.borrow_mut().push(f.to_vec());
            false
        }));
        let (qa, qb) = p.rc_pair(RcOpts { mtu: PathMtu::from_bytes(mtu as u32).unwrap(), ..RcOpts::default() });
        let (la, lb, rb) = (p.a.mr.lkey, p.b.mr.lkey, p.b.mr.rkey);
        let mut posted = 0;
        for (i, &len) in [1usize, 3, mtu - 1, mtu, mtu + 1, 3 * mtu + 5].iter().enumerate() {
            let src = MEM_BASE + 0x1000 + i as u64 * 7;
            p.a.dev.memory_mut().write(src, &pattern(i as u64, len)).unwrap();
            for op in [SendOpcode::Send, SendOpcode::SendImm, SendOpcode::SendInv, SendOpcode::Write, SendOpcode::WriteImm, SendOpcode::Read] {
                if matches!(op, SendOpcode::Send | SendOpcode::SendImm | SendOpcode::SendInv | SendOpcode::WriteImm) {
                    p.b.dev.post_recv(qb, RecvWr::new(9).with_sge(MEM_BASE + 0x80000, 4 * mtu as u32, lb)).unwrap();
                }
                let mut wr = SendWr::new(i as u64, op).with_sge(src, len as u32, la).with_imm(7);
                if matches!(op, SendOpcode::Write | SendOpcode::WriteImm | SendOpcode::Read) {
                    wr = wr.with_remote(MEM_BASE + 0x80003, rb);
                }
                p.a.dev.post_send(qa, wr).unwrap();
                posted += 1;
            }
        }
        let mut done = 0;
        let ok = p.run_until(5_000_000, |p| {
            while p.a.poll().is_some() {
                done += 1;
            }
            while p.b.poll().is_some() {}
            done >= posted
        });
        assert!(ok, "MTU {mtu}: {done} of {posted} sends completed");
        let log = log.borrow();
        let (mut taken, mut corrupted_taken) = (0, 0);
        for (k, f) in log.iter().enumerate() {
            let what = format!("MTU {mtu} frame {k}");
            let took = agrees(f, &what);
            assert_eq!(took, predictable(f), "{what}");
            taken += took as usize;
            // one bit flipped anywhere (the link's flips happen after the recording): a flip
            // in the payload or the ICRC passes both parsers alike, the ICRC check after
            // either one rejects it
            let mut c = f.clone();
            let bit = (k * 7919 + 13) % (c.len() * 8);
            c[bit / 8] ^= 1 << (bit % 8);
            let took = agrees(&c, &format!("{what}, bit {bit} flipped"));
            corrupted_taken += (took && RoceRepr::parse(&c).is_err()) as usize;
            if k % 7 == 0 {
                mutations(f, 14 + 20 + 8 + 12 + 16 + 2, &what);
            }
        }
        assert!(taken * 2 > log.len(), "MTU {mtu}: the prediction took {taken} of {} frames", log.len());
        assert!(corrupted_taken > 0, "MTU {mtu}: no bit-flipped frame reached the prediction");
    }
}

/// Arbitrary bytes behind a valid header prefix: random lengths, fields and payloads.
#[test]
fn prediction_matches_the_full_parser_on_random_frames() {
    let mut p = Pair::new(LinkConfig::PERFECT, 1, 1 << 16);
    let log = Rc::new(RefCell::new(Vec::<Vec<u8>>::new()));
    let l = log.clone();
    p.filter = Some(Box::new(move |_, f| {
        l.borrow_mut().push(f.to_vec());
        false
    }));
    let (qa, _) = p.rc_pair(RcOpts::default());
    let la = p.a.mr.lkey;
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Write).with_sge(MEM_BASE, 3000, la).with_remote(MEM_BASE + 0x4000, p.b.mr.rkey)).unwrap();
    p.run_until(100_000, |p| p.a.poll().is_some());
    let seeds = log.borrow().clone();
    assert!(!seeds.is_empty());
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut taken = 0;
    for i in 0..60_000 {
        let mut f = seeds[i % seeds.len()].clone();
        // a few random bytes changed in the headers, sometimes a random length
        for _ in 0..1 + next() % 3 {
            let at = (next() % 64) as usize % f.len();
            f[at] = next() as u8;
        }
        if next() % 4 == 0 {
            f.truncate((next() % (f.len() as u64 + 1)) as usize);
        }
        taken += agrees(&f, &format!("random frame {i}")) as usize;
    }
    assert!(taken > 1000, "the prediction took only {taken} of the random frames");
}
