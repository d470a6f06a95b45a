//! droce-dump: print the RoCEv2 frames of pcap/pcapng captures, one line per frame, and check
//! their ICRC (a small ibdump/tshark for RoCE).

use droce_transport::pcap::{self, CapturedFrame, LINKTYPE_ETHERNET};
use droce_transport::wire::{
    icrc, AethSyndrome, EtherType, EthernetFrame, Ipv4Packet, Ipv6Packet, NakCode, RoceRepr,
    UdpPacket, ROCE_V2_PORT,
};
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

const USAGE: &str = "\
usage: droce-dump [--help] FILE...

Reads pcap or pcapng captures (Ethernet link type) and prints one line per frame:
  frame number, opcode name, source -> destination (IP address, i.e. the GID; IPv4 for
  IPv4-mapped GIDs), dqp=destination QPN, psn=PSN, A=AckReq (se, mig, tver, fecn/becn and
  pkey only when set or not default), the extension headers (RETH va/rkey/len, AETH
  syndrome/MSN, DETH qkey/srcqp, AtomicETH va/rkey/swap_add/compare, AtomicAckETH orig,
  ImmDt imm, IETH rkey), payload length and icrc=ok|bad. Frames that are not RoCEv2 are
  shown as skipped.

Exit status: 0 when every RoCEv2 frame parses and its ICRC verifies; 1 when some RoCEv2
frame is malformed or has a bad ICRC; 2 when a file cannot be read or is not a valid
capture (frames read before the error are still printed).
";

/// Why a frame is not RoCEv2, for the "skipped" line.
fn not_roce_reason(data: &[u8]) -> Option<String> {
    let Ok(eth) = EthernetFrame::new_checked(data) else {
        return Some(format!("runt frame of {} bytes", data.len()));
    };
    let l3 = &data[14..];
    match eth.ethertype() {
        EtherType::Arp => Some("arp".into()),
        EtherType::Vlan => Some("vlan-tagged".into()),
        EtherType::Unknown(t) => Some(format!("ethertype 0x{t:04x}")),
        EtherType::Ipv4 => {
            let Ok(ip) = Ipv4Packet::new_checked(l3) else {
                return Some("truncated ipv4".into());
            };
            if ip.next_header() != 17 {
                return Some(format!("ipv4 protocol {}", ip.next_header()));
            }
            if ip.more_frags() || ip.frag_offset() != 0 {
                return Some("ipv4 fragment".into());
            }
            udp_reason(ip.payload())
        }
        EtherType::Ipv6 => {
            let Ok(ip) = Ipv6Packet::new_checked(l3) else {
                return Some("truncated ipv6".into());
            };
            if ip.next_header() != 17 {
                return Some(format!("ipv6 next header {}", ip.next_header()));
            }
            udp_reason(ip.payload())
        }
    }
}

fn udp_reason(l4: &[u8]) -> Option<String> {
    match UdpPacket::new_checked(l4) {
        Ok(u) if u.dst_port() == ROCE_V2_PORT => None,
        Ok(u) => Some(format!("udp port {}", u.dst_port())),
        // Addressed to 4791 but broken: a bad RoCE frame, not a foreign one.
        Err(_) if l4.len() >= 4 && u16::from_be_bytes([l4[2], l4[3]]) == ROCE_V2_PORT => None,
        Err(_) => Some("truncated udp".into()),
    }
}

fn syndrome(s: AethSyndrome) -> String {
    match s {
        AethSyndrome::Ack { credits } => format!("ACK credits={credits}"),
        AethSyndrome::RnrNak { timer } => format!("RNR-NAK timer={timer}"),
        AethSyndrome::Nak(c) => format!(
            "NAK {}",
            match c {
                NakCode::PsnSequenceError => "psn-sequence-error",
                NakCode::InvalidRequest => "invalid-request",
                NakCode::RemoteAccessError => "remote-access-error",
                NakCode::RemoteOperationalError => "remote-operational-error",
                NakCode::InvalidRdRequest => "invalid-rd-request",
            }
        ),
    }
}

