//! The process-wide runtime of the libraries ([`global`]): the one progress thread of the
//! process ([`start_progress_thread`], with the frontend's own step if it has one), the ACK
//! watchdog, and the one exit path that stops both before DPDK's destructors run.

use super::*;
use std::sync::Once;

pub(super) static GLOBAL: OnceLock<Result<(&'static Mutex<Runtime>, bool), RuntimeError>> = OnceLock::new();

/// The process-wide host: opened from [`RuntimeConfig::from_env`] on first use, never closed.
/// Errors are sticky (every caller gets the first error). With [`Progress::Thread`] a background
/// thread ("droce-progress") locks the mutex and progresses, sleeping briefly when idle.
pub fn global() -> Result<&'static Mutex<Runtime>, RuntimeError> {
    GLOBAL
        .get_or_init(|| {
            let cfg = RuntimeConfig::from_env()?;
            let thread = cfg.progress == Progress::Thread;
            let watchdog = !thread;
            // Threads run this library's code to the end of the process: ours, and from EAL
            // init on DPDK's interrupt thread, parked in the interrupt-thread gate's callback.
            // libfabric dlclose()s its providers in its exit-time destructor, and a thread that
            // woke up in unmapped code crashed the process at exit (fi_dom_test, 2 in 12 runs;
            // a host whose open failed after EAL init, in fi_multi_mr). Pinned before EAL starts.
            sys::pin_own_library();
            sys::at_exit(stop_threads);
            let host = Runtime::open(cfg)?;
            let m: &'static Mutex<Runtime> = Box::leak(Box::new(Mutex::new(host)));
            if watchdog {
                std::thread::Builder::new()
                    .name("droce-acks".into())
                    .spawn(move || ack_watchdog(m))
                    .map_err(|e| RuntimeError::Device(format!("ACK watchdog thread: {e}")))?;
            }
            if thread {
                // its rounds find GLOBAL set once this closure returns
                start_progress_thread(None);
            }
            Ok((m, thread))
        })
        .clone()
        .map(|(m, _)| m)
}

/// Makes `rt` (opened by the caller, e.g. the CLI from its arguments) the process-wide runtime
/// and, with `thread`, starts the progress thread on it. Fails if the process has one already.
pub fn install_global(rt: Runtime, thread: bool) -> Result<&'static Mutex<Runtime>, RuntimeError> {
    if GLOBAL.get().is_some() {
        return Err(RuntimeError::Device("this process has a runtime already".into()));
    }
    sys::at_exit(stop_threads);
    let m: &'static Mutex<Runtime> = Box::leak(Box::new(Mutex::new(rt)));
    GLOBAL.set(Ok((m, thread))).map_err(|_| RuntimeError::Device("this process has a runtime already".into()))?;
    if thread {
        start_progress_thread(None);
    }
    Ok(m)
}

/// Ends the progress thread and waits for it (bounded like the exit path): the caller's
/// thread alone touches the runtime afterwards (the CLI before it prints its counters and
/// closes the port). The thread is not started again in this process.
pub fn stop_progress_thread() {
    stop_threads_inner(false);
}

/// [`global`] locked; a poisoned lock (a panic while it was held) is taken over.
pub fn lock_global() -> Result<MutexGuard<'static, Runtime>, RuntimeError> {
    Ok(global()?.lock().unwrap_or_else(PoisonError::into_inner))
}

/// How often the ACK watchdog of [`global`] looks at the device.
pub const ACK_WATCHDOG_TICK: Duration = Duration::from_millis(1);

