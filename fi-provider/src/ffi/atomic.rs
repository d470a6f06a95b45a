//! Atomics (fi_atomic*, fi_fetch_atomic*, fi_compare_atomic*, their valid queries and
//! fi_query_atomic): the C operands read, the engine's posting called.

use super::sys::*;
use super::*;
use crate::engine::{self, AtomicRequest};
use crate::info as pinfo;

pub(crate) unsafe extern "C" fn query_atomic(_d: *mut fid_domain, datatype: fi_datatype, op: fi_op, attr: *mut fi_atomic_attr, flags: u64) -> c_int {
    guard(EOTHER_I, || {
        let kind = flags & (FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC);
        if !pinfo::atomic_supported(datatype, op, kind) {
            return -(FI_EOPNOTSUPP as c_int);
        }
        if !attr.is_null() {
            // SAFETY: the caller's attribute struct.
            unsafe { *attr = fi_atomic_attr { count: 1, size: 8 } };
        }
        0
    })
}

pub(super) fn valid(datatype: fi_datatype, op: fi_op, kind: u64, count: *mut usize) -> c_int {
    if !pinfo::atomic_supported(datatype, op, kind) {
        return -(FI_EOPNOTSUPP as c_int);
    }
    if !count.is_null() {
        // SAFETY: the caller's count out-parameter.
        unsafe { *count = 1 };
    }
    0
}

pub(super) unsafe extern "C" fn atomic_writevalid(_ep: *mut fid_ep, datatype: fi_datatype, op: fi_op, count: *mut usize) -> c_int {
    guard(EOTHER_I, || valid(datatype, op, 0, count))
}
pub(super) unsafe extern "C" fn atomic_readwritevalid(_ep: *mut fid_ep, datatype: fi_datatype, op: fi_op, count: *mut usize) -> c_int {
    guard(EOTHER_I, || valid(datatype, op, FI_FETCH_ATOMIC, count))
}
pub(super) unsafe extern "C" fn atomic_compwritevalid(_ep: *mut fid_ep, datatype: fi_datatype, op: fi_op, count: *mut usize) -> c_int {
    guard(EOTHER_I, || valid(datatype, op, FI_COMPARE_ATOMIC, count))
}

pub(super) fn read_u64(p: *const c_void) -> Option<u64> {
    if p.is_null() {
        return None;
    }
    // SAFETY: an operand of the 64-bit datatype the caller names.
    Some(unsafe { ptr::read_unaligned(p as *const u64) })
}

/// One RoCE atomic: FetchAdd (add) or CmpSwap (compare, swap); the 8-byte original lands in
/// `result` (the application's, or a provider scratch word for fi_atomic).
/// `flags`: fi_*msg's (None: the endpoint's transmit op_flags); FI_INJECT (or `inject`):
/// no completion, the operand is read before the call returns anyway.
#[allow(clippy::too_many_arguments)]
pub(super) fn post_atomic(ep: *mut fid_ep, count: usize, datatype: fi_datatype, op: fi_op, kind: u64, operand: (u64, u64), result: Option<(u64, *mut c_void)>, addr: u64, key: u64, context: *mut c_void, flags: Option<u64>, inject: bool) -> isize {
    if count != 1 || !pinfo::atomic_supported(datatype, op, kind) {
        return -(FI_EOPNOTSUPP as isize);
    }
    let Some(o) = ep_obj(ep) else { return -(FI_EINVAL as isize) };
    let Some(mut e) = engine::engine_if_open() else { return -(FI_EOPBADSTATE as isize) };
    let result = result.map(|(r, desc)| (r, lkey_of(desc)));
    let r = AtomicRequest { cswap: op == FI_CSWAP, operand, write: kind == 0, result, addr, key, context: context as usize, flags, inject };
    ret_ssize(e.post_atomic(&AppBuffers, o.id, r))
}

pub(super) unsafe extern "C" fn atomic_write(ep: *mut fid_ep, buf: *const c_void, count: usize, _desc: *mut c_void, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op, context: *mut c_void) -> isize {
    guard(EOTHER_S, || {
        let Some(v) = read_u64(buf) else { return -(FI_EINVAL as isize) };
        post_atomic(ep, count, datatype, op, 0, (v, 0), None, addr, key, context, None, false)
    })
}