fn describe(r: &RoceRepr, payload_len: usize) -> String {
    let mut s = String::new();
    let (src, dst) = (r.ip.src_addr(), r.ip.dst_addr());
    let _ = write!(
        s,
        "{} {src} -> {dst} dqp={} psn={} A={}",
        r.bth.opcode.name(),
        r.bth.dest_qp,
        r.bth.psn,
        r.bth.ack_req as u8
    );
    if r.bth.solicited {
        s.push_str(" se=1");
    }
    if r.bth.mig_req {
        s.push_str(" mig=1");
    }
    if r.bth.tver != 0 {
        let _ = write!(s, " tver={}", r.bth.tver);
    }
    if r.bth.fecn || r.bth.becn {
        let _ = write!(s, " fecn={} becn={}", r.bth.fecn as u8, r.bth.becn as u8);
    }
    if r.bth.pkey.0 != 0xffff {
        let _ = write!(s, " pkey={}", r.bth.pkey);
    }
    if let Some(x) = r.ext.deth {
        let _ = write!(s, " DETH qkey={} srcqp={}", x.qkey, x.src_qp);
    }
    if let Some(x) = r.ext.reth {
        let _ = write!(s, " RETH va=0x{:x} rkey={} len={}", x.va, x.rkey, x.len);
    }
    if let Some(x) = r.ext.atomic {
        let _ = write!(
            s,
            " AtomicETH va=0x{:x} rkey={} swap_add=0x{:x} compare=0x{:x}",
            x.va, x.rkey, x.swap_add, x.compare
        );
    }
    if let Some(x) = r.ext.aeth {
        let _ = write!(s, " AETH {} msn={}", syndrome(x.syndrome), x.msn.value());
    }
    if let Some(x) = r.ext.atomic_ack {
        let _ = write!(s, " AtomicAckETH orig=0x{:x}", x.orig);
    }
    if let Some(x) = r.ext.immdt {
        let _ = write!(s, " ImmDt imm=0x{x:08x}");
    }
    if let Some(x) = r.ext.ieth {
        let _ = write!(s, " IETH rkey={x}");
    }
    let _ = write!(s, " payload={payload_len}");
    s
}

#[derive(Default)]
struct Totals {
    frames: usize,
    roce_ok: usize,
    roce_bad: usize,
    skipped: usize,
}

fn dump_frame(f: &CapturedFrame<'_>, out: &mut String, t: &mut Totals) {
    t.frames += 1;
    let n = f.number;
    if f.linktype != LINKTYPE_ETHERNET {
        t.skipped += 1;
        let _ = writeln!(out, "{n:6} skipped (not RoCEv2: link type {})", f.linktype);
        return;
    }
    if let Some(why) = not_roce_reason(f.data) {
        t.skipped += 1;
        let _ = writeln!(out, "{n:6} skipped (not RoCEv2: {why})");
        return;
    }
    if !f.is_complete() {
        t.roce_bad += 1;
        let _ = writeln!(
            out,
            "{n:6} RoCEv2 frame cut short by the capture ({} of {} bytes) icrc=unchecked",
            f.data.len(),
            f.orig_len
        );
        return;
    }
    match RoceRepr::parse(f.data) {
        Ok((r, pl)) => {
            t.roce_ok += 1;
            let _ = writeln!(out, "{n:6} {} icrc=ok", describe(&r, pl.len()));
        }
        Err(_) => {
            t.roce_bad += 1;
            match RoceRepr::parse_without_icrc(f.data) {
                Ok((r, pl)) => {
                    let _ = writeln!(out, "{n:6} {} icrc=bad", describe(&r, pl.len()));
                }
                Err(_) => {
                    let icrc = if f.data.len() > 18 && icrc::verify(&f.data[14..]) {
                        "ok"
                    } else {
                        "bad"
                    };
                    let op = f
                        .data
                        .get(42)
                        .map(|o| format!("0x{o:02x}"))
                        .unwrap_or_else(|| "-".into());
                    let _ = writeln!(
                        out,
                        "{n:6} malformed RoCEv2 frame ({} bytes, opcode byte {op}) icrc={icrc}",
                        f.data.len()
                    );
                }
            }
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if let Some(bad) = args.iter().find(|a| a.starts_with('-') && a.len() > 1) {
        eprintln!("droce-dump: unknown option {bad}\n{USAGE}");
        return ExitCode::from(2);
    }
    if args.is_empty() {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    }
    let mut status = 0u8;
    let stdout = std::io::stdout();
    for path in &args {
        let data = match std::fs::read(path) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("droce-dump: {path}: {e}");
                status = 2;
                continue;
            }
        };
        let (frames, err) = pcap::read_partial(&data);
        let mut out = String::new();
        let mut t = Totals::default();
        if args.len() > 1 {
            let _ = writeln!(out, "# {path}");
        }
        for f in &frames {
            dump_frame(f, &mut out, &mut t);
        }
        let _ = writeln!(
            out,
            "# {path}: {} frames, {} RoCEv2 ok, {} RoCEv2 bad, {} skipped",
            t.frames, t.roce_ok, t.roce_bad, t.skipped
        );
        // A closed pipe (droce-dump ... | head) is not an error worth a panic.
        if stdout.lock().write_all(out.as_bytes()).is_err() {
            return ExitCode::from(status.max(1));
        }
        if t.roce_bad > 0 && status == 0 {
            status = 1;
        }
        if let Some(e) = err {
            eprintln!("droce-dump: {path}: {e}");
            status = 2;
        }
    }
    ExitCode::from(status)
}
