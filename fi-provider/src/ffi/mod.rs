//! The only room for `unsafe`: libfabric's C ABI. Objects are `#[repr(C)]` structs whose
//! first field is the libfabric fid (asserted at compile time), ops tables are `static`s,
//! every unsupported op is [`enosys`] through the `nosys!` macro, and every `extern "C"` entry
//! runs its body under [`guard`] so that a panic becomes `-FI_EOTHER`, never an unwind into C.

/// The bindgen view of the libfabric headers.
pub mod sys;

// One file per libfabric object family; each converts pointers and calls the engine.
mod atomic;
mod av;
mod cm;
mod cntr;
mod cq;
mod domain;
mod ep;
mod ep_obj;
mod eq;
mod mr;
mod msg;
mod srx;
mod wait;

use self::{atomic::*, av::*, cm::*, cntr::*, cq::*, domain::*, ep::*, ep_obj::*, eq::*, mr::*, msg::*, srx::*, wait::*};

use crate::addr::EpAddr;
use crate::engine::{self, Engine, Errno, Id};
use crate::info::{self, Hints, Info, Query};
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use sys::*;

/// The one stub behind every unsupported operation.
pub(crate) fn enosys() -> isize {
    -(FI_ENOSYS as isize)
}

/// An `Option<unsafe extern "C" fn(..) -> R>` slot that answers -FI_ENOSYS.
macro_rules! nosys {
    (fn($($t:ty),*) -> $r:ty) => {{
        unsafe extern "C" fn stub($(_: $t),*) -> $r {
            $crate::ffi::enosys() as $r
        }
        Some(stub as unsafe extern "C" fn($($t),*) -> $r)
    }};
}
pub(crate) use nosys;

/// Runs an entry point's body; a panic turns into `err`.
pub(crate) fn guard<R>(err: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(err)
}

pub(crate) fn ret_int(r: Result<(), Errno>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => -(e as c_int),
    }
}

pub(crate) fn ret_ssize(r: Result<(), Errno>) -> isize {
    match r {
        Ok(()) => 0,
        Err(e) => -(e as isize),
    }
}

pub(crate) const EOTHER_I: c_int = -(FI_EOTHER as c_int);
pub(crate) const EOTHER_S: isize = -(FI_EOTHER as isize);

/// `(*p).field` for a possibly NULL pointer.
pub(crate) fn opt<T>(p: *const T) -> Option<&'static T> {
    // SAFETY: libfabric passes NULL or a valid object that outlives the call; the reference
    // is only used during the call.
    unsafe { p.as_ref() }
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

pub(crate) fn cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL C strings from libfabric/the application are NUL-terminated.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

pub(crate) fn strdup(s: &str) -> *mut c_char {
    let c = CString::new(s.replace('\0', "")).unwrap_or_default();
    // SAFETY: strdup copies a valid NUL-terminated string into malloc'd memory that
    // fi_freeinfo frees with free().
    unsafe { libc::strdup(c.as_ptr()) }
}

pub(crate) fn malloc_bytes(b: &[u8]) -> *mut c_void {
    // SAFETY: a fresh malloc of b.len() bytes, filled from b; freed by fi_freeinfo (free()).
    unsafe {
        let p = libc::malloc(b.len().max(1));
        if !p.is_null() {
            ptr::copy_nonoverlapping(b.as_ptr(), p as *mut u8, b.len());
        }
        p
    }
}

pub(crate) fn read_addr(p: *const c_void, len: usize) -> Option<EpAddr> {
    if p.is_null() || len < 2 {
        return None;
    }
    // SAFETY: the caller gives an address buffer of `len` bytes.
    let b = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
    EpAddr::from_bytes(b)
}

/// Whether the sockaddr at `p` is an AF_INET6 one (the caller's format, whatever the address:
/// an IPv4-mapped name parses as IPv4 but takes SOCKADDR_IN6_LEN bytes).
pub(crate) fn is_in6(p: *const c_void) -> bool {
    // SAFETY: every sockaddr starts with a 2-byte family.
    !p.is_null() && unsafe { ptr::read_unaligned(p as *const u16) } == libc::AF_INET6 as u16
}

