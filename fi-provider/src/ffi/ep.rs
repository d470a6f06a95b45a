//! Endpoints: active (FI_EP_MSG on RC, FI_EP_DGRAM on UD), passive (listen), connection
//! requests, CM ops, and the data path (msg, rma).

use super::domain::{lkey_of, register, AvObj, CntrObj, CqObj, EqObj};
use super::sys::*;
use super::*;
use crate::engine::{self, Engine, Id, Op, OpKind, SendReq, Seg, Segs};
use crate::info as pinfo;
use droce_dpdk::roce::cm::ConnId;
use droce_transport::verbs::{AccessFlags, SendOpcode};
use droce_transport::{Lkey, Rkey};

// ---------------------------------------------------------------------------- connreq

#[repr(C)]
pub(crate) struct ConnReqObj {
    f: fid,
    conn: ConnId,
}
const _: () = assert!(std::mem::offset_of!(ConnReqObj, f) == 0);

static CONNREQ_FI_OPS: fi_ops = fi_ops {
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
fn connreq_take(h: *mut fid) -> Option<ConnId> {
    let f = opt(h)?;
    if f.fclass as u32 != FI_CLASS_CONNREQ {
        return None;
    }
    // SAFETY: an FI_CLASS_CONNREQ fid is the first field of a ConnReqObj from connreq_new;
    // the handle is consumed here (fi_endpoint / fi_reject take ownership).
    let b = unsafe { Box::from_raw(h as *mut ConnReqObj) };
    Some(b.conn)
}

unsafe extern "C" fn connreq_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        let _ = connreq_take(f);
        0
    })
}

// ---------------------------------------------------------------------------- ops tables

#[repr(C)]
pub(crate) struct EpObj {
    e: fid_ep,
    id: Id,
}
const _: () = assert!(std::mem::offset_of!(EpObj, e) == 0);

#[repr(C)]
pub(crate) struct PepObj {
    p: fid_pep,
    id: Id,
    v6: bool,
    /// The application's info for the listener (a copy): connection requests inherit its
    /// attributes (mode bits like FI_RX_CQ_DATA, sizes, caps).
    info: *mut fi_info,
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

static EP_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(ep_close),
    bind: Some(ep_bind),
    control: Some(ep_control),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

static PEP_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(pep_close),
    bind: Some(pep_bind),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

static EP_OPS: fi_ops_ep = fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: nosys!(fn(fid_t, *mut c_void) -> isize),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: nosys!(fn(*mut fid_ep, c_int, *mut fi_tx_attr, *mut *mut fid_ep, *mut c_void) -> c_int),
    rx_ctx: nosys!(fn(*mut fid_ep, c_int, *mut fi_rx_attr, *mut *mut fid_ep, *mut c_void) -> c_int),
    rx_size_left: nosys!(fn(*mut fid_ep) -> isize),
    tx_size_left: nosys!(fn(*mut fid_ep) -> isize),
};

static CM_OPS: fi_ops_cm = fi_ops_cm {
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

static MSG_OPS: fi_ops_msg = fi_ops_msg {
    size: std::mem::size_of::<fi_ops_msg>(),
    recv: Some(recv),
    recvv: Some(recvv),
    recvmsg: Some(recvmsg),
    send: Some(send),
    sendv: Some(sendv),
    sendmsg: Some(sendmsg),
    inject: Some(inject),
    senddata: Some(senddata),
    injectdata: Some(injectdata),
};

static RMA_OPS: fi_ops_rma = fi_ops_rma {
    size: std::mem::size_of::<fi_ops_rma>(),
    read: Some(rma_read),
    readv: Some(rma_readv),
    readmsg: Some(rma_readmsg),
    write: Some(rma_write),
    writev: Some(rma_writev),
    writemsg: Some(rma_writemsg),
    inject: Some(rma_inject),
    writedata: Some(rma_writedata),
    injectdata: Some(rma_injectdata),
};

static TAGGED_OPS: fi_ops_tagged = fi_ops_tagged {
    size: std::mem::size_of::<fi_ops_tagged>(),
    recv: nosys!(fn(*mut fid_ep, *mut c_void, usize, *mut c_void, fi_addr_t, u64, u64, *mut c_void) -> isize),
    recvv: nosys!(fn(*mut fid_ep, *const iovec, *mut *mut c_void, usize, fi_addr_t, u64, u64, *mut c_void) -> isize),
    recvmsg: nosys!(fn(*mut fid_ep, *const fi_msg_tagged, u64) -> isize),
    send: nosys!(fn(*mut fid_ep, *const c_void, usize, *mut c_void, fi_addr_t, u64, *mut c_void) -> isize),
    sendv: nosys!(fn(*mut fid_ep, *const iovec, *mut *mut c_void, usize, fi_addr_t, u64, *mut c_void) -> isize),
    sendmsg: nosys!(fn(*mut fid_ep, *const fi_msg_tagged, u64) -> isize),
    inject: nosys!(fn(*mut fid_ep, *const c_void, usize, fi_addr_t, u64) -> isize),
    senddata: nosys!(fn(*mut fid_ep, *const c_void, usize, *mut c_void, u64, fi_addr_t, u64, *mut c_void) -> isize),
    injectdata: nosys!(fn(*mut fid_ep, *const c_void, usize, u64, fi_addr_t, u64) -> isize),
};

static ATOMIC_OPS: fi_ops_atomic = fi_ops_atomic {
    size: std::mem::size_of::<fi_ops_atomic>(),
    write: Some(atomic_write),
    writev: Some(atomic_writev),
    writemsg: Some(atomic_writemsg),
    inject: Some(atomic_inject),
    readwrite: Some(atomic_readwrite),
    readwritev: Some(atomic_readwritev),
    readwritemsg: Some(atomic_readwritemsg),
    compwrite: Some(atomic_compwrite),
    compwritev: Some(atomic_compwritev),
    compwritemsg: Some(atomic_compwritemsg),
    writevalid: Some(atomic_writevalid),
    readwritevalid: Some(atomic_readwritevalid),
    compwritevalid: Some(atomic_compwritevalid),
};

static PEP_EP_OPS: fi_ops_ep = fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: nosys!(fn(fid_t, *mut c_void) -> isize),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: nosys!(fn(*mut fid_ep, c_int, *mut fi_tx_attr, *mut *mut fid_ep, *mut c_void) -> c_int),
    rx_ctx: nosys!(fn(*mut fid_ep, c_int, *mut fi_rx_attr, *mut *mut fid_ep, *mut c_void) -> c_int),
    rx_size_left: nosys!(fn(*mut fid_ep) -> isize),
    tx_size_left: nosys!(fn(*mut fid_ep) -> isize),
};

