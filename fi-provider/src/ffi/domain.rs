//! Domain, memory registration, completion queues, event queues, counters, address vectors.

use super::sys::*;
use super::*;
use crate::addr::{self, EpAddr};
use crate::engine::{self, Engine, EqEvent, Id, Mr};
use crate::queue::{CqEntry, ADDR_NOTAVAIL};
use droce_transport::verbs::AccessFlags;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------- engine setup

const BOUNCE_LEN: usize = 64 * 1024;

/// Runs once when the engine opens: registers the bounce area for inline sends.
pub(crate) fn init_engine(e: &mut Engine) {
    let area: &'static mut [u8] = Box::leak(vec![0u8; BOUNCE_LEN].into_boxed_slice());
    let pd = e.pd;
    let ptr = area.as_mut_ptr();
    // SAFETY: `area` is leaked (never freed or moved) and only touched by the engine, under
    // its lock, right before an INLINE post that copies it.
    let mr = unsafe { e.host().reg_mr(pd, ptr, BOUNCE_LEN, AccessFlags::LOCAL_WRITE) };
    if let Ok(mr) = mr {
        e.bounce = Some((area, mr.lkey));
    }
}

/// Auto progress (FI_PROGRESS_AUTO domains, FD wait objects): the runtime's progress thread
/// runs the same progress step as the reads.
pub(crate) fn start_auto_progress() {
    droce_dpdk::runtime::start_progress_thread(Some(auto_progress_step));
}

fn auto_progress_step() -> bool {
    match engine::engine_if_open() {
        Some(mut e) => {
            e.auto_progress = true;
            e.progress()
        }
        None => false,
    }
}

/// An empty CQ's wait descriptor made readable by fi_cq_signal is quiet again (fi_trywait
/// found nothing to read).
pub(crate) fn settle_if_empty(e: &mut Engine, f: *mut fid) {
    let Some(fr) = opt(f) else { return };
    if fr.fclass as u32 == FI_CLASS_CQ {
        // SAFETY: an FI_CLASS_CQ fid of ours is the first field of a CqObj.
        let id = unsafe { (*(f as *const CqObj)).id };
        if let Some(c) = e.cqs.get_mut(&id) {
            c.q.settle();
        }
    }
}

/// Whether `f` (a CQ, EQ or counter of ours) has something to read (fi_trywait).
pub(crate) fn fid_has_data(e: &Engine, f: *mut fid) -> bool {
    let Some(fr) = opt(f) else { return false };
    match fr.fclass as u32 {
        FI_CLASS_CQ => {
            let o = f as *const CqObj;
            // SAFETY: an FI_CLASS_CQ fid of ours is the first field of a CqObj.
            let id = unsafe { (*o).id };
            e.cqs.get(&id).is_some_and(|c| !c.q.is_empty())
        }
        FI_CLASS_EQ => {
            let o = f as *const EqObj;
            // SAFETY: an FI_CLASS_EQ fid of ours is the first field of an EqObj.
            let id = unsafe { (*o).id };
            e.eqs.get(&id).is_some_and(|q| !q.is_empty())
        }
        _ => false,
    }
}

// ---------------------------------------------------------------------------- domain

#[repr(C)]
pub(crate) struct Domain {
    d: fid_domain,
}
const _: () = assert!(std::mem::offset_of!(Domain, d) == 0);

