//! Completion queues: open, close, wait objects, reads in each format, error entries.

use super::sys::*;
use super::*;
use crate::engine::{self, Id};
use crate::queue::CqEntry;
use std::time::{Duration, Instant};

#[repr(C)]
pub(crate) struct CqObj {
    pub(crate) c: fid_cq,
    pub(crate) id: Id,
    pub(crate) format: fi_cq_format,
    /// fi_cq_signal was called: the next (or current) fi_cq_sread returns -FI_EAGAIN.
    pub(crate) wakeup: std::sync::atomic::AtomicBool,
}
const _: () = assert!(std::mem::offset_of!(CqObj, c) == 0);

pub(super) static CQ_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(cq_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: Some(cq_control),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

pub(super) static CQ_OPS: fi_ops_cq = fi_ops_cq {
    size: std::mem::size_of::<fi_ops_cq>(),
    read: Some(cq_read),
    readfrom: Some(cq_readfrom),
    readerr: Some(cq_readerr),
    sread: Some(cq_sread),
    sreadfrom: Some(cq_sreadfrom),
    signal: Some(cq_signal),
    strerror: Some(cq_strerror),
};

pub(super) unsafe extern "C" fn cq_open(_d: *mut fid_domain, attr: *mut fi_cq_attr, cq: *mut *mut fid_cq, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if cq.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let a = opt(attr);
        let format = a.map(|a| a.format).unwrap_or(FI_CQ_FORMAT_CONTEXT);
        if format > FI_CQ_FORMAT_TAGGED {
            return -(FI_ENOSYS as c_int);
        }
        let wait = a.map(|a| a.wait_obj).unwrap_or(FI_WAIT_NONE);
        let fd = match wait {
            // a wait set waits by progressing (fi_wait), like FI_WAIT_NONE's readers
            FI_WAIT_NONE | FI_WAIT_SET => false,
            FI_WAIT_UNSPEC | FI_WAIT_FD => true,
            _ => return -(FI_ENOSYS as c_int),
        };
        let set = a.map(|a| a.wait_set).unwrap_or(ptr::null_mut());
        if wait == FI_WAIT_SET && set.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let mut e = match open_engine() {
            Ok(e) => e,
            Err(x) => return -(x as c_int),
        };
        let id = match e.open_cq(fd) {
            Ok(id) => id,
            Err(x) => return -(x as c_int),
        };
        if wait == FI_WAIT_SET && !join(set, id) {
            let _ = e.close_cq(id);
            return -(FI_EINVAL as c_int);
        }
        drop(e);
        if fd {
            // Nothing else moves the device while an application sleeps on the descriptor.
            start_auto_progress();
        }
        let b = Box::new(CqObj { c: fid_cq { fid: fid { fclass: FI_CLASS_CQ as usize, context, ops: ops_ptr(&CQ_FI_OPS) }, ops: ops_ptr(&CQ_OPS) }, id, format: if format == FI_CQ_FORMAT_UNSPEC { FI_CQ_FORMAT_CONTEXT } else { format }, wakeup: Default::default() });
        // SAFETY: out checked.
        unsafe { *cq = Box::into_raw(b) as *mut fid_cq };
        0
    })
}

pub(super) fn cq_obj(cq: *mut fid_cq) -> Option<&'static CqObj> {
    opt(cq as *const CqObj)
}

pub(super) unsafe extern "C" fn cq_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if f.is_null() {
            return 0;
        }
        let o = f as *mut CqObj;
        // SAFETY: f is the fid of a CqObj.
        let id = unsafe { (*o).id };
        if let Some(mut e) = engine::engine_if_open() {
            if let Err(x) = e.close_cq(id) {
                return -(x as c_int);
            }
        }
        // SAFETY: made by Box::into_raw in cq_open; not used after close.
        drop(unsafe { Box::from_raw(o) });
        0
    })
}

