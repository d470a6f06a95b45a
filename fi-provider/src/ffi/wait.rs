//! Wait sets (`fi_wait_open`, `fi_wait`): a CQ opened with `FI_WAIT_SET` joins the set named
//! in its attributes; `fi_wait` returns once one of the set's CQs has an entry (or an error
//! entry) to read, progressing the engine while it waits (manual progress: nothing else
//! moves the device), or `-FI_ETIMEDOUT`.

use super::sys::*;
use super::*;
use crate::engine::Id;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[repr(C)]
pub(crate) struct WaitObj {
    w: fid_wait,
    /// The CQs of the set (provider ids; ids are never reused, so a closed CQ's id just
    /// stops matching).
    cqs: Mutex<Vec<Id>>,
}
const _: () = assert!(std::mem::offset_of!(WaitObj, w) == 0);

static WAIT_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(wait_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

static WAIT_OPS: fi_ops_wait = fi_ops_wait { size: std::mem::size_of::<fi_ops_wait>(), wait: Some(wait) };

pub(crate) unsafe extern "C" fn wait_open(_f: *mut fid_fabric, attr: *mut fi_wait_attr, out: *mut *mut fid_wait) -> c_int {
    guard(EOTHER_I, || {
        if out.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // FI_WAIT_UNSPEC / FI_WAIT_YIELD: droce waits by progressing (there is no kernel
        // object behind a DPDK device); FI_WAIT_FD and the rest are not offered for sets.
        match opt(attr).map(|a| a.wait_obj).unwrap_or(FI_WAIT_UNSPEC) {
            FI_WAIT_UNSPEC | FI_WAIT_YIELD => {}
            _ => return -(FI_ENOSYS as c_int),
        }
        let b = Box::new(WaitObj { w: fid_wait { fid: fid { fclass: FI_CLASS_WAIT as usize, context: ptr::null_mut(), ops: ops_ptr(&WAIT_FI_OPS) }, ops: ops_ptr(&WAIT_OPS) }, cqs: Mutex::new(Vec::new()) });
        // SAFETY: out checked.
        unsafe { *out = Box::into_raw(b) as *mut fid_wait };
        0
    })
}

/// Adds CQ `id` to the wait set `set` (cq_open with FI_WAIT_SET); false if `set` is not one
/// of ours.
pub(crate) fn join(set: *mut fid_wait, id: Id) -> bool {
    let Some(f) = opt(set as *const fid) else { return false };
    if f.fclass as u32 != FI_CLASS_WAIT {
        return false;
    }
    // SAFETY: an FI_CLASS_WAIT fid of ours heads a live WaitObj (the application keeps the set
    // open while CQs use it).
    let w = unsafe { &*(set as *const WaitObj) };
    w.cqs.lock().unwrap_or_else(|p| p.into_inner()).push(id);
    true
}

unsafe extern "C" fn wait_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if !f.is_null() {
            // SAFETY: made by Box::into_raw in wait_open; freed once here.
            drop(unsafe { Box::from_raw(f as *mut WaitObj) });
        }
        0
    })
}

unsafe extern "C" fn wait(set: *mut fid_wait, timeout: c_int) -> c_int {
    guard(EOTHER_I, || {
        let Some(w) = opt(set as *const WaitObj) else { return -(FI_EINVAL as c_int) };
        let ids = w.cqs.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let deadline = u64::try_from(timeout).ok().map(|ms| Instant::now() + Duration::from_millis(ms));
        loop {
            {
                let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
                let ready = |e: &engine::Engine| ids.iter().any(|i| e.cqs.get(i).is_some_and(|c| !c.q.is_empty() || c.q.has_error()));
                if ready(&e) {
                    return 0;
                }
                e.progress_datapath();
                if ready(&e) {
                    return 0;
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return -(FI_ETIMEDOUT as c_int);
            }
            std::thread::yield_now();
        }
    })
}
