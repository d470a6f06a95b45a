//! Time-stamp-counter clock.

use dpdk_sys as sys;

/// Reads the TSC (`rte_rdtsc`).
#[inline(always)]
#[allow(unsafe_code)]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions on x86_64.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: shim call with no preconditions.
    unsafe {
        sys::droce_rte_rdtsc()
    }
}

/// TSC frequency as measured by EAL (`rte_get_tsc_hz`); 0 before `Eal::init`.
#[allow(unsafe_code)]
pub fn tsc_hz() -> u64 {
    // SAFETY: reads a value set by EAL timer init (0 before it).
    unsafe { sys::rte_get_tsc_hz() }
}

/// Converts TSC cycles to and from nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tsc {
    hz: u64,
}

impl Tsc {
    /// Uses EAL's TSC frequency, or calibrates for 20 ms against the OS clock without EAL.
    pub fn new() -> Tsc {
        let hz = tsc_hz();
        if hz != 0 {
            return Tsc { hz };
        }
        let t0 = std::time::Instant::now();
        let c0 = rdtsc();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let c1 = rdtsc();
        let ns = t0.elapsed().as_nanos().max(1);
        Tsc { hz: ((c1.wrapping_sub(c0) as u128 * 1_000_000_000) / ns).max(1) as u64 }
    }

    /// A clock with a known frequency.
    pub fn with_hz(hz: u64) -> Tsc {
        Tsc { hz: hz.max(1) }
    }

    pub fn hz(&self) -> u64 {
        self.hz
    }

    #[inline(always)]
    pub fn now(&self) -> TscInstant {
        TscInstant(rdtsc())
    }

    #[inline]
    pub fn cycles_to_ns(&self, cycles: u64) -> u64 {
        ((cycles as u128 * 1_000_000_000) / self.hz as u128) as u64
    }

    #[inline]
    pub fn ns_to_cycles(&self, ns: u64) -> u64 {
        ((ns as u128 * self.hz as u128) / 1_000_000_000) as u64
    }

    /// Nanoseconds since `start`.
    #[inline]
    pub fn elapsed_ns(&self, start: TscInstant) -> u64 {
        self.cycles_to_ns(rdtsc().wrapping_sub(start.0))
    }

    /// As a `Duration`.
    #[inline]
    pub fn elapsed(&self, start: TscInstant) -> std::time::Duration {
        std::time::Duration::from_nanos(self.elapsed_ns(start))
    }
}

impl Default for Tsc {
    fn default() -> Self {
        Tsc::new()
    }
}

/// A TSC reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TscInstant(pub u64);

impl TscInstant {
    /// Cycles from `earlier` to `self` (0 if `earlier` is later).
    #[inline]
    pub fn cycles_since(self, earlier: TscInstant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        let t = Tsc::with_hz(2_000_000_000);
        assert_eq!(t.cycles_to_ns(2_000), 1_000);
        assert_eq!(t.ns_to_cycles(1_000), 2_000);
        assert_eq!(t.cycles_to_ns(u64::MAX / 2), (u64::MAX as u128 / 2 * 1_000_000_000 / 2_000_000_000) as u64);
    }

    #[test]
    fn calibrates_without_eal() {
        let t = Tsc::new();
        assert!(t.hz() > 100_000_000, "hz {}", t.hz());
        let s = t.now();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let ns = t.elapsed_ns(s);
        assert!((4_000_000..500_000_000).contains(&ns), "{ns}");
    }
}