// ---------------------------------------------------------------------------- shared contexts

/// A shared receive context is an EpObj of class FI_CLASS_SRX_CTX whose id names an engine
/// `Srx`: only the receive calls work on it.
static SRX_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(srx_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

static SRX_MSG_OPS: fi_ops_msg = fi_ops_msg {
    size: std::mem::size_of::<fi_ops_msg>(),
    recv: Some(recv),
    recvv: Some(recvv),
    recvmsg: Some(recvmsg),
    send: nosys!(fn(*mut fid_ep, *const c_void, usize, *mut c_void, fi_addr_t, *mut c_void) -> isize),
    sendv: nosys!(fn(*mut fid_ep, *const iovec, *mut *mut c_void, usize, fi_addr_t, *mut c_void) -> isize),
    sendmsg: nosys!(fn(*mut fid_ep, *const fi_msg, u64) -> isize),
    inject: nosys!(fn(*mut fid_ep, *const c_void, usize, fi_addr_t) -> isize),
    senddata: nosys!(fn(*mut fid_ep, *const c_void, usize, *mut c_void, u64, fi_addr_t, *mut c_void) -> isize),
    injectdata: nosys!(fn(*mut fid_ep, *const c_void, usize, u64, fi_addr_t) -> isize),
};

static NOSYS_EP_OPS: fi_ops_ep = fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: nosys!(fn(fid_t, *mut c_void) -> isize),
    getopt: nosys!(fn(fid_t, c_int, c_int, *mut c_void, *mut usize) -> c_int),
    setopt: nosys!(fn(fid_t, c_int, c_int, *const c_void, usize) -> c_int),
    tx_ctx: nosys!(fn(*mut fid_ep, c_int, *mut fi_tx_attr, *mut *mut fid_ep, *mut c_void) -> c_int),
    rx_ctx: nosys!(fn(*mut fid_ep, c_int, *mut fi_rx_attr, *mut *mut fid_ep, *mut c_void) -> c_int),
    rx_size_left: nosys!(fn(*mut fid_ep) -> isize),
    tx_size_left: nosys!(fn(*mut fid_ep) -> isize),
};

pub(crate) unsafe extern "C" fn srx_open(_d: *mut fid_domain, attr: *mut fi_rx_attr, out: *mut *mut fid_ep, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if out.is_null() {
            return -(FI_EINVAL as c_int);
        }
        if opt(attr).is_some_and(|a| a.op_flags & FI_MULTI_RECV as u64 != 0) {
            // an SRQ takes one message per receive: no multi-receive buffers
            return -(FI_EOPNOTSUPP as c_int);
        }
        let size = opt(attr).map(|a| a.size).filter(|&n| n > 0).unwrap_or(pinfo::RX_SIZE as usize);
        let mut e = match engine_or(-(FI_ENODEV as c_int)) {
            Ok(e) => e,
            Err(x) => return x,
        };
        let raw = Box::into_raw(Box::new(EpObj {
            e: fid_ep {
                fid: fid { fclass: FI_CLASS_SRX_CTX as usize, context, ops: ops_ptr(&SRX_FI_OPS) },
                ops: ops_ptr(&NOSYS_EP_OPS),
                cm: ptr::null_mut(),
                msg: ops_ptr(&SRX_MSG_OPS),
                rma: ptr::null_mut(),
                tagged: ptr::null_mut(),
                atomic: ptr::null_mut(),
                collective: ptr::null_mut(),
            },
            id: 0,
        }));
        match e.open_srx(raw as usize, context as usize, size) {
            Ok(id) => {
                // SAFETY: raw is the fresh EpObj; out checked.
                unsafe {
                    (*raw).id = id;
                    *out = raw as *mut fid_ep;
                }
                0
            }
            Err(x) => {
                // SAFETY: raw came from Box::into_raw above and was not handed out.
                drop(unsafe { Box::from_raw(raw) });
                -(x as c_int)
            }
        }
    })
}

unsafe extern "C" fn srx_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if f.is_null() {
            return 0;
        }
        // SAFETY: f is the fid of an srx EpObj from srx_open; freed once here.
        let b = unsafe { Box::from_raw(f as *mut EpObj) };
        if let Some(mut e) = engine::engine_if_open() {
            e.close_srx(b.id);
        }
        0
    })
}

/// A shared transmit context: an object endpoints can bind (see ep_bind), no state.
#[repr(C)]
pub(crate) struct StxObj {
    s: fid_stx,
    id: Id,
}
const _: () = assert!(std::mem::offset_of!(StxObj, s) == 0);

static STX_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(stx_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

pub(crate) unsafe extern "C" fn stx_open(_d: *mut fid_domain, _attr: *mut fi_tx_attr, out: *mut *mut fid_stx, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if out.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let id = match engine_or(-(FI_ENODEV as c_int)) {
            Ok(mut e) => e.fresh_id(),
            Err(x) => return x,
        };
        let raw = Box::into_raw(Box::new(StxObj { s: fid_stx { fid: fid { fclass: FI_CLASS_STX_CTX as usize, context, ops: ops_ptr(&STX_FI_OPS) }, ops: ops_ptr(&NOSYS_EP_OPS) }, id }));
        // SAFETY: out checked.
        unsafe { *out = raw as *mut fid_stx };
        0
    })
}

unsafe extern "C" fn stx_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if !f.is_null() {
            // SAFETY: f is the fid of an StxObj from stx_open; freed once here.
            drop(unsafe { Box::from_raw(f as *mut StxObj) });
        }
        0
    })
}

// ---------------------------------------------------------------------------- open/close

fn engine_or<R>(err: R) -> Result<std::sync::MutexGuard<'static, Engine>, R> {
    open_engine().map_err(|_| err)
}