static DOMAIN_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(domain_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

static DOMAIN_OPS: fi_ops_domain = fi_ops_domain {
    size: std::mem::size_of::<fi_ops_domain>(),
    av_open: Some(av_open),
    cq_open: Some(cq_open),
    endpoint: Some(super::ep::ep_open),
    scalable_ep: nosys!(fn(*mut fid_domain, *mut fi_info, *mut *mut fid_ep, *mut c_void) -> c_int),
    cntr_open: Some(cntr_open),
    poll_open: nosys!(fn(*mut fid_domain, *mut fi_poll_attr, *mut *mut fid_poll) -> c_int),
    stx_ctx: Some(super::ep::stx_open),
    srx_ctx: Some(super::ep::srx_open),
    query_atomic: Some(super::ep::query_atomic),
    query_collective: nosys!(fn(*mut fid_domain, fi_collective_op, *mut fi_collective_attr, u64) -> c_int),
    endpoint2: nosys!(fn(*mut fid_domain, *mut fi_info, *mut *mut fid_ep, u64, *mut c_void) -> c_int),
};

static MR_OPS: fi_ops_mr = fi_ops_mr { size: std::mem::size_of::<fi_ops_mr>(), reg: Some(mr_reg), regv: Some(mr_regv), regattr: Some(mr_regattr) };

pub(crate) unsafe extern "C" fn domain_open(_fabric: *mut fid_fabric, info: *mut fi_info, dom: *mut *mut fid_domain, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if dom.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let Some(v) = view(info) else { return -(FI_EINVAL as c_int) };
        if let Some(n) = opt(info).and_then(|i| opt(i.domain_attr)).and_then(|d| cstr(d.name)) {
            if n != crate::info::DOMAIN_NAME {
                return -(FI_EINVAL as c_int);
            }
        }
        if let Err(e) = open_engine() {
            return -(e as c_int);
        }
        if v.progress_auto {
            start_auto_progress();
        }
        let b = Box::new(Domain {
            d: fid_domain {
                fid: fid { fclass: FI_CLASS_DOMAIN as usize, context, ops: ops_ptr(&DOMAIN_FI_OPS) },
                ops: ops_ptr(&DOMAIN_OPS),
                mr: ops_ptr(&MR_OPS),
            },
        });
        // SAFETY: out pointer checked; the application owns the object until fi_close.
        unsafe { *dom = Box::into_raw(b) as *mut fid_domain };
        0
    })
}

unsafe extern "C" fn domain_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if engine::debug() {
            if let Some(e) = engine::engine_if_open() {
                let h = e.host();
                let port = h.port_id().0;
                let st = h.stats();
                eprintln!("{}", droce_dpdk::roce::format_roce_stats(port, &st));
            }
        }
        if !f.is_null() {
            // SAFETY: f is the fid of a Domain from domain_open.
            drop(unsafe { Box::from_raw(f as *mut Domain) });
        }
        0
    })
}

// ---------------------------------------------------------------------------- MR

#[repr(C)]
pub(crate) struct MrObj {
    m: fid_mr,
    lkey: droce_transport::Lkey,
}
const _: () = assert!(std::mem::offset_of!(MrObj, m) == 0);

static MR_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(mr_close),
    bind: Some(mr_bind),
    control: Some(mr_control),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

/// A memory descriptor is the lkey tagged so that it is never NULL.
const DESC_TAG: usize = 1 << 40;
pub(crate) fn desc_of(lkey: droce_transport::Lkey) -> *mut c_void {
    (DESC_TAG | lkey.0 as usize) as *mut c_void
}
pub(crate) fn lkey_of(desc: *mut c_void) -> Option<droce_transport::Lkey> {
    let v = desc as usize;
    (v & !0xffff_ffff == DESC_TAG).then_some(droce_transport::Lkey(v as u32))
}

fn access_of(access: u64) -> AccessFlags {
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

fn mr_out(m: Mr, context: *mut c_void, out: *mut *mut fid_mr) -> c_int {
    let b = Box::new(MrObj {
        m: fid_mr { fid: fid { fclass: FI_CLASS_MR as usize, context, ops: ops_ptr(&MR_FI_OPS) }, mem_desc: desc_of(m.lkey), key: m.rkey.0 as u64 },
        lkey: m.lkey,
    });
    // SAFETY: out checked by the callers.
    unsafe { *out = Box::into_raw(b) as *mut fid_mr };
    0
}

fn reg_common(addr: u64, len: u64, access: u64, context: *mut c_void, out: *mut *mut fid_mr) -> c_int {
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

unsafe extern "C" fn mr_reg(_f: *mut fid, buf: *const c_void, len: usize, access: u64, _offset: u64, _key: u64, _flags: u64, mr: *mut *mut fid_mr, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || reg_common(buf as u64, len as u64, access, context, mr))
}

unsafe extern "C" fn mr_regv(_f: *mut fid, iov: *const iovec, count: usize, access: u64, _offset: u64, _key: u64, _flags: u64, mr: *mut *mut fid_mr, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if count != 1 || iov.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: one iovec as the caller says.
        let v = unsafe { *iov };
        reg_common(v.iov_base as u64, v.iov_len as u64, access, context, mr)
    })
}

