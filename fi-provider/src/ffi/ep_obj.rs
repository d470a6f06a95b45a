//! What every endpoint file uses: the object behind an active endpoint's `fid_ep` and its
//! lookup, and the endpoint options (`fi_getopt`/`fi_setopt`, table `EP_OPS`) that active and
//! passive endpoints share. `ep`, `cm`, `msg`, `atomic` and `srx` use it; it uses nothing
//! of theirs, so none of those files needs another for these.

use super::sys::*;
use super::*;
use crate::engine::{self, Id};
use crate::info as pinfo;

#[repr(C)]
pub(crate) struct EpObj {
    pub(crate) e: fid_ep,
    pub(crate) id: Id,
}
const _: () = assert!(std::mem::offset_of!(EpObj, e) == 0);

pub(super) fn ep_obj(ep: *const fid_ep) -> Option<&'static EpObj> {
    opt(ep as *const EpObj)
}

/// The endpoint operations of an active endpoint and of a passive one alike (options only).
pub(super) static EP_OPS: fi_ops_ep = fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: nosys!(fn(fid_t, *mut c_void) -> isize),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: nosys!(fn(*mut fid_ep, c_int, *mut fi_tx_attr, *mut *mut fid_ep, *mut c_void) -> c_int),
    rx_ctx: nosys!(fn(*mut fid_ep, c_int, *mut fi_rx_attr, *mut *mut fid_ep, *mut c_void) -> c_int),
    rx_size_left: nosys!(fn(*mut fid_ep) -> isize),
    tx_size_left: nosys!(fn(*mut fid_ep) -> isize),
};

/// Writes a `size_t` option value for `fi_getopt`: `-FI_EINVAL` when either pointer is null,
/// `-FI_ETOOSMALL` when `*optlen` is less than a `size_t`; else the value, with `*optlen` set
/// to its size.
///
/// # Safety
/// Non-null `optval` and `optlen` must be valid for writes: `optlen` of a `usize`, `optval`
/// of `*optlen` bytes, aligned for a `usize` (a size_t option, as libfabric defines them).
unsafe fn put_size_opt(optval: *mut c_void, optlen: *mut usize, v: usize) -> c_int {
    if optval.is_null() || optlen.is_null() {
        return -(FI_EINVAL as c_int);
    }
    // SAFETY: both non-null and valid for writes (the caller's contract).
    unsafe {
        if *optlen < std::mem::size_of::<usize>() {
            return -(FI_ETOOSMALL as c_int);
        }
        *(optval as *mut usize) = v;
        *optlen = std::mem::size_of::<usize>();
    }
    0
}

pub(super) unsafe extern "C" fn getopt(f: fid_t, level: c_int, optname: c_int, optval: *mut c_void, optlen: *mut usize) -> c_int {
    guard(EOTHER_I, || {
        if level as u32 != FI_OPT_ENDPOINT {
            return -(FI_ENOPROTOOPT as c_int);
        }
        if optname as u32 == FI_OPT_CM_DATA_SIZE {
            // SAFETY: FI_OPT_CM_DATA_SIZE takes a size_t* and its length.
            return unsafe { put_size_opt(optval, optlen, pinfo::CM_DATA_SIZE as usize) };
        }
        if optname as u32 == FI_OPT_MIN_MULTI_RECV {
            let Some(o) = ep_obj(f as *const fid_ep).filter(|_| opt(f).is_some_and(|x| x.fclass as u32 == FI_CLASS_EP)) else { return -(FI_ENOPROTOOPT as c_int) };
            let Some(e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
            let Some(x) = e.eps.get(&o.id) else { return -(FI_EINVAL as c_int) };
            // SAFETY: FI_OPT_MIN_MULTI_RECV takes a size_t* and its length.
            return unsafe { put_size_opt(optval, optlen, x.min_multi_recv as usize) };
        }
        -(FI_ENOPROTOOPT as c_int)
    })
}

pub(super) unsafe extern "C" fn setopt(f: fid_t, level: c_int, optname: c_int, optval: *const c_void, optlen: usize) -> c_int {
    guard(EOTHER_I, || {
        if level as u32 != FI_OPT_ENDPOINT || optname as u32 != FI_OPT_MIN_MULTI_RECV {
            return -(FI_ENOPROTOOPT as c_int);
        }
        let Some(o) = ep_obj(f as *const fid_ep).filter(|_| opt(f).is_some_and(|x| x.fclass as u32 == FI_CLASS_EP)) else { return -(FI_ENOPROTOOPT as c_int) };
        if optval.is_null() || optlen < std::mem::size_of::<usize>() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: FI_OPT_MIN_MULTI_RECV takes a size_t* and its length (checked).
        let v = unsafe { *(optval as *const usize) } as u64;
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        match e.eps.get_mut(&o.id) {
            Some(x) => {
                x.min_multi_recv = v;
                0
            }
            None => -(FI_EINVAL as c_int),
        }
    })
}