pub(crate) unsafe extern "C" fn ep_open(_d: *mut fid_domain, info: *mut fi_info, ep: *mut *mut fid_ep, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if ep.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let Some(v) = view(info) else { return -(FI_EINVAL as c_int) };
        let pep_src = pep_addr(v.handle);
        let conn = if v.handle.is_null() || pep_src.is_some() {
            None
        } else {
            let c = connreq_take(v.handle);
            // SAFETY: info is the caller's fi_info; the handle was consumed above.
            unsafe { (*info).handle = ptr::null_mut() };
            if c.is_none() {
                return -(FI_EINVAL as c_int);
            }
            c
        };
        let mut e = match engine_or(-(FI_ENODEV as c_int)) {
            Ok(e) => e,
            Err(x) => return x,
        };
        let local = e.local;
        let mut src = pep_src.or(v.src).unwrap_or(EpAddr::new(std::net::SocketAddr::new(local.ip, 0)));
        src.sa.set_ip(local.ip);
        src.qpn = None;
        let peer = v.dest.map(|mut d| {
            d.sa.set_ip(crate::addr::canon(local.resolve_dst(d.sa.ip())));
            d
        });
        let b = Box::new(EpObj {
            e: fid_ep {
                fid: fid { fclass: FI_CLASS_EP as usize, context, ops: ops_ptr(&EP_FI_OPS) },
                ops: ops_ptr(&EP_OPS),
                cm: ops_ptr(&CM_OPS),
                msg: ops_ptr(&MSG_OPS),
                rma: ops_ptr(&RMA_OPS),
                tagged: ops_ptr(&TAGGED_OPS),
                atomic: ops_ptr(&ATOMIC_OPS),
                collective: ptr::null_mut(),
            },
            id: 0,
        });
        let raw = Box::into_raw(b);
        let id = e.new_ep(v.ep_type, raw as usize, context as usize, src, peer, v.v6, conn);
        if let Some(x) = e.eps.get_mut(&id) {
            x.tx_op_flags = v.tx_op_flags;
            x.rx_op_flags = v.rx_op_flags;
            x.prefix = v.prefix;
        }
        // SAFETY: raw is the fresh EpObj; out checked.
        unsafe {
            (*raw).id = id;
            *ep = raw as *mut fid_ep;
        }
        0
    })
}

/// Whether `f` is an endpoint this provider opened (fi_mr_bind checks its target).
pub(crate) fn is_our_ep(f: *const fid) -> bool {
    opt(f).is_some_and(|r| r.fclass == FI_CLASS_EP as usize && std::ptr::eq(r.ops, &EP_FI_OPS))
}

fn ep_obj(ep: *const fid_ep) -> Option<&'static EpObj> {
    opt(ep as *const EpObj)
}

unsafe extern "C" fn ep_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if f.is_null() {
            return 0;
        }
        // SAFETY: f is the fid of an EpObj; freed once here.
        let b = unsafe { Box::from_raw(f as *mut EpObj) };
        if let Some(mut e) = engine::engine_if_open() {
            e.close_ep(b.id);
        }
        0
    })
}

fn bound_id(f: *mut fid) -> Option<(u32, Id)> {
    let c = opt(f)?.fclass as u32;
    // SAFETY: fids of these classes are ours and sit first in their objects.
    let id = unsafe {
        match c {
            FI_CLASS_CQ => (*(f as *const CqObj)).id,
            FI_CLASS_EQ => (*(f as *const EqObj)).id,
            FI_CLASS_CNTR => (*(f as *const CntrObj)).id,
            FI_CLASS_AV => (*(f as *const AvObj)).id,
            FI_CLASS_SRX_CTX => (*(f as *const EpObj)).id,
            FI_CLASS_STX_CTX => (*(f as *const StxObj)).id,
            _ => return None,
        }
    };
    Some((c, id))
}

unsafe extern "C" fn ep_bind(f: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = opt(f as *const EpObj) else { return -(FI_EINVAL as c_int) };
        let Some((class, id)) = bound_id(bfid) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        let Some(ep) = e.eps.get_mut(&o.id) else { return -(FI_EINVAL as c_int) };
        if ep.qp.is_some() && matches!(class, FI_CLASS_CQ | FI_CLASS_SRX_CTX) {
            return -(FI_EOPBADSTATE as c_int);
        }
        let sel = flags & FI_SELECTIVE_COMPLETION != 0;
        match class {
            FI_CLASS_CQ => {
                if flags & FI_TRANSMIT as u64 != 0 {
                    ep.tx_cq = Some(id);
                    ep.tx_selective = sel;
                }
                if flags & FI_RECV as u64 != 0 {
                    ep.rx_cq = Some(id);
                    ep.rx_selective = sel;
                }
                if flags & (FI_TRANSMIT | FI_RECV) as u64 == 0 {
                    return -(FI_EINVAL as c_int);
                }
            }
            FI_CLASS_EQ => ep.eq = Some(id),
            FI_CLASS_AV => ep.av = Some(id),
            // Shared contexts are FI_EP_MSG only (getinfo offers them there). A shared
            // transmit context adds nothing over the endpoint's own send queue: the
            // endpoint keeps posting to its QP and completing to its own bindings.
            FI_CLASS_SRX_CTX if ep.ty == pinfo::EpType::Msg => ep.srx = Some(id),
            FI_CLASS_STX_CTX if ep.ty == pinfo::EpType::Msg => {}
            FI_CLASS_SRX_CTX | FI_CLASS_STX_CTX => return -(FI_ENOSYS as c_int),
            FI_CLASS_CNTR => {
                if flags & (FI_REMOTE_READ | FI_REMOTE_WRITE) as u64 != 0 {
                    // remote-access counters need FI_RMA_EVENT, which droce does not offer:
                    // the responder's work leaves no trace the provider sees
                    return -(FI_ENOSYS as c_int);
                }
                let c = &mut ep.cntrs;
                if flags & FI_SEND as u64 != 0 {
                    c.send = Some(id);
                }
                if flags & FI_RECV as u64 != 0 {
                    c.recv = Some(id);
                }
                if flags & FI_READ as u64 != 0 {
                    c.read = Some(id);
                }
                if flags & FI_WRITE as u64 != 0 {
                    c.write = Some(id);
                }
            }
            _ => return -(FI_EINVAL as c_int),
        }
        0
    })
}

