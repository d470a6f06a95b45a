//! Memory registration (fi_mr_reg/regv/regattr, descriptors), and the engine's access to
//! application memory that rests on the application's word ([`crate::engine::AppMemory`]).

use super::sys::*;
use super::*;
use crate::engine::{self, Engine, Mr};
use droce_transport::verbs::AccessFlags;

#[repr(C)]
pub(crate) struct MrObj {
    pub(crate) m: fid_mr,
    pub(crate) lkey: droce_transport::Lkey,
}
const _: () = assert!(std::mem::offset_of!(MrObj, m) == 0);

pub(super) static MR_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(mr_close),
    bind: Some(mr_bind),
    control: Some(mr_control),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

/// A memory descriptor is the lkey tagged so that it is never NULL.
pub(super) const DESC_TAG: usize = 1 << 40;
pub(crate) fn desc_of(lkey: droce_transport::Lkey) -> *mut c_void {
    (DESC_TAG | lkey.0 as usize) as *mut c_void
}
pub(crate) fn lkey_of(desc: *mut c_void) -> Option<droce_transport::Lkey> {
    let v = desc as usize;
    (v & !0xffff_ffff == DESC_TAG).then_some(droce_transport::Lkey(v as u32))
}

pub(super) fn access_of(access: u64) -> AccessFlags {
    if access == 0 {
        return AccessFlags::ALL;
    }
    let mut a = AccessFlags::LOCAL_WRITE;
    if access & FI_REMOTE_READ as u64 != 0 {
        a = a | AccessFlags::REMOTE_READ;
    }
    if access & FI_REMOTE_WRITE as u64 != 0 {
        a = a | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
    }
    a
}

/// Registers `addr..addr+len` (process memory the application owns) with the device.
/// `temp`: a registration for one operation posted without a descriptor (never lent to
/// another operation: see `mr_table`).
pub(crate) fn register(e: &mut Engine, addr: u64, len: u64, access: AccessFlags, temp: bool) -> Result<Mr, Errno> {
    if addr == 0 && len != 0 {
        return Err(FI_EINVAL);
    }
    let pd = e.pd;
    // SAFETY: the application registered this range: by the fi_mr_reg contract it stays valid
    // until fi_close(mr), which deregisters it first. For temporary registrations the buffer
    // belongs to an operation in flight and is deregistered at its completion (or ep close).
    let mr = unsafe { e.host().reg_mr(pd, addr as *mut u8, len as usize, access) }.map_err(|_| FI_EINVAL)?;
    let m = Mr { va: mr.va, len: mr.len, lkey: mr.lkey, rkey: mr.rkey, temp };
    e.add_mr(m);
    Ok(m)
}

pub(super) fn mr_out(m: Mr, context: *mut c_void, out: *mut *mut fid_mr) -> c_int {
    let b = Box::new(MrObj {
        m: fid_mr { fid: fid { fclass: FI_CLASS_MR as usize, context, ops: ops_ptr(&MR_FI_OPS) }, mem_desc: desc_of(m.lkey), key: m.rkey.0 as u64 },
        lkey: m.lkey,
    });
    // SAFETY: out checked by the callers.
    unsafe { *out = Box::into_raw(b) as *mut fid_mr };
    0
}

pub(super) fn reg_common(addr: u64, len: u64, access: u64, context: *mut c_void, out: *mut *mut fid_mr) -> c_int {
    if out.is_null() {
        return -(FI_EINVAL as c_int);
    }
    let mut e = match open_engine() {
        Ok(e) => e,
        Err(x) => return -(x as c_int),
    };
    match register(&mut e, addr, len, access_of(access), false) {
        Ok(m) => mr_out(m, context, out),
        Err(x) => -(x as c_int),
    }
}

pub(super) unsafe extern "C" fn mr_reg(_f: *mut fid, buf: *const c_void, len: usize, access: u64, _offset: u64, _key: u64, _flags: u64, mr: *mut *mut fid_mr, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || reg_common(buf as u64, len as u64, access, context, mr))
}

pub(super) unsafe extern "C" fn mr_regv(_f: *mut fid, iov: *const iovec, count: usize, access: u64, _offset: u64, _key: u64, _flags: u64, mr: *mut *mut fid_mr, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if count != 1 || iov.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: one iovec as the caller says.
        let v = unsafe { *iov };
        reg_common(v.iov_base as u64, v.iov_len as u64, access, context, mr)
    })
}

pub(super) unsafe extern "C" fn mr_regattr(_f: *mut fid, attr: *const fi_mr_attr, _flags: u64, mr: *mut *mut fid_mr) -> c_int {
    guard(EOTHER_I, || {
        let Some(a) = opt(attr) else { return -(FI_EINVAL as c_int) };
        if a.iov_count != 1 || a.mr_iov.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: iov_count iovecs at mr_iov.
        let v = unsafe { *a.mr_iov };
        reg_common(v.iov_base as u64, v.iov_len as u64, a.access, a.context, mr)
    })
}

/// fi_mr_bind. droce does not ask for FI_MR_ENDPOINT: an MR belongs to the domain's
/// protection domain and any endpoint of the domain may use it at once, so binding it to one
/// of our endpoints is allowed and changes nothing. Counters (remote access events) need
/// FI_RMA_EVENT, which droce does not offer.
pub(super) unsafe extern "C" fn mr_bind(f: *mut fid, bfid: *mut fid, _flags: u64) -> c_int {
    guard(EOTHER_I, || {
        if opt(f).is_none() {
            return -(FI_EINVAL as c_int);
        }
        let Some(b) = opt(bfid) else { return -(FI_EINVAL as c_int) };
        match b.fclass as u32 {
            FI_CLASS_EP if is_our_ep(bfid) => 0,
            FI_CLASS_CNTR => -(FI_ENOSYS as c_int),
            _ => -(FI_EINVAL as c_int),
        }
    })
}

/// fi_mr_enable (fi_control FI_ENABLE): an MR is usable from fi_mr_reg on, nothing waits for
/// the enable.
pub(super) unsafe extern "C" fn mr_control(f: *mut fid, command: c_int, _arg: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if opt(f).is_none() {
            return -(FI_EINVAL as c_int);
        }
        if command == FI_ENABLE as c_int {
            0
        } else {
            -(FI_ENOSYS as c_int)
        }
    })
}

pub(super) unsafe extern "C" fn mr_close(f: *mut fid) -> c_int {
    // SAFETY: f is the fid of an MrObj from mr_out, closed once by the application.
    unsafe { close_boxed(f, |e, b: &MrObj| { e.remove_mr(b.lkey); }) }
}

/// The engine's access to application memory ([`engine::AppMemory`]): registration and the
/// copy of a small send's bytes, both resting on the application's promises.
pub(crate) struct AppBuffers;

impl engine::AppMemory for AppBuffers {
    fn register(&self, e: &mut Engine, addr: u64, len: u64, access: AccessFlags, temp: bool) -> Result<Mr, Errno> {
        register(e, addr, len, access, temp)
    }

    fn gather(&self, iov: &[(u64, u64)], out: &mut [u8]) {
        let mut off = 0usize;
        for &(a, l) in iov {
            let Some(dst) = out.get_mut(off..off + l as usize) else { return };
            // SAFETY: the application's buffers hold the bytes they describe (the fi_send /
            // fi_inject contract); `dst` is the work request's inline buffer in the transport,
            // distinct from them.
            unsafe { ptr::copy_nonoverlapping(a as *const u8, dst.as_mut_ptr(), dst.len()) };
            off += l as usize;
        }
    }
}