unsafe extern "C" fn mr_regattr(_f: *mut fid, attr: *const fi_mr_attr, _flags: u64, mr: *mut *mut fid_mr) -> c_int {
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
unsafe extern "C" fn mr_bind(f: *mut fid, bfid: *mut fid, _flags: u64) -> c_int {
    guard(EOTHER_I, || {
        if opt(f).is_none() {
            return -(FI_EINVAL as c_int);
        }
        let Some(b) = opt(bfid) else { return -(FI_EINVAL as c_int) };
        match b.fclass as u32 {
            FI_CLASS_EP if super::ep::is_our_ep(bfid) => 0,
            FI_CLASS_CNTR => -(FI_ENOSYS as c_int),
            _ => -(FI_EINVAL as c_int),
        }
    })
}

/// fi_mr_enable (fi_control FI_ENABLE): an MR is usable from fi_mr_reg on, nothing waits for
/// the enable.
unsafe extern "C" fn mr_control(f: *mut fid, command: c_int, _arg: *mut c_void) -> c_int {
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

unsafe extern "C" fn mr_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if f.is_null() {
            return 0;
        }
        // SAFETY: f is the fid of an MrObj from mr_out.
        let b = unsafe { Box::from_raw(f as *mut MrObj) };
        if let Some(mut e) = engine::engine_if_open() {
            e.remove_mr(b.lkey);
        }
        0
    })
}

// ---------------------------------------------------------------------------- CQ

#[repr(C)]
pub(crate) struct CqObj {
    c: fid_cq,
    pub(crate) id: Id,
    format: fi_cq_format,
    /// fi_cq_signal was called: the next (or current) fi_cq_sread returns -FI_EAGAIN.
    wakeup: std::sync::atomic::AtomicBool,
}
const _: () = assert!(std::mem::offset_of!(CqObj, c) == 0);

static CQ_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(cq_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: Some(cq_control),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

static CQ_OPS: fi_ops_cq = fi_ops_cq {
    size: std::mem::size_of::<fi_ops_cq>(),
    read: Some(cq_read),
    readfrom: Some(cq_readfrom),
    readerr: Some(cq_readerr),
    sread: Some(cq_sread),
    sreadfrom: Some(cq_sreadfrom),
    signal: Some(cq_signal),
    strerror: Some(cq_strerror),
};

unsafe extern "C" fn cq_open(_d: *mut fid_domain, attr: *mut fi_cq_attr, cq: *mut *mut fid_cq, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if cq.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let a = opt(attr);
        let format = a.map(|a| a.format).unwrap_or(FI_CQ_FORMAT_CONTEXT);
        if format > FI_CQ_FORMAT_TAGGED {
            return -(FI_ENOSYS as c_int);
        }
        let wait = a.map(|a| a.wait_obj).unwrap_or(FI_WAIT_NONE);
        let fd = match wait {
            // a wait set waits by progressing (fi_wait), like FI_WAIT_NONE's readers
            FI_WAIT_NONE | FI_WAIT_SET => false,
            FI_WAIT_UNSPEC | FI_WAIT_FD => true,
            _ => return -(FI_ENOSYS as c_int),
        };
        let set = a.map(|a| a.wait_set).unwrap_or(ptr::null_mut());
        if wait == FI_WAIT_SET && set.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let mut e = match open_engine() {
            Ok(e) => e,
            Err(x) => return -(x as c_int),
        };
        let id = match e.open_cq(fd) {
            Ok(id) => id,
            Err(x) => return -(x as c_int),
        };
        if wait == FI_WAIT_SET && !super::wait::join(set, id) {
            let _ = e.close_cq(id);
            return -(FI_EINVAL as c_int);
        }
        drop(e);
        if fd {
            // Nothing else moves the device while an application sleeps on the descriptor.
            start_auto_progress();
        }
        let b = Box::new(CqObj { c: fid_cq { fid: fid { fclass: FI_CLASS_CQ as usize, context, ops: ops_ptr(&CQ_FI_OPS) }, ops: ops_ptr(&CQ_OPS) }, id, format: if format == FI_CQ_FORMAT_UNSPEC { FI_CQ_FORMAT_CONTEXT } else { format }, wakeup: Default::default() });
        // SAFETY: out checked.
        unsafe { *cq = Box::into_raw(b) as *mut fid_cq };
        0
    })
}

fn cq_obj(cq: *mut fid_cq) -> Option<&'static CqObj> {
    opt(cq as *const CqObj)
}

unsafe extern "C" fn cq_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if f.is_null() {
            return 0;
        }
        let o = f as *mut CqObj;
        // SAFETY: f is the fid of a CqObj.
        let id = unsafe { (*o).id };
        if let Some(mut e) = engine::engine_if_open() {
            if let Err(x) = e.close_cq(id) {
                return -(x as c_int);
            }
        }
        // SAFETY: made by Box::into_raw in cq_open; not used after close.
        drop(unsafe { Box::from_raw(o) });
        0
    })
}

