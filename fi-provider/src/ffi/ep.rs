//! Active endpoints (FI_EP_MSG on RC, FI_EP_DGRAM on UD): their ops tables, open, close,
//! bind, control and options. The operations themselves are in `msg`, `atomic` and `cm`.

use super::sys::*;
use super::*;
use crate::engine::{self, Engine, Id};
use crate::info as pinfo;

#[repr(C)]
pub(crate) struct EpObj {
    pub(crate) e: fid_ep,
    pub(crate) id: Id,
}
const _: () = assert!(std::mem::offset_of!(EpObj, e) == 0);

pub(super) static EP_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(ep_close),
    bind: Some(ep_bind),
    control: Some(ep_control),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

/// The endpoint operations of an active endpoint and of a passive one alike (options only).
pub(super) static EP_OPS: fi_ops_ep = fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: nosys!(fn(fid_t, *mut c_void) -> isize),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: nosys!(fn(*mut fid_ep, c_int, *mut fi_tx_attr, *mut *mut fid_ep, *mut c_void) -> c_int),
    rx_ctx: nosys!(fn(*mut fid_ep, c_int, *mut fi_rx_attr, *mut *mut fid_ep, *mut c_void) -> c_int),
    rx_size_left: nosys!(fn(*mut fid_ep) -> isize),
    tx_size_left: nosys!(fn(*mut fid_ep) -> isize),
};

pub(super) static CM_OPS: fi_ops_cm = fi_ops_cm {
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

pub(super) static MSG_OPS: fi_ops_msg = fi_ops_msg {
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

pub(super) static RMA_OPS: fi_ops_rma = fi_ops_rma {
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

pub(super) static TAGGED_OPS: fi_ops_tagged = fi_ops_tagged {
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

pub(super) static ATOMIC_OPS: fi_ops_atomic = fi_ops_atomic {
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

pub(super) fn engine_or<R>(err: R) -> Result<std::sync::MutexGuard<'static, Engine>, R> {
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

pub(super) fn ep_obj(ep: *const fid_ep) -> Option<&'static EpObj> {
    opt(ep as *const EpObj)
}

pub(super) unsafe extern "C" fn ep_close(f: *mut fid) -> c_int {
    // SAFETY: f is the fid of an EpObj from ep_open, closed once by the application.
    unsafe { close_boxed(f, |e, b: &EpObj| { e.close_ep(b.id); }) }
}

pub(super) fn bound_id(f: *mut fid) -> Option<(u32, Id)> {
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

pub(super) unsafe extern "C" fn ep_bind(f: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
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

pub(super) unsafe extern "C" fn ep_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
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

/// Writes a `size_t` option value for `fi_getopt`: `-FI_EINVAL` when either pointer is null,
/// `-FI_ETOOSMALL` when `*optlen` is less than a `size_t`; else the value, with `*optlen` set
/// to its size.
///
/// # Safety
/// Non-null `optval` and `optlen` must be valid for writes: `optlen` of a `usize`, `optval`
/// of `*optlen` bytes, aligned for a `usize` (a size_t option, as libfabric defines them).
unsafe fn put_size_opt(optval: *mut c_void, optlen: *mut usize, v: usize) -> c_int {
    if optval.is_null() || optlen.is_null() {
        return -(FI_EINVAL as c_int);
    }
    // SAFETY: both non-null and valid for writes (the caller's contract).
    unsafe {
        if *optlen < std::mem::size_of::<usize>() {
            return -(FI_ETOOSMALL as c_int);
        }
        *(optval as *mut usize) = v;
        *optlen = std::mem::size_of::<usize>();
    }
    0
}

pub(super) unsafe extern "C" fn getopt(f: fid_t, level: c_int, optname: c_int, optval: *mut c_void, optlen: *mut usize) -> c_int {
    guard(EOTHER_I, || {
        if level as u32 != FI_OPT_ENDPOINT {
            return -(FI_ENOPROTOOPT as c_int);
        }
        if optname as u32 == FI_OPT_CM_DATA_SIZE {
            // SAFETY: FI_OPT_CM_DATA_SIZE takes a size_t* and its length.
            return unsafe { put_size_opt(optval, optlen, pinfo::CM_DATA_SIZE as usize) };
        }
        if optname as u32 == FI_OPT_MIN_MULTI_RECV {
            let Some(o) = ep_obj(f as *const fid_ep).filter(|_| opt(f).is_some_and(|x| x.fclass as u32 == FI_CLASS_EP)) else { return -(FI_ENOPROTOOPT as c_int) };
            let Some(e) = engine::engine_if_open() else { return -(FI_EINVAL as c_int) };
            let Some(x) = e.eps.get(&o.id) else { return -(FI_EINVAL as c_int) };
            // SAFETY: FI_OPT_MIN_MULTI_RECV takes a size_t* and its length.
            return unsafe { put_size_opt(optval, optlen, x.min_multi_recv as usize) };
        }
        -(FI_ENOPROTOOPT as c_int)
    })
}

pub(super) unsafe extern "C" fn setopt(f: fid_t, level: c_int, optname: c_int, optval: *const c_void, optlen: usize) -> c_int {
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
