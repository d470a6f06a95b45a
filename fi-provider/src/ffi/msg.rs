//! The message and RMA data path (fi_send*, fi_inject*, fi_recv*, fi_write*, fi_read*):
//! pointers into slices and descriptors into lkeys; the engine's posting does the rest.

use super::sys::*;
use super::*;
use crate::engine::{self, RxRequest, Tx, TxRequest};
use crate::info as pinfo;
use droce_transport::Lkey;

/// Room for the caller's list: one entry past the largest iov limit (enough for the limit
/// check to refuse a longer one; a wild count is not walked).
const ROOM: usize = pinfo::IOV_LIMIT as usize + 1;

/// A short list on the stack (an iov or its descriptors): a post builds no `Vec`.
pub(super) struct Few<T> {
    n: usize,
    a: [T; ROOM],
}

impl<T> std::ops::Deref for Few<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.a[..self.n]
    }
}

/// The caller's list, at most [`ROOM`] entries.
pub(super) fn iovs(iov: *const iovec, count: usize) -> Few<(u64, u64)> {
    let mut l = Few { n: 0, a: [(0, 0); ROOM] };
    if iov.is_null() {
        return l;
    }
    l.n = count.min(ROOM);
    // SAFETY: the caller passes `count` (or more) iovecs at iov.
    let src = unsafe { std::slice::from_raw_parts(iov, l.n) };
    for (d, v) in l.a.iter_mut().zip(src) {
        *d = (v.iov_base as u64, v.iov_len as u64);
    }
    l
}

/// The lkeys the caller's descriptors name (None for a NULL or foreign one), at most
/// [`ROOM`] entries like [`iovs`].
pub(super) fn descs(desc: *mut *mut c_void, count: usize) -> Few<Option<Lkey>> {
    let mut l = Few { n: count.min(ROOM), a: [None; ROOM] };
    if desc.is_null() {
        return l;
    }
    // SAFETY: the caller passes `count` (or more) descriptors at desc.
    let src = unsafe { std::slice::from_raw_parts(desc, l.n) };
    for (d, p) in l.a.iter_mut().zip(src) {
        *d = lkey_of(*p);
    }
    l
}

#[allow(clippy::too_many_arguments)]
pub(super) fn post_tx(ep: *mut fid_ep, iov: &[(u64, u64)], desc: &[Option<Lkey>], dest: u64, context: *mut c_void, flags: Option<u64>, imm: Option<u64>, kind: Tx, inject: bool) -> isize {
    let Some(o) = ep_obj(ep) else { return -(FI_EINVAL as isize) };
    let Some(mut e) = engine::engine_if_open() else { return -(FI_EOPBADSTATE as isize) };
    ret_ssize(e.post_tx(&AppBuffers, o.id, TxRequest { iov, desc, dest, context: context as usize, flags, imm, kind, inject }))
}

/// `flags`: fi_recvmsg's (None: the endpoint's receive op_flags).
pub(super) fn post_rx(ep: *mut fid_ep, iov: &[(u64, u64)], desc: &[Option<Lkey>], context: *mut c_void, flags: Option<u64>) -> isize {
    let Some(o) = ep_obj(ep) else {
        if engine::debug() {
            eprintln!("droce-fi: recv on a NULL endpoint");
        }
        return -(FI_EINVAL as isize);
    };
    let Some(mut e) = engine::engine_if_open() else { return -(FI_EOPBADSTATE as isize) };
    ret_ssize(e.post_rx(&AppBuffers, o.id, RxRequest { iov, desc, context: context as usize, flags }))
}

pub(super) unsafe extern "C" fn recv(ep: *mut fid_ep, buf: *mut c_void, len: usize, desc: *mut c_void, _src: fi_addr_t, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_rx(ep, &[(buf as u64, len as u64)], &[lkey_of(desc)], context, None))
}

pub(super) unsafe extern "C" fn recvv(ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, _src: fi_addr_t, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_rx(ep, &iovs(iov, count), &descs(desc, count), context, None))
}

pub(super) unsafe extern "C" fn recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(m) = opt(msg) else { return -(FI_EINVAL as isize) };
        post_rx(ep, &iovs(m.msg_iov, m.iov_count), &descs(m.desc, m.iov_count), m.context, Some(flags))
    })
}

pub(super) unsafe extern "C" fn send(ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, dest: fi_addr_t, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[lkey_of(desc)], dest, context, None, None, Tx::Send, false))
}

pub(super) unsafe extern "C" fn sendv(ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, dest: fi_addr_t, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &iovs(iov, count), &descs(desc, count), dest, context, None, None, Tx::Send, false))
}

