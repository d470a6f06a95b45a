//! CRC-32 (IEEE 802.3 / zlib: reflected polynomial 0x04C11DB7, initial value and final xor
//! 0xffffffff) for the RoCEv2 ICRC, fast at the sizes a frame has (40-byte headers, 1 KiB and
//! 4 KiB payloads).
//!
//! [`update`] continues a finalised CRC like `crc32fast::Hasher::new_with_initial(state)`
//! followed by `update(data)` and `finalize()`, and returns the same value. Where the CPU has
//! AVX-512 (F, BW, VL) and VPCLMULQDQ it runs droce's own kernel: 512-bit carry-less folding
//! from 64 bytes on (four accumulators, 256 bytes a step, from 256 bytes on), the 128-bit fold
//! for the last 16-63 bytes, a masked load for the last partial block and a slice-by-8 table
//! below 16 bytes. crc32fast 1.5 starts its AVX-512 loop only at 2 KiB, runs the AVX2 loop
//! with eight serial 128-bit folds to collapse it below that, and checks the CPU's features
//! on every hasher it builds; the kernel here collapses its accumulators with independent
//! multiplies and checks the features once per process.
//!
//! Elsewhere (other CPUs, or valgrind, which does not emulate AVX-512, or the environment
//! variable `DROCE_CRC32_FALLBACK` set to anything but `0` or empty when the first CRC runs)
//! crc32fast computes it. [`kernel`] says which one runs.
//!
//! [`update_with_ones`] is the ICRC's masked prefix: the CRC of the bytes with some bits set
//! to one (the fields a router may change), without writing them into the frame, which on
//! the datapath had to be undone afterwards and made the CRC's wide loads wait for the byte
//! stores in front of them.
//!
//! `unsafe` is confined to the `x86` module (the intrinsics and the loads); each block says
//! why it holds.

#![deny(unsafe_code, unsafe_op_in_unsafe_fn)]

use std::sync::atomic::{AtomicU8, Ordering};

/// How many leading bytes [`update_with_ones`] can set bits in.
pub const ONES_LEN: usize = 128;

/// Which CRC-32 kernel [`update`] runs on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// droce's AVX-512 + VPCLMULQDQ folding.
    Avx512,
    /// crc32fast (its PCLMULQDQ / AVX2 paths, or its tables).
    Fallback,
}

const UNKNOWN: u8 = 0;
const FALLBACK: u8 = 1;
const AVX512: u8 = 2;

/// The detected kernel, cached after the first call: one relaxed load per CRC afterwards.
static KERNEL: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The kernel [`update`] and [`update_with_ones`] use (detected on the first call).
#[inline]
pub fn kernel() -> Kernel {
    match KERNEL.load(Ordering::Relaxed) {
        AVX512 => Kernel::Avx512,
        FALLBACK => Kernel::Fallback,
        _ => detect(),
    }
}

#[cold]
fn detect() -> Kernel {
    let forced = std::env::var_os("DROCE_CRC32_FALLBACK").is_some_and(|v| !v.is_empty() && v != "0");
    let k = if !forced && x86::available() { Kernel::Avx512 } else { Kernel::Fallback };
    KERNEL.store(if k == Kernel::Avx512 { AVX512 } else { FALLBACK }, Ordering::Relaxed);
    k
}

/// Continues the CRC-32 `state` over `data`: `update(update(0, a), b)` is the CRC-32 of `a`
/// followed by `b`, `update(0, b"123456789") == 0xcbf43926`. Nothing to add returns `state`.
#[inline]
pub fn update(state: u32, data: &[u8]) -> u32 {
    match kernel() {
        Kernel::Avx512 => x86::update(state, data),
        Kernel::Fallback => update_fallback(state, data),
    }
}

/// Bits to set in the first bytes of the data before the CRC: `bytes[i]` is OR-ed into
/// byte `i` of the data, for `i < ONES_LEN` (the ICRC's variant fields).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Ones {
    /// The bits, zero where the data counts as it is.
    pub bytes: [u8; ONES_LEN],
}

impl Ones {
    /// No bits set: [`update_with_ones`] is then [`update`].
    pub const ZERO: Ones = Ones { bytes: [0; ONES_LEN] };
}