unsafe extern "C" fn ep_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = opt(f as *const EpObj) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        match command as u32 {
            FI_ENABLE => ret_int(e.enable_ep(o.id)),
            FI_GETOPSFLAG | FI_SETOPSFLAG if !arg.is_null() => {
                let Some(ep) = e.eps.get_mut(&o.id) else { return -(FI_EINVAL as c_int) };
                // SAFETY: these commands pass a u64*.
                let flags = unsafe { &mut *(arg as *mut u64) };
                let tx = *flags & FI_TRANSMIT as u64 != 0;
                let rx = *flags & FI_RECV as u64 != 0;
                if tx == rx {
                    return -(FI_EINVAL as c_int);
                }
                let slot = if tx { &mut ep.tx_op_flags } else { &mut ep.rx_op_flags };
                if command as u32 == FI_GETOPSFLAG {
                    *flags = *slot | if tx { FI_TRANSMIT as u64 } else { FI_RECV as u64 };
                } else {
                    *slot = *flags & !((FI_TRANSMIT | FI_RECV) as u64);
                }
                0
            }
            _ => -(FI_ENOSYS as c_int),
        }
    })
}

unsafe extern "C" fn getopt(f: fid_t, level: c_int, optname: c_int, optval: *mut c_void, optlen: *mut usize) -> c_int {
    guard(EOTHER_I, || {
        if level as u32 != FI_OPT_ENDPOINT {
            return -(FI_ENOPROTOOPT as c_int);
        }
        if optname as u32 == FI_OPT_CM_DATA_SIZE {
            if optval.is_null() || optlen.is_null() {
                return -(FI_EINVAL as c_int);
            }
            // SAFETY: FI_OPT_CM_DATA_SIZE takes a size_t* and its length.
            unsafe {
                if *optlen < std::mem::size_of::<usize>() {
                    return -(FI_ETOOSMALL as c_int);
                }
                *(optval as *mut usize) = pinfo::CM_DATA_SIZE as usize;
                *optlen = std::mem::size_of::<usize>();
            }
            return 0;
        }
        if optname as u32 == FI_OPT_MIN_MULTI_RECV {
            let Some(o) = ep_obj(f as *const fid_ep).filter(|_| opt(f).is_some_and(|x| x.fclass as u32 == FI_CLASS_EP)) else { return -(FI_ENOPROTOOPT as c_int) };
            let Some(e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
            let Some(x) = e.eps.get(&o.id) else { return -(FI_EINVAL as c_int) };
            if optval.is_null() || optlen.is_null() {
                return -(FI_EINVAL as c_int);
            }
            // SAFETY: FI_OPT_MIN_MULTI_RECV takes a size_t* and its length.
            unsafe {
                if *optlen < std::mem::size_of::<usize>() {
                    return -(FI_ETOOSMALL as c_int);
                }
                *(optval as *mut usize) = x.min_multi_recv as usize;
                *optlen = std::mem::size_of::<usize>();
            }
            return 0;
        }
        -(FI_ENOPROTOOPT as c_int)
    })
}

unsafe extern "C" fn setopt(f: fid_t, level: c_int, optname: c_int, optval: *const c_void, optlen: usize) -> c_int {
    guard(EOTHER_I, || {
        if level as u32 != FI_OPT_ENDPOINT || optname as u32 != FI_OPT_MIN_MULTI_RECV {
            return -(FI_ENOPROTOOPT as c_int);
        }
        let Some(o) = ep_obj(f as *const fid_ep).filter(|_| opt(f).is_some_and(|x| x.fclass as u32 == FI_CLASS_EP)) else { return -(FI_ENOPROTOOPT as c_int) };
        if optval.is_null() || optlen < std::mem::size_of::<usize>() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: FI_OPT_MIN_MULTI_RECV takes a size_t* and its length (checked).
        let v = unsafe { *(optval as *const usize) } as u64;
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        match e.eps.get_mut(&o.id) {
            Some(x) => {
                x.min_multi_recv = v;
                0
            }
            None => -(FI_EINVAL as c_int),
        }
    })
}

// ---------------------------------------------------------------------------- passive ep

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
            p: fid_pep { fid: fid { fclass: FI_CLASS_PEP as usize, context, ops: ops_ptr(&PEP_FI_OPS) }, ops: ops_ptr(&PEP_EP_OPS), cm: ops_ptr(&CM_OPS) },
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

unsafe extern "C" fn pep_close(f: *mut fid) -> c_int {
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

unsafe extern "C" fn pep_bind(f: *mut fid, bfid: *mut fid, _flags: u64) -> c_int {
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

// ---------------------------------------------------------------------------- CM

unsafe extern "C" fn getname(f: fid_t, addr: *mut c_void, addrlen: *mut usize) -> c_int {
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

unsafe extern "C" fn setname(f: fid_t, addr: *mut c_void, addrlen: usize) -> c_int {
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

unsafe extern "C" fn getpeer(ep: *mut fid_ep, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = ep_obj(ep) else { return -(FI_EINVAL as c_int) };
        let Some(e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        match e.eps.get(&o.id).and_then(|x| x.peer.map(|p| (p, x.v6))) {
            Some((p, v6)) => write_out(addr, addrlen, &p.to_bytes(v6)),
            None => -(FI_ENOTCONN as c_int),
        }
    })
}

fn param_bytes(param: *const c_void, len: usize) -> Vec<u8> {
    if param.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's private data of `len` bytes.
    unsafe { std::slice::from_raw_parts(param as *const u8, len) }.to_vec()
}

unsafe extern "C" fn connect(ep: *mut fid_ep, addr: *const c_void, param: *const c_void, paramlen: usize) -> c_int {
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

unsafe extern "C" fn listen(pep: *mut fid_pep) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = opt(pep as *const PepObj) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        if e.peps.get(&o.id).is_some_and(|p| p.eq.is_none()) {
            return -(FI_ENOEQ as c_int);
        }
        ret_int(e.listen(o.id))
    })
}

unsafe extern "C" fn accept(ep: *mut fid_ep, param: *const c_void, paramlen: usize) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = ep_obj(ep) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        ret_int(e.accept(o.id, &param_bytes(param, paramlen)))
    })
}

unsafe extern "C" fn reject(_pep: *mut fid_pep, handle: fid_t, param: *const c_void, paramlen: usize) -> c_int {
    guard(EOTHER_I, || {
        let Some(conn) = connreq_take(handle) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        ret_int(e.reject(conn, &param_bytes(param, paramlen)))
    })
}

