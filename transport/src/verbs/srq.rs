//! Shared receive queues (IBA 10.2.9). The limit is armed by modify_srq; when the number
//! of posted WQEs drops below it, an SRQ limit reached event fires once and disarms it
//! (C11-... "SRQ Limit Reached").

use super::pd::PdHandle;
use super::wr::RecvWqe;
use std::collections::VecDeque;

/// Handle of a shared receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqHandle(pub u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateSrqError {
    InvalidPd,
    InvalidAttr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModifySrqError {
    InvalidSrq,
    /// The limit must not exceed the queue depth.
    InvalidLimit,
}

#[derive(Debug, Clone)]
pub struct SharedReceiveQueue {
    pub pd: PdHandle,
    pub max_wr: usize,
    pub max_sge: usize,
    pub(crate) queue: VecDeque<RecvWqe>,
    /// 0: not armed.
    pub(crate) limit: usize,
    pub(crate) users: u32,
}

impl SharedReceiveQueue {
    pub(crate) fn new(pd: PdHandle, max_wr: usize, max_sge: usize) -> Result<Self, CreateSrqError> {
        if max_wr == 0 || max_sge == 0 || max_wr > 1 << 20 {
            return Err(CreateSrqError::InvalidAttr);
        }
        Ok(SharedReceiveQueue { pd, max_wr, max_sge, queue: VecDeque::new(), limit: 0, users: 0 })
    }
    pub fn len(&self) -> usize {
        self.queue.len()
    }
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
    pub fn limit(&self) -> usize {
        self.limit
    }
    pub(crate) fn set_limit(&mut self, limit: usize) -> Result<(), ModifySrqError> {
        if limit > self.max_wr {
            return Err(ModifySrqError::InvalidLimit);
        }
        self.limit = limit;
        Ok(())
    }
    /// Take the oldest WQE. The bool is true when this take crossed the armed limit.
    pub(crate) fn take(&mut self) -> Option<(RecvWqe, bool)> {
        let w = self.queue.pop_front()?;
        let fired = self.limit != 0 && self.queue.len() < self.limit;
        if fired {
            self.limit = 0;
        }
        Some((w, fired))
    }
}