/// Reads an address whose length the format decides (fi_connect, fi_av_insert).
pub(crate) fn read_sockaddr(p: *const c_void) -> Option<EpAddr> {
    if p.is_null() {
        return None;
    }
    // the family says how many bytes the caller's buffer holds
    let len = if is_in6(p) { crate::addr::SOCKADDR_IN6_LEN } else { crate::addr::SOCKADDR_IN_LEN };
    read_addr(p, len)
}

/// Writes `b` into the caller's `(buf, *len)`; -FI_ETOOSMALL (with the needed size in *len)
/// when it does not fit.
pub(crate) fn write_out(buf: *mut c_void, len: *mut usize, b: &[u8]) -> c_int {
    if len.is_null() {
        return -(FI_EINVAL as c_int);
    }
    // SAFETY: `len` is the caller's in/out size; `buf` holds at least the input *len bytes.
    unsafe {
        let have = *len;
        *len = b.len();
        if have < b.len() || buf.is_null() {
            if !buf.is_null() {
                ptr::copy_nonoverlapping(b.as_ptr(), buf as *mut u8, have);
            }
            return -(FI_ETOOSMALL as c_int);
        }
        ptr::copy_nonoverlapping(b.as_ptr(), buf as *mut u8, b.len());
    }
    0
}

// ---------------------------------------------------------------------------- provider

static NAME: &[u8] = b"droce\0";

static mut PROVIDER: fi_provider = fi_provider {
    version: info::PROV_VERSION,
    fi_version: info::FI_API_VERSION,
    context: fi_context { internal: [ptr::null_mut(); 4] },
    name: NAME.as_ptr() as *const c_char,
    getinfo: Some(getinfo),
    fabric: Some(fabric_open),
    cleanup: Some(cleanup),
};

/// The entry point libfabric looks up in every `*fi.so` of FI_PROVIDER_PATH.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut fi_provider {
    // Only the address is taken; libfabric owns the struct from here on.
    ptr::addr_of_mut!(PROVIDER)
}

unsafe extern "C" fn cleanup() {}

fn hints_from(h: &fi_info) -> Hints {
    let mut o = Hints { caps: h.caps, mode: h.mode, addr_format: h.addr_format, ..Default::default() };
    if let Some(t) = opt(h.tx_attr) {
        o.tx_caps = t.caps;
        o.tx_size = t.size as u64;
        o.inject_size = t.inject_size as u64;
        o.tx_msg_order = t.msg_order;
        o.mode |= t.mode;
    }
    if let Some(r) = opt(h.rx_attr) {
        o.rx_caps = r.caps;
        o.rx_size = r.size as u64;
        o.rx_msg_order = r.msg_order;
        o.mode |= r.mode;
    }
    if let Some(e) = opt(h.ep_attr) {
        o.ep_type = e.type_;
        o.max_msg_size = e.max_msg_size as u64;
        o.protocol = e.protocol;
        o.tx_ctx_cnt = e.tx_ctx_cnt as u64;
        o.rx_ctx_cnt = e.rx_ctx_cnt as u64;
    }
    if let Some(d) = opt(h.domain_attr) {
        o.mr_mode = Some(d.mr_mode as u32);
        o.threading = d.threading;
        o.control_progress = d.control_progress;
        o.data_progress = d.data_progress;
        o.domain_name = cstr(d.name);
        o.domain_caps = d.caps;
    }
    if let Some(f) = opt(h.fabric_attr) {
        o.fabric_name = cstr(f.name);
        o.prov_name = cstr(f.prov_name);
    }
    o.src = read_addr(h.src_addr, h.src_addrlen);
    o.dest = read_addr(h.dest_addr, h.dest_addrlen);
    o
}

