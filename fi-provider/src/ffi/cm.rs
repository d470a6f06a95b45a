//! Passive endpoints, connection requests and the CM ops (getname/setname/getpeer, connect,
//! listen, accept, reject, shutdown): pointers and private data in, the engine's connection
//! management called.

use super::sys::*;
use super::*;
use crate::engine::{self, Id};
use droce_dpdk::roce::cm::ConnId;

#[repr(C)]
pub(crate) struct ConnReqObj {
    pub(crate) f: fid,
    pub(crate) conn: ConnId,
}
const _: () = assert!(std::mem::offset_of!(ConnReqObj, f) == 0);

pub(super) static CONNREQ_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(connreq_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

pub(crate) fn connreq_new(conn: ConnId) -> *mut fid {
    Box::into_raw(Box::new(ConnReqObj { f: fid { fclass: FI_CLASS_CONNREQ as usize, context: ptr::null_mut(), ops: ops_ptr(&CONNREQ_FI_OPS) }, conn })) as *mut fid
}

/// Takes a connection request handle (frees it): its connection id.
pub(super) fn connreq_take(h: *mut fid) -> Option<ConnId> {
    let f = opt(h)?;
    if f.fclass as u32 != FI_CLASS_CONNREQ {
        return None;
    }
    // SAFETY: an FI_CLASS_CONNREQ fid is the first field of a ConnReqObj from connreq_new;
    // the handle is consumed here (fi_endpoint / fi_reject take ownership).
    let b = unsafe { Box::from_raw(h as *mut ConnReqObj) };
    Some(b.conn)
}

pub(super) unsafe extern "C" fn connreq_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        let _ = connreq_take(f);
        0
    })
}

#[repr(C)]
pub(crate) struct PepObj {
    pub(crate) p: fid_pep,
    pub(crate) id: Id,
    pub(crate) v6: bool,
    /// The application's info for the listener (a copy): connection requests inherit its
    /// attributes (mode bits like FI_RX_CQ_DATA, sizes, caps).
    pub(crate) info: *mut fi_info,
}

/// The bound address of one of our passive endpoints.
pub(crate) fn pep_addr(f: *mut fid) -> Option<EpAddr> {
    if opt(f)?.fclass as u32 != FI_CLASS_PEP {
        return None;
    }
    // SAFETY: an FI_CLASS_PEP fid of ours heads a PepObj.
    let id = unsafe { (*(f as *const PepObj)).id };
    let e = engine::engine_if_open()?;
    e.peps.get(&id).map(|p| p.src)
}

/// A copy of the listener's fi_info for a connection request on `pep_fid` (NULL if none).
pub(crate) fn pep_info_dup(pep_fid: usize) -> *mut fi_info {
    let Some(f) = opt(pep_fid as *const fid) else { return ptr::null_mut() };
    if f.fclass as u32 != FI_CLASS_PEP {
        return ptr::null_mut();
    }
    // SAFETY: an FI_CLASS_PEP fid of ours heads a live PepObj (the EQ event was queued by
    // it; a closed listener's events are dropped with it).
    let i = unsafe { (*(pep_fid as *const PepObj)).info };
    if i.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: i is our own fi_dupinfo copy.
    unsafe { fi_dupinfo(i) }
}
const _: () = assert!(std::mem::offset_of!(PepObj, p) == 0);

pub(super) static PEP_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(pep_close),
    bind: Some(pep_bind),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

pub(crate) unsafe extern "C" fn pep_open(_f: *mut fid_fabric, info: *mut fi_info, pep: *mut *mut fid_pep, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if pep.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let v = view(info);
        let mut e = match engine_or(-(FI_ENODEV as c_int)) {
            Ok(e) => e,
            Err(x) => return x,
        };
        let local = e.local;
        let mut src = v.as_ref().and_then(|v| v.src).unwrap_or(EpAddr::new(std::net::SocketAddr::new(local.ip, 0)));
        if !local.is_local(src.sa.ip()) {
            return -(FI_EADDRNOTAVAIL as c_int);
        }
        src.sa.set_ip(local.ip);
        let b = Box::new(PepObj {
            p: fid_pep { fid: fid { fclass: FI_CLASS_PEP as usize, context, ops: ops_ptr(&PEP_FI_OPS) }, ops: ops_ptr(&super::ep_obj::EP_OPS), cm: ops_ptr(&CM_OPS) },
            id: 0,
            v6: v.as_ref().is_some_and(|v| v.v6),
            // SAFETY: info is NULL or the caller's valid fi_info; fi_dupinfo deep-copies it.
            info: if info.is_null() { ptr::null_mut() } else { unsafe { fi_dupinfo(info) } },
        });
        let raw = Box::into_raw(b);
        let id = e.new_pep(raw as usize, context as usize, src);
        // SAFETY: fresh object; out checked.
        unsafe {
            (*raw).id = id;
            *pep = raw as *mut fid_pep;
        }
        0
    })
}

pub(super) unsafe extern "C" fn pep_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if f.is_null() {
            return 0;
        }
        // SAFETY: f is the fid of a PepObj; freed once here.
        let b = unsafe { Box::from_raw(f as *mut PepObj) };
        if let Some(mut e) = engine::engine_if_open() {
            e.close_pep(b.id);
        }
        free_info(b.info);
        0
    })
}

