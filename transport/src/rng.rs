//! A tiny deterministic PRNG (SplitMix64). Randomness in the transport only ever comes
//! from the seed in `DeviceConfig`, so a run is reproducible from its seed.

#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

#[allow(dead_code)] // `below` serves the simulator (feature "sim") only
impl SplitMix64 {
    pub const fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    /// Uniform in `0..n` (n > 0), by multiply-shift; bias is negligible for the uses here.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u32() as u64) * n) >> 32
    }
    /// True with probability `p` (0.0..=1.0).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < p
    }
}
