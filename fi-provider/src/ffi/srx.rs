//! Shared receive and transmit contexts (fi_srx_context, fi_stx_context).

use super::sys::*;
use super::*;
use crate::engine::Id;
use crate::info as pinfo;

/// A shared receive context is an EpObj of class FI_CLASS_SRX_CTX whose id names an engine
/// `Srx`: only the receive calls work on it.
pub(super) static SRX_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(srx_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

pub(super) static SRX_MSG_OPS: fi_ops_msg = fi_ops_msg {
    size: std::mem::size_of::<fi_ops_msg>(),
    recv: Some(recv),
    recvv: Some(recvv),
    recvmsg: Some(recvmsg),
    send: nosys!(fn(*mut fid_ep, *const c_void, usize, *mut c_void, fi_addr_t, *mut c_void) -> isize),
    sendv: nosys!(fn(*mut fid_ep, *const iovec, *mut *mut c_void, usize, fi_addr_t, *mut c_void) -> isize),
    sendmsg: nosys!(fn(*mut fid_ep, *const fi_msg, u64) -> isize),
    inject: nosys!(fn(*mut fid_ep, *const c_void, usize, fi_addr_t) -> isize),
    senddata: nosys!(fn(*mut fid_ep, *const c_void, usize, *mut c_void, u64, fi_addr_t, *mut c_void) -> isize),
    injectdata: nosys!(fn(*mut fid_ep, *const c_void, usize, u64, fi_addr_t) -> isize),
};

pub(super) static NOSYS_EP_OPS: fi_ops_ep = fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: nosys!(fn(fid_t, *mut c_void) -> isize),
    getopt: nosys!(fn(fid_t, c_int, c_int, *mut c_void, *mut usize) -> c_int),
    setopt: nosys!(fn(fid_t, c_int, c_int, *const c_void, usize) -> c_int),
    tx_ctx: nosys!(fn(*mut fid_ep, c_int, *mut fi_tx_attr, *mut *mut fid_ep, *mut c_void) -> c_int),
    rx_ctx: nosys!(fn(*mut fid_ep, c_int, *mut fi_rx_attr, *mut *mut fid_ep, *mut c_void) -> c_int),
    rx_size_left: nosys!(fn(*mut fid_ep) -> isize),
    tx_size_left: nosys!(fn(*mut fid_ep) -> isize),
};

pub(crate) unsafe extern "C" fn srx_open(_d: *mut fid_domain, attr: *mut fi_rx_attr, out: *mut *mut fid_ep, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if out.is_null() {
            return -(FI_EINVAL as c_int);
        }
        if opt(attr).is_some_and(|a| a.op_flags & FI_MULTI_RECV as u64 != 0) {
            // an SRQ takes one message per receive: no multi-receive buffers
            return -(FI_EOPNOTSUPP as c_int);
        }
        let size = opt(attr).map(|a| a.size).filter(|&n| n > 0).unwrap_or(pinfo::RX_SIZE as usize);
        let mut e = match engine_or(-(FI_ENODEV as c_int)) {
            Ok(e) => e,
            Err(x) => return x,
        };
        let raw = Box::into_raw(Box::new(EpObj {
            e: fid_ep {
                fid: fid { fclass: FI_CLASS_SRX_CTX as usize, context, ops: ops_ptr(&SRX_FI_OPS) },
                ops: ops_ptr(&NOSYS_EP_OPS),
                cm: ptr::null_mut(),
                msg: ops_ptr(&SRX_MSG_OPS),
                rma: ptr::null_mut(),
                tagged: ptr::null_mut(),
                atomic: ptr::null_mut(),
                collective: ptr::null_mut(),
            },
            id: 0,
        }));
        match e.open_srx(raw as usize, context as usize, size) {
            Ok(id) => {
                // SAFETY: raw is the fresh EpObj; out checked.
                unsafe {
                    (*raw).id = id;
                    *out = raw as *mut fid_ep;
                }
                0
            }
            Err(x) => {
                // SAFETY: raw came from Box::into_raw above and was not handed out.
                drop(unsafe { Box::from_raw(raw) });
                -(x as c_int)
            }
        }
    })
}

pub(super) unsafe extern "C" fn srx_close(f: *mut fid) -> c_int {
    // SAFETY: f is the fid of an srx EpObj from srx_open, closed once by the application.
    unsafe { close_boxed(f, |e, b: &EpObj| { e.close_srx(b.id); }) }
}

/// A shared transmit context: an object endpoints can bind (see ep_bind), no state.
#[repr(C)]
pub(crate) struct StxObj {
    pub(crate) s: fid_stx,
    pub(crate) id: Id,
}
const _: () = assert!(std::mem::offset_of!(StxObj, s) == 0);

pub(super) static STX_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(stx_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

pub(crate) unsafe extern "C" fn stx_open(_d: *mut fid_domain, _attr: *mut fi_tx_attr, out: *mut *mut fid_stx, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if out.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let id = match engine_or(-(FI_ENODEV as c_int)) {
            Ok(mut e) => e.fresh_id(),
            Err(x) => return x,
        };
        let raw = Box::into_raw(Box::new(StxObj { s: fid_stx { fid: fid { fclass: FI_CLASS_STX_CTX as usize, context, ops: ops_ptr(&STX_FI_OPS) }, ops: ops_ptr(&NOSYS_EP_OPS) }, id }));
        // SAFETY: out checked.
        unsafe { *out = raw as *mut fid_stx };
        0
    })
}

pub(super) unsafe extern "C" fn stx_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if !f.is_null() {
            // SAFETY: f is the fid of an StxObj from stx_open; freed once here.
            drop(unsafe { Box::from_raw(f as *mut StxObj) });
        }
        0
    })
}