unsafe extern "C" fn cq_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if !matches!(command as u32, FI_GETWAIT | FI_GETWAITOBJ) || arg.is_null() {
            return -(FI_ENOSYS as c_int);
        }
        // SAFETY: f is the fid of a CqObj.
        let id = unsafe { (*(f as *const CqObj)).id };
        let Some(e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        match e.cqs.get(&id).and_then(|c| c.q.signal.as_ref()) {
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

fn write_entry(format: fi_cq_format, buf: *mut c_void, i: usize, c: &CqEntry) {
    // SAFETY: the caller's buffer holds `count` entries of the CQ's format and i < count.
    unsafe {
        match format {
            FI_CQ_FORMAT_MSG => {
                *(buf as *mut fi_cq_msg_entry).add(i) = fi_cq_msg_entry { op_context: c.op_context as *mut c_void, flags: c.flags, len: c.len as usize };
            }
            FI_CQ_FORMAT_DATA => {
                *(buf as *mut fi_cq_data_entry).add(i) = fi_cq_data_entry { op_context: c.op_context as *mut c_void, flags: c.flags, len: c.len as usize, buf: c.buf as *mut c_void, data: c.data };
            }
            FI_CQ_FORMAT_TAGGED => {
                *(buf as *mut fi_cq_tagged_entry).add(i) = fi_cq_tagged_entry { op_context: c.op_context as *mut c_void, flags: c.flags, len: c.len as usize, buf: c.buf as *mut c_void, data: c.data, tag: 0 };
            }
            _ => {
                *(buf as *mut fi_cq_entry).add(i) = fi_cq_entry { op_context: c.op_context as *mut c_void };
            }
        }
    }
}

fn cq_read_common(cq: *mut fid_cq, buf: *mut c_void, count: usize, src: *mut fi_addr_t) -> isize {
    let Some(o) = cq_obj(cq) else { return -(FI_EINVAL as isize) };
    if buf.is_null() && count > 0 {
        return -(FI_EINVAL as isize);
    }
    let Some(mut e) = engine::engine_if_open() else { return -(FI_EAGAIN as isize) };
    let format = o.format;
    let r = e.cq_read_with(o.id, count, |i, c| {
        write_entry(format, buf, i, c);
        if !src.is_null() {
            // SAFETY: src_addr has room for `count` addresses.
            unsafe { *src.add(i) = c.src };
        }
    });
    if matches!(r, Err(FI_EAGAIN)) && e.idle_yield_due() {
        drop(e);
        std::thread::yield_now();
        return -(FI_EAGAIN as isize);
    }
    drop(e);
    match r {
        Ok(n) => n as isize,
        Err(x) => -(x as isize),
    }
}

unsafe extern "C" fn cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    guard(EOTHER_S, || cq_read_common(cq, buf, count, ptr::null_mut()))
}

unsafe extern "C" fn cq_readfrom(cq: *mut fid_cq, buf: *mut c_void, count: usize, src: *mut fi_addr_t) -> isize {
    guard(EOTHER_S, || cq_read_common(cq, buf, count, src))
}

/// Blocking read: progress and poll until an entry, the timeout (ms, < 0 = forever) or
/// `wakeup` (fi_cq_signal; taken back here), which end it with -FI_EAGAIN as libfabric's own
/// CQs do.
fn sread_loop(timeout: c_int, wakeup: Option<&std::sync::atomic::AtomicBool>, mut f: impl FnMut() -> isize) -> isize {
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let mut spins = 0u32;
    loop {
        let r = f();
        if r != -(FI_EAGAIN as isize) {
            return r;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return -(FI_EAGAIN as isize);
        }
        if wakeup.is_some_and(|w| w.swap(false, std::sync::atomic::Ordering::AcqRel)) {
            return -(FI_EAGAIN as isize);
        }
        spins = spins.saturating_add(1);
        if spins > 10_000 {
            std::thread::sleep(Duration::from_micros(20));
        } else {
            std::thread::yield_now();
        }
    }
}

unsafe extern "C" fn cq_sread(cq: *mut fid_cq, buf: *mut c_void, count: usize, _cond: *const c_void, timeout: c_int) -> isize {
    guard(EOTHER_S, || sread_loop(timeout, cq_obj(cq).map(|o| &o.wakeup), || cq_read_common(cq, buf, count, ptr::null_mut())))
}

unsafe extern "C" fn cq_sreadfrom(cq: *mut fid_cq, buf: *mut c_void, count: usize, src: *mut fi_addr_t, _cond: *const c_void, timeout: c_int) -> isize {
    guard(EOTHER_S, || sread_loop(timeout, cq_obj(cq).map(|o| &o.wakeup), || cq_read_common(cq, buf, count, src)))
}

/// Wakes a thread blocked in fi_cq_sread/sreadfrom on this CQ (it returns -FI_EAGAIN); with
/// none blocked, the next blocking read returns at once.
unsafe extern "C" fn cq_signal(cq: *mut fid_cq) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = cq_obj(cq) else { return -(FI_EINVAL as c_int) };
        o.wakeup.store(true, std::sync::atomic::Ordering::Release);
        // and a thread in poll/epoll on the FD wait object (fi_trywait then clears it)
        if let Some(mut e) = engine::engine_if_open() {
            if let Some(c) = e.cqs.get_mut(&o.id) {
                c.q.poke();
            }
        }
        0
    })
}

