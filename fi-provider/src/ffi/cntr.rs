//! Counters: open, close, read, add, set, wait.

use super::sys::*;
use super::*;
use crate::engine::{self, Id};


#[repr(C)]
pub(crate) struct CntrObj {
    pub(crate) c: fid_cntr,
    pub(crate) id: Id,
}
const _: () = assert!(std::mem::offset_of!(CntrObj, c) == 0);

pub(super) static CNTR_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(cntr_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

pub(super) static CNTR_OPS: fi_ops_cntr = fi_ops_cntr {
    size: std::mem::size_of::<fi_ops_cntr>(),
    read: Some(cntr_read),
    readerr: Some(cntr_readerr),
    add: Some(cntr_add),
    set: Some(cntr_set),
    wait: Some(cntr_wait),
    adderr: Some(cntr_adderr),
    seterr: Some(cntr_seterr),
};

pub(super) unsafe extern "C" fn cntr_open(_d: *mut fid_domain, attr: *mut fi_cntr_attr, cntr: *mut *mut fid_cntr, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if cntr.is_null() {
            return -(FI_EINVAL as c_int);
        }
        if let Some(a) = opt(attr) {
            if a.events != FI_CNTR_EVENTS_COMP || !matches!(a.wait_obj, FI_WAIT_NONE | FI_WAIT_UNSPEC) {
                return -(FI_ENOSYS as c_int);
            }
        }
        let mut e = match open_engine() {
            Ok(e) => e,
            Err(x) => return -(x as c_int),
        };
        let id = e.fresh_id();
        e.cntrs.insert(id, engine::Cntr::default());
        let b = Box::new(CntrObj { c: fid_cntr { fid: fid { fclass: FI_CLASS_CNTR as usize, context, ops: ops_ptr(&CNTR_FI_OPS) }, ops: ops_ptr(&CNTR_OPS) }, id });
        // SAFETY: out checked.
        unsafe { *cntr = Box::into_raw(b) as *mut fid_cntr };
        0
    })
}

pub(super) unsafe extern "C" fn cntr_close(f: *mut fid) -> c_int {
    // SAFETY: f is the fid of a CntrObj from cntr_open, closed once by the application.
    unsafe { close_boxed(f, |e, b: &CntrObj| { e.cntrs.remove(&b.id); }) }
}

pub(super) fn with_cntr<R>(c: *mut fid_cntr, dflt: R, progress: bool, f: impl FnOnce(&mut engine::Cntr) -> R) -> R {
    let Some(o) = opt(c as *const CntrObj) else { return dflt };
    let Some(mut e) = engine::engine_if_open() else { return dflt };
    if progress {
        e.progress_datapath();
    }
    match e.cntrs.get_mut(&o.id) {
        Some(c) => f(c),
        None => dflt,
    }
}

pub(super) unsafe extern "C" fn cntr_read(c: *mut fid_cntr) -> u64 {
    guard(0, || with_cntr(c, 0, true, |c| c.value))
}
pub(super) unsafe extern "C" fn cntr_readerr(c: *mut fid_cntr) -> u64 {
    guard(0, || with_cntr(c, 0, true, |c| c.err))
}
pub(super) unsafe extern "C" fn cntr_add(c: *mut fid_cntr, v: u64) -> c_int {
    guard(EOTHER_I, || with_cntr(c, -(FI_EINVAL as c_int), false, |c| {
        c.value = c.value.wrapping_add(v);
        0
    }))
}
pub(super) unsafe extern "C" fn cntr_set(c: *mut fid_cntr, v: u64) -> c_int {
    guard(EOTHER_I, || with_cntr(c, -(FI_EINVAL as c_int), false, |c| {
        c.value = v;
        0
    }))
}
pub(super) unsafe extern "C" fn cntr_adderr(c: *mut fid_cntr, v: u64) -> c_int {
    guard(EOTHER_I, || with_cntr(c, -(FI_EINVAL as c_int), false, |c| {
        c.err = c.err.wrapping_add(v);
        0
    }))
}
pub(super) unsafe extern "C" fn cntr_seterr(c: *mut fid_cntr, v: u64) -> c_int {
    guard(EOTHER_I, || with_cntr(c, -(FI_EINVAL as c_int), false, |c| {
        c.err = v;
        0
    }))
}
pub(super) unsafe extern "C" fn cntr_wait(c: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    guard(EOTHER_I, || {
        // The error count when the call began (fi_cntr(3): any change ends the wait), read
        // before the first progress step, which may be the one that brings the error.
        let mut errs = None;
        with_cntr(c, 0, false, |c| {
            errs = Some(c.err);
            0
        });
        let r = sread_loop(timeout, None, || {
            with_cntr(c, -(FI_EINVAL as isize), true, |c| {
                if c.value >= threshold {
                    0
                } else if Some(c.err) != errs {
                    -(FI_EAVAIL as isize)
                } else {
                    -(FI_EAGAIN as isize)
                }
            })
        });
        if r == -(FI_EAGAIN as isize) {
            -(FI_ETIMEDOUT as c_int)
        } else {
            r as c_int
        }
    })
}
