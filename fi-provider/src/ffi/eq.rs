//! Event queues: open, close, wait objects, CM events into fi_eq_cm_entry, error entries.

use super::sys::*;
use super::*;
use crate::addr::{self, EpAddr};
use crate::engine::{self, EqEvent, Id};

#[repr(C)]
pub(crate) struct EqObj {
    pub(crate) e: fid_eq,
    pub(crate) id: Id,
    /// Provider-owned error data of the last fi_eq_readerr (valid until the next one).
    pub(crate) err_data: Vec<u8>,
}
const _: () = assert!(std::mem::offset_of!(EqObj, e) == 0);

pub(super) static EQ_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(eq_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: Some(eq_control),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

pub(super) static EQ_OPS: fi_ops_eq = fi_ops_eq {
    size: std::mem::size_of::<fi_ops_eq>(),
    read: Some(eq_read),
    readerr: Some(eq_readerr),
    write: Some(eq_write),
    sread: Some(eq_sread),
    strerror: Some(eq_strerror),
};

pub(crate) unsafe extern "C" fn eq_open(_f: *mut fid_fabric, attr: *mut fi_eq_attr, eq: *mut *mut fid_eq, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if eq.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let wait = opt(attr).map(|a| a.wait_obj).unwrap_or(FI_WAIT_NONE);
        let fd = match wait {
            FI_WAIT_NONE => false,
            FI_WAIT_UNSPEC | FI_WAIT_FD => true,
            _ => return -(FI_ENOSYS as c_int),
        };
        let mut e = match open_engine() {
            Ok(e) => e,
            Err(x) => return -(x as c_int),
        };
        let id = match e.open_eq(fd) {
            Ok(id) => id,
            Err(x) => return -(x as c_int),
        };
        drop(e);
        if wait == FI_WAIT_FD {
            start_auto_progress();
        }
        let b = Box::new(EqObj { e: fid_eq { fid: fid { fclass: FI_CLASS_EQ as usize, context, ops: ops_ptr(&EQ_FI_OPS) }, ops: ops_ptr(&EQ_OPS) }, id, err_data: Vec::new() });
        // SAFETY: out checked.
        unsafe { *eq = Box::into_raw(b) as *mut fid_eq };
        0
    })
}

pub(super) unsafe extern "C" fn eq_close(f: *mut fid) -> c_int {
    // SAFETY: f is the fid of an EqObj from eq_open, closed once by the application.
    unsafe { close_boxed(f, |e, b: &EqObj| { e.eqs.remove(&b.id); }) }
}

