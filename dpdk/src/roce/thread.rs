//! Auto progress: an engine thread that owns a [`RoceDevice`] and talks to one caller thread
//! through two SPSC rings (`ringbuf`, DESIGN.md decision 3): commands in, events out
//! (command results, work completions of the CQs it watches, async events). The thread runs
//! the same `RoceDevice::poll` as manual progress.
//!
//! ```text
//! let eng = EngineThread::spawn(dev, vec![cq])?;      // dev set up in manual mode first, or
//! let pd = eng.call(Command::AllocPd, timeout)?;       // everything through commands
//! let mr = unsafe { eng.reg_mr(pd, ptr, len, access, timeout) }?;
//! eng.submit(Command::PostSend { qp, wr })?;           // returns a token; result arrives as
//! eng.poll_event() -> Option<Event>                    //   Event::Done { token, result }
//!                                                      // Event::Wc { cq, wc }, Event::Async(..)
//! eng.wait_wc(cq, timeout) -> Option<WorkCompletion>   // convenience
//! let dev = eng.stop();                                // Option<RoceDevice> comes back (stats, reuse)
//! ```
//! Completions are pushed only while the event ring has room; the rest wait in their CQ.

use super::{RoceDevice, RoceStats};
use droce_transport::device::{CreateQpError, ModifyQpError, PostRecvError, PostSendError, QueryQpError};
use droce_transport::qp::{QpAttr, QpAttrMask, QpHandle, QpInfo, QpInitAttr};
use droce_transport::verbs::cq::CreateCqError;
use droce_transport::verbs::mr::{DeregMrError, RegMrError};
use droce_transport::verbs::{AccessFlags, CqHandle, MemoryRegion, PdHandle, RecvWr, SendWr, WorkCompletion};
use droce_transport::{AsyncEvent, Lkey};
use ringbuf::traits::{Consumer, Observer, Producer, Split};
use ringbuf::{HeapCons, HeapProd, HeapRb};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A verb for the engine thread (memory registration is [`EngineThread::reg_mr`], unsafe).
#[derive(Debug, Clone)]
pub enum Command {
    AllocPd,
    DeregMr {
        lkey: Lkey,
    },
    /// The new CQ is also watched: its completions come back as `Event::Wc`.
    CreateCq {
        depth: usize,
    },
    CreateQp {
        init: QpInitAttr,
    },
    ModifyQp {
        qp: QpHandle,
        attr: Box<QpAttr>,
        mask: QpAttrMask,
    },
    QueryQp {
        qp: QpHandle,
    },
    PostSend {
        qp: QpHandle,
        wr: SendWr,
    },
    PostRecv {
        qp: QpHandle,
        wr: RecvWr,
    },
    Stats,
}

/// Result of a command.
#[derive(Debug, Clone)]
pub enum Reply {
    Done,
    Pd(PdHandle),
    Mr(MemoryRegion),
    Cq(CqHandle),
    Qp(QpHandle),
    QpInfo(Box<QpInfo>),
    Stats(Box<RoceStats>),
}

/// A verb's error, as the transport reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerbError {
    RegMr(RegMrError),
    DeregMr(DeregMrError),
    CreateCq(CreateCqError),
    CreateQp(CreateQpError),
    ModifyQp(ModifyQpError),
    QueryQp(QueryQpError),
    PostSend(PostSendError),
    PostRecv(PostRecvError),
    /// `call` gave up waiting (the engine thread stalled or died).
    Timeout,
    /// The command ring is full.
    RingFull,
    /// The engine thread is gone.
    EngineGone,
}

/// What the engine thread reports.
#[derive(Debug, Clone)]
pub enum Event {
    Done { token: u64, result: Result<Reply, VerbError> },
    Wc { cq: CqHandle, wc: WorkCompletion },
    Async(AsyncEvent),
}

enum Msg {
    Cmd(u64, Command),
    RegMr { token: u64, pd: PdHandle, addr: usize, len: usize, access: AccessFlags },
    Stop,
}

/// Ring sizes.
const CMD_RING: usize = 4096;
const EVENT_RING: usize = 16384;