/// The CRC-32 `state` continued over `data` as if each `data[i]` (`i < ONES_LEN`) were
/// `data[i] | ones.bytes[i]`; `data` is only read. Bits of `ones` beyond `data.len()` are
/// ignored.
#[inline]
pub fn update_with_ones(state: u32, data: &[u8], ones: &Ones) -> u32 {
    match kernel() {
        Kernel::Avx512 => x86::update_with_ones(state, data, ones),
        Kernel::Fallback => update_with_ones_fallback(state, data, ones),
    }
}

/// [`update`] through crc32fast, whatever the CPU has: the fallback, public so that tests
/// and benches can compare the two kernels in one process.
#[inline]
pub fn update_fallback(state: u32, data: &[u8]) -> u32 {
    if data.is_empty() {
        return state;
    }
    let mut h = crc32fast::Hasher::new_with_initial(state);
    h.update(data);
    h.finalize()
}

/// [`update_with_ones`] through crc32fast: the masked prefix copied to the stack.
pub fn update_with_ones_fallback(state: u32, data: &[u8], ones: &Ones) -> u32 {
    let n = data.len().min(ONES_LEN);
    let mut prefix = [0u8; ONES_LEN];
    for i in 0..n {
        prefix[i] = data[i] | ones.bytes[i];
    }
    let mut h = crc32fast::Hasher::new_with_initial(state);
    h.update(&prefix[..n]);
    h.update(&data[n..]);
    h.finalize()
}

/// [`update`] through droce's AVX-512 kernel, or `None` where the CPU lacks it (for tests
/// and benches; ignores `DROCE_CRC32_FALLBACK`).
pub fn update_avx512(state: u32, data: &[u8]) -> Option<u32> {
    x86::available().then(|| x86::update(state, data))
}

/// [`update_with_ones`] through droce's AVX-512 kernel, or `None` where the CPU lacks it.
pub fn update_with_ones_avx512(state: u32, data: &[u8], ones: &Ones) -> Option<u32> {
    x86::available().then(|| x86::update_with_ones(state, data, ones))
}

/// Slice-by-8 tables: `TABLES[k][b]` is the raw CRC register after byte `b` and `k` zero bytes.
static TABLES: [[u32; 256]; 8] = make_tables();

const fn make_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xedb8_8320 } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut s = 1;
    while s < 8 {
        let mut i = 0;
        while i < 256 {
            let p = t[s - 1][i];
            t[s][i] = (p >> 8) ^ t[0][(p & 0xff) as usize];
            i += 1;
        }
        s += 1;
    }
    t
}

