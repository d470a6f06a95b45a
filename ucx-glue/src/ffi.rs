//! The `extern "C"` entries the shim calls (`shim/droce_abi.h`) and the calls back into it.
//! The only module with `unsafe`: it turns C pointers into Rust values, calls [`crate::iface`]
//! and [`crate::md`], and runs the UCX callbacks those return with no lock held. Every entry
//! catches panics (a panic becomes `UCS_ERR_IO_ERROR` and an error log line).

use crate::iface::{AtomicKind, Event, Iface, IfaceCfg, Info, Kind, Layout, Seg, DEV_ADDR_LEN, RC_EP_ADDR_LEN, UD_IFACE_ADDR_LEN};
use crate::md::{self, MemReg};
use crate::status::*;
use droce_dpdk::runtime;
use droce_transport::verbs::AccessFlags;
use droce_transport::{Lkey, Rkey};
use std::alloc::{alloc_zeroed, dealloc, Layout as AllocLayout};
use std::ffi::{c_char, c_int, c_long, c_uint, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::PoisonError;

#[repr(C)]
pub struct DroceIfaceCfg {
    pub seg_size: usize,
    pub tx_queue_len: c_uint,
    pub rx_queue_len: c_uint,
}

/// `droce_iface_info_t` of shim/droce_abi.h: the transport's figures as they are (`iface::Info`
/// is `repr(C)` with the same fields in the same order).
pub type DroceIfaceInfo = Info;

#[repr(C)]
pub struct DroceIov {
    pub buffer: *mut c_void,
    pub length: usize,
    pub memh: *mut c_void,
}

extern "C" {
    fn droce_c_invoke_am(iface_c: *mut c_void, id: u8, data: *mut c_void, length: c_uint) -> c_int;
    fn droce_c_complete(comp: *mut c_void, status: c_int);
    fn droce_c_pending_call(req: *mut c_void) -> c_int;
    fn droce_c_pending_purge_cb(cb: *mut c_void, req: *mut c_void, arg: *mut c_void);
    fn droce_c_pack(pack_cb: *mut c_void, dest: *mut c_void, arg: *mut c_void) -> usize;
    fn droce_c_unpack(unpack_cb: *mut c_void, arg: *mut c_void, data: *const c_void, length: usize);
    fn droce_c_ep_failed(iface_c: *mut c_void, ep_c: *mut c_void, status: c_int) -> c_int;
    fn droce_c_log(level: c_int, msg: *const c_char);
}

fn log(level: i32, msg: &str) {
    if let Ok(c) = CString::new(msg) {
        // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
        unsafe { droce_c_log(level, c.as_ptr()) };
    }
}

/// An endpoint failed and nobody handles it: `uct_iface_handle_ep_err` returned an error, i.e.
/// the application installed no UCT error handler (ucx_perftest's UCT tests) or UCP runs the
/// endpoint with `UCP_ERR_HANDLING_MODE_NONE`. UCX's own RDMA transports treat this as fatal
/// (rc_verbs logs at FATAL level, which aborts the process); UCX's tcp transport ignores it and
/// the application waits forever for traffic that cannot come (ucx_perftest -t am_lat over tcp
/// with its peer killed ran until an outside timeout). droce ends the process the way the RDMA
/// transports do, without the core dump: the reason on stderr, stdio flushed, `_exit(1)`
/// (no exit handlers: they would run UCX's destructors under a worker in the middle of
/// progress).
fn unhandled_failure(kind: Kind, why: &str, status: c_int) -> ! {
    log(0, &format!("droce: {kind:?} endpoint failed ({why}, status {status}) and the application handles no endpoint errors (UCT: no error handler; UCP: error handling mode none): exiting with status 1"));
    // SAFETY: fflush(NULL) flushes every open output stream; _exit ends the process at once.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(1)
    }
}

/// Run `f`, turning a panic into `on_panic` and an error log line.
fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            let what = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default();
            log(0, &format!("droce: internal error (panic caught at the UCX boundary): {what}"));
            on_panic
        }
    }
}

fn st(r: Result<(), Status>) -> c_int {
    match r {
        Ok(()) => UCS_OK,
        Err(e) => e,
    }
}

// ---------------------------------------------------------------------- memory domain

/// The MD has no state of its own: registrations go to the process-wide host.
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

fn host_or_log() -> Result<&'static std::sync::Mutex<runtime::Runtime>, Status> {
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

// ---------------------------------------------------------------------- interface