unsafe extern "C" fn shutdown(ep: *mut fid_ep, _flags: u64) -> c_int {
    guard(EOTHER_I, || {
        let Some(o) = ep_obj(ep) else { return -(FI_EINVAL as c_int) };
        let Some(mut e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
        ret_int(e.shutdown(o.id))
    })
}

// ---------------------------------------------------------------------------- data path

/// The scatter/gather list of an operation: descriptors give lkeys; without one, a
/// registered MR covering the range, else a registration just for this operation.
fn segments(e: &mut Engine, iov: &[(u64, u64)], desc: &[*mut c_void], tmp: &mut Vec<Lkey>) -> Result<Segs, u32> {
    let mut v = Segs::default();
    for (i, &(addr, len)) in iov.iter().enumerate() {
        if len == 0 {
            continue;
        }
        let lkey = match desc.get(i).copied().and_then(lkey_of) {
            Some(l) => l,
            None => match e.find_mr(addr, len) {
                Some(l) => l,
                None => {
                    let m = register(e, addr, len, AccessFlags::LOCAL_WRITE, true)?;
                    tmp.push(m.lkey);
                    m.lkey
                }
            },
        };
        v.push(Seg { addr, len, lkey })?;
    }
    Ok(v)
}

/// The caller's list, at most one entry past the iov limit (enough for the limit check to
/// refuse it; a wild count is not walked).
fn iovs(iov: *const iovec, count: usize) -> Vec<(u64, u64)> {
    if iov.is_null() {
        return Vec::new();
    }
    let count = count.min(pinfo::IOV_LIMIT as usize + 1);
    // SAFETY: the caller passes `count` (or more) iovecs at iov.
    unsafe { std::slice::from_raw_parts(iov, count) }.iter().map(|v| (v.iov_base as u64, v.iov_len as u64)).collect()
}

fn descs(desc: *mut *mut c_void, count: usize) -> Vec<*mut c_void> {
    let count = count.min(pinfo::IOV_LIMIT as usize + 1);
    if desc.is_null() {
        return vec![ptr::null_mut(); count];
    }
    // SAFETY: the caller passes `count` (or more) descriptors at desc.
    unsafe { std::slice::from_raw_parts(desc, count) }.to_vec()
}

/// The iov without its first `prefix` bytes, and how many whole entries were dropped.
fn strip_prefix(iov: &[(u64, u64)], prefix: u64) -> Option<(Vec<(u64, u64)>, usize)> {
    let mut left = prefix;
    let mut out = Vec::with_capacity(iov.len());
    let mut dropped = 0;
    for &(a, l) in iov {
        if left >= l && left > 0 {
            left -= l;
            dropped += 1;
            continue;
        }
        out.push((a + left, l - left));
        left = 0;
    }
    (left == 0).then_some((out, dropped))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tx {
    Send,
    Write(u64, u64),
    Read(u64, u64),
}

#[allow(clippy::too_many_arguments)]
fn post_tx(ep: *mut fid_ep, iov: &[(u64, u64)], desc: &[*mut c_void], dest: u64, context: *mut c_void, flags: Option<u64>, imm: Option<u64>, kind: Tx, inject: bool) -> isize {
    let Some(o) = ep_obj(ep) else { return -(FI_EINVAL as isize) };
    let Some(mut e) = engine::engine_if_open() else { return -(FI_EOPBADSTATE as isize) };
    let Some(x) = e.eps.get(&o.id) else { return -(FI_EINVAL as isize) };
    let stripped;
    let (mut iov, mut desc) = (iov, desc);
    if x.ty == pinfo::EpType::Dgram && x.prefix {
        // FI_MSG_PREFIX: the first bytes of a send buffer are the provider's (the GRH room).
        match strip_prefix(iov, pinfo::UD_PREFIX) {
            Some((v, skipped)) => {
                stripped = v;
                iov = &stripped;
                desc = &desc[skipped.min(desc.len())..];
            }
            None => return -(FI_EINVAL as isize),
        }
    }
    let total: u64 = iov.iter().map(|v| v.1).sum();
    let op_flags = flags.unwrap_or(x.tx_op_flags);
    // The fi_inject* calls complete nothing; the FI_INJECT flag only hands the buffer back at
    // return (the data is copied now, within inject_size) and completes as any other op.
    let report = !inject && (!x.tx_selective || op_flags & FI_COMPLETION as u64 != 0);
    let inject = inject || op_flags & FI_INJECT as u64 != 0;
    if inject && total > pinfo::INJECT_SIZE {
        return -(FI_EMSGSIZE as isize);
    }
    if x.ty == pinfo::EpType::Dgram && total > pinfo::DGRAM_MAX_MSG_SIZE {
        // the advertised max_msg_size, whatever the port's MTU
        return -(FI_EMSGSIZE as isize);
    }
    if iov.len() as u64 > pinfo::iov_limit() {
        // checked here too: the inline copy below builds no scatter list
        return -(FI_EINVAL as isize);
    }
    let mut tmp = Vec::new();
    // Small sends and writes go inline: copied now, the buffer is free when the call returns.
    let inline = !matches!(kind, Tx::Read(..)) && total <= pinfo::INJECT_SIZE && e.bounce.is_some();
    let segs = if inline && total > 0 {
        let (area, lkey) = e.bounce.as_mut().map(|(a, l)| (a.as_mut_ptr(), *l)).unwrap_or((ptr::null_mut(), Lkey(0)));
        let mut off = 0usize;
        for &(a, l) in iov {
            // SAFETY: the caller's buffers hold the bytes they describe; the bounce area is
            // BOUNCE_LEN (>= INJECT_SIZE) bytes and only used under the engine lock.
            unsafe { ptr::copy_nonoverlapping(a as *const u8, area.add(off), l as usize) };
            off += l as usize;
        }
        Segs::one(Seg { addr: area as u64, len: total, lkey })
    } else {
        match segments(&mut e, iov, desc, &mut tmp) {
            Ok(s) => s,
            Err(x) => return -(x as isize),
        }
    };
    let (opcode, remote, kflags, okind) = match kind {
        Tx::Send => (if imm.is_some() { SendOpcode::SendImm } else { SendOpcode::Send }, None, FI_SEND as u64 | FI_MSG as u64, OpKind::Send),
        Tx::Write(a, k) => (if imm.is_some() { SendOpcode::WriteImm } else { SendOpcode::Write }, Some((a, Rkey(k as u32))), FI_RMA as u64 | FI_WRITE as u64, OpKind::Write),
        Tx::Read(a, k) => (SendOpcode::Read, Some((a, Rkey(k as u32))), FI_RMA as u64 | FI_READ as u64, OpKind::Read),
    };
    let first = iov.first().map(|v| v.0).unwrap_or(0);
    let op = Op { ep: o.id, kind: okind, context: context as usize, flags: kflags, buf: first, len: total, report, tmp_mrs: tmp.clone(), bounce: None };
    let r = e.post_send(o.id, SendReq { opcode, segs, inline, imm: imm.map(|d| d as u32), remote, atomic: (0, 0), dest: Some(dest), op });
    if r.is_err() {
        for l in tmp {
            e.remove_mr(l);
        }
    }
    ret_ssize(r)
}

/// `flags`: fi_recvmsg's (None: the endpoint's receive op_flags).
fn post_rx(ep: *mut fid_ep, iov: &[(u64, u64)], desc: &[*mut c_void], context: *mut c_void, flags: Option<u64>) -> isize {
    let Some(o) = ep_obj(ep) else {
        if engine::debug() {
            eprintln!("droce-fi: recv on a NULL endpoint");
        }
        return -(FI_EINVAL as isize);
    };
    let Some(mut e) = engine::engine_if_open() else { return -(FI_EOPBADSTATE as isize) };
    if e.eps.get(&o.id).is_some_and(|x| x.qp.is_none()) {
        return -(FI_EOPBADSTATE as isize);
    }
    let multi = e.eps.get(&o.id).is_some_and(|x| x.ty == pinfo::EpType::Msg && flags.unwrap_or(x.rx_op_flags) & FI_MULTI_RECV as u64 != 0);
    if !e.eps.contains_key(&o.id) && flags.unwrap_or(0) & FI_MULTI_RECV as u64 != 0 {
        // a shared receive context (an SRQ) takes one message per receive
        return -(FI_EOPNOTSUPP as isize);
    }
    // FI_SELECTIVE_COMPLETION on the receive binding: only receives that ask for it
    // (FI_COMPLETION in their flags or the endpoint's op_flags) complete successfully to
    // the CQ; a multi-receive buffer always reports (each message names its offset).
    let report = multi || e.eps.get(&o.id).map_or(true, |x| !x.rx_selective || flags.unwrap_or(x.rx_op_flags) & FI_COMPLETION as u64 != 0);
    if multi && iov.len() != 1 {
        // one buffer that successive messages fill
        return -(FI_EINVAL as isize);
    }
    let mut tmp = Vec::new();
    // A NULL buffer takes no data (fabtests' shared_ctx posts NULL receives for zero-byte
    // messages): it gets no scatter entry, so only a message that fits the rest arrives,
    // longer ones complete with FI_ETRUNC.
    let kept: (Vec<(u64, u64)>, Vec<*mut c_void>);
    let (iov_used, desc_used) = if iov.iter().any(|v| v.0 == 0 && v.1 != 0) {
        kept = iov.iter().enumerate().filter(|(_, v)| v.0 != 0).map(|(i, v)| (*v, desc.get(i).copied().unwrap_or(ptr::null_mut()))).unzip();
        (&kept.0[..], &kept.1[..])
    } else {
        (iov, desc)
    };
    let mut segs = match segments(&mut e, iov_used, desc_used, &mut tmp) {
        Ok(s) => s,
        Err(x) => {
            if engine::debug() {
                eprintln!("droce-fi: recv {iov_used:x?}: no memory registration ({x})");
            }
            return -(x as isize);
        }
    };
    let total: u64 = iov.iter().map(|v| v.1).sum();
    let first = iov.first().map(|v| v.0).unwrap_or(0);
    let mut bounce = None;
    if e.eps.get(&o.id).is_some_and(|x| x.ty == pinfo::EpType::Dgram && !x.prefix) {
        // No room for the GRH in the application's buffer: receive into our own, no larger
        // than a UD packet can be (a 4096-byte path MTU) whatever the application's length.
        let mut area = vec![0u8; (pinfo::UD_PREFIX + total.min(4096)) as usize].into_boxed_slice();
        let addr = area.as_mut_ptr() as u64;
        match register(&mut e, addr, area.len() as u64, AccessFlags::LOCAL_WRITE, true) {
            Ok(m) => {
                tmp.push(m.lkey);
                segs = Segs::one(Seg { addr, len: area.len() as u64, lkey: m.lkey });
            }
            Err(x) => {
                for l in tmp {
                    e.remove_mr(l);
                }
                return -(x as isize);
            }
        }
        bounce = Some(engine::Bounce { area, user: iov.to_vec() });
    }
    let op = Op { ep: o.id, kind: OpKind::Recv, context: context as usize, flags: FI_RECV as u64 | FI_MSG as u64, buf: first, len: total, report, tmp_mrs: tmp.clone(), bounce };
    let r = if multi {
        match segs.as_slice() {
            [s] => e.post_multi_recv(o.id, *s, op),
            _ => Err(FI_EINVAL),
        }
    } else {
        e.post_recv(o.id, segs.as_slice(), op)
    };
    if r.is_err() {
        for l in tmp {
            e.remove_mr(l);
        }
    }
    ret_ssize(r)
}

unsafe extern "C" fn recv(ep: *mut fid_ep, buf: *mut c_void, len: usize, desc: *mut c_void, _src: fi_addr_t, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_rx(ep, &[(buf as u64, len as u64)], &[desc], context, None))
}

unsafe extern "C" fn recvv(ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, _src: fi_addr_t, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_rx(ep, &iovs(iov, count), &descs(desc, count), context, None))
}