/// A software RoCE acknowledges only while something polls it, and with manual progress that
/// is the application: when it stops polling (it got its last completion and went on to other
/// things, waits elsewhere, or is a thread the scheduler leaves runnable but unrun for seconds
/// among more pollers than CPUs) its peers' sends go unacknowledged and retry out
/// (RETRY_EXC_ERR after retry_cnt timeouts) although this process is alive. This thread stands
/// in: each tick it takes the lock if free and, when no poll ran for a whole tick, polls the
/// device once (RX, timers, TX) and flushes, so frames that arrived meanwhile are received and
/// acknowledged and held ACKs ([`RuntimeConfig::hold_acks`]) leave. The peer's send completes
/// ~1-2 ms late instead of retrying out. It sleeps between ticks, and a sleeping thread keeps
/// its share of the CPU where a spinning one can be left unrun. Completions wait in their CQs
/// for the application, as after its own poll. A busy application keeps the lock mostly free
/// and polls between ticks: the watchdog costs one wake-up and one uncontended lock per tick.
pub(super) fn ack_watchdog(m: &'static Mutex<Runtime>) {
    let mut seen = 0u64;
    loop {
        std::thread::sleep(ACK_WATCHDOG_TICK);
        let mut h = match m.try_lock() {
            Ok(h) => h,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            // the application is in a call: that call polls
            Err(std::sync::TryLockError::WouldBlock) => continue,
        };
        if EXITING.load(Ordering::SeqCst) {
            return;
        }
        h.dev.poll_if_unpolled(&mut seen);
    }
}

/// Set by the exit handler: the host's threads stop touching DPDK (whose destructors run next).
pub(super) static EXITING: AtomicBool = AtomicBool::new(false);


/// Inside one round of the progress thread (see [`stop_threads`]).
static IN_ROUND: AtomicBool = AtomicBool::new(false);

/// The frontend's progress step, if it set one ([`start_progress_thread`]).
static STEP: OnceLock<fn() -> bool> = OnceLock::new();

static PROGRESS_THREAD: Once = Once::new();

/// Starts the process's one progress thread ("droce-progress") if it is not running yet:
/// [`Progress::Thread`] in the config starts it at [`global`], a frontend that promises
/// progress without calls (libfabric FI_PROGRESS_AUTO) starts it with its own `step`. Each
/// round runs the frontend's step if one was given (it polls the runtime under its own locks,
/// and turns completions into its own), else [`Runtime::progress`] under the runtime's lock;
/// it yields when something happened and sleeps 50 us after 64 idle rounds. The first step
/// given is kept. The thread ends at process exit ([`stop_threads`]).
pub fn start_progress_thread(step: Option<fn() -> bool>) {
    if let Some(f) = step {
        let _ = STEP.set(f);
    }
    PROGRESS_THREAD.call_once(|| {
        if let Err(e) = std::thread::Builder::new().name("droce-progress".into()).spawn(progress_loop) {
            eprintln!("droce: no progress thread ({e}): progress comes from the application's calls only");
        }
    });
}

fn progress_loop() {
    let mut idle = 0u32;
    loop {
        IN_ROUND.store(true, Ordering::SeqCst);
        if EXITING.load(Ordering::SeqCst) {
            IN_ROUND.store(false, Ordering::SeqCst);
            return;
        }
        let busy = match (STEP.get(), GLOBAL.get()) {
            (Some(step), _) => step(),
            (None, Some(Ok((m, _)))) => m.lock().unwrap_or_else(PoisonError::into_inner).progress(),
            (None, _) => false,
        };
        IN_ROUND.store(false, Ordering::SeqCst);
        if busy {
            idle = 0;
            // let application threads waiting for the lock in
            std::thread::yield_now();
        } else {
            idle = idle.saturating_add(1);
            if idle < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

/// At process exit (before the libraries' destructors): the progress thread checks
/// [`EXITING`] at the start of each round with [`IN_ROUND`] set, the ACK watchdog with the
/// runtime lock held; this handler sets it, then waits until no round is running and the lock
/// is free, so neither thread calls into DPDK again. Each wait is at most 50 ms (an
/// application thread may hold the lock while another exits). Then DPDK's interrupt thread is
/// parked for good: nothing of DPDK runs during the destructors.
pub(super) extern "C" fn stop_threads() {
    stop_threads_inner(true);
}

fn stop_threads_inner(freeze_interrupts: bool) {
    EXITING.store(true, Ordering::SeqCst);
    let t0 = Instant::now();
    while IN_ROUND.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_millis(50) {
        std::thread::yield_now();
    }
    if let Some(Ok((m, _))) = GLOBAL.get() {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(50) {
            match m.try_lock() {
                Ok(_) | Err(std::sync::TryLockError::Poisoned(_)) => break,
                Err(std::sync::TryLockError::WouldBlock) => std::thread::yield_now(),
            }
        }
    }
    if freeze_interrupts {
        crate::intr_gate::freeze();
    }
}
