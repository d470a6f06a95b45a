//! Completion and event queues as libfabric sees them: entries, error entries that block the
//! normal ones until read (`-FI_EAVAIL`), and a wake-up descriptor for FD wait objects.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

/// FI_ADDR_NOTAVAIL
pub const ADDR_NOTAVAIL: u64 = u64::MAX;

/// One completion (the union of fi_cq_{context,msg,data,tagged}_entry fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CqEntry {
    pub op_context: usize,
    pub flags: u64,
    pub len: u64,
    pub buf: u64,
    pub data: u64,
    /// Source fi_addr (FI_ADDR_NOTAVAIL when unknown), for fi_cq_readfrom.
    pub src: u64,
}

/// A failed operation (fi_cq_err_entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqError {
    pub entry: CqEntry,
    /// Positive FI_E* value.
    pub err: u32,
    /// The work completion status (ibv_wc_status values).
    pub prov_errno: i32,
    /// Bytes that did not fit (FI_ETRUNC).
    pub olen: u64,
}

/// A readable/writable socket pair: the read end is the FD wait object; one byte in flight
/// means "something queued".
#[derive(Debug)]
pub struct Signal {
    rd: UnixStream,
    wr: UnixStream,
    armed: bool,
}

impl Signal {
    pub fn new() -> std::io::Result<Signal> {
        let (rd, wr) = UnixStream::pair()?;
        rd.set_nonblocking(true)?;
        wr.set_nonblocking(true)?;
        Ok(Signal { rd, wr, armed: false })
    }
    pub fn fd(&self) -> RawFd {
        self.rd.as_raw_fd()
    }
    pub fn raise(&mut self) {
        if !self.armed {
            self.armed = self.wr.write(&[1]).is_ok();
        }
    }
    pub fn clear(&mut self) {
        let mut b = [0u8; 64];
        while matches!(self.rd.read(&mut b), Ok(n) if n > 0) {}
        self.armed = false;
    }
}

/// Entries in order, error entries first (libfabric: a pending error makes reads fail with
/// FI_EAVAIL until fi_cq_readerr takes it).
#[derive(Debug)]
pub struct Queue<E, X> {
    ready: VecDeque<E>,
    errors: VecDeque<X>,
    pub signal: Option<Signal>,
}

impl<E, X> Default for Queue<E, X> {
    fn default() -> Self {
        Queue { ready: VecDeque::new(), errors: VecDeque::new(), signal: None }
    }
}

/// What a read found.
#[derive(Debug, PartialEq, Eq)]
pub enum Read2<E> {
    Entries(Vec<E>),
    ErrorPending,
    Empty,
}

impl<E, X> Queue<E, X> {
    pub fn push(&mut self, e: E) {
        self.ready.push_back(e);
        self.wake();
    }
    pub fn push_error(&mut self, x: X) {
        self.errors.push_back(x);
        self.wake();
    }
    fn wake(&mut self) {
        if let Some(s) = &mut self.signal {
            s.raise();
        }
    }
    /// Makes the wait descriptor readable with nothing queued (fi_cq_signal); the next
    /// [`Queue::settle`] on an empty queue (fi_trywait) takes it back.
    pub fn poke(&mut self) {
        self.wake();
    }
    /// With nothing queued, the wait descriptor is no longer readable.
    pub fn settle(&mut self) {
        if self.ready.is_empty() && self.errors.is_empty() {
            if let Some(s) = &mut self.signal {
                s.clear();
            }
        }
    }
    pub fn read(&mut self, max: usize) -> Read2<E> {
        if !self.errors.is_empty() {
            return Read2::ErrorPending;
        }
        if self.ready.is_empty() || max == 0 {
            return Read2::Empty;
        }
        let n = max.min(self.ready.len());
        let v = self.ready.drain(..n).collect();
        self.settle();
        Read2::Entries(v)
    }
    /// The first ready entry (errors are not looked at: check [`Queue::has_error`] first).
    pub fn pop(&mut self) -> Option<E> {
        let e = self.ready.pop_front();
        if e.is_some() {
            self.settle();
        }
        e
    }
    /// Looks at the next entry without taking it (EQ peek).
    pub fn peek(&self) -> Option<&E> {
        self.ready.front()
    }
    pub fn read_error(&mut self) -> Option<X> {
        let x = self.errors.pop_front();
        self.settle();
        x
    }
    pub fn peek_error(&self) -> Option<&X> {
        self.errors.front()
    }
    pub fn len(&self) -> usize {
        self.ready.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.errors.is_empty()
    }
    pub fn has_error(&self) -> bool {
        !self.errors.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_block_entries_until_read() {
        let mut q: Queue<u32, &str> = Queue::default();
        assert_eq!(q.read(4), Read2::Empty);
        q.push(1);
        q.push(2);
        q.push_error("boom");
        q.push(3);
        assert_eq!(q.read(4), Read2::ErrorPending);
        assert_eq!(q.read_error(), Some("boom"));
        assert_eq!(q.read(2), Read2::Entries(vec![1, 2]));
        assert_eq!(q.read(2), Read2::Entries(vec![3]));
        assert_eq!(q.read(2), Read2::Empty);
        assert!(q.is_empty());
    }

    #[test]
    fn signal_fd_readable_while_entries_wait() {
        let mut q: Queue<u32, ()> = Queue { signal: Some(Signal::new().unwrap()), ..Default::default() };
        let probe = q.signal.as_ref().unwrap().rd.try_clone().unwrap();
        let take = || (&probe).read(&mut [0u8; 8]).map(|n| n > 0).unwrap_or(false);
        assert!(!take());
        q.push(7);
        q.push(8);
        assert!(take(), "a byte is in flight");
        // the probe ate the byte: the queue re-arms on the next wake, and clears when drained
        q.signal.as_mut().unwrap().armed = false;
        q.push(9);
        assert_eq!(q.read(2), Read2::Entries(vec![7, 8]));
        assert_eq!(q.read(2), Read2::Entries(vec![9]));
        assert!(!take(), "drained queue leaves nothing to read");
    }
}