pub(super) unsafe extern "C" fn cq_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if !matches!(command as u32, FI_GETWAIT | FI_GETWAITOBJ) || arg.is_null() {
            return -(FI_ENOSYS as c_int);
        }
        // SAFETY: f is the fid of a CqObj.
        let id = unsafe { (*(f as *const CqObj)).id };
        let Some(e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        match e.cqs.get(&id).and_then(|c| c.q.signal.as_ref()) {
            Some(_) if command as u32 == FI_GETWAITOBJ => {
                // SAFETY: FI_GETWAITOBJ takes an enum fi_wait_obj*.
                unsafe { *(arg as *mut fi_wait_obj) = FI_WAIT_FD };
                0
            }
            Some(s) => {
                // SAFETY: FI_GETWAIT on an FD wait object takes an int*.
                unsafe { *(arg as *mut c_int) = s.fd() };
                0
            }
            None => -(FI_ENODATA as c_int),
        }
    })
}

pub(super) fn write_entry(format: fi_cq_format, buf: *mut c_void, i: usize, c: &CqEntry) {
    // SAFETY: the caller's buffer holds `count` entries of the CQ's format and i < count.
    unsafe {
        match format {
            FI_CQ_FORMAT_MSG => {
                *(buf as *mut fi_cq_msg_entry).add(i) = fi_cq_msg_entry { op_context: c.op_context as *mut c_void, flags: c.flags, len: c.len as usize };
            }
            FI_CQ_FORMAT_DATA => {
                *(buf as *mut fi_cq_data_entry).add(i) = fi_cq_data_entry { op_context: c.op_context as *mut c_void, flags: c.flags, len: c.len as usize, buf: c.buf as *mut c_void, data: c.data };
            }
            FI_CQ_FORMAT_TAGGED => {
                *(buf as *mut fi_cq_tagged_entry).add(i) = fi_cq_tagged_entry { op_context: c.op_context as *mut c_void, flags: c.flags, len: c.len as usize, buf: c.buf as *mut c_void, data: c.data, tag: 0 };
            }
            _ => {
                *(buf as *mut fi_cq_entry).add(i) = fi_cq_entry { op_context: c.op_context as *mut c_void };
            }
        }
    }
}

pub(super) fn cq_read_common(cq: *mut fid_cq, buf: *mut c_void, count: usize, src: *mut fi_addr_t) -> isize {
    let Some(o) = cq_obj(cq) else { return -(FI_EINVAL as isize) };
    if buf.is_null() && count > 0 {
        return -(FI_EINVAL as isize);
    }
    let Some(mut e) = engine::engine_if_open() else { return -(FI_EAGAIN as isize) };
    let format = o.format;
    let r = e.cq_read_with(o.id, count, |i, c| {
        write_entry(format, buf, i, c);
        if !src.is_null() {
            // SAFETY: src_addr has room for `count` addresses.
            unsafe { *src.add(i) = c.src };
        }
    });
    if matches!(r, Err(FI_EAGAIN)) {
        if let Some(a) = e.idle_give_up() {
            drop(e);
            a.act();
            return -(FI_EAGAIN as isize);
        }
    }
    drop(e);
    match r {
        Ok(n) => n as isize,
        Err(x) => -(x as isize),
    }
}

pub(super) unsafe extern "C" fn cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    guard(EOTHER_S, || cq_read_common(cq, buf, count, ptr::null_mut()))
}

pub(super) unsafe extern "C" fn cq_readfrom(cq: *mut fid_cq, buf: *mut c_void, count: usize, src: *mut fi_addr_t) -> isize {
    guard(EOTHER_S, || cq_read_common(cq, buf, count, src))
}

/// Blocking read: progress and poll until an entry, the timeout (ms, < 0 = forever) or
/// `wakeup` (fi_cq_signal; taken back here), which end it with -FI_EAGAIN as libfabric's own
/// CQs do.
pub(super) fn sread_loop(timeout: c_int, wakeup: Option<&std::sync::atomic::AtomicBool>, mut f: impl FnMut() -> isize) -> isize {
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let mut spins = 0u32;
    loop {
        let r = f();
        if r != -(FI_EAGAIN as isize) {
            return r;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return -(FI_EAGAIN as isize);
        }
        if wakeup.is_some_and(|w| w.swap(false, std::sync::atomic::Ordering::AcqRel)) {
            return -(FI_EAGAIN as isize);
        }
        spins = spins.saturating_add(1);
        if spins > 10_000 {
            std::thread::sleep(Duration::from_micros(20));
        } else {
            std::thread::yield_now();
        }
    }
}

