//! Verbs objects: protection domains, memory regions, completion queues, shared receive
//! queues, and the work requests and completions that travel through them.

pub mod cq;
pub mod mr;
pub mod pd;
pub mod srq;
pub mod wr;

pub use cq::{CompletionQueue, CqHandle};
pub use mr::{AccessFlags, MemoryRegion, MrHandle};
pub use pd::PdHandle;
pub use srq::{SharedReceiveQueue, SrqHandle};
pub use wr::*;
