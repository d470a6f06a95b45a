//! Completion queues (IBA 11.4.2). Fixed depth; a completion that does not fit is a CQ
//! overrun (11.6.2, C11-...): the CQ goes to error, an asynchronous event is raised and
//! the QPs that use it are moved to the error state by the device.

use super::wr::WorkCompletion;
use std::collections::VecDeque;

/// Handle of a completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqHandle(pub u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateCqError {
    InvalidDepth,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollCqError {
    InvalidCq,
    /// The CQ overflowed earlier; its contents are unreliable (IBA 11.6.2).
    Overrun,
}

#[derive(Debug, Clone)]
pub struct CompletionQueue {
    depth: usize,
    entries: VecDeque<WorkCompletion>,
    overrun: bool,
    /// Set by a solicited/any completion while armed (ibv_req_notify_cq).
    notify: Option<bool>,
    pub(crate) event_pending: bool,
    pub(crate) users: u32,
}

/// The CQ is full: the completion was lost and the CQ is now in error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqOverrun;

impl CompletionQueue {
    pub fn new(depth: usize) -> Result<Self, CreateCqError> {
        if depth == 0 || depth > 1 << 22 {
            return Err(CreateCqError::InvalidDepth);
        }
        Ok(CompletionQueue { depth, entries: VecDeque::new(), overrun: false, notify: None, event_pending: false, users: 0 })
    }
    pub fn depth(&self) -> usize {
        self.depth
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn is_overrun(&self) -> bool {
        self.overrun
    }
    pub(crate) fn push(&mut self, wc: WorkCompletion, solicited: bool) -> Result<(), CqOverrun> {
        if self.overrun || self.entries.len() >= self.depth {
            self.overrun = true;
            return Err(CqOverrun);
        }
        if let Some(solicited_only) = self.notify {
            if !solicited_only || solicited || wc.status != crate::status::WcStatus::Success {
                self.notify = None;
                self.event_pending = true;
            }
        }
        self.entries.push_back(wc);
        Ok(())
    }
    pub(crate) fn pop(&mut self) -> Option<WorkCompletion> {
        self.entries.pop_front()
    }
    /// Arm a completion event: for the next completion, or the next solicited one.
    pub(crate) fn req_notify(&mut self, solicited_only: bool) {
        self.notify = Some(solicited_only);
    }
}
