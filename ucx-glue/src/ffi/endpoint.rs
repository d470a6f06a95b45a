//! The endpoint entries: create, destroy, address, connect, flush, fence, check, pending.

use super::*;

/// Endpoint ids are slab indices, passed to C as pointer-sized values (+1, never NULL).
pub(super) fn ep_id(ep_rs: *mut c_void) -> u32 {
    (ep_rs as usize).wrapping_sub(1) as u32
}

#[no_mangle]
pub extern "C" fn droce_rs_ep_create(rs: *mut c_void, ep_c: *mut c_void, dev_addr: *const u8, iface_addr: *const u8, ep_rs: *mut *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        // SAFETY: when present, the addresses have this transport's lengths (16 and 4 bytes).
        let dev = (!dev_addr.is_null()).then(|| unsafe { &*(dev_addr as *const [u8; DEV_ADDR_LEN]) });
        // SAFETY: as above.
        let ifa = (!iface_addr.is_null()).then(|| unsafe { &*(iface_addr as *const [u8; UD_IFACE_ADDR_LEN]) });
        let r = iface(rs).iface.ep_create(ep_c as usize, dev, ifa);
        trace!("ep_create {:?} -> {r:?}", iface(rs).iface.kind);
        match r {
            Ok(id) => {
                // SAFETY: valid out pointer from the shim.
                unsafe { *ep_rs = (id as usize + 1) as *mut c_void };
                UCS_OK
            }
            Err(e) => e,
        }
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_ep_destroy(rs: *mut c_void, ep_rs: *mut c_void) {
    guard((), || iface(rs).iface.ep_destroy(ep_id(ep_rs)))
}

#[no_mangle]
pub extern "C" fn droce_rs_ep_address(rs: *mut c_void, ep_rs: *mut c_void, addr: *mut u8) -> c_int {
    guard(UCS_ERR_IO_ERROR, || match iface(rs).iface.ep_address(ep_id(ep_rs)) {
        Ok(a) => {
            // SAFETY: UCX allocates ep_addr_len (8) bytes.
            unsafe { std::ptr::copy_nonoverlapping(a.as_ptr(), addr, a.len()) };
            UCS_OK
        }
        Err(e) => e,
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_ep_connect_to_ep(rs: *mut c_void, ep_rs: *mut c_void, dev_addr: *const u8, ep_addr: *const u8) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        if dev_addr.is_null() || ep_addr.is_null() {
            return UCS_ERR_INVALID_PARAM;
        }
        // SAFETY: addresses of this transport: 16-byte device address, 8-byte ep address.
        let (d, e) = unsafe { (&*(dev_addr as *const [u8; DEV_ADDR_LEN]), &*(ep_addr as *const [u8; RC_EP_ADDR_LEN])) };
        let r = iface(rs).iface.ep_connect_to_ep(ep_id(ep_rs), d, e);
        trace!("connect_to_ep ep {} -> {r:?}", ep_id(ep_rs));
        st(r)
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_ep_flush(rs: *mut c_void, ep_rs: *mut c_void, flags: c_uint, comp: *mut c_void) -> c_int {
    // UCT_FLUSH_FLAG_CANCEL = 1
    guard(UCS_ERR_IO_ERROR, || {
        let r = iface(rs).iface.ep_flush(ep_id(ep_rs), flags & 1 != 0, comp as usize);
        trace!("ep_flush ep {} flags {flags} comp {comp:p} -> {r}", ep_id(ep_rs));
        r
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_ep_fence(rs: *mut c_void, ep_rs: *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || iface(rs).iface.ep_fence(ep_id(ep_rs)))
}

#[no_mangle]
pub extern "C" fn droce_rs_ep_check(rs: *mut c_void, ep_rs: *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || iface(rs).iface.ep_check(ep_id(ep_rs)))
}

#[no_mangle]
pub extern "C" fn droce_rs_ep_pending_add(rs: *mut c_void, ep_rs: *mut c_void, req: *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        let r = iface(rs).iface.pending_add(ep_id(ep_rs), req as usize);
        trace!("pending_add {:?} ep {} req {req:p} -> {r}", iface(rs).iface.kind, ep_id(ep_rs));
        r
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_ep_pending_purge(rs: *mut c_void, ep_rs: *mut c_void, cb: *mut c_void, arg: *mut c_void) {
    guard((), || {
        for req in iface(rs).iface.pending_take(ep_id(ep_rs)) {
            // SAFETY: cb/arg from uct_ep_pending_purge; req was queued by pending_add.
            unsafe { droce_c_pending_purge_cb(cb, req as *mut c_void, arg) };
        }
    })
}
