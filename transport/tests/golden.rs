//! Golden tests against the frames Linux rxe put on the wire (`tests/vectors/`).
//!
//! For every frame of every capture: parse, re-emit byte-identical from the record and the
//! payload, ICRC verifies; the opcode histogram matches the README table; every frame listed
//! in a txt's "First 24 kept frames" matches field by field; the first requests carry the QPN,
//! PSN, rkey and VA the tools printed; bit flips in the RoCE part are rejected unless they hit
//! an ICRC-masked field, in which case the frame parses and re-emits differing only there.

use droce_transport::pcap;
use droce_transport::wire::{
    icrc, AethSyndrome, ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetAddress,
    EthernetFrame, EthernetRepr, IpRepr, Opcode, RoceRepr, UdpRepr, ROCE_V2_PORT,
};
use droce_transport::{Gid, Msn, PKey, Psn, QKey, Qpn, Rkey};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod common;
use common::vectors_dir;

fn pcaps() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(vectors_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    v.sort();
    assert!(
        v.len() >= 17,
        "expected the 17 vector captures, found {}",
        v.len()
    );
    v
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// Re-emits `frame` from its record and payload and checks it is byte-identical (apart from
/// Ethernet padding after the IP packet, which must be zero).
fn reemit(_frame: &[u8], r: &RoceRepr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; r.frame_len(payload.len())];
    let len = r.emit(payload, &mut buf);
    assert_eq!(len, buf.len());
    buf
}

#[test]
fn every_frame_parses_reemits_and_verifies() {
    let mut total = 0;
    for p in pcaps() {
        let file = std::fs::read(&p).unwrap();
        let frames = pcap::read(&file).unwrap_or_else(|e| panic!("{}: {e}", name(&p)));
        assert!(!frames.is_empty(), "{}", name(&p));
        for f in &frames {
            assert!(
                f.is_complete(),
                "{} frame {} is truncated",
                name(&p),
                f.number
            );
            let eth = EthernetRepr::parse(&EthernetFrame::new_checked(f.data).unwrap()).unwrap();
            if eth.ethertype == EtherType::Arp {
                let a = ArpRepr::parse(&ArpPacket::new_checked(&f.data[14..]).unwrap()).unwrap();
                let mut out = f.data.to_vec();
                a.emit(&mut ArpPacket::new_unchecked(&mut out[14..]));
                assert_eq!(out, f.data);
                continue;
            }
            let (r, pl) = RoceRepr::parse(f.data)
                .unwrap_or_else(|e| panic!("{} frame {}: {e}", name(&p), f.number));
            r.check().unwrap();
            assert!(icrc::verify(&f.data[14..r.frame_len(pl.len())]));
            let out = reemit(f.data, &r, &f.data[pl.clone()]);
            assert_eq!(
                &out[..],
                &f.data[..out.len()],
                "{} frame {} re-emit",
                name(&p),
                f.number
            );
            assert!(
                f.data[out.len()..].iter().all(|&b| b == 0),
                "{} frame {} trailer",
                name(&p),
                f.number
            );
            // The split API gives the same bytes.
            let mut buf = vec![0u8; out.len()];
            let h = r.emit_headers(pl.len(), &mut buf);
            assert_eq!(h, pl.start);
            buf[h..h + pl.len()].copy_from_slice(&f.data[pl.clone()]);
            assert_eq!(
                droce_transport::wire::finish_frame(&mut buf, pl.len()),
                out.len()
            );
            assert_eq!(buf, out);
            total += 1;
        }
    }
    // README: 1823 kept RoCEv2 frames.
    assert_eq!(total, 1823);
}

/// Parses the README table: file -> (frames, {opcode: count}).
fn readme_table() -> BTreeMap<String, (usize, BTreeMap<u8, usize>)> {
    let text = std::fs::read_to_string(vectors_dir().join("README.md")).unwrap();
    let mut m = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("| `") && l.contains(".pcap`"))
    {
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        let file = cols[1].trim_matches('`').to_string();
        let frames: usize = cols[2].split_whitespace().next().unwrap().parse().unwrap();
        let mut ops = BTreeMap::new();
        let mut rest = cols[4];
        while let Some(i) = rest.find("(0x") {
            let op = u8::from_str_radix(&rest[i + 3..i + 5], 16).unwrap();
            let after = &rest[i + 6..];
            let n: usize = after
                .split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches(',')
                .parse()
                .unwrap();
            *ops.entry(op).or_insert(0) += n;
            rest = after;
        }
        m.insert(file, (frames, ops));
    }
    m
}

