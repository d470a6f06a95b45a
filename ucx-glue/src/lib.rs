//! UCX transport (droce_rc, droce_ud) for droce.
//!
//! Empty on purpose: the UCT component is issue 6 and needs the device-on-a-port work of
//! issue 4 first. No C shim is built, so no UCX process can load a half-made transport.
