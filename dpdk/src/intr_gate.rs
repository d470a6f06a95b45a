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
//! `PortUse` is held: the interrupt thread, while it runs, swaps the gate's state from "no use,
//! no window" to "window" in one compare-exchange, spinning a bounded while for the gap between
//! two bursts, else it sleeps [`OPEN_RETRY`] and tries again. A `PortUse` is only taken outside
//! windows (it waits, spinning then sleeping, while one is open). So `memif_disconnect` on the
//! interrupt thread can no longer overlap a burst: the burst after it sees the flag cleared and
//! returns 0.
//!
//! # Starvation
//! Up to 2026-11-28 the thread opened the window first and then waited, spinning and then
//! `sched_yield`ing, for the uses in flight to end; the datapath's next use found the window
//! open and waited, yielding too, for the thread to come round and close it. So a datapath
//! stood still for as long as the interrupt thread was off the CPU. On a loaded 2-vCPU VM
//! (Linux 6.18, EEVDF; load 20) the interrupt thread of a `droce-pmd` memif server sat
//! runnable and unscheduled for over 1.5 s (`/proc/PID/task/TID/schedstat` frozen) with the
//! window open and no use held, while its datapath thread spun and yielded: no RX, no TX, and
//! the peer's RC requester ran out of retries (`RETRY_EXC_ERR`, read_bw and write_bw at MTU 4096
//! in about half the runs). Why the scheduler left a runnable thread off the CPU that long is
//! not settled here; `sched_yield` loops are known to distort EEVDF's picks (LKML, "sched/fair:
//! Only increment deadline once on yield", 2025-09), and both sides of the gate yield-looped
//! on both CPUs (each process's datapath thread, pinned to one, and its interrupt thread, on
//! the other). Now the window is
//! only opened by the running interrupt thread when no use is held, neither side yields, and a
//! datapath waits only while the thread is actually inside its window (microseconds).
//! [`GateStats::wait_ns_max`] shows the longest such wait.
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

/// A use waiting this long for a window to close says so once, with what the interrupt
/// thread is doing (a window lasts microseconds; the breaker of 2026-11-28 saw 0.5 s waits on a
/// loaded VM and once two processes that never ended, with no evidence of where they stood).
const STUCK_REPORT: Duration = Duration::from_secs(2);
static STUCK_REPORTED: AtomicBool = AtomicBool::new(false);

/// The interrupt thread as the kernel sees it (`/proc/self/task/TID`: state, wait channel,
/// system call with its arguments), for a report of a window that does not close.
fn intr_thread_state() -> String {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return "no /proc/self/task".into() };
    for t in tasks.flatten() {
        let dir = t.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with("eal-intr") {
            continue;
        }
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).map(|s| s.trim().to_string()).unwrap_or_else(|e| format!("({e})"));
        // the state is the field after the parenthesised name
        let stat = read("stat");
        let state = stat.rsplit_once(") ").and_then(|(_, r)| r.split(' ').next()).unwrap_or("?").to_string();
        return format!(
            "thread {} state {state}, wchan {}, syscall {}",
            t.file_name().to_string_lossy(),
            read("wchan"),
            read("syscall")
        );
    }
    "no eal-intr-thread found".into()
}

/// How often the parked interrupt thread is let run.
pub const WINDOW_PERIOD: Duration = Duration::from_millis(1);

/// How long the interrupt thread sleeps before it tries again when uses were in flight
/// through a whole try ([`Gate::try_open`]).
const OPEN_RETRY: Duration = Duration::from_micros(200);

/// Looks of one try to open a window (some 50 us): a burst lasts microseconds, and between
/// two bursts of a datapath thread no use is held.
const OPEN_SPINS: u32 = 1 << 10;

/// Spins of a use waiting for a window to close before it sleeps between looks: a window
/// lasts microseconds.
const WAIT_SPINS: u32 = 1 << 9;

/// A use that waited this many spins sleeps this long between looks.
const WAIT_SLEEP: Duration = Duration::from_micros(20);

/// High bit of [`Gate::state`]: a window is open (the interrupt thread may be inside PMD code).
const WINDOW: u32 = 1 << 31;

/// Set by [`freeze`]: no window opens again.
const FROZEN: u32 = 1 << 30;

static ARMED: AtomicBool = AtomicBool::new(false);

/// The process's gate.
static GATE: Gate = Gate::new();