#[test]
fn opcode_histograms_match_readme() {
    let table = readme_table();
    assert_eq!(table.len(), 17);
    for p in pcaps() {
        let (frames_expected, ops_expected) = &table[&name(&p)];
        let file = std::fs::read(&p).unwrap();
        let frames = pcap::read(&file).unwrap();
        assert_eq!(frames.len(), *frames_expected, "{}", name(&p));
        let mut ops = BTreeMap::new();
        for f in &frames {
            if let Ok((r, _)) = RoceRepr::parse(f.data) {
                *ops.entry(r.bth.opcode as u8).or_insert(0) += 1;
            }
        }
        assert_eq!(&ops, ops_expected, "{}", name(&p));
    }
}

fn hex_after(s: &str, key: &str) -> Option<u64> {
    let i = s.find(key)? + key.len();
    let t = s[i..].trim_start();
    let t = t.strip_prefix("0x").unwrap_or(t);
    let end = t.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(t.len());
    u64::from_str_radix(&t[..end], 16).ok()
}

fn dec_after(s: &str, key: &str) -> Option<u64> {
    let i = s.find(key)? + key.len();
    let t = s[i..].trim_start();
    let end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    t[..end].parse().ok()
}

/// Every frame listed under "First 24 kept frames" in a txt, field by field.
#[test]
fn listed_frames_match_txt_decodes() {
    let mut checked = 0;
    for p in pcaps() {
        let txt = std::fs::read_to_string(p.with_extension("txt")).unwrap();
        let file = std::fs::read(&p).unwrap();
        let frames = pcap::read(&file).unwrap();
        let Some(start) = txt.find("First 24 kept frames") else {
            continue;
        };
        for line in txt[start..].lines().skip(1) {
            let toks: Vec<&str> = line.split_whitespace().collect();
            if toks.len() < 6 || toks[3] != "->" {
                break;
            }
            let n: usize = toks[0].parse().unwrap();
            let f = &frames[n - 1];
            let (r, pl) = RoceRepr::parse(f.data).unwrap();
            let ctx = format!("{} frame {n}: {line}", name(&p));
            assert_eq!(r.ip.src_addr().to_string(), toks[2], "{ctx}");
            assert_eq!(r.ip.dst_addr().to_string(), toks[4], "{ctx}");
            let op_end = line.find("sport=").unwrap();
            let op_start = line.find(toks[4]).unwrap() + toks[4].len();
            assert_eq!(r.bth.opcode.name(), line[op_start..op_end].trim(), "{ctx}");
            assert_eq!(
                r.udp.src_port as u64,
                dec_after(line, "sport=").unwrap(),
                "{ctx}"
            );
            assert_eq!(r.udp.dst_port, ROCE_V2_PORT);
            assert_eq!(
                r.bth.dest_qp,
                Qpn::new(hex_after(line, "dqp=").unwrap() as u32),
                "{ctx}"
            );
            assert_eq!(
                r.bth.psn,
                Psn::new(hex_after(line, "psn=").unwrap() as u32),
                "{ctx}"
            );
            assert_eq!(r.bth.ack_req, dec_after(line, " A=").unwrap() == 1, "{ctx}");
            assert_eq!(
                r.bth.pad_count as u64,
                dec_after(line, "pad=").unwrap(),
                "{ctx}"
            );
            assert_eq!(
                f.data.len() as u64,
                dec_after(line, "len=").unwrap(),
                "{ctx}"
            );
            assert_eq!(r.bth.pkey, PKey::DEFAULT);
            assert_eq!(
                (r.bth.tver, r.bth.solicited, r.bth.mig_req),
                (0, false, false)
            );
            match r.ext.reth {
                Some(reth) => assert_eq!(
                    reth.len as u64,
                    dec_after(line, "RETH len=").unwrap(),
                    "{ctx}"
                ),
                None => assert!(!line.contains("RETH"), "{ctx}"),
            }
            match r.ext.aeth {
                Some(a) => {
                    let credits = dec_after(line, "credit code ").unwrap() as u8;
                    assert_eq!(a.syndrome, AethSyndrome::Ack { credits }, "{ctx}");
                    assert_eq!(
                        a.msn,
                        Msn::new(dec_after(line, "msn=").unwrap() as u32),
                        "{ctx}"
                    );
                }
                None => assert!(!line.contains("ACK ("), "{ctx}"),
            }
            match r.ext.deth {
                Some(d) => {
                    assert_eq!(
                        d.qkey,
                        QKey(hex_after(line, "qkey=").unwrap() as u32),
                        "{ctx}"
                    );
                    assert_eq!(
                        d.src_qp,
                        Qpn::new(hex_after(line, "srcqp=").unwrap() as u32),
                        "{ctx}"
                    );
                }
                None => assert!(!line.contains("DETH"), "{ctx}"),
            }
            match r.ext.atomic {
                Some(a) => {
                    assert_eq!(a.swap_add, hex_after(line, "swap/add=").unwrap(), "{ctx}");
                    assert_eq!(a.compare, hex_after(line, "cmp=").unwrap(), "{ctx}");
                }
                None => assert!(!line.contains("AtomicETH"), "{ctx}"),
            }
            match r.ext.atomic_ack {
                Some(a) => assert_eq!(a.orig, hex_after(line, "orig=").unwrap(), "{ctx}"),
                None => assert!(!line.contains("AtomicAckETH"), "{ctx}"),
            }
            assert!(r.ext.immdt.is_none() && r.ext.ieth.is_none());
            if line.contains("MAD CM") {
                // CM MADs to QP1: GSI Q_Key, MAD base version 1, class 0x07 (CM) version 2.
                assert_eq!(r.bth.dest_qp, Qpn::GSI);
                assert_eq!(r.ext.deth.unwrap().qkey, QKey::GSI);
                assert_eq!(&f.data[pl.start..pl.start + 3], &[1, 7, 2], "{ctx}");
            }
            checked += 1;
        }
    }
    assert!(checked > 300, "only {checked} listed frames found");
}

