//! Sans-IO RoCEv2 transport.
#![forbid(unsafe_code)]

pub mod types;
pub use types::*;
pub mod wire;
pub mod pcap;
pub mod cm;

pub mod counters;
pub mod device;
pub mod memory;
pub mod qp;
pub mod rc;
pub(crate) mod rng;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub(crate) mod slab;
pub mod status;
pub mod time;
pub mod timer;
pub mod ud;
pub mod verbs;

pub use device::{AsyncEvent, Device, DeviceConfig};
pub use memory::{Memory, MemoryError, VecMemory};
pub use time::{Duration, Instant};