/// Table-driven CRC for inputs below one 16-byte block (pads, short tails).
#[inline]
fn update_short(state: u32, mut data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut c = !state;
    while data.len() >= 8 {
        let lo = u32::from_le_bytes([data[0], data[1], data[2], data[3]]) ^ c;
        let hi = u32::from_le_bytes([data[4], data[5], data[6], data[7]]);
        c = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xff) as usize]
            ^ t[2][((hi >> 8) & 0xff) as usize]
            ^ t[1][((hi >> 16) & 0xff) as usize]
            ^ t[0][(hi >> 24) as usize];
        data = &data[8..];
    }
    for &b in data {
        c = t[0][((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use super::Ones;
    pub fn available() -> bool {
        false
    }
    pub fn update(state: u32, data: &[u8]) -> u32 {
        super::update_fallback(state, data)
    }
    pub fn update_with_ones(state: u32, data: &[u8], ones: &Ones) -> u32 {
        super::update_with_ones_fallback(state, data, ones)
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    //! Carry-less multiply folding after Gopal et al., "Fast CRC computation for generic
    //! polynomials using PCLMULQDQ instruction" (Intel, 2009), in the bit-reflected form
    //! crc32fast and zlib use. A fold by `D` bits multiplies the low and high 64 bits of a
    //! 128-bit lane by `reflect(x^(D+32) mod P) << 1` and `reflect(x^(D-32) mod P) << 1`
    //! and adds the product to the lane `D` bits further on.

    use super::{update_short, Ones, ONES_LEN};
    use core::arch::x86_64::*;

    /// Fold constants `(x^(D+32), x^(D-32))` for a distance of `D` bits (see the module text;
    /// D = 128 and 512 are crc32fast's K3/K4 and K1/K2).
    const K128: (i64, i64) = (0x1751997d0, 0x0ccaa009e);
    const K256: (i64, i64) = (0x0f1da05aa, 0x15a546366);
    const K384: (i64, i64) = (0x03db1ecdc, 0x174359406);
    const K512: (i64, i64) = (0x154442bd4, 0x1c6e41596);
    const K1024: (i64, i64) = (0x1e88ef372, 0x14a7fe880);
    const K1536: (i64, i64) = (0x1821d8bc0, 0x12e958ac4);
    const K2048: (i64, i64) = (0x11542778a, 0x1322d1430);
    /// x^64 for the 96 -> 64 bit step of the final reduction.
    const K5: i64 = 0x163cd6124;
    /// The polynomial and its Barrett constant (reflected), for the 64 -> 32 bit step.
    const P_X: i64 = 0x1db710641;
    const U_PRIME: i64 = 0x1f7011641;

    pub fn available() -> bool {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("vpclmulqdq")
            && is_x86_feature_detected!("pclmulqdq")
            && is_x86_feature_detected!("sse4.1")
            && is_x86_feature_detected!("ssse3")
    }

    /// Only called after `available()` (through the cached `kernel()` or directly).
    #[inline]
    pub fn update(state: u32, data: &[u8]) -> u32 {
        if data.len() < 16 {
            return update_short(state, data);
        }
        // SAFETY: the caller established `available()`, so the CPU has every feature `fold`
        // is compiled for; `fold` reads only inside `data`, and with MASK = false never reads
        // `ones`.
        unsafe { fold::<false>(state, data, &Ones::ZERO) }
    }

    /// Only called after `available()`.
    #[inline]
    pub fn update_with_ones(state: u32, data: &[u8], ones: &Ones) -> u32 {
        if data.len() < 16 {
            let mut b = [0u8; 16];
            for (i, (d, o)) in data.iter().zip(ones.bytes.iter()).enumerate() {
                b[i] = d | o;
            }
            return update_short(state, &b[..data.len()]);
        }
        // SAFETY: as in `update`; with MASK = true `fold` reads `ones` at the offsets it
        // reads `data` at, below ONES_LEN, which `ones.bytes` covers.
        unsafe { fold::<true>(state, data, ones) }
    }

    /// 16 bytes at `p + off`, with `ones` OR-ed in where MASK and `off < ONES_LEN`.
    ///
    /// # Safety
    /// `p + off .. p + off + 16` readable; SSE2.
    #[inline(always)]
    unsafe fn ld16<const MASK: bool>(p: *const u8, off: usize, ones: &Ones) -> __m128i {
        // SAFETY: the caller guarantees the 16 bytes are readable; unaligned load.
        let v = unsafe { _mm_loadu_si128(p.add(off) as *const __m128i) };
        if MASK && off < ONES_LEN {
            // off is a multiple of 16 below ONES_LEN: off + 16 <= ONES_LEN, inside `ones`.
            let o = &ones.bytes[off..off + 16];
            // SAFETY: `o` is 16 bytes long; SSE2 is part of x86_64.
            unsafe { _mm_or_si128(v, _mm_loadu_si128(o.as_ptr() as *const __m128i)) }
        } else {
            v
        }
    }

    /// 64 bytes at `p + off`, with `ones` OR-ed in where MASK and `off < ONES_LEN`.
    ///
    /// # Safety
    /// `p + off .. p + off + 64` readable; AVX-512F.
    #[inline(always)]
    unsafe fn ld64<const MASK: bool>(p: *const u8, off: usize, ones: &Ones) -> __m512i {
        // SAFETY: the caller guarantees the 64 bytes are readable and the feature.
        let v = unsafe { _mm512_loadu_si512(p.add(off) as *const __m512i) };
        if MASK && off < ONES_LEN {
            // off is a multiple of 64 below ONES_LEN: off + 64 <= ONES_LEN, inside `ones`.
            let o = &ones.bytes[off..off + 64];
            // SAFETY: `o` is 64 bytes long; the caller guarantees AVX-512F.
            unsafe { _mm512_or_si512(v, _mm512_loadu_si512(o.as_ptr() as *const __m512i)) }
        } else {
            v
        }
    }

    /// `clmul(x.lo, k.lo) ^ clmul(x.hi, k.hi) ^ next` per 128-bit lane: `x` moved forward by
    /// the distance `k` stands for and added to `next`.
    #[inline(always)]
    unsafe fn fold512(x: __m512i, k: __m512i, next: __m512i) -> __m512i {
        // SAFETY (all three): the caller has AVX-512F and VPCLMULQDQ (the kernel's features).
        let lo = unsafe { _mm512_clmulepi64_epi128::<0x00>(x, k) };
        let hi = unsafe { _mm512_clmulepi64_epi128::<0x11>(x, k) };
        unsafe { _mm512_ternarylogic_epi64::<0x96>(lo, hi, next) }
    }

    #[inline(always)]
    unsafe fn fold128(x: __m128i, k: __m128i, next: __m128i) -> __m128i {
        // SAFETY (all three): the caller has PCLMULQDQ, AVX-512F and AVX-512VL.
        let lo = unsafe { _mm_clmulepi64_si128::<0x00>(x, k) };
        let hi = unsafe { _mm_clmulepi64_si128::<0x11>(x, k) };
        unsafe { _mm_ternarylogic_epi64::<0x96>(lo, hi, next) }
    }

    #[inline(always)]
    fn k128(k: (i64, i64)) -> __m128i {
        // SAFETY: SSE2 is part of x86_64.
        unsafe { _mm_set_epi64x(k.1, k.0) }
    }

    /// The kernel for `data.len() >= 16`.
    ///
    /// # Safety
    /// The CPU has the features below; with MASK the `ones` bytes are OR-ed into the data's
    /// first ONES_LEN bytes (never into memory).
    #[target_feature(
        enable = "avx512f",
        enable = "avx512bw",
        enable = "avx512vl",
        enable = "vpclmulqdq",
        enable = "pclmulqdq",
        enable = "sse4.1",
        enable = "ssse3"
    )]
    unsafe fn fold<const MASK: bool>(crc: u32, data: &[u8], ones: &Ones) -> u32 {
        let len = data.len();
        debug_assert!(len >= 16);
        let p = data.as_ptr();
        // Every load below is of 16 or 64 bytes at an offset `off` with `off + size <= len`
        // (each is guarded by the loop or branch condition on `len - off`), except the last
        // partial block, read with a byte mask of its `len - off` bytes.
        let crc0 = _mm_cvtsi32_si128(!crc as i32);
        let mut off;
        let mut x: __m128i;
        if len >= 64 {
            let mut v: __m512i;
            if len >= 256 {
                // SAFETY: 256 <= len.
                let (mut v0, mut v1, mut v2, mut v3) = unsafe {
                    (
                        _mm512_xor_si512(ld64::<MASK>(p, 0, ones), _mm512_zextsi128_si512(crc0)),
                        ld64::<MASK>(p, 64, ones),
                        ld64::<MASK>(p, 128, ones),
                        ld64::<MASK>(p, 192, ones),
                    )
                };
                off = 256;
                let k = _mm512_broadcast_i32x4(k128(K2048));
                while len - off >= 256 {
                    // SAFETY: off + 256 <= len; no ones beyond ONES_LEN <= off.
                    unsafe {
                        v0 = fold512(v0, k, ld64::<false>(p, off, ones));
                        v1 = fold512(v1, k, ld64::<false>(p, off + 64, ones));
                        v2 = fold512(v2, k, ld64::<false>(p, off + 128, ones));
                        v3 = fold512(v3, k, ld64::<false>(p, off + 192, ones));
                    }
                    off += 256;
                }
                // Four accumulators into one: v0 moves 192 bytes, v1 128, v2 64; the
                // multiplies are independent, only the three-way xors chain.
                // SAFETY: register-only, the kernel's features.
                v = unsafe {
                    let a = fold512(v0, _mm512_broadcast_i32x4(k128(K1536)), v3);
                    let b = fold512(v1, _mm512_broadcast_i32x4(k128(K1024)), a);
                    fold512(v2, _mm512_broadcast_i32x4(k128(K512)), b)
                };
            } else {
                // SAFETY: 64 <= len.
                v = unsafe { _mm512_xor_si512(ld64::<MASK>(p, 0, ones), _mm512_zextsi128_si512(crc0)) };
                off = 64;
            }
            let k = _mm512_broadcast_i32x4(k128(K512));
            while len - off >= 64 {
                // SAFETY: off + 64 <= len; off is a multiple of 64.
                v = unsafe { fold512(v, k, ld64::<MASK>(p, off, ones)) };
                off += 64;
            }
            // 512 -> 128 bits: lanes 0, 1, 2 move 48, 32, 16 bytes onto lane 3, which stays.
            let kz = _mm512_set_epi64(0, 0, K128.1, K128.0, K256.1, K256.0, K384.1, K384.0);
            // SAFETY: register-only, the kernel's features.
            let t = unsafe { fold512(v, kz, _mm512_maskz_mov_epi64(0xc0, v)) };
            let h = _mm256_xor_si256(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64::<1>(t));
            x = _mm_xor_si128(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
        } else {
            // SAFETY: 16 <= len.
            x = _mm_xor_si128(unsafe { ld16::<MASK>(p, 0, ones) }, crc0);
            off = 16;
        }
        let k3k4 = k128(K128);
        while len - off >= 16 {
            // SAFETY: off + 16 <= len; off is a multiple of 16.
            x = unsafe { fold128(x, k3k4, ld16::<MASK>(p, off, ones)) };
            off += 16;
        }

        // The last n (1..=15) bytes: the accumulator shifted down by n bytes to make room for
        // them, the n bytes shifted out folded back 128 bits on (crc32fast's method).
        let n = len - off;
        if n > 0 {
            let seq = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            let shl = _mm_add_epi8(seq, _mm_set1_epi8(n as i8 - 16));
            let shr = _mm_xor_si128(shl, _mm_set1_epi8(-128));
            let overflow = _mm_shuffle_epi8(x, shl);
            x = _mm_shuffle_epi8(x, shr);
            let m: __mmask16 = (1u16 << n) - 1;
            // SAFETY: the masked load reads only the n bytes p + off .. p + len (masked-off
            // bytes are not accessed and do not fault).
            let mut part = unsafe { _mm_maskz_loadu_epi8(m, p.add(off) as *const i8) };
            if MASK && off < ONES_LEN {
                let o = &ones.bytes[off..off + 16];
                // SAFETY: `o` is 16 bytes long.
                part = _mm_or_si128(part, unsafe { _mm_maskz_loadu_epi8(m, o.as_ptr() as *const i8) });
            }
            x = _mm_xor_si128(x, _mm_shuffle_epi8(part, shl));
            // SAFETY: register-only.
            x = unsafe { fold128(overflow, k3k4, x) };
        }

        // 128 -> 64 bits, then Barrett reduction to 32 (as crc32fast and zlib-ng do).
        let x = _mm_xor_si128(_mm_clmulepi64_si128::<0x10>(x, k3k4), _mm_srli_si128::<8>(x));
        let low32 = _mm_set_epi32(0, 0, 0, !0);
        let x = _mm_xor_si128(
            _mm_clmulepi64_si128::<0x00>(_mm_and_si128(x, low32), _mm_set_epi64x(0, K5)),
            _mm_srli_si128::<4>(x),
        );
        let pu = _mm_set_epi64x(U_PRIME, P_X);
        let t1 = _mm_clmulepi64_si128::<0x10>(_mm_and_si128(x, low32), pu);
        let t2 = _mm_clmulepi64_si128::<0x00>(_mm_and_si128(t1, low32), pu);
        !(_mm_extract_epi32::<1>(_mm_xor_si128(x, t2)) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*: deterministic test data.
    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s >> 12;
                s ^= s << 25;
                s ^= s >> 27;
                (s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect()
    }

    fn reference(state: u32, data: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new_with_initial(state);
        h.update(data);
        h.finalize()
    }

    #[test]
    fn check_values() {
        assert_eq!(update(0, b"123456789"), 0xcbf4_3926);
        assert_eq!(update_short(0, b"123456789"), 0xcbf4_3926);
        assert_eq!(update_fallback(0, b"123456789"), 0xcbf4_3926);
        if let Some(c) = update_avx512(0, b"123456789") {
            assert_eq!(c, 0xcbf4_3926);
        }
        for s in [0, 1, 0xdead_beef, u32::MAX] {
            assert_eq!(update(s, &[]), s);
        }
    }

    /// Every length 0..=9000 at four alignments and three initial states, against crc32fast,
    /// for both kernels (the AVX-512 one where the CPU has it), and the cached `update`.
    #[test]
    fn every_length_matches_crc32fast() {
        let data = bytes(9000 + 64, 0x1234_5678);
        let avx = x86::available();
        eprintln!("kernel in use: {:?}, AVX-512 kernel available: {avx}", kernel());
        for align in [0usize, 1, 7, 33] {
            for len in 0..=9000 {
                let d = &data[align..align + len];
                for s in [0u32, 0xffff_ffff, 0x8f3a_01c5 ^ len as u32] {
                    let want = reference(s, d);
                    assert_eq!(update_fallback(s, d), want, "fallback len {len} align {align}");
                    if avx {
                        assert_eq!(x86::update(s, d), want, "avx512 len {len} align {align} state {s:#x}");
                    }
                    assert_eq!(update(s, d), want, "update len {len} align {align}");
                }
            }
        }
    }

    /// A CRC split anywhere continues to the same value (random split points, random data).
    #[test]
    fn continuation_is_concatenation() {
        let data = bytes(8192, 99);
        let cuts = bytes(400, 7);
        for c in cuts.chunks(2) {
            let at = (u16::from_le_bytes([c[0], c[1]]) as usize) % data.len();
            let (a, b) = data.split_at(at);
            assert_eq!(update(update(0, a), b), reference(0, &data), "split at {at}");
        }
    }

    /// update_with_ones against OR-ing the bytes into a copy first, every length 0..=600 and
    /// some long ones, random bits in all ONES_LEN bytes and the ICRC's IPv4 pattern; the
    /// data is left as it was.
    #[test]
    fn ones_match_or_into_copy() {
        let data = bytes(5100, 3);
        let mut patterns = vec![Ones::ZERO];
        let r = bytes(ONES_LEN * 3, 11);
        for c in r.chunks(ONES_LEN) {
            let mut o = Ones::ZERO;
            o.bytes.copy_from_slice(c);
            patterns.push(o);
        }
        let mut v4 = Ones::ZERO;
        for i in [1usize, 8, 10, 11, 26, 27, 32] {
            v4.bytes[i] = 0xff;
        }
        patterns.push(v4);
        let avx = x86::available();
        let lens = (0..=600).chain([1024, 1028, 1080, 4096, 4100, 4154, 4999]);
        for len in lens {
            for align in [0usize, 5] {
                let d = &data[align..align + len];
                let before = d.to_vec();
                for (pi, o) in patterns.iter().enumerate() {
                    let mut copy = d.to_vec();
                    for (i, b) in copy.iter_mut().enumerate().take(ONES_LEN) {
                        *b |= o.bytes[i];
                    }
                    let want = reference(0x0bad_cafe, &copy);
                    assert_eq!(update_with_ones_fallback(0x0bad_cafe, d, o), want, "fallback len {len} pattern {pi}");
                    if avx {
                        assert_eq!(x86::update_with_ones(0x0bad_cafe, d, o), want, "avx512 len {len} pattern {pi}");
                    }
                    assert_eq!(update_with_ones(0x0bad_cafe, d, o), want, "len {len} pattern {pi}");
                }
                assert_eq!(d, &before[..]);
            }
        }
    }

    /// The short path alone (also the kernel below 16 bytes), every length to 64.
    #[test]
    fn table_path_matches() {
        let data = bytes(64, 5);
        for len in 0..=64 {
            for s in [0u32, 0x1357_9bdf] {
                assert_eq!(update_short(s, &data[..len]), reference(s, &data[..len]), "len {len}");
            }
        }
    }

    /// The environment variable forces the fallback (run the suite with
    /// DROCE_CRC32_FALLBACK=1 to see it); without it the kernel follows the CPU.
    #[test]
    fn kernel_follows_cpu_or_env() {
        let forced = std::env::var_os("DROCE_CRC32_FALLBACK").is_some_and(|v| !v.is_empty() && v != "0");
        let want = if !forced && x86::available() { Kernel::Avx512 } else { Kernel::Fallback };
        assert_eq!(kernel(), want);
    }
}
