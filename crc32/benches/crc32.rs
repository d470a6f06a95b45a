//! ns per CRC-32 call at frame sizes: crc32fast (a hasher per call, as droce used it),
//! the `crc-fast` crate, and droce-crc32's AVX-512 kernel; warm data, each call continuing
//! the previous call's result (so a call's latency counts, as a frame's CRC does on the
//! datapath). Rounds alternate the implementations; the medians are printed.
//!
//! `cargo bench -p droce-crc32 --bench crc32` (ROUNDS=n to change the 15 rounds)

use std::hint::black_box;
use std::time::Instant;

fn crc32fast_hasher(state: u32, data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(state);
    h.update(data);
    h.finalize()
}

fn crc_fast(state: u32, data: &[u8]) -> u32 {
    let mut d = crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32IsoHdlc, (!state) as u64);
    d.update(data);
    d.finalize() as u32
}

fn droce(state: u32, data: &[u8]) -> u32 {
    droce_crc32::update(state, data)
}

type F = fn(u32, &[u8]) -> u32;

/// ns per call of `f` over `data`, `iters` chained calls.
fn time(f: F, data: &[u8], iters: u32) -> f64 {
    let mut s = 0u32;
    let t = Instant::now();
    for _ in 0..iters {
        s = f(black_box(s), black_box(data));
    }
    black_box(s);
    t.elapsed().as_nanos() as f64 / iters as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(15);
    println!("droce-crc32 kernel in use: {:?}", droce_crc32::kernel());
    let mut impls: Vec<(&str, F)> = vec![("crc32fast", crc32fast_hasher), ("crc-fast", crc_fast)];
    if droce_crc32::kernel() == droce_crc32::Kernel::Avx512 {
        impls.push(("droce-crc32", droce));
    } else {
        println!("(no AVX-512 kernel here: the droce-crc32 column is crc32fast behind it)");
        impls.push(("droce-crc32 (fallback)", droce));
    }
    let data: Vec<u8> = (0..8192 + 64u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    for (_, f) in &impls {
        // agree before timing
        assert_eq!(f(7, &data[..4100]), crc32fast_hasher(7, &data[..4100]));
    }
    print!("| bytes |");
    for (n, _) in &impls {
        print!(" {n} ns |");
    }
    println!(" {} / crc32fast |", impls[2].0);
    println!("|---:|{}---:|", "---:|".repeat(impls.len()));
    for size in [8usize, 40, 56, 64, 256, 1024, 1028, 1080, 4096, 4100, 4152, 8192] {
        let d = &data[..size];
        // ~1 ms per timing
        let iters = (1_000_000 / (size as u32 / 16 + 10)).max(100);
        for (_, f) in &impls {
            time(*f, d, iters);
        }
        let mut res = vec![Vec::new(); impls.len()];
        for r in 0..rounds {
            for j in 0..impls.len() {
                let i = (j + r) % impls.len();
                res[i].push(time(impls[i].1, d, iters));
            }
        }
        let med: Vec<f64> = res.iter_mut().map(|v| median(v)).collect();
        print!("| {size} |");
        for m in &med {
            print!(" {m:.1} |");
        }
        println!(" {:.2} |", med[2] / med[0]);
    }
}