unsafe extern "C" fn recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(m) = opt(msg) else { return -(FI_EINVAL as isize) };
        post_rx(ep, &iovs(m.msg_iov, m.iov_count), &descs(m.desc, m.iov_count), m.context, Some(flags))
    })
}

unsafe extern "C" fn send(ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, dest: fi_addr_t, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[desc], dest, context, None, None, Tx::Send, false))
}

unsafe extern "C" fn sendv(ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, dest: fi_addr_t, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &iovs(iov, count), &descs(desc, count), dest, context, None, None, Tx::Send, false))
}

unsafe extern "C" fn sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(m) = opt(msg) else { return -(FI_EINVAL as isize) };
        let imm = (flags & FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
        post_tx(ep, &iovs(m.msg_iov, m.iov_count), &descs(m.desc, m.iov_count), m.addr, m.context, Some(flags), imm, Tx::Send, false)
    })
}

unsafe extern "C" fn inject(ep: *mut fid_ep, buf: *const c_void, len: usize, dest: fi_addr_t) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[ptr::null_mut()], dest, ptr::null_mut(), None, None, Tx::Send, true))
}

unsafe extern "C" fn senddata(ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, data: u64, dest: fi_addr_t, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[desc], dest, context, None, Some(data), Tx::Send, false))
}

unsafe extern "C" fn injectdata(ep: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest: fi_addr_t) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[ptr::null_mut()], dest, ptr::null_mut(), None, Some(data), Tx::Send, true))
}

