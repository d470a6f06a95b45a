//! The interface entries: open/close, figures and addresses, progress (running the events
//! it returns and the pending requests with no lock held), flush and fence.

use super::*;

/// The Rust side of a `droce_iface_t`: the interface and its registered block.
pub(super) struct IfaceBox {
    pub(super) iface: Iface,
    block: *mut u8,
    block_layout: AllocLayout,
}

pub(super) fn iface<'a>(rs: *mut c_void) -> &'a IfaceBox {
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
        if b.iface.close() {
            // SAFETY: close() destroyed every queue using the block and deregistered it.
            unsafe { dealloc(b.block, b.block_layout) };
        } else {
            log(1, "droce: the interface's slot block is still referenced by frames in flight (zero-copy transmit); leaked, not freed");
        }
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