thread_local! {
    /// Set on the interrupt thread: callbacks of other sources that it runs inside a window may
    /// use ports without waiting for the window to close (it cannot close while they run).
    static ON_INTR_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// The gate's state: one per process ([`GATE`]); unit tests make their own.
#[derive(Debug)]
pub(crate) struct Gate {
    /// [`WINDOW`] | [`FROZEN`] | the number of uses held.
    state: AtomicU32,
    windows: AtomicU64,
    waits: AtomicU64,
    window_ns_max: AtomicU64,
    wait_ns_max: AtomicU64,
    deferred: AtomicU64,
    /// What the parked callback waits on: a kick (an early window) from [`kick`], or the freeze.
    park: Mutex<Park>,
    park_cv: Condvar,
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
    /// Longest wait of a port use for a window to close, in nanoseconds: how long a datapath
    /// thread stood still for the interrupt thread (see the module docs, "Starvation").
    pub wait_ns_max: u64,
    /// Tries to open a window that found port uses in flight throughout and slept
    /// [`OPEN_RETRY`] before the next one.
    pub deferred: u64,
}

pub fn stats() -> GateStats {
    let mut s = GATE.stats();
    s.armed = ARMED.load(Ordering::Relaxed);
    s
}

/// Held while a port is in use by this thread (see the module docs). Not `Send`: taken and
/// dropped around one call on one thread.
pub(crate) type PortUse = Use<'static>;

#[derive(Debug)]
#[must_use]
pub(crate) struct Use<'g> {
    gate: &'g Gate,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl PortUse {
    #[inline]
    pub(crate) fn enter() -> PortUse {
        GATE.enter()
    }
}

impl Drop for Use<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release pairs with the Acquire of the window's opening: the burst's reads of PMD
        // memory happen before anything the interrupt thread does in the next window.
        self.gate.state.fetch_sub(1, Ordering::Release);
    }
}

impl Gate {
    pub(crate) const fn new() -> Gate {
        Gate {
            state: AtomicU32::new(0),
            windows: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            window_ns_max: AtomicU64::new(0),
            wait_ns_max: AtomicU64::new(0),
            deferred: AtomicU64::new(0),
            park: Mutex::new(Park { kicked: false, frozen: false }),
            park_cv: Condvar::new(),
        }
    }

    fn stats(&self) -> GateStats {
        GateStats {
            armed: false,
            windows: self.windows.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            window_ns_max: self.window_ns_max.load(Ordering::Relaxed),
            wait_ns_max: self.wait_ns_max.load(Ordering::Relaxed),
            deferred: self.deferred.load(Ordering::Relaxed),
        }
    }

