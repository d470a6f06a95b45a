//! Packet round trip.
//! 1. Arbitrary bytes that parse as a RoCEv2 frame re-emit to bytes that parse to the same
//!    record and payload.
//! 2. An arbitrary record (consistent with its opcode) emits without panicking, and the frame
//!    parses back to the same record (after the normalisations emit performs).
//! 3. An arbitrary, possibly inconsistent record still emits without panicking.
#![no_main]

use arbitrary::{Result, Unstructured};
use droce_transport::wire::*;
use droce_transport::*;
use libfuzzer_sys::fuzz_target;
use std::net::{Ipv4Addr, Ipv6Addr};

fn record(u: &mut Unstructured, consistent: bool) -> Result<RoceRepr> {
    let ip = if u.arbitrary()? {
        IpRepr::Ipv4(Ipv4Repr {
            src_addr: Ipv4Addr::from(u.arbitrary::<u32>()?),
            dst_addr: Ipv4Addr::from(u.arbitrary::<u32>()?),
            next_header: 17,
            payload_len: 0,
            dscp: u.int_in_range(0..=63)?,
            ecn: u.int_in_range(0..=3)?,
            ident: u.arbitrary()?,
            dont_frag: u.arbitrary()?,
            hop_limit: u.arbitrary()?,
        })
    } else {
        IpRepr::Ipv6(Ipv6Repr {
            src_addr: Ipv6Addr::from(u.arbitrary::<u128>()?),
            dst_addr: Ipv6Addr::from(u.arbitrary::<u128>()?),
            next_header: 17,
            payload_len: 0,
            traffic_class: u.arbitrary()?,
            flow_label: u.int_in_range(0..=0xfffff)?,
            hop_limit: u.arbitrary()?,
        })
    };
    let opcode = *u.choose(Opcode::ALL)?;
    let mut r = RoceRepr::new(
        EthernetRepr {
            src_addr: EthernetAddress(u.arbitrary()?),
            dst_addr: EthernetAddress(u.arbitrary()?),
            ethertype: ip.ethertype(),
        },
        ip,
        UdpRepr {
            src_port: u.arbitrary()?,
            dst_port: ROCE_V2_PORT,
        },
        BthRepr {
            opcode,
            solicited: u.arbitrary()?,
            mig_req: u.arbitrary()?,
            pad_count: 0,
            tver: u.int_in_range(0..=15)?,
            pkey: PKey(u.arbitrary()?),
            fecn: u.arbitrary()?,
            becn: u.arbitrary()?,
            dest_qp: Qpn::new(u.arbitrary()?),
            ack_req: u.arbitrary()?,
            psn: Psn::new(u.arbitrary()?),
        },
    );
    let i = opcode.info();
    let want = |u: &mut Unstructured, has: bool| -> Result<bool> {
        Ok(if consistent { has } else { u.arbitrary()? })
    };
    if want(u, i.has_reth())? {
        r.ext.reth = Some(RethRepr {
            va: u.arbitrary()?,
            rkey: Rkey(u.arbitrary()?),
            len: u.arbitrary()?,
        });
    }
    if want(u, i.has_aeth())? {
        let b: u8 = u.arbitrary()?;
        let syndrome = AethSyndrome::from_u8(b).unwrap_or(AethSyndrome::Ack { credits: b & 0x1f });
        r.ext.aeth = Some(AethRepr {
            syndrome,
            msn: Msn::new(u.arbitrary()?),
        });
    }
    if want(u, i.has_deth())? {
        r.ext.deth = Some(DethRepr {
            qkey: QKey(u.arbitrary()?),
            src_qp: Qpn::new(u.arbitrary()?),
        });
    }
    if want(u, i.has_atomic_eth())? {
        r.ext.atomic = Some(AtomicEthRepr {
            va: u.arbitrary()?,
            rkey: Rkey(u.arbitrary()?),
            swap_add: u.arbitrary()?,
            compare: u.arbitrary()?,
        });
    }
    if want(u, i.has_atomic_ack_eth())? {
        r.ext.atomic_ack = Some(AtomicAckEthRepr {
            orig: u.arbitrary()?,
        });
    }
    if want(u, i.has_immdt())? {
        r.ext.immdt = Some(u.arbitrary()?);
    }
    if want(u, i.has_ieth())? {
        r.ext.ieth = Some(Rkey(u.arbitrary()?));
    }
    Ok(r)
}

/// What a record looks like after emit + parse: lengths and pad filled in.
fn normalised(mut r: RoceRepr, payload_len: usize) -> RoceRepr {
    let frame_len = r.frame_len(payload_len);
    r.bth.pad_count = ((4 - payload_len % 4) % 4) as u8;
    let ip_payload = frame_len - 14 - r.ip.header_len();
    r.ip.set_payload_len(ip_payload);
    r
}

fn from_bytes(data: &[u8]) {
    let Ok((r, pl)) = RoceRepr::parse(data) else {
        return;
    };
    let mut buf = vec![0u8; r.frame_len(pl.len())];
    let n = r.emit(&data[pl.clone()], &mut buf);
    let (r2, pl2) = RoceRepr::parse(&buf[..n]).expect("re-emitted frame must parse");
    assert_eq!(r, r2);
    assert_eq!(&data[pl], &buf[pl2]);
}

fn from_record(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let consistent: bool = u.arbitrary()?;
    let r = record(&mut u, consistent)?;
    let payload_len = if r.bth.opcode.info().has_payload() || !consistent {
        u.int_in_range(0..=4200usize)?
    } else {
        0
    };
    let payload: Vec<u8> = (0..payload_len).map(|i| i as u8 ^ 0x5a).collect();
    let mut buf = vec![0u8; r.frame_len(payload_len)];
    let n = r.emit(&payload, &mut buf);
    assert_eq!(n, buf.len());
    if consistent {
        let (back, pl) = RoceRepr::parse(&buf).expect("emitted frame must parse");
        assert_eq!(back, normalised(r, payload_len));
        assert_eq!(&buf[pl], &payload[..]);
    } else {
        let _ = RoceRepr::parse(&buf);
    }
    Ok(())
}

/// Rewrites the ICRC of a would-be RoCEv2 frame so that mutated inputs get past the CRC and
/// exercise the parser behind it. Returns `None` when there is no IP length to go by.
fn with_fixed_icrc(data: &[u8]) -> Option<Vec<u8>> {
    let l3 = data.get(14..)?;
    let ip_len = match data.get(12..14)? {
        [0x08, 0x00] => Ipv4Packet::new_checked(l3).ok()?.total_len() as usize,
        [0x86, 0xdd] => 40 + Ipv6Packet::new_checked(l3).ok()?.payload_len() as usize,
        _ => return None,
    };
    let end = 14 + ip_len;
    let body_end = end.checked_sub(4)?;
    let crc = icrc::compute(data.get(14..body_end)?).ok()?;
    let mut v = data.to_vec();
    v[body_end..end].copy_from_slice(&crc.to_le_bytes());
    Some(v)
}

fuzz_target!(|data: &[u8]| {
    from_bytes(data);
    if let Some(v) = with_fixed_icrc(data) {
        from_bytes(&v);
    }
    let _ = from_record(data);
});