/// Handle of a running engine thread (one caller thread uses it: the rings are SPSC).
pub struct EngineThread {
    cmd: HeapProd<Msg>,
    events: HeapCons<Event>,
    stash: VecDeque<Event>,
    next_token: u64,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<RoceDevice>>,
}

impl std::fmt::Debug for EngineThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineThread").field("next_token", &self.next_token).finish()
    }
}

fn execute(dev: &mut RoceDevice, cqs: &mut Vec<CqHandle>, cmd: Command) -> Result<Reply, VerbError> {
    let d = dev.device_mut();
    Ok(match cmd {
        Command::AllocPd => Reply::Pd(d.alloc_pd()),
        Command::DeregMr { lkey } => {
            dev.dereg_mr(lkey).map_err(VerbError::DeregMr)?;
            Reply::Done
        }
        Command::CreateCq { depth } => {
            let cq = d.create_cq(depth).map_err(VerbError::CreateCq)?;
            cqs.push(cq);
            Reply::Cq(cq)
        }
        Command::CreateQp { init } => Reply::Qp(d.create_qp(init).map_err(VerbError::CreateQp)?),
        Command::ModifyQp { qp, attr, mask } => {
            d.modify_qp(qp, &attr, mask).map_err(VerbError::ModifyQp)?;
            Reply::Done
        }
        Command::QueryQp { qp } => Reply::QpInfo(Box::new(d.query_qp(qp).map_err(VerbError::QueryQp)?)),
        Command::PostSend { qp, wr } => {
            d.post_send(qp, wr).map_err(VerbError::PostSend)?;
            Reply::Done
        }
        Command::PostRecv { qp, wr } => {
            d.post_recv(qp, wr).map_err(VerbError::PostRecv)?;
            Reply::Done
        }
        Command::Stats => Reply::Stats(Box::new(dev.stats())),
    })
}

fn engine_loop(
    mut dev: RoceDevice,
    mut cqs: Vec<CqHandle>,
    mut cmd: HeapCons<Msg>,
    mut ev: HeapProd<Event>,
    stop: Arc<AtomicBool>,
) -> RoceDevice {
    let registered = crate::register_thread().is_ok();
    let mut outbox: VecDeque<Event> = VecDeque::new();
    let mut idle_rounds = 0u32;
    'outer: while !stop.load(Ordering::Relaxed) {
        let mut busy = false;
        for _ in 0..64 {
            let Some(m) = cmd.try_pop() else { break };
            busy = true;
            let ev = match m {
                Msg::Stop => break 'outer,
                Msg::Cmd(token, c) => Event::Done { token, result: execute(&mut dev, &mut cqs, c) },
                Msg::RegMr { token, pd, addr, len, access } => {
                    // SAFETY: forwarded from `EngineThread::reg_mr`'s contract.
                    #[allow(unsafe_code)]
                    let r = unsafe { dev.reg_mr(pd, addr as *mut u8, len, access) };
                    Event::Done { token, result: r.map(Reply::Mr).map_err(VerbError::RegMr) }
                }
            };
            outbox.push_back(ev);
        }
        let w = dev.poll();
        busy |= !w.is_idle();
        while let Some(e) = dev.device_mut().poll_event() {
            outbox.push_back(Event::Async(e));
        }
        while let Some(e) = outbox.pop_front() {
            if let Err(e) = ev.try_push(e) {
                outbox.push_front(e);
                break;
            }
        }
        if outbox.is_empty() {
            for &cq in &cqs {
                while ev.vacant_len() > 0 {
                    match dev.device_mut().poll_cq_one(cq) {
                        Ok(Some(wc)) => {
                            busy = true;
                            let _ = ev.try_push(Event::Wc { cq, wc });
                        }
                        _ => break,
                    }
                }
            }
        }
        if busy {
            idle_rounds = 0;
        } else {
            idle_rounds = idle_rounds.saturating_add(1);
            // Few cores: after a while of nothing, let the other threads run.
            if idle_rounds > 256 {
                std::thread::yield_now();
            }
        }
    }
    dev.flush_pcap();
    if registered {
        crate::unregister_thread();
    }
    dev
}