unsafe extern "C" fn cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, _flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(o) = cq_obj(cq) else { return -(FI_EINVAL as isize) };
        if buf.is_null() {
            return -(FI_EINVAL as isize);
        }
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EAGAIN as isize) };
        let Some(x) = e.cqs.get_mut(&o.id).and_then(|c| c.q.read_error()) else { return -(FI_EAGAIN as isize) };
        // SAFETY: buf is the caller's fi_cq_err_entry; err_data/err_data_size are inputs we
        // leave alone except for reporting no error data.
        unsafe {
            let b = &mut *buf;
            b.op_context = x.entry.op_context as *mut c_void;
            b.flags = x.entry.flags;
            b.len = x.entry.len as usize;
            b.buf = x.entry.buf as *mut c_void;
            b.data = x.entry.data;
            b.tag = 0;
            b.olen = x.olen as usize;
            b.err = x.err as c_int;
            b.prov_errno = x.prov_errno;
            b.err_data_size = 0;
        }
        1
    })
}

/// The status text of `prov_errno` as a NUL-terminated static string (fi_cq_strerror without a buffer).
fn static_status_str(prov_errno: c_int) -> *const c_char {
    static TEXTS: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
    let t = TEXTS.get_or_init(|| (0..=u8::MAX as c_int).map(|v| std::ffi::CString::new(format!("droce: {}", engine::wc_status_str(v))).unwrap_or_default()).collect());
    let i = usize::try_from(prov_errno).ok().filter(|&i| i < t.len()).unwrap_or(t.len() - 1);
    t[i].as_ptr()
}

/// `s` into the caller's buffer, or `fallback` (NUL-terminated, static) without one.
fn strerror_out(s: &str, fallback: *const c_char, buf: *mut c_char, len: usize) -> *const c_char {
    if buf.is_null() || len == 0 {
        return fallback;
    }
    let n = s.len().min(len - 1);
    // SAFETY: buf holds len bytes.
    unsafe {
        ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
    buf
}

unsafe extern "C" fn cq_strerror(_cq: *mut fid_cq, prov_errno: c_int, _err_data: *const c_void, buf: *mut c_char, len: usize) -> *const c_char {
    guard(ptr::null(), || strerror_out(engine::wc_status_str(prov_errno), static_status_str(prov_errno), buf, len))
}

// ---------------------------------------------------------------------------- EQ

#[repr(C)]
pub(crate) struct EqObj {
    e: fid_eq,
    pub(crate) id: Id,
    /// Provider-owned error data of the last fi_eq_readerr (valid until the next one).
    err_data: Vec<u8>,
}
const _: () = assert!(std::mem::offset_of!(EqObj, e) == 0);

static EQ_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(eq_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: Some(eq_control),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

static EQ_OPS: fi_ops_eq = fi_ops_eq {
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

unsafe extern "C" fn eq_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if f.is_null() {
            return 0;
        }
        let o = f as *mut EqObj;
        // SAFETY: f is the fid of an EqObj; freed once here.
        let b = unsafe { Box::from_raw(o) };
        if let Some(mut e) = engine::engine_if_open() {
            e.eqs.remove(&b.id);
        }
        0
    })
}

unsafe extern "C" fn eq_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
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