/// A libfabric-owned fi_info (freed by fi_freeinfo) filled from `i`.
pub(crate) fn make_info(i: &Info) -> *mut fi_info {
    // SAFETY: fi_dupinfo(NULL) allocates an fi_info with all attribute structs zeroed; every
    // pointer we store is malloc'd (strdup/malloc_bytes), as fi_freeinfo expects.
    unsafe {
        let p = fi_dupinfo(ptr::null());
        if p.is_null() {
            return p;
        }
        let f = &mut *p;
        let v6 = i.addr_format == FI_SOCKADDR_IN6;
        f.caps = i.caps;
        f.mode = i.mode;
        f.addr_format = i.addr_format;
        if let Some(s) = i.src {
            let b = s.to_bytes(v6);
            f.src_addr = malloc_bytes(&b);
            f.src_addrlen = b.len();
        }
        if let Some(d) = i.dest {
            let b = d.to_bytes(v6);
            f.dest_addr = malloc_bytes(&b);
            f.dest_addrlen = b.len();
        }
        let order = i.msg_order;
        let t = &mut *f.tx_attr;
        t.caps = i.tx_caps;
        t.mode = i.mode;
        t.msg_order = order;
        t.comp_order = FI_ORDER_NONE as u64;
        t.inject_size = i.inject_size as usize;
        t.size = i.tx_size as usize;
        t.iov_limit = i.iov_limit as usize;
        t.rma_iov_limit = 1;
        let r = &mut *f.rx_attr;
        r.caps = i.rx_caps;
        r.mode = i.mode;
        r.msg_order = order;
        r.comp_order = FI_ORDER_NONE as u64;
        r.size = i.rx_size as usize;
        r.iov_limit = i.iov_limit as usize;
        let e = &mut *f.ep_attr;
        e.type_ = i.ep_type.raw();
        e.protocol = i.protocol;
        e.protocol_version = 1;
        e.max_msg_size = i.max_msg_size as usize;
        e.msg_prefix_size = i.msg_prefix_size as usize;
        e.max_order_raw_size = i.max_msg_size as usize;
        e.max_order_war_size = 0; // no FI_ORDER_WAR: a READ may pass a WRITE
        e.max_order_waw_size = i.max_msg_size as usize;
        e.tx_ctx_cnt = if i.shared_tx { FI_SHARED_CONTEXT as usize } else { 1 };
        e.rx_ctx_cnt = if i.shared_rx { FI_SHARED_CONTEXT as usize } else { 1 };
        let d = &mut *f.domain_attr;
        d.name = strdup(&i.domain_name);
        d.threading = i.threading;
        d.control_progress = i.progress;
        d.data_progress = i.progress;
        d.resource_mgmt = FI_RM_ENABLED;
        d.av_type = if i.ep_type == info::EpType::Dgram { FI_AV_MAP } else { FI_AV_UNSPEC };
        d.mr_mode = i.mr_mode as c_int;
        d.mr_key_size = 4;
        d.cq_data_size = info::CQ_DATA_SIZE as usize;
        d.cq_cnt = 1024;
        d.ep_cnt = 4096;
        d.tx_ctx_cnt = 4096;
        d.rx_ctx_cnt = 4096;
        d.max_ep_tx_ctx = 1;
        d.max_ep_rx_ctx = 1;
        // shared contexts (fi_stx_context / fi_srx_context) on FI_EP_MSG endpoints
        let shared = if i.ep_type == info::EpType::Msg { 1 } else { 0 };
        d.max_ep_stx_ctx = shared;
        d.max_ep_srx_ctx = shared;
        d.cntr_cnt = 1024;
        d.mr_iov_limit = 1;
        d.caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
        d.max_err_data = 256;
        d.mr_cnt = 65536;
        let fa = &mut *f.fabric_attr;
        fa.name = strdup(&i.fabric_name);
        // prov_name stays NULL: libfabric fills it (a core provider must not, see ofi_set_prov_attr).
        fa.prov_version = info::PROV_VERSION;
        fa.api_version = info::FI_API_VERSION;
        p
    }
}

/// Frees a list made by make_info (on error paths).
pub(crate) fn free_info(p: *mut fi_info) {
    if !p.is_null() {
        // SAFETY: a list allocated by fi_dupinfo and linked by us.
        unsafe { fi_freeinfo(p) }
    }
}

