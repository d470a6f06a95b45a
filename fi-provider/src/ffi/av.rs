//! Address vectors: insert, insertsvc, remove, lookup, straddr.

use super::sys::*;
use super::*;
use crate::addr::{self, EpAddr};
use crate::engine::{self, Id};
use crate::queue::ADDR_NOTAVAIL;

#[repr(C)]
pub(crate) struct AvObj {
    pub(crate) a: fid_av,
    pub(crate) id: Id,
}
const _: () = assert!(std::mem::offset_of!(AvObj, a) == 0);

pub(super) static AV_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(av_close),
    bind: nosys!(fn(*mut fid, *mut fid, u64) -> c_int),
    control: nosys!(fn(*mut fid, c_int, *mut c_void) -> c_int),
    ops_open: nosys!(fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int),
    tostr: nosys!(fn(*const fid, *mut c_char, usize) -> c_int),
    ops_set: nosys!(fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int),
};

pub(super) static AV_OPS: fi_ops_av = fi_ops_av {
    size: std::mem::size_of::<fi_ops_av>(),
    insert: Some(av_insert),
    insertsvc: Some(av_insertsvc),
    insertsym: nosys!(fn(*mut fid_av, *const c_char, usize, *const c_char, usize, *mut fi_addr_t, u64, *mut c_void) -> c_int),
    remove: Some(av_remove),
    lookup: Some(av_lookup),
    straddr: Some(av_straddr),
    av_set: nosys!(fn(*mut fid_av, *mut fi_av_set_attr, *mut *mut fid_av_set, *mut c_void) -> c_int),
};

pub(super) unsafe extern "C" fn av_open(_d: *mut fid_domain, attr: *mut fi_av_attr, av: *mut *mut fid_av, context: *mut c_void) -> c_int {
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

pub(super) unsafe extern "C" fn av_close(f: *mut fid) -> c_int {
    // SAFETY: f is the fid of an AvObj from av_open, closed once by the application.
    unsafe { close_boxed(f, |e, b: &AvObj| { e.avs.remove(&b.id); }) }
}

pub(super) fn av_id(av: *mut fid_av) -> Option<Id> {
    opt(av as *const AvObj).map(|o| o.id)
}

pub(super) unsafe extern "C" fn av_insert(av: *mut fid_av, addr: *const c_void, count: usize, fi_addr: *mut fi_addr_t, _flags: u64, _ctx: *mut c_void) -> c_int {
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

pub(super) unsafe extern "C" fn av_insertsvc(av: *mut fid_av, node: *const c_char, service: *const c_char, fi_addr: *mut fi_addr_t, _flags: u64, _ctx: *mut c_void) -> c_int {
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

pub(super) unsafe extern "C" fn av_remove(av: *mut fid_av, fi_addr: *mut fi_addr_t, count: usize, _flags: u64) -> c_int {
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

pub(super) unsafe extern "C" fn av_lookup(av: *mut fid_av, fi_addr: fi_addr_t, addr: *mut c_void, addrlen: *mut usize) -> c_int {
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

pub(super) unsafe extern "C" fn av_straddr(_av: *mut fid_av, addr: *const c_void, buf: *mut c_char, len: *mut usize) -> *const c_char {
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