const CM_ENTRY_LEN: usize = std::mem::size_of::<fi_eq_cm_entry>();

fn eq_read_common(eq: *mut fid_eq, event: *mut u32, buf: *mut c_void, len: usize, flags: u64) -> isize {
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
                let p = match super::ep::pep_info_dup(*pep_fid) {
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
                unsafe { (*p).handle = super::ep::connreq_new(*conn) };
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
fn set_addrs(d: *mut fi_info, i: &crate::info::Info) {
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

unsafe extern "C" fn eq_read(eq: *mut fid_eq, event: *mut u32, buf: *mut c_void, len: usize, flags: u64) -> isize {
    guard(EOTHER_S, || eq_read_common(eq, event, buf, len, flags))
}

unsafe extern "C" fn eq_sread(eq: *mut fid_eq, event: *mut u32, buf: *mut c_void, len: usize, timeout: c_int, flags: u64) -> isize {
    guard(EOTHER_S, || sread_loop(timeout, None, || eq_read_common(eq, event, buf, len, flags)))
}

unsafe extern "C" fn eq_readerr(eq: *mut fid_eq, buf: *mut fi_eq_err_entry, _flags: u64) -> isize {
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

unsafe extern "C" fn eq_write(eq: *mut fid_eq, event: u32, buf: *const c_void, len: usize, _flags: u64) -> isize {
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

unsafe extern "C" fn eq_strerror(_eq: *mut fid_eq, _prov_errno: c_int, _err_data: *const c_void, buf: *mut c_char, len: usize) -> *const c_char {
    guard(ptr::null(), || strerror_out("droce connection manager error", c"droce connection manager error".as_ptr(), buf, len))
}

// ---------------------------------------------------------------------------- counters

#[repr(C)]
pub(crate) struct CntrObj {
    c: fid_cntr,
    pub(crate) id: Id,
}
const _: () = assert!(std::mem::offset_of!(CntrObj, c) == 0);

static CNTR_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(cntr_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

static CNTR_OPS: fi_ops_cntr = fi_ops_cntr {
    size: std::mem::size_of::<fi_ops_cntr>(),
    read: Some(cntr_read),
    readerr: Some(cntr_readerr),
    add: Some(cntr_add),
    set: Some(cntr_set),
    wait: Some(cntr_wait),
    adderr: Some(cntr_adderr),
    seterr: Some(cntr_seterr),
};

unsafe extern "C" fn cntr_open(_d: *mut fid_domain, attr: *mut fi_cntr_attr, cntr: *mut *mut fid_cntr, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if cntr.is_null() {
            return -(FI_EINVAL as c_int);
        }
        if let Some(a) = opt(attr) {
            if a.events != FI_CNTR_EVENTS_COMP || !matches!(a.wait_obj, FI_WAIT_NONE | FI_WAIT_UNSPEC) {
                return -(FI_ENOSYS as c_int);
            }
        }
        let mut e = match open_engine() {
            Ok(e) => e,
            Err(x) => return -(x as c_int),
        };
        let id = e.fresh_id();
        e.cntrs.insert(id, engine::Cntr::default());
        let b = Box::new(CntrObj { c: fid_cntr { fid: fid { fclass: FI_CLASS_CNTR as usize, context, ops: ops_ptr(&CNTR_FI_OPS) }, ops: ops_ptr(&CNTR_OPS) }, id });
        // SAFETY: out checked.
        unsafe { *cntr = Box::into_raw(b) as *mut fid_cntr };
        0
    })
}

unsafe extern "C" fn cntr_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if f.is_null() {
            return 0;
        }
        // SAFETY: f is the fid of a CntrObj; freed once here.
        let b = unsafe { Box::from_raw(f as *mut CntrObj) };
        if let Some(mut e) = engine::engine_if_open() {
            e.cntrs.remove(&b.id);
        }
        0
    })
}

fn with_cntr<R>(c: *mut fid_cntr, dflt: R, progress: bool, f: impl FnOnce(&mut engine::Cntr) -> R) -> R {
    let Some(o) = opt(c as *const CntrObj) else { return dflt };
    let Some(mut e) = engine::engine_if_open() else { return dflt };
    if progress {
        e.progress_datapath();
    }
    match e.cntrs.get_mut(&o.id) {
        Some(c) => f(c),
        None => dflt,
    }
}

unsafe extern "C" fn cntr_read(c: *mut fid_cntr) -> u64 {
    guard(0, || with_cntr(c, 0, true, |c| c.value))
}
unsafe extern "C" fn cntr_readerr(c: *mut fid_cntr) -> u64 {
    guard(0, || with_cntr(c, 0, true, |c| c.err))
}
unsafe extern "C" fn cntr_add(c: *mut fid_cntr, v: u64) -> c_int {
    guard(EOTHER_I, || with_cntr(c, -(FI_EINVAL as c_int), false, |c| {
        c.value = c.value.wrapping_add(v);
        0
    }))
}
unsafe extern "C" fn cntr_set(c: *mut fid_cntr, v: u64) -> c_int {
    guard(EOTHER_I, || with_cntr(c, -(FI_EINVAL as c_int), false, |c| {
        c.value = v;
        0
    }))
}
unsafe extern "C" fn cntr_adderr(c: *mut fid_cntr, v: u64) -> c_int {
    guard(EOTHER_I, || with_cntr(c, -(FI_EINVAL as c_int), false, |c| {
        c.err = c.err.wrapping_add(v);
        0
    }))
}
unsafe extern "C" fn cntr_seterr(c: *mut fid_cntr, v: u64) -> c_int {
    guard(EOTHER_I, || with_cntr(c, -(FI_EINVAL as c_int), false, |c| {
        c.err = v;
        0
    }))
}
unsafe extern "C" fn cntr_wait(c: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    guard(EOTHER_I, || {
        // The error count when the call began (fi_cntr(3): any change ends the wait), read
        // before the first progress step, which may be the one that brings the error.
        let mut errs = None;
        with_cntr(c, 0, false, |c| {
            errs = Some(c.err);
            0
        });
        let r = sread_loop(timeout, None, || {
            with_cntr(c, -(FI_EINVAL as isize), true, |c| {
                if c.value >= threshold {
                    0
                } else if Some(c.err) != errs {
                    -(FI_EAVAIL as isize)
                } else {
                    -(FI_EAGAIN as isize)
                }
            })
        });
        if r == -(FI_EAGAIN as isize) {
            -(FI_ETIMEDOUT as c_int)
        } else {
            r as c_int
        }
    })
}

// ---------------------------------------------------------------------------- AV

#[repr(C)]
pub(crate) struct AvObj {
    a: fid_av,
    pub(crate) id: Id,
}
const _: () = assert!(std::mem::offset_of!(AvObj, a) == 0);

static AV_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(av_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

static AV_OPS: fi_ops_av = fi_ops_av {
    size: std::mem::size_of::<fi_ops_av>(),
    insert: Some(av_insert),
    insertsvc: Some(av_insertsvc),
    insertsym: nosys!(fn(*mut fid_av, *const c_char, usize, *const c_char, usize, *mut fi_addr_t, u64, *mut c_void) -> c_int),
    remove: Some(av_remove),
    lookup: Some(av_lookup),
    straddr: Some(av_straddr),
    av_set: nosys!(fn(*mut fid_av, *mut fi_av_set_attr, *mut *mut fid_av_set, *mut c_void) -> c_int),
};

unsafe extern "C" fn av_open(_d: *mut fid_domain, attr: *mut fi_av_attr, av: *mut *mut fid_av, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if av.is_null() {
            return -(FI_EINVAL as c_int);
        }
        if let Some(a) = opt(attr) {
            if a.flags & (FI_EVENT as u64) != 0 || !a.name.is_null() {
                return -(FI_ENOSYS as c_int);
            }
        }
        let mut e = match open_engine() {
            Ok(e) => e,
            Err(x) => return -(x as c_int),
        };
        let id = e.fresh_id();
        e.avs.insert(id, engine::Av::default());
        let b = Box::new(AvObj { a: fid_av { fid: fid { fclass: FI_CLASS_AV as usize, context, ops: ops_ptr(&AV_FI_OPS) }, ops: ops_ptr(&AV_OPS) }, id });
        // SAFETY: out checked.
        unsafe { *av = Box::into_raw(b) as *mut fid_av };
        0
    })
}