unsafe extern "C" fn getinfo(version: u32, node: *const c_char, service: *const c_char, flags: u64, hints: *const fi_info, out: *mut *mut fi_info) -> c_int {
    guard(EOTHER_I, || {
        if out.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let node = cstr(node);
        let service = cstr(service);
        let h = opt(hints).map(hints_from);
        let local = match engine::local_from_config() {
            Ok(l) => l,
            Err(e) => {
                // a value the user set and droce cannot use (a bad DROCE_* variable, a conf
                // file): said at any log level, and the provider answers nothing rather than
                // run with a default the user did not ask for
                report_config_error(&format!("droce: the droce provider is off: {e}"));
                return -(FI_EINVAL as c_int);
            }
        };
        let q = Query { node: node.as_deref(), service: service.as_deref(), source: flags & FI_SOURCE != 0, version };
        // hints->handle naming one of our passive endpoints: the answer takes over its
        // address (fi_endpoint "steals" the listener's address, socket style).
        let pep_handle = opt(hints).map(|x| x.handle).filter(|h| opt(*h).is_some_and(|f| f.fclass as u32 == FI_CLASS_PEP));
        let mut h = h;
        if let (Some(ph), Some(hh)) = (pep_handle, h.as_mut()) {
            if let Some(a) = pep_addr(ph) {
                hh.src = Some(a);
            }
        }
        match info::getinfo(&q, h.as_ref(), &local) {
            Ok(v) => {
                let mut head: *mut fi_info = ptr::null_mut();
                for i in v.iter().rev() {
                    let p = make_info(i);
                    if p.is_null() {
                        free_info(head);
                        return -(FI_ENOMEM as c_int);
                    }
                    // SAFETY: p is a fresh fi_info; hints (if any) is the caller's.
                    unsafe {
                        // FI_MULTI_RECV asked as a receive op flag becomes the endpoints'
                        // default (fi_recv then posts a multi-receive buffer)
                        if let Some(r) = opt(hints).and_then(|x| opt(x.rx_attr)) {
                            if (*p).caps & FI_MULTI_RECV as u64 != 0 {
                                (*(*p).rx_attr).op_flags |= r.op_flags & FI_MULTI_RECV as u64;
                            }
                        }
                        (*p).next = head;
                        if let Some(ph) = pep_handle {
                            (*p).handle = ph;
                        }
                    }
                    head = p;
                }
                // SAFETY: out checked non-NULL above.
                unsafe { *out = head };
                0
            }
            Err(e) => -(e as c_int),
        }
    })
}

/// A configuration error on stderr whatever FI_LOG_LEVEL says, once per process (an
/// application calls fi_getinfo many times; the configuration does not change in between).
pub(crate) fn report_config_error(msg: &str) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| eprintln!("{msg}"));
}

pub(crate) fn log_warn(msg: &str) {
    if std::env::var_os("FI_LOG_LEVEL").is_some() || std::env::var_os("DROCE_DEBUG").is_some() {
        eprintln!("{msg}");
    }
}

/// Turns an fi_info given back by the application into [`Info`]-level facts we need.
pub(crate) struct InfoView {
    pub ep_type: info::EpType,
    pub src: Option<EpAddr>,
    pub dest: Option<EpAddr>,
    pub v6: bool,
    pub handle: *mut fid,
    pub progress_auto: bool,
    pub tx_op_flags: u64,
    pub rx_op_flags: u64,
    pub prefix: bool,
}

pub(crate) fn view(i: *const fi_info) -> Option<InfoView> {
    let f = opt(i)?;
    let ep_type = match opt(f.ep_attr).map(|e| e.type_) {
        Some(t) if t == FI_EP_DGRAM => info::EpType::Dgram,
        _ => info::EpType::Msg,
    };
    let progress_auto = opt(f.domain_attr).is_some_and(|d| d.data_progress == FI_PROGRESS_AUTO || d.control_progress == FI_PROGRESS_AUTO);
    Some(InfoView {
        ep_type,
        src: read_addr(f.src_addr, f.src_addrlen),
        dest: read_addr(f.dest_addr, f.dest_addrlen),
        v6: f.addr_format == FI_SOCKADDR_IN6,
        handle: f.handle,
        progress_auto,
        tx_op_flags: opt(f.tx_attr).map(|t| t.op_flags).unwrap_or(0),
        prefix: f.mode & FI_MSG_PREFIX != 0 || opt(f.ep_attr).is_some_and(|e| e.msg_prefix_size > 0),
        rx_op_flags: opt(f.rx_attr).map(|r| r.op_flags).unwrap_or(0),
    })
}

// ---------------------------------------------------------------------------- fabric

