//! What the stateful fuzz targets share.

use arbitrary::{Result, Unstructured};

/// How far a target moves its clock (ns) in one step: up to its earliest timer (`next` asks
/// for it; no move without one) when the input says so, else an arbitrary jump of up to
/// `max_jump`.
pub fn clock_jump(u: &mut Unstructured, now: u64, next: impl FnOnce() -> Option<u64>, max_jump: u64) -> Result<u64> {
    Ok(if u.arbitrary()? { next().map_or(0, |t| t.saturating_sub(now)) } else { u.int_in_range(0..=max_jump)? })
}