unsafe extern "C" fn av_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if f.is_null() {
            return 0;
        }
        // SAFETY: f is the fid of an AvObj; freed once here.
        let b = unsafe { Box::from_raw(f as *mut AvObj) };
        if let Some(mut e) = engine::engine_if_open() {
            e.avs.remove(&b.id);
        }
        0
    })
}

fn av_id(av: *mut fid_av) -> Option<Id> {
    opt(av as *const AvObj).map(|o| o.id)
}

unsafe extern "C" fn av_insert(av: *mut fid_av, addr: *const c_void, count: usize, fi_addr: *mut fi_addr_t, _flags: u64, _ctx: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        let Some(id) = av_id(av) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        let local = e.local;
        let Some(t) = e.avs.get_mut(&id) else { return -(FI_EINVAL as c_int) };
        let mut p = addr as *const u8;
        let mut n = 0;
        for i in 0..count {
            let a = read_sockaddr(p as *const c_void);
            let in6 = is_in6(p as *const c_void);
            let out = match a {
                Some(mut a) => {
                    a.sa.set_ip(addr::canon(local.resolve_dst(a.sa.ip())));
                    n += 1;
                    t.insert_as(a, in6)
                }
                None => ADDR_NOTAVAIL,
            };
            if !fi_addr.is_null() {
                // SAFETY: fi_addr has room for `count` addresses.
                unsafe { *fi_addr.add(i) = out };
            }
            // the caller's format decides the size, not the address (an IPv4-mapped IN6 name)
            let step = if is_in6(p as *const c_void) { crate::addr::SOCKADDR_IN6_LEN } else { crate::addr::SOCKADDR_IN_LEN };
            // SAFETY: consecutive addresses of the same format.
            p = unsafe { p.add(step) };
        }
        n
    })
}