/// The Rust side of a `droce_iface_t`: the interface and its registered block.
struct IfaceBox {
    iface: Iface,
    block: *mut u8,
    block_layout: AllocLayout,
}

fn iface<'a>(rs: *mut c_void) -> &'a IfaceBox {
    // SAFETY: rs is the Box<IfaceBox> made by droce_rs_iface_open, alive until iface_close;
    // UCT never calls an interface op after iface_close.
    unsafe { &*(rs as *const IfaceBox) }
}

#[no_mangle]
pub extern "C" fn droce_rs_iface_open(iface_c: *mut c_void, kind: c_int, cfg: *const DroceIfaceCfg, rs: *mut *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        let kind = if kind == 0 { Kind::Rc } else { Kind::Ud };
        // SAFETY: the shim passes a valid config struct.
        let cfg = unsafe { &*cfg };
        let cfg = IfaceCfg { seg_size: cfg.seg_size, tx_queue_len: cfg.tx_queue_len, rx_queue_len: cfg.rx_queue_len };
        let hm = match host_or_log() {
            Ok(h) => h,
            Err(e) => return e,
        };
        let mut h = hm.lock().unwrap_or_else(PoisonError::into_inner);
        let pd = md::pd(&mut h);
        let lay = Layout::new(kind, &cfg, h.path_mtu());
        let Ok(al) = AllocLayout::from_size_align(lay.bytes(), 4096) else { return UCS_ERR_INVALID_PARAM };
        // SAFETY: non-zero size (at least 16 receive + 4 send slots of 256 B).
        let block = unsafe { alloc_zeroed(al) };
        if block.is_null() {
            return UCS_ERR_NO_MEMORY;
        }
        // SAFETY: the block is ours until iface_close, which deregisters it before freeing it.
        let mr = match unsafe { h.reg_mr(pd, block, lay.bytes(), AccessFlags::ALL) } {
            Ok(mr) => mr,
            Err(e) => {
                // SAFETY: allocated above with `al`, never registered.
                unsafe { dealloc(block, al) };
                log(0, &format!("droce: registering interface buffers failed: {e:?}"));
                return UCS_ERR_NO_MEMORY;
            }
        };
        match Iface::new(kind, iface_c as usize, hm, &mut h, pd, mr.lkey, block as u64, lay) {
            Ok(i) => {
                let b = Box::new(IfaceBox { iface: i, block, block_layout: al });
                // SAFETY: valid out pointer from the shim.
                unsafe { *rs = Box::into_raw(b) as *mut c_void };
                UCS_OK
            }
            Err(msg) => {
                let _ = h.dereg_mr(mr.lkey);
                // SAFETY: deregistered just above; nothing else refers to the block.
                unsafe { dealloc(block, al) };
                log(0, &msg);
                UCS_ERR_IO_ERROR
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_iface_close(rs: *mut c_void) {
    guard((), || {
        // SAFETY: made by droce_rs_iface_open; the shim calls close once, after disabling progress.
        let b = unsafe { Box::from_raw(rs as *mut IfaceBox) };
        b.iface.close();
        // SAFETY: close() destroyed every queue using the block and deregistered it.
        unsafe { dealloc(b.block, b.block_layout) };
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_iface_info(rs: *mut c_void, out: *mut DroceIfaceInfo) {
    guard((), || {
        let i: Info = iface(rs).iface.info();
        // SAFETY: valid out pointer from the shim.
        unsafe { *out = i };
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_iface_device_address(rs: *mut c_void, addr: *mut u8) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        let a = iface(rs).iface.device_address();
        // SAFETY: UCX allocates device_addr_len (16) bytes.
        unsafe { std::ptr::copy_nonoverlapping(a.as_ptr(), addr, a.len()) };
        UCS_OK
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_iface_address(rs: *mut c_void, addr: *mut u8) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        let i = &iface(rs).iface;
        if i.kind == Kind::Ud {
            let a = i.iface_address();
            // SAFETY: UCX allocates iface_addr_len (4) bytes.
            unsafe { std::ptr::copy_nonoverlapping(a.as_ptr(), addr, a.len()) };
        }
        UCS_OK
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_iface_is_reachable(rs: *mut c_void, dev_addr: *const u8, iface_addr: *const u8) -> c_int {
    guard(0, || {
        let i = &iface(rs).iface;
        if dev_addr.is_null() || (i.kind == Kind::Ud && iface_addr.is_null()) {
            return 0;
        }
        // SAFETY: a device address of this transport is 16 bytes.
        let d = unsafe { &*(dev_addr as *const [u8; DEV_ADDR_LEN]) };
        i.is_reachable(d) as c_int
    })
}

/// Run the events of a progress round (no lock held), then the pending requests.
fn run_events(b: &IfaceBox, events: Vec<Event>) {
    for e in &events {
        trace!("event {e:?}");
        match *e {
            Event::Am { id, addr, len, .. } => {
                // SAFETY: addr..addr+len is a received buffer of this interface, not reposted
                // before after_events(); the C side passes it to the AM handler.
                unsafe { droce_c_invoke_am(b.iface.c as *mut c_void, id, addr as *mut c_void, len as c_uint) };
            }
            Event::Complete { comp, status } => {
                // SAFETY: comp is the uct_completion_t* given with the operation, still owned by
                // the caller until this completion.
                unsafe { droce_c_complete(comp as *mut c_void, status) };
            }
            Event::Unpack { cb, arg, addr, len, .. } => {
                // SAFETY: cb/arg came with uct_ep_get_bcopy; the data lies in a send slot that is
                // freed only in after_events().
                unsafe { droce_c_unpack(cb as *mut c_void, arg as *mut c_void, addr as *const c_void, len) };
            }
            Event::AtomicResult { result, width, value } => {
                // SAFETY: result is the caller's uint32_t*/uint64_t* of the fetching atomic.
                unsafe {
                    if width == 4 {
                        *(result as *mut u32) = value as u32;
                    } else {
                        *(result as *mut u64) = value;
                    }
                }
            }
            Event::EpFailed { ep_c, status, peer_gone } => {
                let why = match (peer_gone, status == UCS_ERR_ENDPOINT_TIMEOUT, b.iface.kind) {
                    (true, _, _) => "Endpoint timeout: the memif link to the peer went down, the peer process has gone",
                    (false, true, Kind::Ud) => "Endpoint timeout: no acknowledgement from the peer for 4 s",
                    (false, true, Kind::Rc) => "Endpoint timeout: retries exhausted, the peer does not acknowledge",
                    (false, false, _) => "a work request failed",
                };
                log(1, &format!("droce: {:?} endpoint {ep_c:#x} failed ({why}, status {status})", b.iface.kind));
                // SAFETY: ep_c is the droce_ep_t* of a live endpoint of this interface.
                let handled = unsafe { droce_c_ep_failed(b.iface.c as *mut c_void, ep_c as *mut c_void, status) };
                if handled != UCS_OK {
                    unhandled_failure(b.iface.kind, why, status);
                }
            }
        }
    }
    b.iface.after_events(events);
}

fn dispatch_pending(b: &IfaceBox) -> u32 {
    let mut n = 0;
    // Bounded: at most one round over the send slots per progress call.
    for _ in 0..1024 {
        let Some((ep, req)) = b.iface.pending_next() else { break };
        // SAFETY: req is a uct_pending_req_t* queued by ep_pending_add and not yet purged.
        let s = unsafe { droce_c_pending_call(req as *mut c_void) };
        trace!("pending call ep {ep} req {req:#x} -> {s}");
        n += 1;
        if !b.iface.pending_done(ep, req, s) {
            break;
        }
    }
    n
}

#[no_mangle]
pub extern "C" fn droce_rs_iface_progress(rs: *mut c_void) -> c_uint {
    guard(0, || {
        let b = iface(rs);
        let p = b.iface.progress();
        if !p.events.is_empty() {
            run_events(b, p.events);
        }
        p.count + if p.pending { dispatch_pending(b) } else { 0 }
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_iface_flush(rs: *mut c_void, _flags: c_uint, comp: *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || {
        let r = iface(rs).iface.iface_flush(comp as usize);
        trace!("iface_flush {:?} comp {comp:p} -> {r}", iface(rs).iface.kind);
        r
    })
}

#[no_mangle]
pub extern "C" fn droce_rs_iface_fence(rs: *mut c_void) -> c_int {
    guard(UCS_ERR_IO_ERROR, || iface(rs).iface.iface_fence())
}

// ---------------------------------------------------------------------- endpoints

/// Endpoint ids are slab indices, passed to C as pointer-sized values (+1, never NULL).
fn ep_id(ep_rs: *mut c_void) -> u32 {
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

// ---------------------------------------------------------------------- operations

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