pub(super) unsafe extern "C" fn atomic_readwrite(ep: *mut fid_ep, buf: *const c_void, count: usize, _desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op, context: *mut c_void) -> isize {
    guard(EOTHER_S, || {
        // FI_ATOMIC_READ has no operand: a fetch-and-add of 0.
        let v = if op == FI_ATOMIC_READ { 0 } else {
            match read_u64(buf) {
                Some(v) => v,
                None => return -(FI_EINVAL as isize),
            }
        };
        if result.is_null() {
            return -(FI_EINVAL as isize);
        }
        post_atomic(ep, count, datatype, op, FI_FETCH_ATOMIC, (v, 0), Some((result as u64, result_desc)), addr, key, context, None, false)
    })
}

pub(super) unsafe extern "C" fn atomic_compwrite(ep: *mut fid_ep, buf: *const c_void, count: usize, _desc: *mut c_void, compare: *const c_void, _compare_desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op, context: *mut c_void) -> isize {
    guard(EOTHER_S, || {
        let (Some(swap), Some(cmp)) = (read_u64(buf), read_u64(compare)) else { return -(FI_EINVAL as isize) };
        if result.is_null() {
            return -(FI_EINVAL as isize);
        }
        post_atomic(ep, count, datatype, op, FI_COMPARE_ATOMIC, (cmp, swap), Some((result as u64, result_desc)), addr, key, context, None, false)
    })
}

// The vector and message forms: a RoCE atomic moves one 8-byte element, so every ioc list
// holds one entry of count 1 (writevalid and friends say count 1); the target is one
// fi_rma_ioc.

/// The single element of an ioc list of `n` entries: (its address, its count, its desc).
pub(super) fn one_ioc(iov: *const fi_ioc, desc: *mut *mut c_void, n: usize) -> Result<(*mut c_void, usize, *mut c_void), isize> {
    if iov.is_null() || n != 1 {
        return Err(-(FI_EINVAL as isize));
    }
    // SAFETY: the caller's list of `n` (= 1) entries.
    let v = unsafe { &*iov };
    // SAFETY: a non-NULL descriptor list holds `n` (= 1) entries.
    let d = if desc.is_null() { ptr::null_mut() } else { unsafe { *desc } };
    Ok((v.addr, v.count, d))
}

/// The target of a message form: one fi_rma_ioc of one element.
pub(super) fn atomic_target(m: &fi_msg_atomic) -> Result<(u64, u64), isize> {
    if m.rma_iov.is_null() || m.rma_iov_count != 1 {
        return Err(-(FI_EINVAL as isize));
    }
    // SAFETY: the message's one rma_iov entry.
    let r = unsafe { &*m.rma_iov };
    if r.count != 1 {
        return Err(-(FI_EOPNOTSUPP as isize));
    }
    Ok((r.addr, r.key))
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(r) => return r,
        }
    };
}

pub(super) unsafe extern "C" fn atomic_writev(ep: *mut fid_ep, iov: *const fi_ioc, desc: *mut *mut c_void, count: usize, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op, context: *mut c_void) -> isize {
    guard(EOTHER_S, || {
        let (buf, n, _) = tri!(one_ioc(iov, desc, count));
        let Some(v) = read_u64(buf) else { return -(FI_EINVAL as isize) };
        post_atomic(ep, n, datatype, op, 0, (v, 0), None, addr, key, context, None, false)
    })
}

pub(super) unsafe extern "C" fn atomic_writemsg(ep: *mut fid_ep, msg: *const fi_msg_atomic, flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(m) = opt(msg) else { return -(FI_EINVAL as isize) };
        let (buf, n, _) = tri!(one_ioc(m.msg_iov, m.desc, m.iov_count));
        let (addr, key) = tri!(atomic_target(m));
        let Some(v) = read_u64(buf) else { return -(FI_EINVAL as isize) };
        post_atomic(ep, n, m.datatype, m.op, 0, (v, 0), None, addr, key, m.context, Some(flags), false)
    })
}

pub(super) unsafe extern "C" fn atomic_inject(ep: *mut fid_ep, buf: *const c_void, count: usize, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op) -> isize {
    guard(EOTHER_S, || {
        let Some(v) = read_u64(buf) else { return -(FI_EINVAL as isize) };
        post_atomic(ep, count, datatype, op, 0, (v, 0), None, addr, key, ptr::null_mut(), None, true)
    })
}