struct Side {
    ip: &'static str,
    local_qpn: u32,
    local_psn: u32,
    remote_qpn: u32,
    remote: Option<(u32, u64)>, // rkey, vaddr
}

fn side(txt: &str, section: &str, ip: &'static str) -> Option<Side> {
    let s = &txt[txt.find(section)?..];
    let s = &s[..s[3..].find("\n## ").map(|i| i + 3).unwrap_or(s.len())];
    let local = s.lines().find(|l| l.contains("local address:"))?;
    let remote = s.lines().find(|l| l.contains("remote address:"))?;
    Some(Side {
        ip,
        local_qpn: hex_after(local, "QPN ")? as u32,
        local_psn: hex_after(local, "PSN ")? as u32,
        remote_qpn: hex_after(remote, "QPN ")? as u32,
        remote: hex_after(remote, "RKey ")
            .map(|k| (k as u32, hex_after(remote, "VAddr ").unwrap())),
    })
}

/// The first request each side sends carries the QPN and PSN the tools printed, and the first
/// RETH carries the peer's rkey and buffer address.
#[test]
fn first_requests_match_tool_output() {
    let mut checked = 0;
    for p in pcaps() {
        let txt = std::fs::read_to_string(p.with_extension("txt")).unwrap();
        let file = std::fs::read(&p).unwrap();
        let frames = pcap::read(&file).unwrap();
        let sides = [
            side(&txt, "## Output of vm0", "192.168.77.10"),
            side(&txt, "## Output of vm1", "192.168.77.11"),
        ];
        for s in sides.into_iter().flatten() {
            let reqs: Vec<RoceRepr> = frames
                .iter()
                .filter_map(|f| RoceRepr::parse(f.data).ok().map(|x| x.0))
                .filter(|r| r.ip.src_addr().to_string() == s.ip && r.bth.opcode.info().is_request())
                .collect();
            let Some(first) = reqs.first() else { continue };
            let ctx = format!("{} from {}", name(&p), s.ip);
            assert_eq!(first.bth.dest_qp, Qpn::new(s.remote_qpn), "{ctx}");
            assert_eq!(first.bth.psn, Psn::new(s.local_psn), "{ctx}");
            if let Some(d) = first.ext.deth {
                assert_eq!(d.src_qp, Qpn::new(s.local_qpn), "{ctx}");
            }
            if let Some((rkey, va)) = s.remote {
                let r = reqs.iter().find_map(|r| r.ext.reth).expect("a RETH");
                assert_eq!((r.rkey, r.va), (Rkey(rkey), va), "{ctx}");
            }
            if let Some(a) = first.ext.atomic {
                // Atomics: no rkey printed; the VA is 8-byte aligned and the add value is 1.
                assert_eq!(a.va % 8, 0, "{ctx}");
                if first.bth.opcode == Opcode::RcFetchAdd {
                    assert_eq!(a.swap_add, 1, "{ctx}");
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "checked {checked}");
}

/// The README's stated facts about pads, QP1 and the GID.
#[test]
fn pads_and_gids() {
    let d = vectors_dir();
    for (file, pad, payload) in [
        ("A3_rc_pingpong_13.pcap", 3, 13),
        ("E3_ud_pingpong_13.pcap", 3, 13),
    ] {
        let data = std::fs::read(d.join(file)).unwrap();
        for f in pcap::read(&data).unwrap() {
            let (r, pl) = RoceRepr::parse(f.data).unwrap();
            if r.bth.opcode.info().has_payload() {
                assert_eq!(
                    (r.bth.pad_count, pl.len()),
                    (pad, payload),
                    "{file} {}",
                    f.number
                );
            }
        }
    }
    let data = std::fs::read(d.join("A4_rc_pingpong_1027.pcap")).unwrap();
    for f in pcap::read(&data).unwrap() {
        let (r, pl) = RoceRepr::parse(f.data).unwrap();
        if r.bth.opcode == Opcode::RcSendLast {
            assert_eq!((r.bth.pad_count, pl.len()), (1, 3));
        }
    }
    let data = std::fs::read(d.join("G_rping_arp.pcap")).unwrap();
    let frames = pcap::read(&data).unwrap();
    let ops: Vec<ArpOperation> = frames
        .iter()
        .map(|f| {
            ArpRepr::parse(&ArpPacket::new_checked(&f.data[14..]).unwrap())
                .unwrap()
                .operation
        })
        .collect();
    assert_eq!(ops, [ArpOperation::Request, ArpOperation::Reply]);
    let a1 = std::fs::read(d.join("A1_rc_pingpong_64.pcap")).unwrap();
    let (r, _) = RoceRepr::parse(pcap::read(&a1).unwrap()[0].data).unwrap();
    assert_eq!(r.ip.src_gid().to_string(), "::ffff:192.168.77.11");
    assert_eq!(
        r.eth.src_addr,
        EthernetAddress([0x52, 0x54, 0, 0x77, 0, 0x11])
    );
}

/// Byte offsets (from the start of the frame) of the ICRC-masked bytes of an IPv4 frame, and
/// the bits inside them that the record does not keep (so re-emit changes them back).
fn masked_v4(i: usize) -> bool {
    matches!(i, 15 | 22 | 24 | 25 | 40 | 41 | 46)
}

fn flip_all(frame: &[u8], ctx: &str, step: usize) -> usize {
    let mut n = 0;
    let mut bit = 14 * 8;
    while bit < frame.len() * 8 {
        let (i, b) = (bit / 8, bit % 8);
        let mut g = frame.to_vec();
        g[i] ^= 1 << b;
        match RoceRepr::parse(&g) {
            Ok((r, pl)) => {
                assert!(
                    masked_v4(i),
                    "{ctx}: flipping byte {i} bit {b} was not detected"
                );
                let out = reemit(&g, &r, &g[pl]);
                assert_eq!(out.len(), g.len());
                for (k, (x, y)) in out.iter().zip(&g).enumerate() {
                    if x != y {
                        assert!(
                            masked_v4(k),
                            "{ctx}: re-emit after flip at {i}.{b} differs at byte {k}"
                        );
                    }
                }
            }
            Err(_) => assert!(
                !masked_v4(i),
                "{ctx}: flipping masked byte {i} bit {b} broke the parse"
            ),
        }
        n += 1;
        bit += if bit < 14 * 8 + 64 * 8 { 1 } else { step };
    }
    n
}

#[test]
fn flipped_bits_are_rejected_except_in_masked_fields() {
    let mut flips = 0;
    // One frame of every opcode in the vectors, every bit of the first 64 RoCE bytes and a
    // sample (every 13th bit) of the rest of big frames.
    let mut seen = std::collections::BTreeSet::new();
    for p in pcaps() {
        let data = std::fs::read(&p).unwrap();
        for f in pcap::read(&data).unwrap() {
            if let Ok((r, _)) = RoceRepr::parse(f.data) {
                if seen.insert(r.bth.opcode) {
                    let step = if f.data.len() > 200 { 13 } else { 1 };
                    flips += flip_all(f.data, &format!("{} frame {}", name(&p), f.number), step);
                }
            }
        }
    }
    assert_eq!(seen.len(), 18);
    assert!(flips > 5_000, "{flips}");
}

// ---------------------------------------------------------------------------------------
// IPv6 (no vector captures exist): constructed frames, cross-checked with icrc_check.py.

fn v6_repr(opcode: Opcode) -> RoceRepr {
    let src = Gid::from(
        "fe80::5054:ff:fe77:11"
            .parse::<std::net::Ipv6Addr>()
            .unwrap(),
    );
    let dst = Gid::from("2001:db8::10".parse::<std::net::Ipv6Addr>().unwrap());
    let ip = IpRepr::from_gids(src, dst, 0xa5, 17, 0x12345).unwrap();
    let mut r = RoceRepr::new(
        EthernetRepr {
            src_addr: EthernetAddress([0x52, 0x54, 0, 0x77, 0, 0x11]),
            dst_addr: EthernetAddress([0x52, 0x54, 0, 0x77, 0, 0x10]),
            ethertype: EtherType::Ipv6,
        },
        ip,
        UdpRepr {
            src_port: 0xc123,
            dst_port: ROCE_V2_PORT,
        },
        droce_transport::wire::BthRepr {
            opcode,
            solicited: true,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: PKey::DEFAULT,
            fecn: false,
            becn: false,
            dest_qp: Qpn::new(0x123456),
            ack_req: true,
            psn: Psn::new(0xfffffe),
        },
    );
    let info = opcode.info();
    if info.has_reth() {
        r.ext.reth = Some(droce_transport::wire::RethRepr {
            va: 0x7f00_dead_beef,
            rkey: Rkey(0xabcd),
            len: 4099,
        });
    }
    if info.has_immdt() {
        r.ext.immdt = Some(0x0102_0304);
    }
    if info.has_deth() {
        r.ext.deth = Some(droce_transport::wire::DethRepr {
            qkey: QKey(0x11111111),
            src_qp: Qpn::new(0x77),
        });
    }
    if info.has_ieth() {
        r.ext.ieth = Some(Rkey(0x55aa));
    }
    r
}

fn v6_frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (op, n) in [
        (Opcode::RcWriteOnlyImm, 13usize),
        (Opcode::UdSendOnlyImm, 64),
        (Opcode::RcSendOnlyInv, 1),
        (Opcode::RcSendMiddle, 1024),
    ] {
        let r = v6_repr(op);
        let payload: Vec<u8> = (0..n).map(|i| (i * 31 + 7) as u8).collect();
        let mut buf = vec![0u8; r.frame_len(n)];
        let len = r.emit(&payload, &mut buf);
        assert_eq!(len, buf.len());
        out.push(buf);
    }
    out
}

#[test]
fn ipv6_roundtrip_and_masks() {
    for f in v6_frames() {
        let (r, pl) = RoceRepr::parse(&f).unwrap();
        assert!(matches!(r.ip, IpRepr::Ipv6(_)));
        assert_eq!(r.ip.traffic_class(), 0xa5);
        assert_eq!(reemit(&f, &r, &f[pl.clone()]), f);
        // Traffic class, flow label and hop limit are masked: the frame still parses.
        for (i, m) in [
            (14usize, 0x0f),
            (15, 0xff),
            (16, 0xff),
            (17, 0xff),
            (21, 0xff),
        ] {
            let mut g = f.clone();
            g[i] ^= m;
            let (r2, _) = RoceRepr::parse(&g).unwrap_or_else(|_| panic!("masked byte {i}"));
            assert_eq!(reemit(&g, &r2, &g[pl.clone()]), g);
        }
        // The version nibble, payload length, next header and addresses are covered.
        for i in [14usize, 18, 19, 20, 22, 37, 53] {
            let mut g = f.clone();
            g[i] ^= if i == 14 { 0x10 } else { 0x01 };
            assert!(RoceRepr::parse(&g).is_err(), "byte {i}");
        }
    }
}

/// Writes the IPv6 frames to a pcap and runs the independent checker on it when python3 is
/// installed (it is on CI); the frames' ICRC must agree with it.
#[test]
fn ipv6_icrc_matches_independent_checker() {
    let frames = v6_frames();
    let mut f = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    f.extend_from_slice(&65535u32.to_le_bytes());
    f.extend_from_slice(&1u32.to_le_bytes());
    for fr in &frames {
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&(fr.len() as u32).to_le_bytes());
        f.extend_from_slice(&(fr.len() as u32).to_le_bytes());
        f.extend_from_slice(fr);
    }
    let path = std::env::temp_dir().join(format!("droce-golden-v6-{}.pcap", std::process::id()));
    std::fs::write(&path, &f).unwrap();
    // Our own reader sees them too.
    assert_eq!(pcap::read(&f).unwrap().len(), frames.len());
    let out = std::process::Command::new("python3")
        .arg(vectors_dir().join("icrc_check.py"))
        .arg(&path)
        .output();
    let _ = std::fs::remove_file(&path);
    match out {
        Ok(o) => {
            let s = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success(),
                "icrc_check.py failed: {s} {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let want = format!(
                "{} RoCEv2 frames (IPv6), ICRC ok {n}/{n}",
                frames.len(),
                n = frames.len()
            );
            assert!(s.contains(&want), "icrc_check.py said: {s}");
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("python3 not installed: IPv6 ICRC not cross-checked");
        }
        Err(e) => panic!("running python3: {e}"),
    }
}