pub(super) unsafe extern "C" fn eq_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if !matches!(command as u32, FI_GETWAIT | FI_GETWAITOBJ) || arg.is_null() {
            return -(FI_ENOSYS as c_int);
        }
        // SAFETY: f is the fid of an EqObj.
        let id = unsafe { (*(f as *const EqObj)).id };
        let Some(e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        match e.eqs.get(&id).and_then(|q| q.signal.as_ref()) {
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

pub(super) const CM_ENTRY_LEN: usize = std::mem::size_of::<fi_eq_cm_entry>();

pub(super) fn eq_read_common(eq: *mut fid_eq, event: *mut u32, buf: *mut c_void, len: usize, flags: u64) -> isize {
    let Some(o) = opt(eq as *const EqObj) else { return -(FI_EINVAL as isize) };
    let Some(mut e) = engine::engine_if_open() else { return -(FI_EAGAIN as isize) };
    e.progress();
    let local = e.local;
    let Some(q) = e.eqs.get_mut(&o.id) else { return -(FI_EINVAL as isize) };
    if q.has_error() {
        return -(FI_EAVAIL as isize);
    }
    let Some(ev) = q.peek().cloned() else { return -(FI_EAGAIN as isize) };
    let need = match &ev {
        EqEvent::ConnReq { data, .. } | EqEvent::Connected { data, .. } => CM_ENTRY_LEN + data.len(),
        EqEvent::Shutdown { .. } => CM_ENTRY_LEN,
        EqEvent::Other { .. } => std::mem::size_of::<fi_eq_entry>(),
    };
    if buf.is_null() || len < need {
        return -(FI_ETOOSMALL as isize);
    }
    let peek = flags & FI_PEEK as u64 != 0;
    let (code, fidp, info, data): (u32, *mut fid, *mut fi_info, Vec<u8>) = match &ev {
        EqEvent::ConnReq { pep_fid, conn, src, dst, data, .. } => {
            // The request's fi_info: the peer is the destination, the listener the source.
            let mut i = match crate::info::getinfo(&crate::info::Query { version: crate::info::FI_API_VERSION, ..Default::default() }, Some(&crate::info::Hints { ep_type: FI_EP_MSG, ..Default::default() }), &local) {
                Ok(mut v) => v.remove(0),
                Err(_) => return -(FI_EOTHER as isize),
            };
            i.src = Some(EpAddr::new(*dst));
            if let Some(s) = i.src.as_mut() { s.sa.set_ip(local.ip) }
            i.dest = Some(EpAddr::new(std::net::SocketAddr::new(addr::canon(src.ip()), src.port())));
            if peek {
                (FI_CONNREQ, *pep_fid as *mut fid, ptr::null_mut(), data.clone())
            } else {
                let p = match pep_info_dup(*pep_fid) {
                    d if d.is_null() => make_info(&i),
                    d => {
                        set_addrs(d, &i);
                        d
                    }
                };
                if p.is_null() {
                    return -(FI_ENOMEM as isize);
                }
                // SAFETY: p is a fresh fi_info; the connreq object is freed by fi_freeinfo's
                // caller through fi_close on the handle or when an endpoint takes it.
                unsafe { (*p).handle = connreq_new(*conn) };
                (FI_CONNREQ, *pep_fid as *mut fid, p, data.clone())
            }
        }
        EqEvent::Connected { fid: f, data, .. } => (FI_CONNECTED, *f as *mut fid, ptr::null_mut(), data.clone()),
        EqEvent::Shutdown { fid: f, .. } => (FI_SHUTDOWN, *f as *mut fid, ptr::null_mut(), Vec::new()),
        EqEvent::Other { event: code, fid: f, context, data } => {
            // SAFETY: the buffer holds an fi_eq_entry (checked above); event is the caller's u32.
            unsafe {
                *(buf as *mut fi_eq_entry) = fi_eq_entry { fid: *f as *mut fid, context: *context as *mut c_void, data: *data };
                if !event.is_null() {
                    *event = *code;
                }
            }
            if !peek {
                let _ = q.read(1);
            }
            return std::mem::size_of::<fi_eq_entry>() as isize;
        }
    };
    // SAFETY: buf holds `need` bytes: the fixed cm entry then the data.
    unsafe {
        let c = buf as *mut fi_eq_cm_entry;
        (*c).fid = fidp;
        (*c).info = info;
        ptr::copy_nonoverlapping(data.as_ptr(), (buf as *mut u8).add(CM_ENTRY_LEN), data.len());
        if !event.is_null() {
            *event = code;
        }
    }
    if !peek {
        let _ = q.read(1);
    }
    need as isize
}

/// Replaces the addresses of a copied listener info by the request's.
pub(super) fn set_addrs(d: *mut fi_info, i: &crate::info::Info) {
    // SAFETY: d is a fresh fi_dupinfo copy; its old addresses are malloc'd and freed here.
    unsafe {
        let f = &mut *d;
        let v6 = f.addr_format == FI_SOCKADDR_IN6;
        libc::free(f.src_addr);
        libc::free(f.dest_addr);
        f.src_addr = ptr::null_mut();
        f.dest_addr = ptr::null_mut();
        f.src_addrlen = 0;
        f.dest_addrlen = 0;
        if let Some(s) = i.src {
            let b = s.to_bytes(v6);
            f.src_addr = malloc_bytes(&b);
            f.src_addrlen = b.len();
        }
        if let Some(t) = i.dest {
            let b = t.to_bytes(v6);
            f.dest_addr = malloc_bytes(&b);
            f.dest_addrlen = b.len();
        }
        f.handle = ptr::null_mut();
    }
}

pub(super) unsafe extern "C" fn eq_read(eq: *mut fid_eq, event: *mut u32, buf: *mut c_void, len: usize, flags: u64) -> isize {
    guard(EOTHER_S, || eq_read_common(eq, event, buf, len, flags))
}

pub(super) unsafe extern "C" fn eq_sread(eq: *mut fid_eq, event: *mut u32, buf: *mut c_void, len: usize, timeout: c_int, flags: u64) -> isize {
    guard(EOTHER_S, || sread_loop(timeout, None, || eq_read_common(eq, event, buf, len, flags)))
}

pub(super) unsafe extern "C" fn eq_readerr(eq: *mut fid_eq, buf: *mut fi_eq_err_entry, _flags: u64) -> isize {
    guard(EOTHER_S, || {
        let o = eq as *mut EqObj;
        if o.is_null() || buf.is_null() {
            return -(FI_EINVAL as isize);
        }
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EAGAIN as isize) };
        // SAFETY: o is our EqObj (the application passes the EQ it opened).
        let id = unsafe { (*o).id };
        let Some(x) = e.eqs.get_mut(&id).and_then(|q| q.read_error()) else { return -(FI_EAGAIN as isize) };
        // SAFETY: buf is the caller's entry; with err_data_size > 0 the caller owns a buffer
        // of that size (API >= 1.5), else the provider's buffer is handed out.
        unsafe {
            let b = &mut *buf;
            let user_buf = b.err_data_size > 0 && !b.err_data.is_null();
            b.fid = x.fid as *mut fid;
            b.context = x.context as *mut c_void;
            b.data = 0;
            b.err = x.err as c_int;
            b.prov_errno = x.prov_errno;
            if user_buf {
                let n = x.data.len().min(b.err_data_size);
                ptr::copy_nonoverlapping(x.data.as_ptr(), b.err_data as *mut u8, n);
                b.err_data_size = n;
            } else {
                (*o).err_data = x.data.clone();
                b.err_data = if x.data.is_empty() { ptr::null_mut() } else { (*o).err_data.as_mut_ptr() as *mut c_void };
                b.err_data_size = x.data.len();
            }
        }
        std::mem::size_of::<fi_eq_err_entry>() as isize
    })
}

pub(super) unsafe extern "C" fn eq_write(eq: *mut fid_eq, event: u32, buf: *const c_void, len: usize, _flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(o) = opt(eq as *const EqObj) else { return -(FI_EINVAL as isize) };
        if buf.is_null() || len < std::mem::size_of::<fi_eq_entry>() {
            return -(FI_EINVAL as isize);
        }
        // SAFETY: the caller writes an fi_eq_entry.
        let en = unsafe { *(buf as *const fi_eq_entry) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as isize) };
        match e.eqs.get_mut(&o.id) {
            Some(q) => {
                q.push(EqEvent::Other { event, fid: en.fid as usize, context: en.context as usize, data: en.data });
                len as isize
            }
            None => -(FI_EINVAL as isize),
        }
    })
}

pub(super) unsafe extern "C" fn eq_strerror(_eq: *mut fid_eq, _prov_errno: c_int, _err_data: *const c_void, buf: *mut c_char, len: usize) -> *const c_char {
    guard(ptr::null(), || strerror_out("droce connection manager error", c"droce connection manager error".as_ptr(), buf, len))
}