#[repr(C)]
pub(crate) struct Fabric {
    f: fid_fabric,
}
const _: () = assert!(std::mem::offset_of!(Fabric, f) == 0);

static FABRIC_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(fabric_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

static FABRIC_OPS: fi_ops_fabric = fi_ops_fabric {
    size: std::mem::size_of::<fi_ops_fabric>(),
    domain: Some(domain_open),
    passive_ep: Some(pep_open),
    eq_open: Some(eq_open),
    wait_open: Some(wait_open),
    trywait: Some(trywait),
    domain2: nosys!(fn(*mut fid_fabric, *mut fi_info, *mut *mut fid_domain, u64, *mut c_void) -> c_int),
};

pub(crate) fn ops_ptr<T>(t: &'static T) -> *mut T {
    t as *const T as *mut T
}

/// The `close` of an object its open call boxed (its fid first, `repr(C)`): frees the box and,
/// if the engine is still open, lets `forget` drop what the engine keeps for it. A null fid
/// closes nothing.
///
/// # Safety
/// `f` is null or the fid of a `T` made by `Box::into_raw`, not closed before.
pub(super) unsafe fn close_boxed<T>(f: *mut fid, forget: impl FnOnce(&mut engine::Engine, &T)) -> c_int {
    guard(EOTHER_I, || {
        if f.is_null() {
            return 0;
        }
        // SAFETY: the caller's contract; the box is freed once, here.
        let b = unsafe { Box::from_raw(f as *mut T) };
        if let Some(mut e) = engine::engine_if_open() {
            forget(&mut *e, &*b);
        }
        0
    })
}

unsafe extern "C" fn fabric_open(attr: *mut fi_fabric_attr, fabric: *mut *mut fid_fabric, context: *mut c_void) -> c_int {
    guard(EOTHER_I, || {
        if fabric.is_null() {
            return -(FI_EINVAL as c_int);
        }
        if let Some(n) = opt(attr).and_then(|a| cstr(a.name)) {
            if n != info::FABRIC_NAME {
                return -(FI_ENODATA as c_int);
            }
        }
        let api = opt(attr).map(|a| a.api_version).unwrap_or(info::FI_API_VERSION);
        let b = Box::new(Fabric {
            f: fid_fabric {
                fid: fid { fclass: FI_CLASS_FABRIC as usize, context, ops: ops_ptr(&FABRIC_FI_OPS) },
                ops: ops_ptr(&FABRIC_OPS),
                api_version: api,
            },
        });
        // SAFETY: out pointer checked above; ownership passes to the application until fi_close.
        unsafe { *fabric = Box::into_raw(b) as *mut fid_fabric };
        0
    })
}

unsafe extern "C" fn fabric_close(f: *mut fid) -> c_int {
    guard(EOTHER_I, || {
        if !f.is_null() {
            // SAFETY: f is the fid of a Fabric made by fabric_open (fid first, repr(C)).
            drop(unsafe { Box::from_raw(f as *mut Fabric) });
        }
        0
    })
}

/// fi_trywait: progress once; -FI_EAGAIN if any of the fids has something to read.
unsafe extern "C" fn trywait(_f: *mut fid_fabric, fids: *mut *mut fid, count: c_int) -> c_int {
    guard(EOTHER_I, || {
        let Some(mut e) = engine::engine_if_open() else { return 0 };
        e.progress();
        for i in 0..count.max(0) as usize {
            // SAFETY: the caller passes `count` fids.
            let f = unsafe { *fids.add(i) };
            if fid_has_data(&e, f) {
                return -(FI_EAGAIN as c_int);
            }
        }
        for i in 0..count.max(0) as usize {
            // SAFETY: as above.
            settle_if_empty(&mut e, unsafe { *fids.add(i) });
        }
        0
    })
}

/// Opens (once) the engine.
pub(crate) fn open_engine() -> Result<std::sync::MutexGuard<'static, engine::Engine>, Errno> {
    engine::engine().map_err(|e| {
        eprintln!("droce: {e}");
        FI_ENODEV
    })
}

pub(super) fn engine_or<R>(err: R) -> Result<std::sync::MutexGuard<'static, Engine>, R> {
    open_engine().map_err(|_| err)
}

