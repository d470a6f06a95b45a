//! The interrupt-thread gate: ports are used only while DPDK's interrupt thread is parked.
//!
//! # The race
//! EAL runs one interrupt thread (`eal-intr-thread`) per process. Some PMDs tear a port's
//! shared state down from it. net_memif (DPDK 22.11, unchanged up to 24.11) is the one droce
//! meets every day: when the peer closes its control socket (it exits, is killed, or stops its
//! port), the interrupt thread's `memif_intr_handler` runs `memif_disconnect`, which clears
//! `ETH_MEMIF_FLAG_CONNECTED` and then `munmap`s the shared regions (rings and buffers). The
//! burst functions (`eth_memif_rx`, `eth_memif_tx`) check that flag once on entry and then
//! read the rings, with no lock and no epoch between the two threads. A burst that passed the
//! check a moment before the flag was cleared reads unmapped memory: SIGSEGV in
//! `rte_eth_rx_burst`/`rte_eth_tx_burst` of the surviving process, after its peer is gone.
//! (Worse, the freed range may already hold another mapping, and a TX burst writes a ring
//! index into it.) Upstream has not changed this: its memif commits since 22.11 fix
//! multi-segment, zero-copy and burst-size bugs, none adds a lock between `memif_disconnect`
//! and the datapath. The same shape applies to any PMD whose link or removal handling runs on
//! the interrupt thread (device removal events of PCI NICs, vdev hot-unplug).
//!
//! # The gate
//! droce registers one more interrupt source, an eventfd, whose callback parks the interrupt
//! thread. The thread only runs EAL and PMD code in *windows*; a window opens when the parked
//! callback returns and closes when the thread comes back into it, which is right after it has
//! handled every event that was pending (the eventfd is written as the window opens, so the
//! thread's next `epoll_wait` returns at once with it). Windows open every [`WINDOW_PERIOD`]
//! (link changes, memif connection handshakes and alarms are handled at most that late) and last
//! a few microseconds.
//!
//! Every port call that may meet PMD state the interrupt thread also changes (bursts, start,
//! stop, close, configure) holds a [`PortUse`] for its duration. A window opens only when no
//! `PortUse` is held, and a `PortUse` is only taken outside windows (it waits, spinning then
//! yielding, while one is open). So `memif_disconnect` on the interrupt thread can no longer
//! overlap a burst: the burst after it sees the flag cleared and returns 0.
//!
//! Fast path cost: one atomic add and one atomic subtract per burst on a counter that only
//! this process's datapath threads and the interrupt thread touch.
//!
//! `DROCE_INTR_GATE=off` leaves the gate out (the thread runs freely, as in plain DPDK): a
//! switch for comparing, which brings the crash back with net_memif.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often the parked interrupt thread is let run.
pub const WINDOW_PERIOD: Duration = Duration::from_millis(1);

/// High bit of [`STATE`]: a window is open (the interrupt thread may be inside PMD code).
const WINDOW: u32 = 1 << 31;

/// [`WINDOW`] | the number of [`PortUse`]s held.
static STATE: AtomicU32 = AtomicU32::new(0);

static ARMED: AtomicBool = AtomicBool::new(false);
static WINDOWS: AtomicU64 = AtomicU64::new(0);
static WAITS: AtomicU64 = AtomicU64::new(0);
static WINDOW_NS_MAX: AtomicU64 = AtomicU64::new(0);

/// What the parked callback waits on: a kick (an early window) from [`kick`], or the freeze.
static PARK: Mutex<Park> = Mutex::new(Park { kicked: false, frozen: false });
static PARK_CV: Condvar = Condvar::new();

thread_local! {
    /// Set on the interrupt thread: callbacks of other sources that it runs inside a window may
    /// use ports without waiting for the window to close (it cannot close while they run).
    static ON_INTR_THREAD: Cell<bool> = const { Cell::new(false) };
}

#[derive(Debug)]
struct Park {
    kicked: bool,
    /// Set by [`freeze`]: no window ever again.
    frozen: bool,
}

/// Counters of the gate (`show port gate`-style diagnostics and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GateStats {
    /// Whether the gate parks the interrupt thread (false before EAL init, or when disabled).
    pub armed: bool,
    /// Windows opened so far.
    pub windows: u64,
    /// Port uses that found a window open and waited for it to close.
    pub waits: u64,
    /// Longest window, from opening until the thread parked again, in nanoseconds.
    pub window_ns_max: u64,
}