pub(super) unsafe extern "C" fn pep_bind(f: *mut fid, bfid: *mut fid, _flags: u64) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = opt(f as *const PepObj) else { return -(FI_EINVAL as c_int) };
        let Some((FI_CLASS_EQ, id)) = bound_id(bfid) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        match e.peps.get_mut(&o.id) {
            Some(p) => {
                p.eq = Some(id);
                0
            }
            None => -(FI_EINVAL as c_int),
        }
    })
}

pub(super) static CM_OPS: fi_ops_cm = fi_ops_cm {
    size: std::mem::size_of::<fi_ops_cm>(),
    setname: Some(setname),
    getname: Some(getname),
    getpeer: Some(getpeer),
    connect: Some(connect),
    listen: Some(listen),
    accept: Some(accept),
    reject: Some(reject),
    shutdown: Some(shutdown),
    join: nosys!(fn(*mut fid_ep, *const c_void, u64, *mut *mut fid_mc, *mut c_void) -> c_int),
};

pub(super) unsafe extern "C" fn getname(f: fid_t, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard(EOTHER_I, || {
        let Some(fr) = opt(f) else { return -(FI_EINVAL as c_int) };
        let Some(e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        let bytes = match fr.fclass as u32 {
            FI_CLASS_PEP => {
                // SAFETY: an FI_CLASS_PEP fid of ours is the first field of a PepObj.
                let o = unsafe { &*(f as *const PepObj) };
                match e.peps.get(&o.id) {
                    Some(p) => p.src.to_bytes(o.v6),
                    None => return -(FI_EINVAL as c_int),
                }
            }
            FI_CLASS_EP => {
                // SAFETY: an FI_CLASS_EP fid of ours is the first field of an EpObj.
                let o = unsafe { &*(f as *const EpObj) };
                match e.eps.get(&o.id) {
                    Some(ep) => ep.src.to_bytes(ep.v6),
                    None => return -(FI_EINVAL as c_int),
                }
            }
            _ => return -(FI_EINVAL as c_int),
        };
        write_out(addr, addrlen, &bytes)
    })
}

pub(super) unsafe extern "C" fn setname(f: fid_t, addr: *mut c_void, addrlen: usize) -> c_int {
    guard(EOTHER_I, || {
        let Some(fr) = opt(f) else { return -(FI_EINVAL as c_int) };
        let Some(a) = read_addr(addr, addrlen) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        match fr.fclass as u32 {
            FI_CLASS_PEP => {
                // SAFETY: an FI_CLASS_PEP fid of ours is the first field of a PepObj.
                let id = unsafe { (*(f as *const PepObj)).id };
                ret_int(e.set_pep_name(id, a))
            }
            FI_CLASS_EP => {
                // SAFETY: an FI_CLASS_EP fid of ours is the first field of an EpObj.
                let id = unsafe { (*(f as *const EpObj)).id };
                let local = e.local;
                match e.eps.get_mut(&id) {
                    Some(ep) if local.is_local(a.sa.ip()) && ep.qp.is_none() => {
                        ep.src = EpAddr::new(std::net::SocketAddr::new(local.ip, a.sa.port()));
                        0
                    }
                    Some(_) => -(FI_EINVAL as c_int),
                    None => -(FI_EINVAL as c_int),
                }
            }
            _ => -(FI_EINVAL as c_int),
        }
    })
}

pub(super) unsafe extern "C" fn getpeer(ep: *mut fid_ep, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = ep_obj(ep) else { return -(FI_EINVAL as c_int) };
        let Some(e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        match e.eps.get(&o.id).and_then(|x| x.peer.map(|p| (p, x.v6))) {
            Some((p, v6)) => write_out(addr, addrlen, &p.to_bytes(v6)),
            None => -(FI_ENOTCONN as c_int),
        }
    })
}

pub(super) fn param_bytes(param: *const c_void, len: usize) -> Vec<u8> {
    if param.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's private data of `len` bytes.
    unsafe { std::slice::from_raw_parts(param as *const u8, len) }.to_vec()
}

pub(super) unsafe extern "C" fn connect(ep: *mut fid_ep, addr: *const c_void, param: *const c_void, paramlen: usize) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = ep_obj(ep) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        let dst = match read_sockaddr(addr).or_else(|| e.eps.get(&o.id).and_then(|x| x.peer)) {
            Some(d) => d,
            None => return -(FI_EINVAL as c_int),
        };
        ret_int(e.connect(o.id, dst, &param_bytes(param, paramlen)))
    })
}

pub(super) unsafe extern "C" fn listen(pep: *mut fid_pep) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = opt(pep as *const PepObj) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        if e.peps.get(&o.id).is_some_and(|p| p.eq.is_none()) {
            return -(FI_ENOEQ as c_int);
        }
        ret_int(e.listen(o.id))
    })
}

pub(super) unsafe extern "C" fn accept(ep: *mut fid_ep, param: *const c_void, paramlen: usize) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = ep_obj(ep) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        ret_int(e.accept(o.id, &param_bytes(param, paramlen)))
    })
}

pub(super) unsafe extern "C" fn reject(_pep: *mut fid_pep, handle: fid_t, param: *const c_void, paramlen: usize) -> c_int {
    guard(EOTHER_I, || {
        let Some(conn) = connreq_take(handle) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        ret_int(e.reject(conn, &param_bytes(param, paramlen)))
    })
}

pub(super) unsafe extern "C" fn shutdown(ep: *mut fid_ep, _flags: u64) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = ep_obj(ep) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        ret_int(e.shutdown(o.id))
    })
}