unsafe extern "C" fn av_insertsvc(av: *mut fid_av, node: *const c_char, service: *const c_char, fi_addr: *mut fi_addr_t, _flags: u64, _ctx: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        let Some(id) = av_id(av) else { return -(FI_EINVAL as c_int) };
        let (Some(ip), Some(port)) = (cstr(node).and_then(|n| addr::resolve_node(&n)), cstr(service).and_then(|s| addr::parse_service(&s))) else {
            return -(FI_EINVAL as c_int);
        };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        let ip = addr::canon(e.local.resolve_dst(ip));
        let Some(t) = e.avs.get_mut(&id) else { return -(FI_EINVAL as c_int) };
        let f = t.insert(EpAddr::new(std::net::SocketAddr::new(ip, port)));
        if !fi_addr.is_null() {
            // SAFETY: one address out.
            unsafe { *fi_addr = f };
        }
        1
    })
}

unsafe extern "C" fn av_remove(av: *mut fid_av, fi_addr: *mut fi_addr_t, count: usize, _flags: u64) -> c_int {
    guard(EOTHER_I, || {
        let Some(id) = av_id(av) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        let Some(t) = e.avs.get_mut(&id) else { return -(FI_EINVAL as c_int) };
        let mut ok = true;
        for i in 0..count {
            // SAFETY: count addresses at fi_addr.
            let f = unsafe { *fi_addr.add(i) };
            ok &= t.remove(f);
        }
        if ok {
            0
        } else {
            -(FI_EINVAL as c_int)
        }
    })
}

unsafe extern "C" fn av_lookup(av: *mut fid_av, fi_addr: fi_addr_t, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard(EOTHER_I, || {
        let Some(id) = av_id(av) else { return -(FI_EINVAL as c_int) };
        let Some(e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        let t_in6 = e.avs.get(&id).is_some_and(|t| t.is_in6(fi_addr));
        match e.avs.get(&id).and_then(|t| t.lookup(fi_addr)) {
            // in the format the application inserted
            Some(a) => write_out(addr, addrlen, &a.to_bytes(t_in6)),
            None => -(FI_ENODATA as c_int),
        }
    })
}

unsafe extern "C" fn av_straddr(_av: *mut fid_av, addr: *const c_void, buf: *mut c_char, len: *mut usize) -> *const c_char {
    guard(ptr::null(), || {
        let s = match read_sockaddr(addr) {
            Some(a) => a.to_string_uri(is_in6(addr)),
            None => "fi_addr_unknown".to_string(),
        };
        let mut b = s.into_bytes();
        b.push(0);
        if len.is_null() || buf.is_null() {
            return buf as *const c_char;
        }
        // SAFETY: buf has *len bytes; truncate with a NUL, report the full size.
        unsafe {
            let have = *len;
            if have > 0 {
                let n = b.len().min(have);
                ptr::copy_nonoverlapping(b.as_ptr(), buf as *mut u8, n);
                *buf.add(n - 1) = 0;
            }
            *len = b.len();
        }
        buf as *const c_char
    })
}