unsafe extern "C" fn rma_read(ep: *mut fid_ep, buf: *mut c_void, len: usize, desc: *mut c_void, src: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[desc], src, context, None, None, Tx::Read(addr, key), false))
}

unsafe extern "C" fn rma_readv(ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, src: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &iovs(iov, count), &descs(desc, count), src, context, None, None, Tx::Read(addr, key), false))
}

fn rma_target(m: &fi_msg_rma) -> Option<(u64, u64)> {
    if m.rma_iov_count != 1 || m.rma_iov.is_null() {
        return None;
    }
    // SAFETY: one fi_rma_iov as counted.
    let r = unsafe { *m.rma_iov };
    Some((r.addr, r.key))
}

unsafe extern "C" fn rma_readmsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(m) = opt(msg) else { return -(FI_EINVAL as isize) };
        let Some((a, k)) = rma_target(m) else { return -(FI_EINVAL as isize) };
        post_tx(ep, &iovs(m.msg_iov, m.iov_count), &descs(m.desc, m.iov_count), m.addr, m.context, Some(flags), None, Tx::Read(a, k), false)
    })
}

unsafe extern "C" fn rma_write(ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, dest: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[desc], dest, context, None, None, Tx::Write(addr, key), false))
}

unsafe extern "C" fn rma_writev(ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, dest: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &iovs(iov, count), &descs(desc, count), dest, context, None, None, Tx::Write(addr, key), false))
}

unsafe extern "C" fn rma_writemsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(m) = opt(msg) else { return -(FI_EINVAL as isize) };
        let Some((a, k)) = rma_target(m) else { return -(FI_EINVAL as isize) };
        let imm = (flags & FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
        post_tx(ep, &iovs(m.msg_iov, m.iov_count), &descs(m.desc, m.iov_count), m.addr, m.context, Some(flags), imm, Tx::Write(a, k), false)
    })
}

unsafe extern "C" fn rma_inject(ep: *mut fid_ep, buf: *const c_void, len: usize, dest: fi_addr_t, addr: u64, key: u64) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[ptr::null_mut()], dest, ptr::null_mut(), None, None, Tx::Write(addr, key), true))
}

unsafe extern "C" fn rma_writedata(ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, data: u64, dest: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[desc], dest, context, None, Some(data), Tx::Write(addr, key), false))
}

unsafe extern "C" fn rma_injectdata(ep: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest: fi_addr_t, addr: u64, key: u64) -> isize {
    guard(EOTHER_S, || post_tx(ep, &[(buf as u64, len as u64)], &[ptr::null_mut()], dest, ptr::null_mut(), None, Some(data), Tx::Write(addr, key), true))
}

// ---------------------------------------------------------------------------- atomics

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

fn valid(datatype: fi_datatype, op: fi_op, kind: u64, count: *mut usize) -> c_int {
    if !pinfo::atomic_supported(datatype, op, kind) {
        return -(FI_EOPNOTSUPP as c_int);
    }
    if !count.is_null() {
        // SAFETY: the caller's count out-parameter.
        unsafe { *count = 1 };
    }
    0
}

unsafe extern "C" fn atomic_writevalid(_ep: *mut fid_ep, datatype: fi_datatype, op: fi_op, count: *mut usize) -> c_int {
    guard(EOTHER_I, || valid(datatype, op, 0, count))
}
unsafe extern "C" fn atomic_readwritevalid(_ep: *mut fid_ep, datatype: fi_datatype, op: fi_op, count: *mut usize) -> c_int {
    guard(EOTHER_I, || valid(datatype, op, FI_FETCH_ATOMIC, count))
}
unsafe extern "C" fn atomic_compwritevalid(_ep: *mut fid_ep, datatype: fi_datatype, op: fi_op, count: *mut usize) -> c_int {
    guard(EOTHER_I, || valid(datatype, op, FI_COMPARE_ATOMIC, count))
}

fn read_u64(p: *const c_void) -> Option<u64> {
    if p.is_null() {
        return None;
    }
    // SAFETY: an operand of the 64-bit datatype the caller names.
    Some(unsafe { ptr::read_unaligned(p as *const u64) })
}

