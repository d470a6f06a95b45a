//! Whether EAL is up: the flag every DPDK object reads before it touches DPDK (and in its
//! `Drop`, since EAL cleanup has already released DPDK memory). `Eal` sets and clears it.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

/// True between a successful init and cleanup: objects check it before touching DPDK in `Drop`.
pub(crate) static RUNNING: AtomicBool = AtomicBool::new(false);

/// True while EAL is initialised and not yet cleaned up.
#[inline]
pub fn is_running() -> bool {
    RUNNING.load(Ordering::Acquire)
}

pub(crate) fn ensure_running() -> Result<()> {
    if is_running() {
        Ok(())
    } else {
        Err(Error::EalNotInitialized)
    }
}