pub(super) unsafe extern "C" fn cq_sread(cq: *mut fid_cq, buf: *mut c_void, count: usize, _cond: *const c_void, timeout: c_int) -> isize {
    guard(EOTHER_S, || sread_loop(timeout, cq_obj(cq).map(|o| &o.wakeup), || cq_read_common(cq, buf, count, ptr::null_mut())))
}

pub(super) unsafe extern "C" fn cq_sreadfrom(cq: *mut fid_cq, buf: *mut c_void, count: usize, src: *mut fi_addr_t, _cond: *const c_void, timeout: c_int) -> isize {
    guard(EOTHER_S, || sread_loop(timeout, cq_obj(cq).map(|o| &o.wakeup), || cq_read_common(cq, buf, count, src)))
}

/// Wakes a thread blocked in fi_cq_sread/sreadfrom on this CQ (it returns -FI_EAGAIN); with
/// none blocked, the next blocking read returns at once.
pub(super) unsafe extern "C" fn cq_signal(cq: *mut fid_cq) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = cq_obj(cq) else { return -(FI_EINVAL as c_int) };
        o.wakeup.store(true, std::sync::atomic::Ordering::Release);
        // and a thread in poll/epoll on the FD wait object (fi_trywait then clears it)
        if let Some(mut e) = engine::engine_if_open() {
            if let Some(c) = e.cqs.get_mut(&o.id) {
                c.q.poke();
            }
        }
        0
    })
}

pub(super) unsafe extern "C" fn cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, _flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(o) = cq_obj(cq) else { return -(FI_EINVAL as isize) };
        if buf.is_null() {
            return -(FI_EINVAL as isize);
        }
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EAGAIN as isize) };
        let Some(x) = e.cqs.get_mut(&o.id).and_then(|c| c.q.read_error()) else { return -(FI_EAGAIN as isize) };
        // SAFETY: buf is the caller's fi_cq_err_entry; err_data/err_data_size are inputs we
        // leave alone except for reporting no error data.
        unsafe {
            let b = &mut *buf;
            b.op_context = x.entry.op_context as *mut c_void;
            b.flags = x.entry.flags;
            b.len = x.entry.len as usize;
            b.buf = x.entry.buf as *mut c_void;
            b.data = x.entry.data;
            b.tag = 0;
            b.olen = x.olen as usize;
            b.err = x.err as c_int;
            b.prov_errno = x.prov_errno;
            b.err_data_size = 0;
        }
        1
    })
}

/// The status text of `prov_errno` as a NUL-terminated static string (fi_cq_strerror without a buffer).
pub(super) fn static_status_str(prov_errno: c_int) -> *const c_char {
    static TEXTS: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
    let t = TEXTS.get_or_init(|| (0..=u8::MAX as c_int).map(|v| std::ffi::CString::new(format!("droce: {}", engine::wc_status_str(v))).unwrap_or_default()).collect());
    let i = usize::try_from(prov_errno).ok().filter(|&i| i < t.len()).unwrap_or(t.len() - 1);
    t[i].as_ptr()
}

/// `s` into the caller's buffer, or `fallback` (NUL-terminated, static) without one.
pub(super) fn strerror_out(s: &str, fallback: *const c_char, buf: *mut c_char, len: usize) -> *const c_char {
    if buf.is_null() || len == 0 {
        return fallback;
    }
    let n = s.len().min(len - 1);
    // SAFETY: buf holds len bytes.
    unsafe {
        ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
    buf
}

pub(super) unsafe extern "C" fn cq_strerror(_cq: *mut fid_cq, prov_errno: c_int, _err_data: *const c_void, buf: *mut c_char, len: usize) -> *const c_char {
    guard(ptr::null(), || strerror_out(engine::wc_status_str(prov_errno), static_status_str(prov_errno), buf, len))
}
