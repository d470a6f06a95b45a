//! droce-dump end to end: every vector file, a corrupted copy, truncated and garbage files,
//! and a pcapng written here.

use std::path::PathBuf;
use std::process::{Command, Output};

mod common;
use common::vectors_dir;

const BIN: &str = env!("CARGO_BIN_EXE_droce-dump");

fn vectors() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(vectors_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    v.sort();
    assert!(v.len() >= 17);
    v
}

fn run<P: AsRef<std::ffi::OsStr>>(args: &[P]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run droce-dump")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A scratch file removed on drop.
struct Tmp(PathBuf);
impl Tmp {
    fn new(name: &str, data: &[u8]) -> Tmp {
        let p = std::env::temp_dir().join(format!("droce-dump-{}-{name}", std::process::id()));
        std::fs::write(&p, data).unwrap();
        Tmp(p)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn frame_lines(s: &str) -> Vec<&str> {
    s.lines().filter(|l| !l.starts_with('#')).collect()
}

#[test]
fn every_vector_file_verifies() {
    let files = vectors();
    let mut total_ok = 0;
    for f in &files {
        let o = run(&[f]);
        let out = stdout(&o);
        assert!(
            o.status.success(),
            "{}: {}\n{}",
            f.display(),
            stderr(&o),
            out
        );
        let lines = frame_lines(&out);
        assert!(!lines.is_empty());
        for l in &lines {
            assert!(
                l.ends_with("icrc=ok") || l.contains("skipped (not RoCEv2: arp)"),
                "{l}"
            );
        }
        total_ok += lines.iter().filter(|l| l.ends_with("icrc=ok")).count();
    }
    assert_eq!(total_ok, 1823);
    // All files at once: same verdict, per-file headers.
    let o = run(&files);
    assert!(o.status.success());
    assert_eq!(
        stdout(&o)
            .lines()
            .filter(|l| l.starts_with("# ") && l.contains(": "))
            .count(),
        files.len()
    );
}

#[test]
fn lines_show_the_fields() {
    let d = vectors_dir();
    let out = stdout(&run(&[d.join("A1_rc_pingpong_64.pcap")]));
    let l = frame_lines(&out);
    assert_eq!(
        l[0],
        "     1 RC SEND Only 192.168.77.11 -> 192.168.77.10 dqp=0x000013 psn=0x735b2c A=1 payload=64 icrc=ok"
    );
    assert_eq!(
        l[1],
        "     2 RC Acknowledge 192.168.77.10 -> 192.168.77.11 dqp=0x000023 psn=0x735b2c A=0 AETH ACK credits=31 msn=1 payload=0 icrc=ok"
    );
    let out = stdout(&run(&[d.join("E1_ud_pingpong_64.pcap")]));
    assert!(
        frame_lines(&out)[0].contains("DETH qkey=0x11111111 srcqp=0x00002f"),
        "{out}"
    );
    let out = stdout(&run(&[d.join("C1_read_bw_64k.pcap")]));
    assert!(
        frame_lines(&out)[0].contains("RETH va=0x7f93f380f000 rkey=0x00000b08 len=65536"),
        "{out}"
    );
    let out = stdout(&run(&[d.join("D1_atomic_bw_fadd.pcap")]));
    assert!(out.contains("AtomicETH va=0x"), "{out}");
    assert!(out.contains(" AtomicAckETH orig=0x"), "{out}");
    let out = stdout(&run(&[d.join("G_rping_arp.pcap")]));
    assert_eq!(
        frame_lines(&out),
        [
            "     1 skipped (not RoCEv2: arp)",
            "     2 skipped (not RoCEv2: arp)"
        ]
    );
}

#[test]
fn corrupted_frame_is_reported() {
    let mut data = std::fs::read(vectors_dir().join("A1_rc_pingpong_64.pcap")).unwrap();
    // Frame 1 starts at 24 + 16; flip a payload bit (byte 60 of the frame).
    data[24 + 16 + 60] ^= 0x04;
    let t = Tmp::new("corrupt.pcap", &data);
    let o = run(&[&t.0]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    let l = frame_lines(&out);
    assert!(
        l[0].starts_with("     1 RC SEND Only") && l[0].ends_with("icrc=bad"),
        "{}",
        l[0]
    );
    assert!(l[1].ends_with("icrc=ok"));
    assert!(out.contains("79 RoCEv2 ok, 1 RoCEv2 bad"), "{out}");
}

#[test]
fn truncated_garbage_empty_and_missing_files_fail_cleanly() {
    let data = std::fs::read(vectors_dir().join("A1_rc_pingpong_64.pcap")).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "trunc-record.pcap",
            data[..data.len() - 7].to_vec(),
            "truncated",
        ),
        ("trunc-header.pcap", data[..30].to_vec(), "truncated"),
        ("trunc-global.pcap", data[..10].to_vec(), "truncated"),
        (
            "garbage.pcap",
            b"this is not a capture file at all".to_vec(),
            "not a pcap or pcapng",
        ),
        ("empty.pcap", Vec::new(), "not a pcap or pcapng"),
        (
            "huge-record.pcap",
            {
                let mut d = data[..24 + 16].to_vec();
                d[24 + 8..24 + 12].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
                d
            },
            "malformed",
        ),
    ];
    for (name, bytes, msg) in cases {
        let t = Tmp::new(name, &bytes);
        let o = run(&[&t.0]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(msg), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: one error line: {err}");
    }
    // Frames before a truncation are still shown.
    let t = Tmp::new("trunc-late.pcap", &data[..data.len() - 7]);
    let out = stdout(&run(&[&t.0]));
    assert_eq!(frame_lines(&out).len(), 79);
    let o = run(&["/nonexistent/droce-dump-test.pcap"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("No such file"), "{}", stderr(&o));
}

#[test]
fn help_and_usage() {
    let o = run(&["--help"]);
    assert!(o.status.success());
    assert!(stdout(&o).starts_with("usage: droce-dump"));
    let o = run::<&str>(&[]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["--bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown option --bogus"));
}

/// Converts a classic pcap to pcapng (SHB + IDB + one EPB per frame), big-endian when asked
/// so the reader's byte-order handling is exercised too.
fn to_pcapng(pcap: &[u8], big: bool) -> Vec<u8> {
    let u32b = |v: u32| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let u16b = |v: u16| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let block = |t: u32, body: &[u8]| {
        let len = 12 + body.len().div_ceil(4) * 4;
        let mut b = u32b(t).to_vec();
        b.extend_from_slice(&u32b(len as u32));
        b.extend_from_slice(body);
        b.resize(len - 4, 0);
        b.extend_from_slice(&u32b(len as u32));
        b
    };
    let mut shb = u32b(0x1a2b_3c4d).to_vec();
    shb.extend_from_slice(&u16b(1));
    shb.extend_from_slice(&u16b(0));
    shb.extend_from_slice(&[0xff; 8]);
    let mut out = block(0x0a0d_0d0a, &shb);
    let mut idb = u16b(1).to_vec(); // LINKTYPE_ETHERNET
    idb.extend_from_slice(&[0, 0]);
    idb.extend_from_slice(&u32b(0));
    out.extend(block(1, &idb));
    let mut off = 24;
    while off < pcap.len() {
        let r = |i: usize| u32::from_le_bytes(pcap[off + i..off + i + 4].try_into().unwrap());
        let (sec, usec, incl, orig) = (r(0), r(4), r(8) as usize, r(12));
        let ts = sec as u64 * 1_000_000 + usec as u64;
        let mut epb = u32b(0).to_vec();
        epb.extend_from_slice(&u32b((ts >> 32) as u32));
        epb.extend_from_slice(&u32b(ts as u32));
        epb.extend_from_slice(&u32b(incl as u32));
        epb.extend_from_slice(&u32b(orig));
        epb.extend_from_slice(&pcap[off + 16..off + 16 + incl]);
        out.extend(block(6, &epb));
        off += 16 + incl;
    }
    out
}

#[test]
fn pcapng_gives_the_same_lines() {
    for name in [
        "A3_rc_pingpong_13.pcap",
        "G_rping.pcap",
        "D2_atomic_bw_cswap.pcap",
    ] {
        let p = vectors_dir().join(name);
        let data = std::fs::read(&p).unwrap();
        let want = stdout(&run(&[&p]));
        for big in [false, true] {
            let t = Tmp::new(&format!("{name}-{big}.pcapng"), &to_pcapng(&data, big));
            let o = run(&[&t.0]);
            assert!(o.status.success(), "{}", stderr(&o));
            assert_eq!(
                frame_lines(&stdout(&o)),
                frame_lines(&want),
                "{name} big={big}"
            );
        }
    }
    // A truncated pcapng is an error too.
    let data = std::fs::read(vectors_dir().join("A3_rc_pingpong_13.pcap")).unwrap();
    let ng = to_pcapng(&data, false);
    let t = Tmp::new("trunc.pcapng", &ng[..ng.len() - 5]);
    let o = run(&[&t.0]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));
}
