//! The operation entries: AM short/bcopy/zcopy, PUT, GET, atomics; C iov lists become
//! [`Seg`]s here.

use super::*;

/// Borrow C iov elements as copy sources (`zcopy` false) or registered ranges.
fn segs<'a>(iov: *const DroceIov, n: usize, zcopy: bool) -> Result<Vec<Seg<'a>>, Status> {
    if n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the shim passes `n` flattened elements.
    let iov = unsafe { std::slice::from_raw_parts(iov, n) };
    iov.iter()
        .map(|v| {
            if zcopy {
                if v.memh.is_null() {
                    crate::trace!("zcopy iov {:p}+{} without a memory handle", v.buffer, v.length);
                    return Err(UCS_ERR_INVALID_PARAM);
                }
                // SAFETY: memh of a zcopy iov is a live droce registration (UCT contract).
                let reg = unsafe { &*(v.memh as *const MemReg) };
                Ok(Seg::Zcopy { addr: v.buffer as u64, len: v.length, lkey: reg.lkey })
            } else if v.length == 0 {
                Ok(Seg::Copy(&[]))
            } else {
                // SAFETY: the caller's buffer of `length` bytes, read before the call returns.
                Ok(Seg::Copy(unsafe { std::slice::from_raw_parts(v.buffer as *const u8, v.length) }))
            }
        })
        .collect()
}

#[no_mangle]
pub extern "C" fn droce_rs_am_send(
    rs: *mut c_void,
    ep_rs: *mut c_void,
    id: u8,
    hdr: *const c_void,
    hdr_len: usize,
    iov: *const DroceIov,
    iovcnt: usize,
    zcopy: c_int,
    comp: *mut c_void,
) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        let h: &[u8] = if hdr_len == 0 {
            &[]
        } else {
            // SAFETY: the caller's header of hdr_len bytes, copied before returning.
            unsafe { std::slice::from_raw_parts(hdr as *const u8, hdr_len) }
        };
        let s = match segs(iov, iovcnt, zcopy != 0) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let r = iface(rs).iface.am_send(ep_id(ep_rs), id, h, &s, comp as usize);
        trace!("am_send ep {} id {id} hdr {hdr_len} iov {iovcnt} zcopy {zcopy} -> {r:?}", ep_id(ep_rs));
        match r {
            Ok(()) if zcopy != 0 => UCS_INPROGRESS,
            Ok(()) => UCS_OK,
            Err(e) => e,
        }
    })
}

fn bcopy(rs: *mut c_void, ep_rs: *mut c_void, pack_cb: *mut c_void, arg: *mut c_void, am_id: Option<u8>, remote: Option<(u64, Rkey)>) -> c_long {
    let i = &iface(rs).iface;
    let ep = ep_id(ep_rs);
    let (slot, addr, cap) = match i.bcopy_reserve(ep) {
        Ok(v) => v,
        Err(e) => return e as c_long,
    };
    // SAFETY: the slot (cap bytes at addr) is reserved for this operation; pack_cb/arg come
    // from the caller and write at most the advertised max_bcopy (= cap) bytes.
    let len = unsafe { droce_c_pack(pack_cb, addr as *mut c_void, arg) };
    trace!("bcopy ep {ep} am {am_id:?} remote {remote:?} len {len}");
    if len > cap {
        i.bcopy_abort(slot);
        log(0, &format!("droce: bcopy pack callback wrote {len} B into a {cap} B buffer"));
        return UCS_ERR_EXCEEDS_LIMIT as c_long;
    }
    match i.bcopy_post(ep, slot, len, am_id, remote) {
        Ok(()) => len as c_long,
        Err(e) => e as c_long,
    }
}

#[no_mangle]
pub extern "C" fn droce_rs_am_bcopy(rs: *mut c_void, ep_rs: *mut c_void, id: u8, pack_cb: *mut c_void, arg: *mut c_void) -> c_long {
    guard(UCS_ERR_IO_ERROR as c_long, || bcopy(rs, ep_rs, pack_cb, arg, Some(id), None))
}

#[no_mangle]
pub extern "C" fn droce_rs_put_bcopy(rs: *mut c_void, ep_rs: *mut c_void, pack_cb: *mut c_void, arg: *mut c_void, remote: u64, rkey: u64) -> c_long {
    guard(UCS_ERR_IO_ERROR as c_long, || {
        if iface(rs).iface.kind != Kind::Rc {
            return UCS_ERR_UNSUPPORTED as c_long;
        }
        bcopy(rs, ep_rs, pack_cb, arg, None, Some((remote, Rkey(rkey as u32))))
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_put(rs: *mut c_void, ep_rs: *mut c_void, iov: *const DroceIov, iovcnt: usize, zcopy: c_int, remote: u64, rkey: u64, comp: *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        let s = match segs(iov, iovcnt, zcopy != 0) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let r = iface(rs).iface.put(ep_id(ep_rs), &s, remote, Rkey(rkey as u32), comp as usize);
        trace!("put ep {} segs {:?} remote {remote:#x} rkey {rkey:#x} comp {comp:p} -> {r:?}", ep_id(ep_rs), s.iter().map(|x| match x { Seg::Copy(b) => (0, b.len()), Seg::Zcopy { addr, len, .. } => (*addr, *len) }).collect::<Vec<_>>());
        match r {
            Ok(()) if zcopy != 0 => UCS_INPROGRESS,
            Ok(()) => UCS_OK,
            Err(e) => e,
        }
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_get_bcopy(rs: *mut c_void, ep_rs: *mut c_void, unpack_cb: *mut c_void, arg: *mut c_void, length: usize, remote: u64, rkey: u64, comp: *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        st(iface(rs).iface.get_bcopy(ep_id(ep_rs), unpack_cb as usize, arg as usize, length, remote, Rkey(rkey as u32), comp as usize))
            .then_inprogress()
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_get_zcopy(rs: *mut c_void, ep_rs: *mut c_void, iov: *const DroceIov, iovcnt: usize, remote: u64, rkey: u64, comp: *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        let s = match segs(iov, iovcnt, true) {
            Ok(s) => s,
            Err(e) => return e,
        };
        st(iface(rs).iface.get_zcopy(ep_id(ep_rs), &s, remote, Rkey(rkey as u32), comp as usize)).then_inprogress()
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_atomic(
    rs: *mut c_void,
    ep_rs: *mut c_void,
    op: c_int,
    width: c_int,
    value: u64,
    compare: u64,
    remote: u64,
    rkey: u64,
    result: *mut c_void,
    comp: *mut c_void,
) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        let kind = match op {
            0 => AtomicKind::Add,
            1 => AtomicKind::Swap,
            2 => AtomicKind::Cswap,
            _ => return UCS_ERR_UNSUPPORTED,
        };
        let (value, compare) = if width == 4 { (value & 0xffff_ffff, compare & 0xffff_ffff) } else { (value, compare) };
        let r = iface(rs).iface.atomic(ep_id(ep_rs), kind, width as u8, value, compare, remote, Rkey(rkey as u32), result as usize, comp as usize);
        match r {
            // A post (no result) is complete for the caller once queued.
            Ok(()) if result.is_null() => UCS_OK,
            Ok(()) => UCS_INPROGRESS,
            Err(e) => e,
        }
    })
}

/// `Ok` of an operation that completes later means `UCS_INPROGRESS`.
trait ThenInprogress {
    fn then_inprogress(self) -> c_int;
}

impl ThenInprogress for c_int {
    fn then_inprogress(self) -> c_int {
        if self == UCS_OK {
            UCS_INPROGRESS
        } else {
            self
        }
    }
}