impl EngineThread {
    /// Move `dev` into a new engine thread. `cqs` are watched for completions (CQs created
    /// later with `Command::CreateCq` are added).
    pub fn spawn(dev: RoceDevice, cqs: Vec<CqHandle>) -> std::io::Result<EngineThread> {
        let (cmd_tx, cmd_rx) = HeapRb::<Msg>::new(CMD_RING).split();
        let (ev_tx, ev_rx) = HeapRb::<Event>::new(EVENT_RING).split();
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let handle = std::thread::Builder::new().name("droce-engine".into()).spawn(move || engine_loop(dev, cqs, cmd_rx, ev_tx, s2))?;
        Ok(EngineThread { cmd: cmd_tx, events: ev_rx, stash: VecDeque::new(), next_token: 1, stop, handle: Some(handle) })
    }

    fn engine_gone(&self) -> bool {
        match &self.handle {
            Some(h) => h.is_finished(),
            None => true,
        }
    }

    fn push(&mut self, m: Msg) -> Result<(), VerbError> {
        if self.engine_gone() {
            return Err(VerbError::EngineGone);
        }
        self.cmd.try_push(m).map_err(|_| VerbError::RingFull)
    }

    /// Queue a command; its result comes back as `Event::Done { token, .. }`.
    pub fn submit(&mut self, c: Command) -> Result<u64, VerbError> {
        let token = self.next_token;
        self.push(Msg::Cmd(token, c))?;
        self.next_token += 1;
        Ok(token)
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.stash.pop_front().or_else(|| self.events.try_pop())
    }

    fn wait_token(&mut self, token: u64, timeout: Duration) -> Result<Reply, VerbError> {
        let t0 = Instant::now();
        loop {
            while let Some(e) = self.events.try_pop() {
                match e {
                    Event::Done { token: t, result } if t == token => return result,
                    other => self.stash.push_back(other),
                }
            }
            if t0.elapsed() > timeout {
                return Err(VerbError::Timeout);
            }
            if self.engine_gone() {
                return Err(VerbError::EngineGone);
            }
            std::hint::spin_loop();
        }
    }

    /// Submit a command and wait for its result (other events are kept for `poll_event`).
    pub fn call(&mut self, c: Command, timeout: Duration) -> Result<Reply, VerbError> {
        let token = self.submit(c)?;
        self.wait_token(token, timeout)
    }

    /// Register process memory through the engine thread.
    ///
    /// # Safety
    /// As [`RoceDevice::reg_mr`]: the range stays valid until deregistered or the device is
    /// dropped, and is not accessed while work requests or peers may use it.
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr(
        &mut self,
        pd: PdHandle,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
        timeout: Duration,
    ) -> Result<MemoryRegion, VerbError> {
        let token = self.next_token;
        self.push(Msg::RegMr { token, pd, addr: addr as usize, len, access })?;
        self.next_token += 1;
        match self.wait_token(token, timeout)? {
            Reply::Mr(m) => Ok(m),
            _ => Err(VerbError::EngineGone),
        }
    }

    /// Wait for the next completion of `cq` (other events are kept for `poll_event`).
    pub fn wait_wc(&mut self, cq: CqHandle, timeout: Duration) -> Option<WorkCompletion> {
        let t0 = Instant::now();
        if let Some(i) = self.stash.iter().position(|e| matches!(e, Event::Wc { cq: c, .. } if *c == cq)) {
            if let Some(Event::Wc { wc, .. }) = self.stash.remove(i) {
                return Some(wc);
            }
        }
        while t0.elapsed() < timeout {
            match self.events.try_pop() {
                Some(Event::Wc { cq: c, wc }) if c == cq => return Some(wc),
                Some(other) => self.stash.push_back(other),
                None => std::hint::spin_loop(),
            }
        }
        None
    }

    /// Stop the thread and take the device back (`None` if the engine thread panicked).
    pub fn stop(mut self) -> Option<RoceDevice> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Option<RoceDevice> {
        let _ = self.cmd.try_push(Msg::Stop);
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().and_then(|h| h.join().ok())
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        if self.handle.is_some() {
            let _ = self.stop_inner();
        }
    }
}