pub(super) unsafe extern "C" fn atomic_readwritev(ep: *mut fid_ep, iov: *const fi_ioc, desc: *mut *mut c_void, count: usize, resultv: *mut fi_ioc, result_desc: *mut *mut c_void, result_count: usize, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op, context: *mut c_void) -> isize {
    guard(EOTHER_S, || {
        let (res, rn, rdesc) = tri!(one_ioc(resultv, result_desc, result_count));
        // FI_ATOMIC_READ has no operand (its iov may be empty)
        let (v, n) = if op == FI_ATOMIC_READ && (iov.is_null() || count == 0) {
            (0, rn)
        } else {
            let (buf, n, _) = tri!(one_ioc(iov, desc, count));
            let v = if op == FI_ATOMIC_READ { 0 } else { match read_u64(buf) { Some(v) => v, None => return -(FI_EINVAL as isize) } };
            (v, n)
        };
        if res.is_null() || rn != n {
            return -(FI_EINVAL as isize);
        }
        post_atomic(ep, n, datatype, op, FI_FETCH_ATOMIC, (v, 0), Some((res as u64, rdesc)), addr, key, context, None, false)
    })
}

pub(super) unsafe extern "C" fn atomic_readwritemsg(ep: *mut fid_ep, msg: *const fi_msg_atomic, resultv: *mut fi_ioc, result_desc: *mut *mut c_void, result_count: usize, flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(m) = opt(msg) else { return -(FI_EINVAL as isize) };
        let (res, rn, rdesc) = tri!(one_ioc(resultv, result_desc, result_count));
        let (addr, key) = tri!(atomic_target(m));
        let v = if m.op == FI_ATOMIC_READ { 0 } else {
            let (buf, n, _) = tri!(one_ioc(m.msg_iov, m.desc, m.iov_count));
            if n != rn {
                return -(FI_EINVAL as isize);
            }
            match read_u64(buf) { Some(v) => v, None => return -(FI_EINVAL as isize) }
        };
        if res.is_null() {
            return -(FI_EINVAL as isize);
        }
        post_atomic(ep, rn, m.datatype, m.op, FI_FETCH_ATOMIC, (v, 0), Some((res as u64, rdesc)), addr, key, m.context, Some(flags), false)
    })
}

pub(super) unsafe extern "C" fn atomic_compwritev(ep: *mut fid_ep, iov: *const fi_ioc, desc: *mut *mut c_void, count: usize, comparev: *const fi_ioc, compare_desc: *mut *mut c_void, compare_count: usize, resultv: *mut fi_ioc, result_desc: *mut *mut c_void, result_count: usize, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op, context: *mut c_void) -> isize {
    guard(EOTHER_S, || {
        let (buf, n, _) = tri!(one_ioc(iov, desc, count));
        let (cmp, cn, _) = tri!(one_ioc(comparev, compare_desc, compare_count));
        let (res, rn, rdesc) = tri!(one_ioc(resultv, result_desc, result_count));
        let (Some(swap), Some(cmp)) = (read_u64(buf), read_u64(cmp)) else { return -(FI_EINVAL as isize) };
        if res.is_null() || cn != n || rn != n {
            return -(FI_EINVAL as isize);
        }
        post_atomic(ep, n, datatype, op, FI_COMPARE_ATOMIC, (cmp, swap), Some((res as u64, rdesc)), addr, key, context, None, false)
    })
}

pub(super) unsafe extern "C" fn atomic_compwritemsg(ep: *mut fid_ep, msg: *const fi_msg_atomic, comparev: *const fi_ioc, compare_desc: *mut *mut c_void, compare_count: usize, resultv: *mut fi_ioc, result_desc: *mut *mut c_void, result_count: usize, flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(m) = opt(msg) else { return -(FI_EINVAL as isize) };
        let (buf, n, _) = tri!(one_ioc(m.msg_iov, m.desc, m.iov_count));
        let (cmp, cn, _) = tri!(one_ioc(comparev, compare_desc, compare_count));
        let (res, rn, rdesc) = tri!(one_ioc(resultv, result_desc, result_count));
        let (addr, key) = tri!(atomic_target(m));
        let (Some(swap), Some(cmp)) = (read_u64(buf), read_u64(cmp)) else { return -(FI_EINVAL as isize) };
        if res.is_null() || cn != n || rn != n {
            return -(FI_EINVAL as isize);
        }
        post_atomic(ep, n, m.datatype, m.op, FI_COMPARE_ATOMIC, (cmp, swap), Some((res as u64, rdesc)), addr, key, m.context, Some(flags), false)
    })
}
