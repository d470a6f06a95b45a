//! Sans-IO RoCEv2 transport.
#![forbid(unsafe_code)]
pub mod cm;
