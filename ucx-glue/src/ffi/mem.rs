//! The memory domain entries: registration through the runtime's verbs, rkey packing.

use super::*;

/// The MD has no state of its own: registrations go to the process-wide runtime.
#[no_mangle]
pub extern "C" fn droce_rs_md_open(md_rs: *mut *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        // SAFETY: the shim passes a valid out pointer.
        unsafe { *md_rs = std::ptr::NonNull::<c_void>::dangling().as_ptr() };
        UCS_OK
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_md_close(_md_rs: *mut c_void) {}

pub(super) fn host_or_log() -> Result<&'static std::sync::Mutex<runtime::Runtime>, Status> {
    runtime::global().map_err(|e| {
        log(0, &format!("droce: {e}"));
        UCS_ERR_NO_DEVICE
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_mem_reg(_md_rs: *mut c_void, address: *mut c_void, length: usize, memh: *mut *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        let reg = if length == 0 {
            MemReg { lkey: Lkey(0), rkey: Rkey(0), addr: address as u64, len: 0 }
        } else {
            let hm = match host_or_log() {
                Ok(h) => h,
                Err(e) => return e,
            };
            let mut h = hm.lock().unwrap_or_else(PoisonError::into_inner);
            let pd = md::pd(&mut h);
            // SAFETY: UCT's contract: the range stays mapped until mem_dereg, which removes it
            // from the device before returning.
            match unsafe { h.reg_mr(pd, address as *mut u8, length, AccessFlags::ALL) } {
                Ok(mr) => MemReg { lkey: mr.lkey, rkey: mr.rkey, addr: address as u64, len: length as u64 },
                Err(e) => {
                    log(0, &format!("droce: memory registration of {length} B at {address:p} failed: {e:?}"));
                    return UCS_ERR_IO_ERROR;
                }
            }
        };
        crate::trace!("mem_reg {address:p}+{length} -> {reg:?}");
        // SAFETY: valid out pointer from the shim.
        unsafe { *memh = Box::into_raw(Box::new(reg)) as *mut c_void };
        UCS_OK
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_mem_dereg(_md_rs: *mut c_void, memh: *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        if memh.is_null() {
            return UCS_ERR_INVALID_PARAM;
        }
        // SAFETY: memh came from droce_rs_mem_reg (Box::into_raw) and is released once.
        let reg = unsafe { Box::from_raw(memh as *mut MemReg) };
        if reg.len == 0 {
            return UCS_OK;
        }
        match runtime::global() {
            Ok(hm) => match hm.lock().unwrap_or_else(PoisonError::into_inner).dereg_mr(reg.lkey) {
                Ok(()) => UCS_OK,
                Err(_) => UCS_ERR_INVALID_PARAM,
            },
            Err(_) => UCS_ERR_NO_DEVICE,
        }
    })
}

/// # Safety contract (C side)
/// `memh` from droce_rs_mem_reg, `buf` has DROCE_RKEY_PACKED_LEN bytes.
#[no_mangle]
pub extern "C" fn droce_rs_mkey_pack(memh: *mut c_void, buf: *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        if memh.is_null() {
            return UCS_ERR_INVALID_PARAM;
        }
        // SAFETY: memh is a live MemReg (see above).
        let reg = unsafe { &*(memh as *const MemReg) };
        let p = md::pack_rkey(reg.rkey);
        // SAFETY: the shim reports rkey_packed_size = 8, UCX allocates that much.
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), buf as *mut u8, p.len()) };
        UCS_OK
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_rkey_unpack(buf: *const c_void, rkey: *mut u64) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        let mut b = [0u8; 8];
        // SAFETY: a packed droce rkey is 8 bytes (rkey_packed_size).
        unsafe { std::ptr::copy_nonoverlapping(buf as *const u8, b.as_mut_ptr(), 8) };
        match md::unpack_rkey(&b) {
            Ok(r) => {
                // SAFETY: valid out pointer from the shim.
                unsafe { *rkey = r.0 as u64 };
                UCS_OK
            }
            Err(e) => e,
        }
    })
}