    #[inline]
    pub(crate) fn enter(&self) -> Use<'_> {
        // Acquire pairs with the Release of the window's close: what the interrupt thread did to
        // the PMD in the window is visible to the burst.
        if self.state.fetch_add(1, Ordering::Acquire) & WINDOW != 0 {
            self.wait_window_closed();
        }
        Use { gate: self, _not_send: std::marker::PhantomData }
    }

    /// A use found a window open: give the count back and wait until the window closes. The
    /// interrupt thread itself (running another source's callback inside the window) goes on.
    /// No `sched_yield`: see the module docs, "Starvation".
    #[cold]
    fn wait_window_closed(&self) {
        if ON_INTR_THREAD.with(|c| c.get()) {
            return;
        }
        self.waits.fetch_add(1, Ordering::Relaxed);
        self.state.fetch_sub(1, Ordering::Relaxed);
        let t0 = Instant::now();
        let mut spins = 0u32;
        loop {
            if self.state.load(Ordering::Relaxed) & WINDOW == 0 {
                if self.state.fetch_add(1, Ordering::Acquire) & WINDOW == 0 {
                    self.wait_ns_max.fetch_max(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    return;
                }
                self.state.fetch_sub(1, Ordering::Relaxed);
            }
            if spins < WAIT_SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::sleep(WAIT_SLEEP);
                spins += 1;
                if spins % 4096 == 0 && t0.elapsed() >= STUCK_REPORT && !STUCK_REPORTED.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "droce: a port use has waited {:.1} s for DPDK's interrupt thread to leave its window: {} (the datapath stands still until it does)",
                        t0.elapsed().as_secs_f64(),
                        intr_thread_state()
                    );
                }
            }
        }
    }

    /// Opens a window if no use is held, trying for a bounded number of spins. Only the
    /// interrupt thread calls this, while it runs: a window is never open while that thread
    /// is parked or waiting for uses to end. False when uses were in flight throughout, or the
    /// gate is frozen.
    fn try_open(&self) -> bool {
        for _ in 0..OPEN_SPINS {
            // a plain load while uses are held: the datapath's counter line is not written to
            let s = self.state.load(Ordering::Relaxed);
            if s & FROZEN != 0 {
                return false;
            }
            // Acquire pairs with the Release of the last use's drop: the bursts' accesses to
            // PMD memory happen before the window's.
            if s == 0 && self.state.compare_exchange(0, WINDOW, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return true;
            }
            std::hint::spin_loop();
        }
        false
    }

    /// The eventfd's callback, on the interrupt thread: close the window, park until the next
    /// period (or a kick), open the next window once no use is held, and make sure the thread
    /// comes back right after (`wake`).
    fn on_event(&self, window_opened: &mut Option<Instant>, wake: impl Fn()) {
        ON_INTR_THREAD.with(|c| c.set(true));
        self.state.fetch_and(!WINDOW, Ordering::Release);
        if let Some(t) = window_opened.take() {
            let ns = t.elapsed().as_nanos() as u64;
            self.window_ns_max.fetch_max(ns, Ordering::Relaxed);
        }
        let mut wait = WINDOW_PERIOD;
        loop {
            self.park(wait);
            if self.try_open() {
                break;
            }
            self.deferred.fetch_add(1, Ordering::Relaxed);
            wait = OPEN_RETRY;
        }
        self.windows.fetch_add(1, Ordering::Relaxed);
        *window_opened = Some(Instant::now());
        wake();
    }

    /// Sleeps for `wait` or until kicked; for good once frozen.
    fn park(&self, wait: Duration) {
        let mut park = self.park.lock().unwrap_or_else(PoisonError::into_inner);
        let deadline = Instant::now() + wait;
        loop {
            if park.frozen {
                park = self.park_cv.wait(park).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            let now = Instant::now();
            if park.kicked || now >= deadline {
                break;
            }
            park = self.park_cv.wait_timeout(park, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
        }
        park.kicked = false;
    }

    fn kick(&self) {
        self.park.lock().unwrap_or_else(PoisonError::into_inner).kicked = true;
        self.park_cv.notify_one();
    }

    fn freeze(&self) {
        self.park.lock().unwrap_or_else(PoisonError::into_inner).frozen = true;
        // No window opens after this (try_open expects a state of exactly 0) ...
        self.state.fetch_or(FROZEN, Ordering::AcqRel);
        // ... and one in progress is waited out: once a use gets in, the thread has closed the
        // window and is in the callback, where it parks for good.
        drop(self.enter());
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
    GATE.state.fetch_or(WINDOW, Ordering::AcqRel);
    sys::wake();
}

/// Asks the parked interrupt thread for a window now instead of at the next period (a caller
/// that waits for something the thread does, such as a link coming up).
pub fn kick() {
    if ARMED.load(Ordering::Relaxed) {
        GATE.kick();
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
    GATE.freeze();
}

/// The eventfd's callback, on the interrupt thread.
fn on_event(window_opened: &mut Option<Instant>) {
    sys::drain();
    GATE.on_event(window_opened, sys::wake);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::thread;

    /// EAL's interrupt thread as the gate sees it: the callback, again and again (EAL calls
    /// it as soon as it has handled what was pending), until `stop`.
    fn interrupt_thread(gate: &Gate, stop: &AtomicBool) {
        let mut opened = None;
        while !stop.load(Ordering::Relaxed) {
            gate.on_event(&mut opened, || {});
        }
        gate.state.fetch_and(!WINDOW, Ordering::Release);
    }

    /// The starvation of 2026-11-28 without a scheduler: a use held for a long time stands
    /// for an interrupt thread that is off the CPU while it waits for the uses in flight to end.
    /// Other threads' uses must go on meanwhile: the gate must not claim a window it cannot open
    /// yet. (The gate before the fix set the window bit first and made them wait.)
    #[test]
    fn a_held_use_keeps_the_window_shut_and_others_going() {
        let gate = Gate::new();
        let stop = AtomicBool::new(false);
        let holding = AtomicBool::new(true);
        let uses = AtomicU64::new(0);
        // (while a use is held, after it is released); asserted once every thread is done
        let (during, after) = thread::scope(|s| {
            let long = gate.enter();
            s.spawn(|| interrupt_thread(&gate, &stop));
            let user = s.spawn(|| {
                let t0 = Instant::now();
                while holding.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(30) {
                    drop(gate.enter());
                    uses.fetch_add(1, Ordering::Relaxed);
                }
            });
            // many periods: the interrupt thread has tried (and deferred) its window many times,
            // the other thread has used the gate many times
            let t0 = Instant::now();
            let busy = |g: GateStats| (g.deferred < 20 || uses.load(Ordering::Relaxed) < 1000) && g.waits == 0 && g.windows == 0;
            while busy(gate.stats()) && t0.elapsed() < Duration::from_secs(60) {
                thread::sleep(Duration::from_millis(5));
            }
            let during = (gate.stats(), t0.elapsed());
            holding.store(false, Ordering::Relaxed);
            drop(long);
            user.join().unwrap();
            // once no use is held, windows open again
            let t0 = Instant::now();
            while gate.stats().windows < during.0.windows + 3 && t0.elapsed() < Duration::from_secs(60) {
                thread::sleep(Duration::from_millis(1));
            }
            stop.store(true, Ordering::Relaxed);
            gate.kick();
            (during, gate.stats())
        });
        let (during, took) = during;
        eprintln!("{took:?} with a use held: {during:?}");
        assert_eq!(during.waits, 0, "no use waited for a window it could not get: {during:?}");
        assert_eq!(during.windows, 0, "no window while a use was held: {during:?}");
        assert!(during.deferred >= 20, "the interrupt thread tried to open windows: {during:?}");
        assert!(uses.load(Ordering::Relaxed) >= 1000, "the other thread used the gate meanwhile");
        assert!(after.windows >= 3, "windows open when no use is held: {after:?}");
    }

    /// A window open keeps uses out until it closes (what the gate is for).
    /// A window that does not close is reported once, with the interrupt thread's state as
    /// the kernel shows it (here a stand-in thread of that name, asleep).
    #[test]
    fn a_window_that_does_not_close_is_reported_with_the_threads_state() {
        let stop = AtomicBool::new(false);
        let gate = Gate::new();
        thread::scope(|s| {
            thread::Builder::new()
                .name("eal-intr-thread".into())
                .spawn_scoped(s, || {
                    while !stop.load(Ordering::Relaxed) {
                        thread::sleep(Duration::from_millis(5));
                    }
                })
                .unwrap();
            assert!(gate.try_open());
            let waiter = s.spawn(|| drop(gate.enter()));
            let t0 = Instant::now();
            while !STUCK_REPORTED.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(30) {
                thread::sleep(Duration::from_millis(10));
            }
            let took = t0.elapsed();
            let state = intr_thread_state();
            gate.state.fetch_and(!WINDOW, Ordering::Release);
            waiter.join().unwrap();
            stop.store(true, Ordering::Relaxed);
            assert!(STUCK_REPORTED.load(Ordering::Relaxed) && took >= STUCK_REPORT, "not reported ({took:?})");
            assert!(state.starts_with("thread ") && state.contains("state S") && state.contains("syscall "), "{state}");
        });
    }

    #[test]
    fn an_open_window_holds_uses_until_it_closes() {
        let gate = Gate::new();
        assert!(gate.try_open());
        let entered = AtomicBool::new(false);
        thread::scope(|s| {
            s.spawn(|| {
                let u = gate.enter();
                entered.store(true, Ordering::Release);
                drop(u);
            });
            // it is waiting (and stays out a while longer)
            let t0 = Instant::now();
            while gate.stats().waits == 0 && t0.elapsed() < Duration::from_secs(60) {
                thread::sleep(Duration::from_millis(1));
            }
            thread::sleep(Duration::from_millis(20));
            let early = entered.load(Ordering::Acquire);
            gate.state.fetch_and(!WINDOW, Ordering::Release);
            assert!(!early, "a use got in while the window was open");
        });
        assert!(entered.load(Ordering::Acquire));
        assert_eq!(gate.stats().waits, 1);
        // a held use keeps a window from opening; a frozen gate never opens one
        let u = gate.enter();
        assert!(!gate.try_open());
        drop(u);
        gate.state.fetch_or(FROZEN, Ordering::AcqRel);
        assert!(!gate.try_open());
    }
}
