//! ICRC throughput: droce's implementation (`droce-crc32`; in place, as the TX and RX paths
//! run it, and read-only, as `icrc::compute`) against the same in place with crc32fast (the
//! kernel before droce-crc32), the table-driven `crc` crate and the AVX-512/VPCLMULQDQ `crc-fast` crate, on whole RoCEv2
//! frames (RC SEND Middle over IPv4) with 64 B, 1 KiB and 4 KiB of payload (frames of 122,
//! 1082 and 4154 bytes). Plain `harness = false` main printing GB/s and ratios.
//!
//! `cargo bench -p droce-transport --bench icrc`

use droce_transport::wire::{
    icrc, BthRepr, EtherType, EthernetAddress, EthernetRepr, IpRepr, Opcode, RoceRepr, UdpRepr,
    ROCE_V2_PORT,
};
use droce_transport::{Gid, PKey, Psn, Qpn};
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

type Update = fn(u32, &[u8]) -> u32;
type Impl<'a> = &'a dyn Fn(&[u8]) -> u32;

static CRC_TABLE1: crc::Crc<u32, crc::Table<1>> =
    crc::Crc::<u32, crc::Table<1>>::new(&crc::CRC_32_ISO_HDLC);
static CRC_TABLE16: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISO_HDLC);

fn crc_table1(state: u32, data: &[u8]) -> u32 {
    // `crc` takes the raw register as its initial value; our state is the finalised CRC.
    let mut d = CRC_TABLE1.digest_with_initial((!state).reverse_bits());
    d.update(data);
    d.finalize()
}
fn crc_table16(state: u32, data: &[u8]) -> u32 {
    let mut d = CRC_TABLE16.digest_with_initial((!state).reverse_bits());
    d.update(data);
    d.finalize()
}
fn crc_fast(state: u32, data: &[u8]) -> u32 {
    let mut d = crc_fast::Digest::new_with_init_state(
        crc_fast::CrcAlgorithm::Crc32IsoHdlc,
        (!state) as u64,
    );
    d.update(data);
    d.finalize() as u32
}
fn crc32fast_update(state: u32, data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(state);
    h.update(data);
    h.finalize()
}

/// `icrc::compute_in_place` as it was with crc32fast (IPv4 without options, for the bench):
/// the variant fields set to ones in the frame, one hasher pass, the fields put back.
fn crc32fast_in_place(ip: &mut [u8]) -> u32 {
    const AT: [usize; 7] = [1, 8, 10, 11, 26, 27, 32];
    let mut saved = [0u8; 7];
    for (i, &a) in AT.iter().enumerate() {
        saved[i] = ip[a];
        ip[a] = 0xff;
    }
    let crc = crc32fast_update(icrc::LRH_SEED, ip);
    for (i, &a) in AT.iter().enumerate() {
        ip[a] = saved[i];
    }
    crc
}

/// The ICRC procedure of `icrc::compute` with a pluggable CRC (IPv4 only, for the bench).
fn icrc_with(update: Update, ip: &[u8]) -> u32 {
    let mut m = [0u8; 40];
    m.copy_from_slice(&ip[..40]);
    m[1] = 0xff;
    m[8] = 0xff;
    m[10] = 0xff;
    m[11] = 0xff;
    m[26] = 0xff;
    m[27] = 0xff;
    m[32] = 0xff;
    let s = update(icrc::LRH_SEED, &m);
    update(s, &ip[40..])
}

fn frame(payload_len: usize) -> Vec<u8> {
    let r = RoceRepr::new(
        EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EtherType::Ipv4,
        },
        IpRepr::from_gids(
            Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1)),
            Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 2)),
            0,
            64,
            0,
        )
        .unwrap(),
        UdpRepr {
            src_port: 0xc000,
            dst_port: ROCE_V2_PORT,
        },
        BthRepr {
            opcode: Opcode::RcSendMiddle,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: PKey::DEFAULT,
            fecn: false,
            becn: false,
            dest_qp: Qpn::new(0x11),
            ack_req: false,
            psn: Psn::new(1),
        },
    );
    let payload: Vec<u8> = (0..payload_len).map(|i| (i * 13 + 1) as u8).collect();
    let mut buf = vec![0u8; r.frame_len(payload_len)];
    let n = r.emit(&payload, &mut buf);
    assert_eq!(n, buf.len());
    buf
}