pub(super) unsafe extern "C" fn sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(m) = opt(msg) else { return -(FI_EINVAL as isize) };
        let imm = (flags & FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
        post_tx(ep, &iovs(m.msg_iov, m.iov_count), &descs(m.desc, m.iov_count), m.addr, m.context, Some(flags), imm, Tx::Send, false)
    })
}

pub(super) unsafe extern "C" fn inject(ep: *mut fid_ep, buf: *const c_void, len: usize, dest: fi_addr_t) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[None], dest, ptr::null_mut(), None, None, Tx::Send, true))
}

pub(super) unsafe extern "C" fn senddata(ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, data: u64, dest: fi_addr_t, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[lkey_of(desc)], dest, context, None, Some(data), Tx::Send, false))
}

pub(super) unsafe extern "C" fn injectdata(ep: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest: fi_addr_t) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[None], dest, ptr::null_mut(), None, Some(data), Tx::Send, true))
}

pub(super) unsafe extern "C" fn rma_read(ep: *mut fid_ep, buf: *mut c_void, len: usize, desc: *mut c_void, src: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[lkey_of(desc)], src, context, None, None, Tx::Read(addr, key), false))
}

pub(super) unsafe extern "C" fn rma_readv(ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, src: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &iovs(iov, count), &descs(desc, count), src, context, None, None, Tx::Read(addr, key), false))
}

pub(super) fn rma_target(m: &fi_msg_rma) -> Option<(u64, u64)> {
    if m.rma_iov_count != 1 || m.rma_iov.is_null() {
        return None;
    }
    // SAFETY: one fi_rma_iov as counted.
    let r = unsafe { *m.rma_iov };
    Some((r.addr, r.key))
}

pub(super) unsafe extern "C" fn rma_readmsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(m) = opt(msg) else { return -(FI_EINVAL as isize) };
        let Some((a, k)) = rma_target(m) else { return -(FI_EINVAL as isize) };
        post_tx(ep, &iovs(m.msg_iov, m.iov_count), &descs(m.desc, m.iov_count), m.addr, m.context, Some(flags), None, Tx::Read(a, k), false)
    })
}

pub(super) unsafe extern "C" fn rma_write(ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, dest: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[lkey_of(desc)], dest, context, None, None, Tx::Write(addr, key), false))
}

pub(super) unsafe extern "C" fn rma_writev(ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, dest: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &iovs(iov, count), &descs(desc, count), dest, context, None, None, Tx::Write(addr, key), false))
}

pub(super) unsafe extern "C" fn rma_writemsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(m) = opt(msg) else { return -(FI_EINVAL as isize) };
        let Some((a, k)) = rma_target(m) else { return -(FI_EINVAL as isize) };
        let imm = (flags & FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
        post_tx(ep, &iovs(m.msg_iov, m.iov_count), &descs(m.desc, m.iov_count), m.addr, m.context, Some(flags), imm, Tx::Write(a, k), false)
    })
}

pub(super) unsafe extern "C" fn rma_inject(ep: *mut fid_ep, buf: *const c_void, len: usize, dest: fi_addr_t, addr: u64, key: u64) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[None], dest, ptr::null_mut(), None, None, Tx::Write(addr, key), true))
}

pub(super) unsafe extern "C" fn rma_writedata(ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, data: u64, dest: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[lkey_of(desc)], dest, context, None, Some(data), Tx::Write(addr, key), false))
}

pub(super) unsafe extern "C" fn rma_injectdata(ep: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest: fi_addr_t, addr: u64, key: u64) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[None], dest, ptr::null_mut(), None, Some(data), Tx::Write(addr, key), true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iov_and_desc_lists_are_clamped_and_null_safe() {
        let bufs = [[0u8; 4]; 12];
        let v: Vec<iovec> = bufs.iter().map(|b| iovec { iov_base: b.as_ptr() as *mut c_void, iov_len: b.len() }).collect();
        let l = iovs(v.as_ptr(), 3);
        assert_eq!(&l[..], &[(bufs[0].as_ptr() as u64, 4), (bufs[1].as_ptr() as u64, 4), (bufs[2].as_ptr() as u64, 4)]);
        // a count past the limit is cut one past it (the limit check then refuses it)
        assert_eq!(iovs(v.as_ptr(), 12).len(), ROOM);
        assert!(iovs(ptr::null(), 5).is_empty());
        // NULL descriptors: one None per entry
        assert_eq!(&descs(ptr::null_mut(), 2)[..], &[None, None]);
        let mut d = [ptr::null_mut::<c_void>(); 12];
        assert_eq!(descs(d.as_mut_ptr(), 12).len(), ROOM);
        assert!(descs(d.as_mut_ptr(), 4).iter().all(Option::is_none));
    }
}
