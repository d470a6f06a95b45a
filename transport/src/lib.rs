//! Sans-IO RoCEv2 transport.
#![forbid(unsafe_code)]