/// Returns GB/s over the ICRC-covered bytes (IP header to the end of the pad) for each
/// implementation. The implementations are measured in interleaved rounds and the best round
/// of each counts, so that other load on the machine hits them alike.
fn measure(fs: &[Impl<'_>], body: &[u8]) -> Vec<f64> {
    // `cargo bench` passes --bench; under `cargo test --benches` only a quick smoke run.
    let default_ms = if std::env::args().any(|a| a == "--bench") {
        1500
    } else {
        20
    };
    let budget = Duration::from_millis(
        std::env::var("ICRC_BENCH_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default_ms),
    );
    const ROUNDS: u32 = 15;
    let slot = budget / (ROUNDS * fs.len() as u32);
    // Calibrate: iterations per slot for each implementation.
    let iters: Vec<u64> = fs
        .iter()
        .map(|f| {
            let mut n = 1u64;
            loop {
                let t = Instant::now();
                for _ in 0..n {
                    black_box(f(black_box(body)));
                }
                if t.elapsed() >= slot || n >= 1 << 30 {
                    return n;
                }
                n *= 2;
            }
        })
        .collect();
    let mut best = vec![f64::MAX; fs.len()];
    for _ in 0..ROUNDS {
        for (i, f) in fs.iter().enumerate() {
            let t = Instant::now();
            for _ in 0..iters[i] {
                black_box(f(black_box(body)));
            }
            best[i] = best[i].min(t.elapsed().as_secs_f64() / iters[i] as f64);
        }
    }
    best.iter().map(|t| body.len() as f64 / t / 1e9).collect()
}

fn main() {
    // `cargo test --benches` passes --bench-less args; only run when benchmarking.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!("ICRC throughput, one core, GB/s over the ICRC-covered bytes (IP header .. pad)");
    println!("droce-crc32 kernel: {:?}", droce_crc32::kernel());
    println!(
        "{:>7} | {:>15} | {:>14} | {:>14} | {:>12} | {:>13} | {:>9} | {:>14} | {:>15} | {:>22}",
        "payload",
        "crc32fast in pl",
        "droce in place",
        "droce (chosen)",
        "crc Table<1>",
        "crc Table<16>",
        "crc-fast",
        "chosen/Table1",
        "chosen/crc-fast",
        "ns/frame in place b/a"
    );
    for size in [64usize, 1024, 4096] {
        let f = frame(size);
        let body = &f[14..f.len() - 4];
        let want = u32::from_le_bytes(f[f.len() - 4..].try_into().unwrap());
        for (i, u) in [
            crc_table1 as Update,
            crc_table16,
            crc_fast,
            crc32fast_update,
        ]
        .into_iter()
        .enumerate()
        {
            assert_eq!(icrc_with(u, body), want, "implementation {i} disagrees");
        }
        assert_eq!(icrc::compute(body).unwrap(), want);
        let mut scratch = body.to_vec();
        assert_eq!(icrc::compute_in_place(&mut scratch).unwrap(), want);
        assert_eq!(crc32fast_in_place(&mut scratch), want);
        let scratch = std::cell::RefCell::new(scratch);
        let r = measure(
            &[
                &|_| crc32fast_in_place(&mut scratch.borrow_mut()),
                &|_| icrc::compute_in_place(&mut scratch.borrow_mut()).unwrap(),
                &|b| icrc::compute(b).unwrap(),
                &|b| icrc_with(crc_table1, b),
                &|b| icrc_with(crc_table16, b),
                &|b| icrc_with(crc_fast, b),
            ],
            body,
        );
        let (old, in_place, chosen, t1, t16, cf) = (r[0], r[1], r[2], r[3], r[4], r[5]);
        let ns = |gbs: f64| body.len() as f64 / gbs;
        println!(
            "{:>6}B | {:>15.2} | {:>14.2} | {:>14.2} | {:>12.2} | {:>13.2} | {:>9.2} | {:>13.1}x | {:>14.2}x | {:>9.1} / {:>9.1}",
            size,
            old,
            in_place,
            chosen,
            t1,
            t16,
            cf,
            chosen / t1,
            chosen / cf,
            ns(old),
            ns(in_place)
        );
    }
}