pub fn stats() -> GateStats {
    GateStats {
        armed: ARMED.load(Ordering::Relaxed),
        windows: WINDOWS.load(Ordering::Relaxed),
        waits: WAITS.load(Ordering::Relaxed),
        window_ns_max: WINDOW_NS_MAX.load(Ordering::Relaxed),
    }
}

/// Held while a port is in use by this thread (see the module docs). Not `Send`: taken and
/// dropped around one call on one thread.
#[derive(Debug)]
#[must_use]
pub(crate) struct PortUse {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl PortUse {
    #[inline]
    pub(crate) fn enter() -> PortUse {
        // Acquire pairs with the Release of the window's close: what the interrupt thread did to
        // the PMD in the window is visible to the burst.
        if STATE.fetch_add(1, Ordering::Acquire) & WINDOW != 0 {
            wait_window_closed();
        }
        PortUse { _not_send: std::marker::PhantomData }
    }
}

impl Drop for PortUse {
    #[inline]
    fn drop(&mut self) {
        // Release pairs with the Acquire of the window's opening: the burst's reads of PMD
        // memory happen before anything the interrupt thread does in the next window.
        STATE.fetch_sub(1, Ordering::Release);
    }
}

/// A use found a window open: give the count back and wait until the window closes. The
/// interrupt thread itself (running another source's callback inside the window) goes on.
#[cold]
fn wait_window_closed() {
    if ON_INTR_THREAD.with(|c| c.get()) {
        return;
    }
    WAITS.fetch_add(1, Ordering::Relaxed);
    STATE.fetch_sub(1, Ordering::Relaxed);
    let mut spins = 0u32;
    loop {
        if STATE.load(Ordering::Relaxed) & WINDOW == 0 {
            if STATE.fetch_add(1, Ordering::Acquire) & WINDOW == 0 {
                return;
            }
            STATE.fetch_sub(1, Ordering::Relaxed);
        }
        spins = spins.saturating_add(1);
        if spins < 256 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Parks EAL's interrupt thread (called once, right after `rte_eal_init`). Until the thread
/// first parks, port uses wait: the window is open from the start.
pub(crate) fn arm() {
    if std::env::var("DROCE_INTR_GATE").map(|v| v == "off" || v == "0").unwrap_or(false) {
        return;
    }
    if ARMED.swap(true, Ordering::AcqRel) {
        return;
    }
    if let Err(e) = sys::register() {
        ARMED.store(false, Ordering::Release);
        // without the gate droce runs as plain DPDK does; say so once
        eprintln!("droce: interrupt-thread gate not armed ({e}); a PMD that tears a port down from DPDK's interrupt thread (net_memif on peer exit) may crash this process");
        return;
    }
    STATE.fetch_or(WINDOW, Ordering::AcqRel);
    sys::wake();
}

/// Asks the parked interrupt thread for a window now instead of at the next period (a caller
/// that waits for something the thread does, such as a link coming up).
pub fn kick() {
    if ARMED.load(Ordering::Relaxed) {
        PARK.lock().unwrap_or_else(PoisonError::into_inner).kicked = true;
        PARK_CV.notify_one();
    }
}

/// Kicks at most once per [`LINK_KICK_EVERY`]: for callers that poll a link that is down (the
/// memif handshake that brings it up is a few messages, each handled in a window).
pub(crate) fn kick_link_wait() {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    if !ARMED.load(Ordering::Relaxed) {
        return;
    }
    let now = Instant::now();
    {
        let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
        if last.map(|t| now.duration_since(t) < LINK_KICK_EVERY).unwrap_or(false) {
            return;
        }
        *last = Some(now);
    }
    kick();
}

/// See [`kick_link_wait`].
pub const LINK_KICK_EVERY: Duration = Duration::from_micros(100);

/// Parks the interrupt thread for good: when this returns it is inside the gate's callback
/// and never runs EAL or PMD code again. For the end of the process: `rte_eal_cleanup` unmaps
/// the DPDK heap, where the interrupt sources live, without stopping that thread (DPDK 22.11),
/// and a window after it read freed memory (SIGSEGV in `rte_intr_fd_get`). Ports stopped and
/// closed after this no longer talk to the peer through the interrupt thread: close them first.
pub fn freeze() {
    if !ARMED.load(Ordering::Acquire) {
        return;
    }
    PARK.lock().unwrap_or_else(PoisonError::into_inner).frozen = true;
    // Wait out a window in progress: once a use gets in, the thread has closed the window and
    // is in the callback, where it sees `frozen` before it could open another.
    drop(PortUse::enter());
}

/// The eventfd's callback, on the interrupt thread: close the window, park until the next
/// period (or a kick), open the next window, and make sure the thread comes back right after.
fn on_event(window_opened: &mut Option<Instant>) {
    ON_INTR_THREAD.with(|c| c.set(true));
    sys::drain();
    STATE.fetch_and(!WINDOW, Ordering::Release);
    if let Some(t) = window_opened.take() {
        let ns = t.elapsed().as_nanos() as u64;
        WINDOW_NS_MAX.fetch_max(ns, Ordering::Relaxed);
    }
    {
        let mut park = PARK.lock().unwrap_or_else(PoisonError::into_inner);
        let deadline = Instant::now() + WINDOW_PERIOD;
        loop {
            if park.frozen {
                park = PARK_CV.wait(park).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            let now = Instant::now();
            if park.kicked || now >= deadline {
                break;
            }
            park = PARK_CV.wait_timeout(park, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
        }
        park.kicked = false;
    }
    // Open: no new use may start, and the ones in flight finish (a burst is bounded).
    STATE.fetch_or(WINDOW, Ordering::Acquire);
    let mut spins = 0u32;
    while STATE.load(Ordering::Acquire) & !WINDOW != 0 {
        spins = spins.saturating_add(1);
        if spins < 256 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    WINDOWS.fetch_add(1, Ordering::Relaxed);
    *window_opened = Some(Instant::now());
    sys::wake();
}

#[allow(unsafe_code)]
mod sys {
    use std::ffi::c_void;
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::time::Instant;

    static EFD: AtomicI32 = AtomicI32::new(-1);

    /// When the current window opened; touched only by the interrupt thread.
    struct CallbackState(std::cell::UnsafeCell<Option<Instant>>);
    // SAFETY: only the interrupt thread (the one caller of `callback`) touches the cell.
    unsafe impl Sync for CallbackState {}
    static CB_STATE: CallbackState = CallbackState(std::cell::UnsafeCell::new(None));

    extern "C" fn callback(_arg: *mut c_void) {
        // A panic must not unwind into EAL's C loop; the gate's code does not panic (no
        // indexing, poisoned locks are taken over), this is the last line of defence.
        let r = std::panic::catch_unwind(|| {
            // SAFETY: EAL calls the callbacks of a source from its interrupt thread only, one
            // at a time: this is the only reference to the cell while it lives.
            let opened = unsafe { &mut *CB_STATE.0.get() };
            super::on_event(opened)
        });
        if r.is_err() {
            std::process::abort();
        }
    }

    pub(super) fn register() -> Result<(), String> {
        // SAFETY: eventfd has no memory preconditions.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
        }
        EFD.store(fd, Ordering::Release);
        // SAFETY: EAL is initialised (called right after rte_eal_init); the callback is a
        // 'static function that ignores its argument; the fd stays open for the process.
        let r = unsafe { dpdk_sys::droce_intr_register_fd(fd, Some(callback), std::ptr::null_mut()) };
        if r != 0 {
            // SAFETY: our own fd, registered nowhere.
            unsafe { libc::close(fd) };
            EFD.store(-1, Ordering::Release);
            return Err(format!("rte_intr_callback_register: {}", crate::error::strerror(-r)));
        }
        Ok(())
    }

    /// Makes the eventfd readable: the interrupt thread calls the callback at its next wait.
    pub(super) fn wake() {
        let fd = EFD.load(Ordering::Acquire);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd (EAGAIN only when the counter
        // is near overflow, which one pending wake never reaches).
        let _ = unsafe { libc::write(fd, &one as *const u64 as *const c_void, 8) };
    }

    /// Resets the eventfd (EXT sources are not read by EAL: a readable fd would fire again).
    pub(super) fn drain() {
        let fd = EFD.load(Ordering::Acquire);
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64 from our non-blocking eventfd.
        let _ = unsafe { libc::read(fd, &mut v as *mut u64 as *mut c_void, 8) };
    }
}
