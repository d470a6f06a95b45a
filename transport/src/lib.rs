//! Sans-IO RoCEv2 transport.
#![forbid(unsafe_code)]

pub mod types;
pub use types::*;
pub mod wire;
pub mod pcap;
pub mod cm;
