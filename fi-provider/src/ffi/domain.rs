//! The domain: the progress thread of FI_PROGRESS_AUTO, fi_trywait's look at CQs and EQs,
//! and the domain's ops.

use super::sys::*;
use super::*;
use crate::engine::{self, Engine};

/// Auto progress (FI_PROGRESS_AUTO domains, FD wait objects): the runtime's progress thread
/// runs the same progress step as the reads.
pub(crate) fn start_auto_progress() {
    droce_dpdk::runtime::start_progress_thread(Some(auto_progress_step));
}

pub(super) fn auto_progress_step() -> bool {
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

#[repr(C)]
pub(crate) struct Domain {
    pub(crate) d: fid_domain,
}
const _: () = assert!(std::mem::offset_of!(Domain, d) == 0);

pub(super) static DOMAIN_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(domain_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

pub(super) static DOMAIN_OPS: fi_ops_domain = fi_ops_domain {
    size: std::mem::size_of::<fi_ops_domain>(),
    av_open: Some(av_open),
    cq_open: Some(cq_open),
    endpoint: Some(ep_open),
    scalable_ep: nosys!(fn(*mut fid_domain, *mut fi_info, *mut *mut fid_ep, *mut c_void) -> c_int),
    cntr_open: Some(cntr_open),
    poll_open: nosys!(fn(*mut fid_domain, *mut fi_poll_attr, *mut *mut fid_poll) -> c_int),
    stx_ctx: Some(stx_open),
    srx_ctx: Some(srx_open),
    query_atomic: Some(query_atomic),
    query_collective: nosys!(fn(*mut fid_domain, fi_collective_op, *mut fi_collective_attr, u64) -> c_int),
    endpoint2: nosys!(fn(*mut fid_domain, *mut fi_info, *mut *mut fid_ep, u64, *mut c_void) -> c_int),
};

pub(super) static MR_OPS: fi_ops_mr = fi_ops_mr { size: std::mem::size_of::<fi_ops_mr>(), reg: Some(mr_reg), regv: Some(mr_regv), regattr: Some(mr_regattr) };

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

pub(super) unsafe extern "C" fn domain_close(f: *mut fid) -> c_int {
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