/// One RoCE atomic: FetchAdd (add) or CmpSwap (compare, swap); the 8-byte original lands in
/// `result` (the application's, or a provider scratch word for fi_atomic).
#[allow(clippy::too_many_arguments)]
/// `flags`: fi_*msg's (None: the endpoint's transmit op_flags); FI_INJECT (or `inject`):
/// no completion, the operand is read before the call returns anyway.
fn post_atomic(ep: *mut fid_ep, count: usize, datatype: fi_datatype, op: fi_op, kind: u64, operand: (u64, u64), result: Option<(u64, *mut c_void)>, addr: u64, key: u64, context: *mut c_void, flags: Option<u64>, inject: bool) -> isize {
    if count != 1 || !pinfo::atomic_supported(datatype, op, kind) {
        return -(FI_EOPNOTSUPP as isize);
    }
    let Some(o) = ep_obj(ep) else { return -(FI_EINVAL as isize) };
    let Some(mut e) = engine::engine_if_open() else { return -(FI_EOPBADSTATE as isize) };
    let Some(x) = e.eps.get(&o.id) else { return -(FI_EINVAL as isize) };
    let op_flags = flags.unwrap_or(x.tx_op_flags);
    // fi_inject_atomic completes nothing; the FI_INJECT flag (the operand is read before the
    // call returns anyway) completes as any other op
    let report = !inject && (!x.tx_selective || op_flags & FI_COMPLETION as u64 != 0);
    let context = if inject { ptr::null_mut() } else { context };
    if addr % 8 != 0 {
        // IBA 9.4.5: the target of a RoCE atomic is 8-byte aligned; the responder would
        // answer with a NAK that ends the connection
        return -(FI_EINVAL as isize);
    }
    let mut tmp = Vec::new();
    let mut bounce = None;
    let (seg, buf) = match result {
        Some((r, desc)) => match segments(&mut e, &[(r, 8)], &[desc], &mut tmp) {
            Ok(s) => match s.as_slice().first() {
                Some(s) => (*s, r),
                None => return -(FI_EINVAL as isize),
            },
            Err(x) => return -(x as isize),
        },
        None => {
            let mut area = vec![0u8; 8].into_boxed_slice();
            let a = area.as_mut_ptr() as u64;
            match register(&mut e, a, 8, AccessFlags::LOCAL_WRITE, true) {
                Ok(m) => {
                    tmp.push(m.lkey);
                    bounce = Some(engine::Bounce { area, user: Vec::new() });
                    (Seg { addr: a, len: 8, lkey: m.lkey }, 0)
                }
                Err(x) => return -(x as isize),
            }
        }
    };
    let (opcode, atomic) = if op == FI_CSWAP { (SendOpcode::CmpSwap, operand) } else { (SendOpcode::FetchAdd, (operand.0, 0)) };
    let flags = FI_ATOMIC as u64 | if kind == 0 { FI_WRITE as u64 } else { FI_READ as u64 };
    let op = Op { ep: o.id, kind: OpKind::Atomic, context: context as usize, flags, buf, len: 8, report, tmp_mrs: tmp.clone(), bounce };
    let r = e.post_send(o.id, SendReq { opcode, segs: Segs::one(seg), inline: false, imm: None, remote: Some((addr, Rkey(key as u32))), atomic, dest: Some(0), op });
    if r.is_err() {
        for l in tmp {
            e.remove_mr(l);
        }
    }
    ret_ssize(r)
}

unsafe extern "C" fn atomic_write(ep: *mut fid_ep, buf: *const c_void, count: usize, _desc: *mut c_void, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op, context: *mut c_void) -> isize {
    guard(EOTHER_S, || {
        let Some(v) = read_u64(buf) else { return -(FI_EINVAL as isize) };
        post_atomic(ep, count, datatype, op, 0, (v, 0), None, addr, key, context, None, false)
    })
}

unsafe extern "C" fn atomic_readwrite(ep: *mut fid_ep, buf: *const c_void, count: usize, _desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op, context: *mut c_void) -> isize {
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

unsafe extern "C" fn atomic_compwrite(ep: *mut fid_ep, buf: *const c_void, count: usize, _desc: *mut c_void, compare: *const c_void, _compare_desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op, context: *mut c_void) -> isize {
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
fn one_ioc(iov: *const fi_ioc, desc: *mut *mut c_void, n: usize) -> Result<(*mut c_void, usize, *mut c_void), isize> {
    if iov.is_null() || n != 1 {
        return Err(-(FI_EINVAL as isize));
    }
    // SAFETY: the caller's list of `n` (= 1) entries.
    let v = unsafe { &*iov };
    Ok((v.addr, v.count, descs(desc, 1)[0]))
}

/// The target of a message form: one fi_rma_ioc of one element.
fn atomic_target(m: &fi_msg_atomic) -> Result<(u64, u64), isize> {
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

unsafe extern "C" fn atomic_writev(ep: *mut fid_ep, iov: *const fi_ioc, desc: *mut *mut c_void, count: usize, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op, context: *mut c_void) -> isize {
    guard(EOTHER_S, || {
        let (buf, n, _) = tri!(one_ioc(iov, desc, count));
        let Some(v) = read_u64(buf) else { return -(FI_EINVAL as isize) };
        post_atomic(ep, n, datatype, op, 0, (v, 0), None, addr, key, context, None, false)
    })
}

unsafe extern "C" fn atomic_writemsg(ep: *mut fid_ep, msg: *const fi_msg_atomic, flags: u64) -> isize {
    guard(EOTHER_S, || {
        let Some(m) = opt(msg) else { return -(FI_EINVAL as isize) };
        let (buf, n, _) = tri!(one_ioc(m.msg_iov, m.desc, m.iov_count));
        let (addr, key) = tri!(atomic_target(m));
        let Some(v) = read_u64(buf) else { return -(FI_EINVAL as isize) };
        post_atomic(ep, n, m.datatype, m.op, 0, (v, 0), None, addr, key, m.context, Some(flags), false)
    })
}

unsafe extern "C" fn atomic_inject(ep: *mut fid_ep, buf: *const c_void, count: usize, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op) -> isize {
    guard(EOTHER_S, || {
        let Some(v) = read_u64(buf) else { return -(FI_EINVAL as isize) };
        post_atomic(ep, count, datatype, op, 0, (v, 0), None, addr, key, ptr::null_mut(), None, true)
    })
}

unsafe extern "C" fn atomic_readwritev(ep: *mut fid_ep, iov: *const fi_ioc, desc: *mut *mut c_void, count: usize, resultv: *mut fi_ioc, result_desc: *mut *mut c_void, result_count: usize, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op, context: *mut c_void) -> isize {
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

unsafe extern "C" fn atomic_readwritemsg(ep: *mut fid_ep, msg: *const fi_msg_atomic, resultv: *mut fi_ioc, result_desc: *mut *mut c_void, result_count: usize, flags: u64) -> isize {
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

unsafe extern "C" fn atomic_compwritev(ep: *mut fid_ep, iov: *const fi_ioc, desc: *mut *mut c_void, count: usize, comparev: *const fi_ioc, compare_desc: *mut *mut c_void, compare_count: usize, resultv: *mut fi_ioc, result_desc: *mut *mut c_void, result_count: usize, _dest: fi_addr_t, addr: u64, key: u64, datatype: fi_datatype, op: fi_op, context: *mut c_void) -> isize {
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

unsafe extern "C" fn atomic_compwritemsg(ep: *mut fid_ep, msg: *const fi_msg_atomic, comparev: *const fi_ioc, compare_desc: *mut *mut c_void, compare_count: usize, resultv: *mut fi_ioc, result_desc: *mut *mut c_void, result_count: usize, flags: u64) -> isize {
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
