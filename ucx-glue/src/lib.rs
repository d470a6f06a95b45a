//! UCX 1.13 transport for droce: `libuct_droce.so`, a UCT component `droce` with one memory
//! domain and two transports on device `droce0`:
//!
//! * `droce_rc` — RC QPs, CONNECT_TO_EP (ep address = QPN + PSN, exchanged by UCP wire-up or
//!   ucx_perftest), AM short/bcopy/zcopy (AM id in the immediate data), PUT short/bcopy/zcopy
//!   (RDMA WRITE), GET bcopy/zcopy (RDMA READ), atomics: 64-bit fetch-add and compare-swap are
//!   native IB atomics; 64-bit swap and every 32-bit op run as a compare-swap loop on the
//!   enclosing aligned 8-byte word (so a 32-bit target needs its whole 8-byte word registered).
//! * `droce_ud` — one UD QP per interface, CONNECT_TO_IFACE (iface address = UD QPN, device
//!   address = GID), AM short/bcopy/zcopy up to the path MTU. UCP uses it for wire-up and may
//!   take it as its AM lane: it is reliable and in order (a header, acknowledgements and
//!   go-back-N retransmission: `droce_transport::ud::reliable`), and an endpoint whose peer
//!   stops acknowledging fails after about 4 s, as an RC one does.
//!
//! Both share the process-wide droce runtime ([`droce_dpdk::runtime::global`]): one DPDK port
//! from `DROCE_CONF` or the zero-config memif mesh, reached only through the runtime's verbs.
//! Progress is manual: the interface progress callback (registered with the UCT worker by
//! `uct_iface_progress_enable`) locks the runtime, runs one datapath round and polls the
//! interface's completion queue, then runs UCX callbacks with no lock held.
//!
//! Layout: `shim/droce_uct.c` and `shim/droce_uct_ep.c` (C; UCX's class and registration
//! macros, struct embedding, the load-time layout check, the ops tables) forward every
//! operation through the plain ABI of `shim/droce_abi.h` to `ffi` (the only module with
//! `unsafe`), which converts pointers and calls the safe [`iface`] and [`md`] code. Panics
//! are caught at every `extern "C"` entry and become `UCS_ERR_IO_ERROR`.
//!
//! Public API (Rust, for tests): [`status`] (UCS status values), [`iface::IfaceCfg`],
//! [`md::pack_rkey`] / [`md::unpack_rkey`]; the rest is reached through UCX.
#![deny(unsafe_code)]

/// DROCE_UCX_TRACE set: one stderr line per operation and event (debugging aid).
pub(crate) fn trace_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("DROCE_UCX_TRACE").is_some())
}

#[macro_export]
#[doc(hidden)]
macro_rules! trace {
    ($($a:tt)*) => { if $crate::trace_on() { eprintln!("droce-ucx[{}]: {}", std::process::id(), format!($($a)*)); } };
}


#[allow(unsafe_code)]
mod ffi;
pub mod iface;
pub mod md;
pub mod status;
