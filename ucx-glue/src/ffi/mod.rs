//! The `extern "C"` entries the shim calls (`shim/droce_abi.h`) and the calls back into it.
//! The only module with `unsafe`: it turns C pointers into Rust values, calls [`crate::iface`]
//! and [`crate::md`], and runs the UCX callbacks those return with no lock held. Every entry
//! catches panics (a panic becomes `UCS_ERR_IO_ERROR` and an error log line).
//!
//! This file holds what every entry shares (the C types, the calls into the shim, the panic
//! guard); the entries sit by UCT object: `mem` (memory domain), `iface`, `endpoint`, `ops`.

use crate::iface::{AtomicKind, Event, Iface, IfaceCfg, Info, Kind, Layout, Seg, DEV_ADDR_LEN, RC_EP_ADDR_LEN, UD_IFACE_ADDR_LEN};
use crate::md::{self, MemReg};
use crate::status::*;
use droce_dpdk::runtime;
use droce_transport::verbs::AccessFlags;
use droce_transport::{Lkey, Rkey};
use std::alloc::{alloc_zeroed, dealloc, Layout as AllocLayout};
use std::ffi::{c_char, c_int, c_long, c_uint, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::PoisonError;

mod endpoint;
mod iface;
mod mem;
mod ops;

use endpoint::ep_id;
use iface::iface;
use mem::host_or_log;

#[repr(C)]
pub struct DroceIfaceCfg {
    pub seg_size: usize,
    pub tx_queue_len: c_uint,
    pub rx_queue_len: c_uint,
}

/// `droce_iface_info_t` of shim/droce_abi.h: the transport's figures as they are (`iface::Info`
/// is `repr(C)` with the same fields in the same order).
pub type DroceIfaceInfo = Info;

#[repr(C)]
pub struct DroceIov {
    pub buffer: *mut c_void,
    pub length: usize,
    pub memh: *mut c_void,
}

extern "C" {
    fn droce_c_invoke_am(iface_c: *mut c_void, id: u8, data: *mut c_void, length: c_uint) -> c_int;
    fn droce_c_complete(comp: *mut c_void, status: c_int);
    fn droce_c_pending_call(req: *mut c_void) -> c_int;
    fn droce_c_pending_purge_cb(cb: *mut c_void, req: *mut c_void, arg: *mut c_void);
    fn droce_c_pack(pack_cb: *mut c_void, dest: *mut c_void, arg: *mut c_void) -> usize;
    fn droce_c_unpack(unpack_cb: *mut c_void, arg: *mut c_void, data: *const c_void, length: usize);
    fn droce_c_ep_failed(iface_c: *mut c_void, ep_c: *mut c_void, status: c_int) -> c_int;
    fn droce_c_log(level: c_int, msg: *const c_char);
}

fn log(level: i32, msg: &str) {
    if let Ok(c) = CString::new(msg) {
        // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
        unsafe { droce_c_log(level, c.as_ptr()) };
    }
}

/// An endpoint failed and nobody handles it: `uct_iface_handle_ep_err` returned an error, i.e.
/// the application installed no UCT error handler (ucx_perftest's UCT tests) or UCP runs the
/// endpoint with `UCP_ERR_HANDLING_MODE_NONE`. UCX's own RDMA transports treat this as fatal
/// (rc_verbs logs at FATAL level, which aborts the process); UCX's tcp transport ignores it and
/// the application waits forever for traffic that cannot come (ucx_perftest -t am_lat over tcp
/// with its peer killed ran until an outside timeout). droce ends the process the way the RDMA
/// transports do, without the core dump: the reason on stderr, stdio flushed, `_exit(1)`
/// (no exit handlers: they would run UCX's destructors under a worker in the middle of
/// progress).
fn unhandled_failure(kind: Kind, why: &str, status: c_int) -> ! {
    log(0, &format!("droce: {kind:?} endpoint failed ({why}, status {status}) and the application handles no endpoint errors (UCT: no error handler; UCP: error handling mode none): exiting with status 1"));
    // SAFETY: fflush(NULL) flushes every open output stream; _exit ends the process at once.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(1)
    }
}

/// Run `f`, turning a panic into `on_panic` and an error log line.
fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            let what = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default();
            log(0, &format!("droce: internal error (panic caught at the UCX boundary): {what}"));
            on_panic
        }
    }
}

fn st(r: Result<(), Status>) -> c_int {
    match r {
        Ok(()) => UCS_OK,
        Err(e) => e,
    }
}
