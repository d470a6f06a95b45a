//! Logical cores: listing, launching closures on worker lcores, waiting for them.

use std::any::Any;
use std::ffi::c_void;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use dpdk_sys as sys;

use crate::error::{Error, Result};

/// An lcore id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LcoreId(pub u32);

impl std::fmt::Display for LcoreId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Enabled lcores, main lcore included, ascending.
#[allow(unsafe_code)]
pub fn lcores() -> Vec<LcoreId> {
    let mut out = Vec::new();
    if !crate::running::is_running() {
        return out;
    }
    // SAFETY: EAL is running; rte_get_next_lcore(-1, 0, 0) starts from the first enabled lcore
    // and returns RTE_MAX_LCORE at the end.
    let mut i = unsafe { sys::rte_get_next_lcore(u32::MAX, 0, 0) };
    while i < sys::RTE_MAX_LCORE {
        out.push(LcoreId(i));
        // SAFETY: as above.
        i = unsafe { sys::rte_get_next_lcore(i, 0, 0) };
    }
    out
}

/// Enabled worker lcores (all but the main one).
pub fn worker_lcores() -> Vec<LcoreId> {
    let main = main_lcore();
    lcores().into_iter().filter(|l| Some(*l) != main).collect()
}

/// The main lcore (the thread that ran `Eal::init`), `None` without EAL.
#[allow(unsafe_code)]
pub fn main_lcore() -> Option<LcoreId> {
    if !crate::running::is_running() {
        return None;
    }
    // SAFETY: EAL is running.
    Some(LcoreId(unsafe { sys::rte_get_main_lcore() }))
}

/// Number of enabled lcores.
#[allow(unsafe_code)]
pub fn lcore_count() -> u32 {
    if !crate::running::is_running() {
        return 0;
    }
    // SAFETY: EAL is running.
    unsafe { sys::rte_lcore_count() }
}

/// The calling thread's lcore id, `None` for a thread EAL does not know.
#[allow(unsafe_code)]
#[inline]
pub fn current_lcore() -> Option<LcoreId> {
    // SAFETY: reads a thread-local variable.
    let id = unsafe { sys::droce_rte_lcore_id() };
    (id < sys::RTE_MAX_LCORE).then_some(LcoreId(id))
}

/// NUMA socket of an lcore.
#[allow(unsafe_code)]
pub fn lcore_socket(lcore: LcoreId) -> i32 {
    // SAFETY: any id may be asked.
    unsafe { sys::rte_lcore_to_socket_id(lcore.0) as i32 }
}

type Job = Box<dyn FnOnce() -> i32 + Send + 'static>;
type Slot = Arc<Mutex<Option<std::result::Result<i32, String>>>>;

struct Launch {
    job: Job,
    slot: Slot,
}

fn panic_text(p: Box<dyn Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs on the worker lcore; owns the boxed job. A panic never crosses into C.
extern "C" fn trampoline(arg: *mut c_void) -> c_int {
    #[allow(unsafe_code)]
    // SAFETY: `arg` is the Box<Launch> leaked by `launch`, handed to exactly this call.
    let launch = unsafe { Box::from_raw(arg as *mut Launch) };
    let Launch { job, slot } = *launch;
    let res = catch_unwind(AssertUnwindSafe(job)).map_err(panic_text);
    let code = *res.as_ref().unwrap_or(&-1);
    if let Ok(mut s) = slot.lock() {
        *s = Some(res);
    }
    code
}

/// A closure running on a worker lcore; [`LaunchHandle::wait`] joins it.
#[derive(Debug)]
#[must_use = "wait() for the lcore, or it keeps running until Eal is dropped"]
pub struct LaunchHandle {
    lcore: LcoreId,
    slot: Slot,
}

impl LaunchHandle {
    pub fn lcore(&self) -> LcoreId {
        self.lcore
    }

    /// Waits until the closure returns (`rte_eal_wait_lcore`); its value, or
    /// `Error::LcorePanicked` if it panicked.
    #[allow(unsafe_code)]
    pub fn wait(self) -> Result<i32> {
        // SAFETY: lcore is an enabled worker we launched on; called from the main lcore.
        unsafe { sys::rte_eal_wait_lcore(self.lcore.0) };
        let taken = self.slot.lock().map(|mut s| s.take()).unwrap_or(None);
        match taken {
            Some(Ok(v)) => Ok(v),
            Some(Err(message)) => Err(Error::LcorePanicked { lcore: self.lcore.0, message }),
            None => Err(Error::Lcore { lcore: self.lcore.0, reason: "closure did not report a result".into() }),
        }
    }

    /// True once the closure has returned.
    pub fn is_finished(&self) -> bool {
        self.slot.lock().map(|s| s.is_some()).unwrap_or(true)
    }
}

/// Runs `f` on worker lcore `lcore` (`rte_eal_remote_launch`). Must be called from the main
/// lcore; the target must be an enabled worker that is idle.
#[allow(unsafe_code)]
pub fn launch<F>(lcore: LcoreId, f: F) -> Result<LaunchHandle>
where
    F: FnOnce() -> i32 + Send + 'static,
{
    crate::running::ensure_running()?;
    if Some(lcore) == main_lcore() {
        return Err(Error::Lcore { lcore: lcore.0, reason: "is the main lcore; run the closure directly".into() });
    }
    if !worker_lcores().contains(&lcore) {
        let ids: Vec<String> = worker_lcores().iter().map(|l| l.to_string()).collect();
        return Err(Error::Lcore {
            lcore: lcore.0,
            reason: format!("not an enabled worker lcore (workers: [{}]; enable more with -l)", ids.join(", ")),
        });
    }
    let slot: Slot = Arc::new(Mutex::new(None));
    let arg = Box::into_raw(Box::new(Launch { job: Box::new(f), slot: slot.clone() })) as *mut c_void;
    // SAFETY: trampoline has the lcore_function_t ABI and takes ownership of `arg` if launched.
    let r = unsafe { sys::rte_eal_remote_launch(Some(trampoline), arg, lcore.0) };
    if r != 0 {
        // SAFETY: not launched, so `arg` is still ours to free.
        drop(unsafe { Box::from_raw(arg as *mut Launch) });
        return Err(Error::Lcore { lcore: lcore.0, reason: format!("cannot launch: {}", crate::error::strerror(-r)) });
    }
    Ok(LaunchHandle { lcore, slot })
}

/// Registers the calling non-EAL thread with EAL (`rte_thread_register`) so that it gets an
/// lcore id and, with it, per-lcore mempool caches (mbuf alloc/free from an unregistered thread
/// go straight to the shared ring, which is much slower). Returns the lcore id given; a thread
/// that already has one gets it back unchanged. Call [`unregister_thread`] before the thread ends.
#[allow(unsafe_code)]
pub fn register_thread() -> Result<LcoreId> {
    crate::running::ensure_running()?;
    if let Some(l) = current_lcore() {
        return Ok(l);
    }
    // SAFETY: EAL is running; registers only the calling thread.
    if unsafe { sys::rte_thread_register() } != 0 {
        return Err(Error::Dpdk { op: "rte_thread_register", errno: crate::error::rte_errno() });
    }
    current_lcore().ok_or(Error::Lcore { lcore: u32::MAX, reason: "rte_thread_register gave no lcore id".into() })
}

/// Releases the lcore id the calling thread got from [`register_thread`]. Call it only on
/// threads you registered, never on an EAL lcore's own thread.
#[allow(unsafe_code)]
pub fn unregister_thread() {
    if crate::running::is_running() {
        // SAFETY: unregisters only the calling thread.
        unsafe { sys::rte_thread_unregister() }
    }
}
