//! Advertised droce capabilities that no other test exercised (static audit of the provider,
//! gaps 2-13), driven through the real libfabric API in the style of msg_api.rs: counters,
//! TX selective completion and op flags, error completions, iov/size/queue limits, EQ
//! write/peek, CQ sreadfrom/tagged format/wait objects, AV insertsvc/straddr, getpeer/setname,
//! IPv6 names, the FI_SOURCE capability, FI_THREAD_SAFE with two application threads, and
//! message ordering on the wire (WAS/SAW, RAW, WAW).
//!
//! droce opens its host once per process, on the zero-config link DROCE_LINK names, and an FD
//! wait object starts a progress thread for the rest of the process. So every test runs its
//! body in a child process of this binary ([`isolated`]) with its own link name
//! (common::unique); the parent bounds the child's run and kills it after [`CHILD_LIMIT`].

#[macro_use]
mod common;
use common::{cq_wait, eq_event};
use droce_fi::sys::*;
use std::os::raw::{c_char, c_void};
use std::process::Stdio;
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;
const FI_ADDR_NOTAVAIL: fi_addr_t = u64::MAX;
const API: u32 = (1 << 16) | 17;
const DEADLINE: Duration = Duration::from_secs(30);
const CHILD_LIMIT: Duration = Duration::from_secs(180);
const MR_MODES: i32 = (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY) as i32;
/// ibv_wc_status IBV_WC_REM_ACCESS_ERR: droce's prov_errno is the work completion status.
const WC_REM_ACCESS_ERR: i32 = 10;
const CHILD_ENV: &str = "DROCE_API_COVERAGE_CHILD";

// ------------------------------------------------------------------------- process isolation

/// Runs `body` in a child process of this test binary with its own zero-config link; in the
/// child (named by CHILD_ENV) runs it directly.
fn isolated(name: &str, tag: &str, body: unsafe fn()) {
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        // FI_PROVIDER_PATH, FI_PROVIDER=droce and DROCE_LINK come from the parent (fi_cmd)
        unsafe { body() };
        return;
    }
    let exe = std::env::current_exe().expect("test binary path");
    let link = common::unique(tag);
    let child = common::fi_cmd(exe.to_str().expect("utf-8 test binary path"), &link)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD_ENV, name)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the test's own process");
    let t0 = Instant::now();
    let (code, out) = common::wait_bounded(child, CHILD_LIMIT);
    remove_link_locks(&link);
    println!("{out}");
    assert!(t0.elapsed() < CHILD_LIMIT, "{name} (link {link}) killed after {CHILD_LIMIT:?}:\n{out}");
    assert!(code == Some(0) && out.contains("test result: ok. 1 passed"), "{name} (link {link}) exited {code:?}:\n{out}");
}

/// The lock files of a finished child's zero-config link (`/tmp/droce-<uid>/<link>.<slot>.lock`).
fn remove_link_locks(link: &str) {
    // SAFETY: getuid has no preconditions.
    let dir = std::path::PathBuf::from(format!("/tmp/droce-{}", unsafe { libc::getuid() }));
    let prefix = format!("{link}.");
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with(&prefix) && n.ends_with(".lock") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

// ------------------------------------------------------------------------- helpers

fn fid<T>(p: *mut T) -> *mut fid {
    // every fid_* struct starts with its struct fid
    p as *mut fid
}

unsafe fn close(f: *mut fid) {
    assert_eq!(fidcall!(f, close()), 0, "fi_close");
}

unsafe fn hints(ep_type: u32, caps: u64, mode: u64) -> *mut fi_info {
    let h = fi_dupinfo(null());
    (*h).caps = caps;
    (*h).mode = mode;
    (*(*h).ep_attr).type_ = ep_type;
    (*(*h).domain_attr).mr_mode = MR_MODES;
    (*(*h).fabric_attr).prov_name = libc::strdup(c"droce".as_ptr());
    h
}

unsafe fn getinfo(h: *mut fi_info) -> *mut fi_info {
    let mut info: *mut fi_info = null_mut();
    assert_eq!(fi_getinfo(API, null(), null(), 0, h, &mut info), 0, "fi_getinfo");
    assert!(!info.is_null());
    info
}

unsafe fn open_domain(info: *mut fi_info) -> (*mut fid_fabric, *mut fid_domain) {
    let mut fabric: *mut fid_fabric = null_mut();
    assert_eq!(fi_fabric((*info).fabric_attr, &mut fabric, null_mut()), 0, "fi_fabric");
    let mut domain: *mut fid_domain = null_mut();
    assert_eq!(call!(fabric, ops.domain(info, &mut domain, null_mut())), 0, "fi_domain");
    (fabric, domain)
}

unsafe fn open_eq(fabric: *mut fid_fabric, flags: u64) -> *mut fid_eq {
    let mut attr: fi_eq_attr = std::mem::zeroed();
    attr.wait_obj = FI_WAIT_NONE;
    attr.flags = flags;
    let mut eq: *mut fid_eq = null_mut();
    assert_eq!(call!(fabric, ops.eq_open(&mut attr, &mut eq, null_mut())), 0, "fi_eq_open");
    eq
}

unsafe fn open_cq(domain: *mut fid_domain, format: fi_cq_format, wait: fi_wait_obj) -> *mut fid_cq {
    let mut attr: fi_cq_attr = std::mem::zeroed();
    attr.format = format;
    attr.wait_obj = wait;
    attr.size = 1024;
    let mut cq: *mut fid_cq = null_mut();
    assert_eq!(call!(domain, ops.cq_open(&mut attr, &mut cq, null_mut())), 0, "fi_cq_open");
    cq
}

/// A completion counter that fi_cntr_wait may be used on (not FI_WAIT_NONE).
unsafe fn open_cntr(domain: *mut fid_domain) -> *mut fid_cntr {
    let mut attr: fi_cntr_attr = std::mem::zeroed();
    attr.events = FI_CNTR_EVENTS_COMP;
    attr.wait_obj = FI_WAIT_UNSPEC;
    let mut c: *mut fid_cntr = null_mut();
    assert_eq!(call!(domain, ops.cntr_open(&mut attr, &mut c, null_mut())), 0, "fi_cntr_open");
    c
}

unsafe fn cntr_read(c: *mut fid_cntr) -> u64 {
    call!(c, ops.read())
}

unsafe fn cntr_readerr(c: *mut fid_cntr) -> u64 {
    call!(c, ops.readerr())
}

unsafe fn mr_reg(domain: *mut fid_domain, buf: &[u8], access: u64) -> *mut fid_mr {
    let mut mr: *mut fid_mr = null_mut();
    let reg = (*(*domain).mr).reg.expect("reg");
    let r = reg(fid(domain), buf.as_ptr() as *const c_void, buf.len(), access, 0, 0, 0, &mut mr, null_mut());
    assert_eq!(r, 0, "fi_mr_reg");
    mr
}

unsafe fn name_of(f: *mut fid, cm: *mut fi_ops_cm) -> Vec<u8> {
    let mut b = [0u8; 64];
    let mut len = b.len();
    assert_eq!(((*cm).getname.unwrap())(f, b.as_mut_ptr() as *mut c_void, &mut len), 0, "fi_getname");
    b[..len].to_vec()
}

unsafe fn ep_name(ep: *mut fid_ep) -> Vec<u8> {
    name_of(fid(ep), (*ep).cm)
}

unsafe fn getpeer(ep: *mut fid_ep) -> Result<Vec<u8>, i32> {
    let mut b = [0u8; 64];
    let mut len = b.len();
    match call!(ep, cm.getpeer(b.as_mut_ptr() as *mut c_void, &mut len)) {
        0 => Ok(b[..len].to_vec()),
        r => Err(r),
    }
}

fn port_of(name: &[u8]) -> u16 {
    u16::from_be_bytes([name[2], name[3]])
}

/// An endpoint with its bindings, enabled.
unsafe fn new_ep(domain: *mut fid_domain, info: *mut fi_info, binds: &[(*mut fid, u64)], ctx: usize) -> *mut fid_ep {
    let mut ep: *mut fid_ep = null_mut();
    assert_eq!(call!(domain, ops.endpoint(info, &mut ep, ctx as *mut c_void)), 0, "fi_endpoint");
    for &(b, flags) in binds {
        assert_eq!(fidcall!(fid(ep), bind(b, flags)), 0, "fi_ep_bind flags {flags:#x}");
    }
    assert_eq!(fidcall!(fid(ep), control(FI_ENABLE as i32, null_mut())), 0, "fi_enable");
    ep
}

/// The next error entry (panics on a successful completion or after DEADLINE).
unsafe fn cq_wait_err(cq: *mut fid_cq) -> fi_cq_err_entry {
    let mut e: fi_cq_data_entry = std::mem::zeroed();
    let start = Instant::now();
    loop {
        let n = call!(cq, ops.read(&mut e as *mut _ as *mut c_void, 1));
        if n == -(FI_EAVAIL as isize) {
            let mut x: fi_cq_err_entry = std::mem::zeroed();
            assert_eq!(call!(cq, ops.readerr(&mut x, 0)), 1, "fi_cq_readerr");
            return x;
        }
        assert_eq!(n, -(FI_EAGAIN as isize), "expected an error entry, got {n} (ctx {:?})", e.op_context);
        assert!(start.elapsed() < DEADLINE, "no error entry");
    }
}

/// Reads the CQ a few times (each read progresses): nothing there.
unsafe fn assert_cq_empty(cq: *mut fid_cq, what: &str) {
    for _ in 0..50 {
        let mut e: fi_cq_data_entry = std::mem::zeroed();
        let n = call!(cq, ops.read(&mut e as *mut _ as *mut c_void, 1));
        assert_eq!(n, -(FI_EAGAIN as isize), "{what}: unexpected CQ entry (ctx {:?})", e.op_context);
    }
}

/// Waits (bounded) until the counter reaches `v` through fi_cntr_read, then checks it is exactly `v`.
unsafe fn cntr_reaches(c: *mut fid_cntr, v: u64, what: &str) {
    let start = Instant::now();
    while cntr_read(c) < v {
        assert!(start.elapsed() < DEADLINE, "{what}: counter stuck at {} (want {v})", cntr_read(c));
    }
    assert_eq!(cntr_read(c), v, "{what}");
}

/// One self-connected FI_EP_MSG setup: fabric, EQ, domain, listening passive endpoint.
struct Msg {
    hints: *mut fi_info,
    info: *mut fi_info,
    fabric: *mut fid_fabric,
    eq: *mut fid_eq,
    domain: *mut fid_domain,
    pep: *mut fid_pep,
    name: Vec<u8>,
}

unsafe fn msg_open(tweak: impl FnOnce(*mut fi_info)) -> Msg {
    let h = hints(FI_EP_MSG, (FI_MSG | FI_RMA) as u64, FI_RX_CQ_DATA);
    tweak(h);
    let info = getinfo(h);
    assert_eq!((*(*info).ep_attr).type_, FI_EP_MSG);
    let mut fabric: *mut fid_fabric = null_mut();
    assert_eq!(fi_fabric((*info).fabric_attr, &mut fabric, null_mut()), 0);
    let eq = open_eq(fabric, 0);
    let mut domain: *mut fid_domain = null_mut();
    assert_eq!(call!(fabric, ops.domain(info, &mut domain, null_mut())), 0);
    let mut pep: *mut fid_pep = null_mut();
    assert_eq!(call!(fabric, ops.passive_ep(info, &mut pep, null_mut())), 0);
    assert_eq!(fidcall!(fid(pep), bind(fid(eq), 0)), 0);
    assert_eq!(call!(pep, cm.listen()), 0);
    let name = name_of(fid(pep), (*pep).cm);
    assert_ne!(port_of(&name), 0, "listen assigned a port");
    Msg { hints: h, info, fabric, eq, domain, pep, name }
}

impl Msg {
    /// A connects to the listener, B is accepted; both get the EQ and their extra bindings.
    unsafe fn connect(&self, a_binds: &[(*mut fid, u64)], b_binds: &[(*mut fid, u64)]) -> (*mut fid_ep, *mut fid_ep) {
        let mut binds = vec![(fid(self.eq), 0u64)];
        binds.extend_from_slice(a_binds);
        let a = new_ep(self.domain, self.info, &binds, 0xa);
        self.connect_ep(a, b_binds)
    }

    unsafe fn connect_ep(&self, a: *mut fid_ep, b_binds: &[(*mut fid, u64)]) -> (*mut fid_ep, *mut fid_ep) {
        assert_eq!(call!(a, cm.connect(self.name.as_ptr() as *const c_void, null(), 0)), 0, "fi_connect");
        let (ev, f, req, _) = eq_event(self.eq);
        assert_eq!((ev, f), (FI_CONNREQ, fid(self.pep)));
        let mut binds = vec![(fid(self.eq), 0u64)];
        binds.extend_from_slice(b_binds);
        let b = new_ep(self.domain, req, &binds, 0xb);
        fi_freeinfo(req);
        assert_eq!(call!(b, cm.accept(null(), 0)), 0, "fi_accept");
        let mut up = Vec::new();
        while up.len() < 2 {
            let (ev, f, _, _) = eq_event(self.eq);
            assert_eq!(ev, FI_CONNECTED);
            up.push(f);
        }
        assert!(up.contains(&fid(a)) && up.contains(&fid(b)), "both ends connected");
        (a, b)
    }

    unsafe fn close(self) {
        for f in [fid(self.pep), fid(self.domain), fid(self.eq), fid(self.fabric)] {
            close(f);
        }
        fi_freeinfo(self.info);
        fi_freeinfo(self.hints);
    }
}

/// One FI_EP_DGRAM setup: fabric, domain, AV; endpoints are added with `ep`.
struct Dgram {
    hints: *mut fi_info,
    info: *mut fi_info,
    fabric: *mut fid_fabric,
    domain: *mut fid_domain,
    av: *mut fid_av,
    /// FI_MSG_PREFIX bytes in front of every buffer (0 without the mode).
    pre: usize,
}

unsafe fn dgram_open(caps: u64, prefix: bool, addr_format: u32) -> Dgram {
    let h = hints(FI_EP_DGRAM, caps, if prefix { FI_MSG_PREFIX } else { 0 });
    (*h).addr_format = addr_format;
    let info = getinfo(h);
    assert_eq!((*(*info).ep_attr).type_, FI_EP_DGRAM);
    let pre = (*(*info).ep_attr).msg_prefix_size;
    assert_eq!(pre, if prefix { 40 } else { 0 });
    let (fabric, domain) = open_domain(info);
    let mut av_attr: fi_av_attr = std::mem::zeroed();
    av_attr.type_ = FI_AV_MAP;
    let mut av: *mut fid_av = null_mut();
    assert_eq!(call!(domain, ops.av_open(&mut av_attr, &mut av, null_mut())), 0, "fi_av_open");
    Dgram { hints: h, info, fabric, domain, av, pre }
}

impl Dgram {
    /// An endpoint bound to the AV and `cq` (both directions); its name inserted unless `insert` is false.
    unsafe fn ep(&self, cq: *mut fid_cq, insert: bool) -> (*mut fid_ep, Vec<u8>, fi_addr_t) {
        let ep = new_ep(self.domain, self.info, &[(fid(self.av), 0), (fid(cq), (FI_TRANSMIT | FI_RECV) as u64)], 0xd);
        let name = ep_name(ep);
        let mut a = FI_ADDR_NOTAVAIL;
        if insert {
            assert_eq!(call!(self.av, ops.insert(name.as_ptr() as *const c_void, 1, &mut a, 0, null_mut())), 1, "fi_av_insert");
        }
        (ep, name, a)
    }

    unsafe fn close(self) {
        close(fid(self.av));
        close(fid(self.domain));
        close(fid(self.fabric));
        fi_freeinfo(self.info);
        fi_freeinfo(self.hints);
    }
}

/// Reads `n` entries (successes and errors) from a CQ, with their source addresses.
enum Got {
    Ok(fi_cq_msg_entry, fi_addr_t),
    Err(fi_cq_err_entry),
}

unsafe fn cq_collect(cq: *mut fid_cq, n: usize) -> Vec<Got> {
    let mut v = Vec::new();
    let start = Instant::now();
    while v.len() < n {
        let mut e: fi_cq_msg_entry = std::mem::zeroed();
        let mut src: fi_addr_t = 0;
        let r = call!(cq, ops.readfrom(&mut e as *mut _ as *mut c_void, 1, &mut src));
        if r == 1 {
            v.push(Got::Ok(e, src));
        } else if r == -(FI_EAVAIL as isize) {
            let mut x: fi_cq_err_entry = std::mem::zeroed();
            assert_eq!(call!(cq, ops.readerr(&mut x, 0)), 1);
            v.push(Got::Err(x));
        } else {
            assert_eq!(r, -(FI_EAGAIN as isize), "fi_cq_readfrom");
            assert!(start.elapsed() < DEADLINE, "{} of {n} completions", v.len());
        }
    }
    v
}

fn ok_ctx(v: &[Got], ctx: usize) -> Option<(fi_cq_msg_entry, fi_addr_t)> {
    v.iter().find_map(|g| match g {
        Got::Ok(e, s) if e.op_context as usize == ctx => Some((*e, *s)),
        _ => None,
    })
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32).map(|i| (i.wrapping_mul(31).wrapping_add(seed.wrapping_mul(7)) >> 1) as u8 ^ seed as u8).collect()
}

// ------------------------------------------------------------------------- 2. counters

/// Counters at droce level on FI_EP_MSG: one bound FI_SEND|FI_WRITE and one FI_RECV|FI_READ on
/// the active side (plus FI_RECV on the passive side); a send, an RMA write, an RMA read and a
/// receive move exactly their counter; fi_cntr_wait reaches a threshold and times out on an
/// unreachable one; add/set/adderr/seterr/readerr round trip, completions add on top of set.
#[test]
fn counters_count_sends_writes_reads_and_receives() {
    isolated("counters_count_sends_writes_reads_and_receives", "cov-cntr", counters_body);
}

unsafe fn counters_body() {
    let m = msg_open(|_| {});
    let cq_a = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let cq_b = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let tx = open_cntr(m.domain);
    let rx = open_cntr(m.domain);
    let b_rx = open_cntr(m.domain);
    let both = (FI_TRANSMIT | FI_RECV) as u64;
    let (a, b) = m.connect(
        &[(fid(cq_a), both), (fid(tx), (FI_SEND | FI_WRITE) as u64), (fid(rx), (FI_RECV | FI_READ) as u64)],
        &[(fid(cq_b), both), (fid(b_rx), FI_RECV as u64)],
    );
    let mut la = pattern(16384, 1);
    let lb = vec![0u8; 16384];
    let mr_a = mr_reg(m.domain, &la, (FI_SEND | FI_RECV | FI_READ | FI_WRITE) as u64);
    let mr_b = mr_reg(m.domain, &lb, (FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE) as u64);
    let (da, db, key) = ((*mr_a).mem_desc, (*mr_b).mem_desc, (*mr_b).key);
    for c in [tx, rx, b_rx] {
        assert_eq!((cntr_read(c), cntr_readerr(c)), (0, 0), "fresh counter");
    }

    // a send: FI_SEND of A and FI_RECV of B
    assert_eq!(call!(b, msg.recv(lb.as_ptr() as *mut c_void, 4096, db, FI_ADDR_UNSPEC, 0x10 as *mut c_void)), 0);
    assert_eq!(call!(a, msg.send(la.as_ptr() as *const c_void, 4000, da, FI_ADDR_UNSPEC, 0x11 as *mut c_void)), 0);
    assert_eq!(cq_wait(cq_a).op_context as usize, 0x11);
    assert_eq!(cq_wait(cq_b).len, 4000);
    assert_eq!(&lb[..4000], &la[..4000]);
    assert_eq!(call!(tx, ops.wait(1, 5000)), 0, "fi_cntr_wait(1)");
    assert_eq!((cntr_read(tx), cntr_read(rx)), (1, 0), "send counted as FI_SEND only");
    cntr_reaches(b_rx, 1, "B's receive");

    // an RMA write into B: FI_WRITE (same counter)
    let remote = lb.as_ptr() as u64 + 8192;
    assert_eq!(call!(a, rma.write(la.as_ptr().add(4096) as *const c_void, 3000, da, FI_ADDR_UNSPEC, remote, key, 0x12 as *mut c_void)), 0);
    assert_eq!(cq_wait(cq_a).op_context as usize, 0x12);
    assert_eq!(&lb[8192..11192], &la[4096..7096]);
    assert_eq!(call!(tx, ops.wait(2, 5000)), 0, "fi_cntr_wait(2)");
    assert_eq!((cntr_read(tx), cntr_read(rx), cntr_read(b_rx)), (2, 0, 1), "write counted as FI_WRITE; no receive at B");

    // an RMA read back: FI_READ
    la[12288..15288].fill(0);
    assert_eq!(call!(a, rma.read(la.as_mut_ptr().add(12288) as *mut c_void, 3000, da, FI_ADDR_UNSPEC, remote, key, 0x13 as *mut c_void)), 0);
    assert_eq!(cq_wait(cq_a).op_context as usize, 0x13);
    assert_eq!(&la[12288..15288], &lb[8192..11192]);
    assert_eq!(call!(rx, ops.wait(1, 5000)), 0);
    assert_eq!((cntr_read(tx), cntr_read(rx)), (2, 1), "read counted as FI_READ");

    // a receive at A: FI_RECV (same counter as the read)
    assert_eq!(call!(a, msg.recv(la.as_mut_ptr() as *mut c_void, 1024, da, FI_ADDR_UNSPEC, 0x14 as *mut c_void)), 0);
    assert_eq!(call!(b, msg.send(lb.as_ptr().add(8192) as *const c_void, 1000, db, FI_ADDR_UNSPEC, 0x15 as *mut c_void)), 0);
    assert_eq!(cq_wait(cq_b).op_context as usize, 0x15);
    assert_eq!(cq_wait(cq_a).op_context as usize, 0x14);
    assert_eq!(call!(rx, ops.wait(2, 5000)), 0);
    assert_eq!((cntr_read(tx), cntr_read(rx), cntr_read(b_rx)), (2, 2, 1), "A's receive counted as FI_RECV; B's send has no counter");
    assert_eq!(&la[..1000], &lb[8192..9192]);

    // an unreachable threshold: -FI_ETIMEDOUT, not before the timeout, errors unchanged
    let t0 = Instant::now();
    assert_eq!(call!(tx, ops.wait(3, 100)), -(FI_ETIMEDOUT as i32), "fi_cntr_wait on an unreachable threshold");
    assert!(t0.elapsed() >= Duration::from_millis(100), "timed out after {:?}", t0.elapsed());
    assert_eq!((cntr_read(tx), cntr_readerr(tx)), (2, 0));

    // add / set / adderr / seterr / readerr
    assert_eq!(call!(tx, ops.set(40)), 0);
    assert_eq!(cntr_read(tx), 40);
    assert_eq!(call!(tx, ops.add(2)), 0);
    assert_eq!(cntr_read(tx), 42);
    assert_eq!(call!(tx, ops.wait(42, 1000)), 0, "threshold already reached");
    assert_eq!(call!(tx, ops.seterr(7)), 0);
    assert_eq!(cntr_readerr(tx), 7);
    assert_eq!(call!(tx, ops.adderr(3)), 0);
    assert_eq!((cntr_readerr(tx), cntr_read(tx)), (10, 42), "error value apart from the value");
    assert_eq!((cntr_read(rx), cntr_readerr(rx)), (2, 0), "the other counter untouched");
    // completions add on top of a set value
    assert_eq!(call!(tx, ops.set(100)), 0);
    assert_eq!(call!(b, msg.recv(lb.as_ptr() as *mut c_void, 4096, db, FI_ADDR_UNSPEC, 0x16 as *mut c_void)), 0);
    assert_eq!(call!(a, msg.send(la.as_ptr() as *const c_void, 64, da, FI_ADDR_UNSPEC, 0x17 as *mut c_void)), 0);
    assert_eq!(call!(tx, ops.wait(101, 5000)), 0);
    assert_eq!((cntr_read(tx), cntr_readerr(tx)), (101, 10));
    assert_eq!(cq_wait(cq_a).op_context as usize, 0x17);
    assert_eq!(cq_wait(cq_b).op_context as usize, 0x16);

    for f in [fid(a), fid(b), fid(mr_a), fid(mr_b), fid(tx), fid(rx), fid(b_rx), fid(cq_a), fid(cq_b)] {
        close(f);
    }
    m.close();
}

// ------------------------------------------------------------------------- 3. selective completion

/// TX CQ bound FI_TRANSMIT|FI_SELECTIVE_COMPLETION: plain sends and writes give no CQ entry
/// but move the counter; fi_sendmsg/fi_writemsg with FI_COMPLETION give one; FI_INJECT frees
/// the buffer at once; FI_SETOPSFLAG(FI_COMPLETION) makes plain sends report, FI_GETOPSFLAG
/// returns what was set; a failed operation without FI_COMPLETION is still reported.
#[test]
fn selective_completion_on_transmit() {
    isolated("selective_completion_on_transmit", "cov-sel", selective_body);
}

unsafe fn sendmsg(ep: *mut fid_ep, buf: &[u8], desc: *mut c_void, ctx: usize, flags: u64) -> isize {
    let iov = iovec { iov_base: buf.as_ptr() as *mut c_void, iov_len: buf.len() };
    let mut d = desc;
    let msg = fi_msg { msg_iov: &iov, desc: &mut d, iov_count: 1, addr: FI_ADDR_UNSPEC, context: ctx as *mut c_void, data: 0 };
    call!(ep, msg.sendmsg(&msg, flags))
}

unsafe fn ops_flag(ep: *mut fid_ep, cmd: u32, flags: u64) -> (i32, u64) {
    let mut f = flags;
    let r = fidcall!(fid(ep), control(cmd as i32, &mut f as *mut u64 as *mut c_void));
    (r, f)
}

unsafe fn selective_body() {
    let m = msg_open(|_| {});
    let cq_tx = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let cq_arx = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let cq_b = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let cnt = open_cntr(m.domain);
    let (a, b) = m.connect(
        &[(fid(cq_tx), FI_TRANSMIT as u64 | FI_SELECTIVE_COMPLETION), (fid(cq_arx), FI_RECV as u64), (fid(cnt), (FI_SEND | FI_WRITE) as u64)],
        &[(fid(cq_b), (FI_TRANSMIT | FI_RECV) as u64)],
    );
    let mut la = pattern(8192, 3);
    let lb = vec![0u8; 8192];
    let mr_a = mr_reg(m.domain, &la, (FI_SEND | FI_RECV | FI_READ | FI_WRITE) as u64);
    let mr_b = mr_reg(m.domain, &lb, (FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE) as u64);
    let (da, db) = ((*mr_a).mem_desc, (*mr_b).mem_desc);
    let recv_b = |ctx: usize| {
        assert_eq!(call!(b, msg.recv(lb.as_ptr() as *mut c_void, 4096, db, FI_ADDR_UNSPEC, ctx as *mut c_void)), 0);
    };

    // the defaults: no transmit op flags; FI_TRANSMIT or FI_RECV, not both nor neither
    assert_eq!(ops_flag(a, FI_GETOPSFLAG, FI_TRANSMIT as u64), (0, FI_TRANSMIT as u64));
    assert_eq!(ops_flag(a, FI_GETOPSFLAG, (FI_TRANSMIT | FI_RECV) as u64).0, -(FI_EINVAL as i32));
    assert_eq!(ops_flag(a, FI_GETOPSFLAG, 0).0, -(FI_EINVAL as i32));

    // 1. fi_send: no entry, the counter moves
    recv_b(0x100);
    assert_eq!(call!(a, msg.send(la.as_ptr() as *const c_void, 1000, da, FI_ADDR_UNSPEC, 0x1 as *mut c_void)), 0);
    let r = cq_wait(cq_b);
    assert_eq!((r.op_context as usize, r.len), (0x100, 1000));
    assert_eq!(&lb[..1000], &la[..1000]);
    cntr_reaches(cnt, 1, "plain send");
    assert_cq_empty(cq_tx, "fi_send without FI_COMPLETION");

    // 2. fi_sendmsg(FI_COMPLETION): an entry
    recv_b(0x101);
    assert_eq!(sendmsg(a, &la[1000..2000], da, 0x2, FI_COMPLETION as u64), 0);
    let s = cq_wait(cq_tx);
    assert_eq!(s.op_context as usize, 0x2);
    assert_eq!(s.flags & (FI_SEND | FI_MSG) as u64, (FI_SEND | FI_MSG) as u64);
    assert_eq!(cq_wait(cq_b).op_context as usize, 0x101);
    assert_eq!(&lb[..1000], &la[1000..2000]);
    cntr_reaches(cnt, 2, "sendmsg with FI_COMPLETION");
    assert_cq_empty(cq_tx, "one entry for one FI_COMPLETION");

    // 3. fi_sendmsg(0): none
    recv_b(0x102);
    assert_eq!(sendmsg(a, &la[2000..3000], da, 0x3, 0), 0);
    assert_eq!(cq_wait(cq_b).op_context as usize, 0x102);
    cntr_reaches(cnt, 3, "sendmsg without flags");
    assert_cq_empty(cq_tx, "fi_sendmsg without FI_COMPLETION");

    // 4. fi_sendmsg(FI_INJECT): the buffer is the application's again on return, no entry
    let mut inj = pattern(200, 9);
    let sent = inj.clone();
    recv_b(0x103);
    let mr_inj = mr_reg(m.domain, &inj, FI_SEND as u64);
    assert_eq!(sendmsg(a, &inj, (*mr_inj).mem_desc, 0x4, FI_INJECT as u64), 0);
    inj.fill(0xee);
    let r = cq_wait(cq_b);
    assert_eq!((r.op_context as usize, r.len), (0x103, 200));
    assert_eq!(&lb[..200], &sent[..], "the bytes of the call, not the overwritten buffer");
    cntr_reaches(cnt, 4, "inject");
    assert_cq_empty(cq_tx, "fi_sendmsg(FI_INJECT)");

    // 5. RMA: fi_write silent, fi_writemsg(FI_COMPLETION) reported
    let key = (*mr_b).key;
    let remote = lb.as_ptr() as u64 + 4096;
    assert_eq!(call!(a, rma.write(la.as_ptr() as *const c_void, 2000, da, FI_ADDR_UNSPEC, remote, key, 0x5 as *mut c_void)), 0);
    cntr_reaches(cnt, 5, "plain write");
    assert_eq!(&lb[4096..6096], &la[..2000]);
    assert_cq_empty(cq_tx, "fi_write without FI_COMPLETION");
    let iov = iovec { iov_base: la.as_mut_ptr().add(2000) as *mut c_void, iov_len: 1500 };
    let mut d = da;
    let rma_iov = fi_rma_iov { addr: remote, len: 1500, key };
    let wm = fi_msg_rma { msg_iov: &iov, desc: &mut d, iov_count: 1, addr: FI_ADDR_UNSPEC, rma_iov: &rma_iov, rma_iov_count: 1, context: 0x6 as *mut c_void, data: 0 };
    assert_eq!(call!(a, rma.writemsg(&wm, FI_COMPLETION as u64)), 0);
    let w = cq_wait(cq_tx);
    assert_eq!((w.op_context as usize, w.flags & (FI_RMA | FI_WRITE) as u64), (0x6, (FI_RMA | FI_WRITE) as u64));
    assert_eq!(&lb[4096..5596], &la[2000..3500]);
    cntr_reaches(cnt, 6, "writemsg");

    // 6. FI_SETOPSFLAG(FI_TRANSMIT|FI_COMPLETION): fi_send reports now; FI_GETOPSFLAG says so
    assert_eq!(ops_flag(a, FI_SETOPSFLAG, (FI_TRANSMIT | FI_COMPLETION) as u64).0, 0);
    assert_eq!(ops_flag(a, FI_GETOPSFLAG, FI_TRANSMIT as u64), (0, (FI_TRANSMIT | FI_COMPLETION) as u64));
    assert_eq!(ops_flag(a, FI_GETOPSFLAG, FI_RECV as u64), (0, FI_RECV as u64), "receive flags unchanged");
    recv_b(0x104);
    assert_eq!(call!(a, msg.send(la.as_ptr() as *const c_void, 300, da, FI_ADDR_UNSPEC, 0x7 as *mut c_void)), 0);
    assert_eq!(cq_wait(cq_tx).op_context as usize, 0x7, "default FI_COMPLETION applies to fi_send");
    assert_eq!(cq_wait(cq_b).op_context as usize, 0x104);
    cntr_reaches(cnt, 7, "send with default FI_COMPLETION");

    // 7. back to none: silent again
    assert_eq!(ops_flag(a, FI_SETOPSFLAG, FI_TRANSMIT as u64).0, 0);
    assert_eq!(ops_flag(a, FI_GETOPSFLAG, FI_TRANSMIT as u64), (0, FI_TRANSMIT as u64));
    recv_b(0x105);
    assert_eq!(call!(a, msg.send(la.as_ptr() as *const c_void, 300, da, FI_ADDR_UNSPEC, 0x8 as *mut c_void)), 0);
    assert_eq!(cq_wait(cq_b).op_context as usize, 0x105);
    cntr_reaches(cnt, 8, "send after clearing the default");
    assert_cq_empty(cq_tx, "default flags cleared");

    // 8. a failure is reported even without FI_COMPLETION (fi_endpoint(3), FI_SELECTIVE_COMPLETION)
    let bad = key ^ 0x5a5a_0000;
    assert_ne!(bad, key);
    assert_eq!(call!(a, rma.write(la.as_ptr() as *const c_void, 512, da, FI_ADDR_UNSPEC, remote, bad, 0x9 as *mut c_void)), 0);
    let x = cq_wait_err(cq_tx);
    assert_eq!((x.op_context as usize, x.err), (0x9, FI_EACCES as i32), "failed silent write reported");
    assert_eq!(cntr_readerr(cnt), 1);
    assert_eq!(cntr_read(cnt), 8);

    for f in [fid(a), fid(b), fid(mr_a), fid(mr_b), fid(mr_inj), fid(cnt), fid(cq_tx), fid(cq_arx), fid(cq_b)] {
        close(f);
    }
    m.close();
}

// ------------------------------------------------------------------------- 4. error completions

/// An RMA write with a wrong remote key completes in error: -FI_EAVAIL, then an error entry with
/// FI_EACCES (droce maps IBV_WC_REM_ACCESS_ERR to it) naming the operation, a non-empty
/// fi_cq_strerror, the FI_WRITE counter's error value (not its value) moves.
/// On FI_EP_DGRAM (with and without FI_MSG_PREFIX), a datagram larger than the posted receive
/// completes that receive with FI_ETRUNC, the sender succeeds, and the endpoint keeps working.
#[test]
fn error_completions_wrong_key_and_truncated_datagram() {
    isolated("error_completions_wrong_key_and_truncated_datagram", "cov-err", errors_body);
}

unsafe fn errors_body() {
    let m = msg_open(|_| {});
    let cq_a = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let cq_b = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let cw = open_cntr(m.domain);
    let both = (FI_TRANSMIT | FI_RECV) as u64;
    let (a, b) = m.connect(&[(fid(cq_a), both), (fid(cw), FI_WRITE as u64)], &[(fid(cq_b), both)]);
    let la = pattern(4096, 5);
    let lb = vec![0u8; 4096];
    let mr_a = mr_reg(m.domain, &la, (FI_SEND | FI_WRITE) as u64);
    let mr_b = mr_reg(m.domain, &lb, (FI_RECV | FI_REMOTE_WRITE) as u64);
    let key = (*mr_b).key;
    let bad = key ^ 0x00a5_5a00;
    assert!(bad != key && bad != (*mr_a).key);
    // a good write first (the counter's value moves)
    assert_eq!(call!(a, rma.write(la.as_ptr() as *const c_void, 1024, (*mr_a).mem_desc, FI_ADDR_UNSPEC, lb.as_ptr() as u64, key, 0x40 as *mut c_void)), 0);
    assert_eq!(cq_wait(cq_a).op_context as usize, 0x40);
    assert_eq!(&lb[..1024], &la[..1024]);
    assert_eq!(cntr_read(cw), 1);
    // then the wrong key, to fresh bytes, with a fi_cntr_wait already waiting: the error that
    // arrives during the wait ends it with -FI_EAVAIL (fi_cntr(3)), long before its timeout
    assert_eq!(call!(a, rma.write(la.as_ptr().add(2048) as *const c_void, 512, (*mr_a).mem_desc, FI_ADDR_UNSPEC, lb.as_ptr() as u64 + 2048, bad, 0x4e as *mut c_void)), 0, "posting succeeds");
    let t0 = Instant::now();
    assert_eq!(call!(cw, ops.wait(2, 3000)), -(FI_EAVAIL as i32), "fi_cntr_wait sees the error that arrives while it waits");
    assert!(t0.elapsed() < Duration::from_millis(2500), "fi_cntr_wait returned after {:?}", t0.elapsed());
    let x = cq_wait_err(cq_a);
    assert_eq!(x.err, FI_EACCES as i32, "remote access error");
    assert_eq!(x.prov_errno, WC_REM_ACCESS_ERR, "prov_errno is the work completion status");
    assert_eq!(x.op_context as usize, 0x4e);
    assert_eq!(x.flags & (FI_RMA | FI_WRITE) as u64, (FI_RMA | FI_WRITE) as u64);
    assert!(lb[2048..2560].iter().all(|&v| v == 0), "nothing written with the wrong key");
    let mut text = [0 as c_char; 128];
    let p = call!(cq_a, ops.strerror(x.prov_errno, x.err_data, text.as_mut_ptr(), text.len()));
    assert_eq!(p, text.as_ptr() as *const c_char, "fi_cq_strerror fills the caller's buffer");
    let s = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
    assert!(s.contains("remote access"), "fi_cq_strerror: {s:?}");
    let p = call!(cq_a, ops.strerror(x.prov_errno, x.err_data, null_mut(), 0));
    assert!(!p.is_null() && !std::ffi::CStr::from_ptr(p).to_bytes().is_empty(), "fi_cq_strerror without a buffer");
    // the error value moved, the value did not; with no further change a wait times out
    cntr_reaches(cw, 1, "value after the failed write");
    assert_eq!(cntr_readerr(cw), 1, "the failed write counts as an error");
    assert_eq!(call!(cw, ops.wait(2, 50)), -(FI_ETIMEDOUT as i32));
    for f in [fid(a), fid(b), fid(mr_a), fid(mr_b), fid(cw), fid(cq_a), fid(cq_b)] {
        close(f);
    }
    m.close();

    for prefix in [false, true] {
        let d = dgram_open(FI_MSG as u64, prefix, 0);
        let cq = open_cq(d.domain, FI_CQ_FORMAT_MSG, FI_WAIT_NONE);
        let (e0, _, _) = d.ep(cq, true);
        let (e1, _, a1) = d.ep(cq, true);
        let pre = d.pre;
        let rx = vec![0u8; 2048];
        let tx = pattern(2048, 11);
        let mr_rx = mr_reg(d.domain, &rx, FI_RECV as u64);
        let mr_tx = mr_reg(d.domain, &tx, FI_SEND as u64);
        // 100-byte receive, 500-byte datagram
        assert_eq!(call!(e1, msg.recv(rx.as_ptr() as *mut c_void, pre + 100, (*mr_rx).mem_desc, FI_ADDR_UNSPEC, 0x61 as *mut c_void)), 0);
        assert_eq!(call!(e0, msg.send(tx.as_ptr() as *const c_void, pre + 500, (*mr_tx).mem_desc, a1, 0x62 as *mut c_void)), 0);
        let got = cq_collect(cq, 2);
        assert!(ok_ctx(&got, 0x62).is_some(), "the datagram's send completes (prefix {prefix})");
        let x = got
            .iter()
            .find_map(|g| match g {
                Got::Err(x) => Some(*x),
                _ => None,
            })
            .expect("an error entry for the small receive");
        assert_eq!(x.op_context as usize, 0x61);
        assert_eq!(x.err, FI_ETRUNC as i32, "a datagram larger than the receive: FI_ETRUNC (prefix {prefix})");
        assert_ne!(x.flags & FI_RECV as u64, 0);
        assert_eq!(x.olen, 400, "olen: the bytes that did not fit (prefix {prefix})");
        let mut text = [0 as c_char; 128];
        let p = call!(cq, ops.strerror(x.prov_errno, x.err_data, text.as_mut_ptr(), text.len()));
        assert!(!std::ffi::CStr::from_ptr(p).to_bytes().is_empty());
        // the endpoint still receives
        assert_eq!(call!(e1, msg.recv(rx.as_ptr() as *mut c_void, pre + 1000, (*mr_rx).mem_desc, FI_ADDR_UNSPEC, 0x63 as *mut c_void)), 0);
        assert_eq!(call!(e0, msg.send(tx.as_ptr() as *const c_void, pre + 300, (*mr_tx).mem_desc, a1, 0x64 as *mut c_void)), 0);
        let got = cq_collect(cq, 2);
        let (r, _) = ok_ctx(&got, 0x63).expect("receive after the truncation");
        assert!(r.len >= 300);
        assert!(ok_ctx(&got, 0x64).is_some());
        assert_eq!(&rx[pre..pre + 300], &tx[pre..pre + 300]);
        for f in [fid(e0), fid(e1), fid(mr_rx), fid(mr_tx), fid(cq)] {
            close(f);
        }
        d.close();
    }
}

// ------------------------------------------------------------------------- 5. limits

/// The advertised limits through the API: sendv/recvv with iov_limit (8) entries carry the
/// data (gather and scatter checked byte for byte), 9 entries are -FI_EINVAL; readmsg and
/// writemsg with rma_iov_count 2 are -FI_EINVAL (rma_iov_limit 1); fi_mr_regv with 2 entries
/// is -FI_EINVAL (mr_iov_limit 1); fi_inject / fi_inject_write of inject_size + 1 bytes are
/// -FI_EMSGSIZE while inject_size bytes arrive; posting sends nobody receives fills tx_size
/// (256) and the next post is -FI_EAGAIN, after which all 256 complete once receives exist;
/// a DGRAM send of max_msg_size (1024) arrives, one far beyond it (64 KiB) is -FI_EMSGSIZE.
#[test]
fn limits_iov_rma_iov_mr_iov_inject_tx_size_dgram_size() {
    isolated("limits_iov_rma_iov_mr_iov_inject_tx_size_dgram_size", "cov-lim", limits_body);
}

unsafe fn limits_body() {
    let m = msg_open(|_| {});
    let tx_attr = &*(*m.info).tx_attr;
    let rx_attr = &*(*m.info).rx_attr;
    assert_eq!((tx_attr.iov_limit, rx_attr.iov_limit, tx_attr.rma_iov_limit), (8, 8, 1));
    assert_eq!((tx_attr.inject_size, tx_attr.size, rx_attr.size), (256, 256, 256));
    assert_eq!((*(*m.info).domain_attr).mr_iov_limit, 1);
    let cq_a = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let cq_b = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let both = (FI_TRANSMIT | FI_RECV) as u64;
    let (a, b) = m.connect(&[(fid(cq_a), both)], &[(fid(cq_b), both)]);
    let mut la = pattern(65536, 21);
    let lb = vec![0u8; 65536];
    let mr_a = mr_reg(m.domain, &la, (FI_SEND | FI_RECV | FI_READ | FI_WRITE) as u64);
    let mr_b = mr_reg(m.domain, &lb, (FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE) as u64);
    let (da, db, key) = ((*mr_a).mem_desc, (*mr_b).mem_desc, (*mr_b).key);

    // 8 gather entries (apart from each other) into 8 scatter entries of other sizes
    let gsz = [300usize, 1, 512, 77, 1024, 2, 400, 700];
    let ssz = [500usize, 500, 16, 1000, 1, 999, 100, 200];
    let total: usize = gsz.iter().sum();
    let mut giov = Vec::new();
    let mut off = 0;
    for &n in &gsz {
        giov.push(iovec { iov_base: la.as_mut_ptr().add(off) as *mut c_void, iov_len: n });
        off += n + 37;
    }
    let mut siov = Vec::new();
    let mut off = 0;
    for &n in &ssz {
        siov.push(iovec { iov_base: lb.as_ptr().add(off) as *mut c_void, iov_len: n });
        off += n + 11;
    }
    let mut gdesc = vec![da; 9];
    let mut sdesc = vec![db; 9];
    assert_eq!(call!(b, msg.recvv(siov.as_ptr(), sdesc.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x50 as *mut c_void)), 0, "fi_recvv with 8 entries");
    assert_eq!(call!(a, msg.sendv(giov.as_ptr(), gdesc.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 0x51 as *mut c_void)), 0, "fi_sendv with 8 entries");
    assert_eq!(cq_wait(cq_a).op_context as usize, 0x51);
    let r = cq_wait(cq_b);
    assert_eq!((r.op_context as usize, r.len), (0x50, total));
    let gathered: Vec<u8> = giov.iter().flat_map(|v| std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len).to_vec()).collect();
    let scattered: Vec<u8> = siov.iter().flat_map(|v| std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len).to_vec()).collect();
    assert_eq!(gathered.len(), total);
    assert_eq!(&scattered[..total], &gathered[..], "8-entry gather lands in the 8-entry scatter in order");
    assert!(scattered[total..].iter().all(|&v| v == 0), "nothing past the message");

    // 9 entries: beyond iov_limit
    let nine: Vec<iovec> = (0..9).map(|k| iovec { iov_base: la.as_mut_ptr().add(k * 400) as *mut c_void, iov_len: 300 }).collect();
    assert_eq!(call!(a, msg.sendv(nine.as_ptr(), gdesc.as_mut_ptr(), 9, FI_ADDR_UNSPEC, 0x52 as *mut c_void)), -(FI_EINVAL as isize), "fi_sendv with 9 entries");
    // also when the whole message is small enough to be copied inline (9 x 10 B)
    let small: Vec<iovec> = (0..9).map(|k| iovec { iov_base: la.as_mut_ptr().add(k * 20) as *mut c_void, iov_len: 10 }).collect();
    assert_eq!(call!(a, msg.sendv(small.as_ptr(), gdesc.as_mut_ptr(), 9, FI_ADDR_UNSPEC, 0x54 as *mut c_void)), -(FI_EINVAL as isize), "fi_sendv with 9 small entries");
    let nine_rx: Vec<iovec> = (0..9).map(|k| iovec { iov_base: lb.as_ptr().add(k * 400) as *mut c_void, iov_len: 300 }).collect();
    assert_eq!(call!(b, msg.recvv(nine_rx.as_ptr(), sdesc.as_mut_ptr(), 9, FI_ADDR_UNSPEC, 0x53 as *mut c_void)), -(FI_EINVAL as isize), "fi_recvv with 9 entries");
    assert_cq_empty(cq_a, "refused posts complete nothing");
    assert_cq_empty(cq_b, "refused posts complete nothing");

    // rma_iov_count 2: beyond rma_iov_limit
    let liov = iovec { iov_base: la.as_mut_ptr() as *mut c_void, iov_len: 512 };
    let mut d = da;
    let two = [fi_rma_iov { addr: lb.as_ptr() as u64, len: 256, key }, fi_rma_iov { addr: lb.as_ptr() as u64 + 1024, len: 256, key }];
    let mut rm = fi_msg_rma { msg_iov: &liov, desc: &mut d, iov_count: 1, addr: FI_ADDR_UNSPEC, rma_iov: two.as_ptr(), rma_iov_count: 2, context: 0x54 as *mut c_void, data: 0 };
    assert_eq!(call!(a, rma.readmsg(&rm, 0)), -(FI_EINVAL as isize), "fi_readmsg with rma_iov_count 2");
    assert_eq!(call!(a, rma.writemsg(&rm, 0)), -(FI_EINVAL as isize), "fi_writemsg with rma_iov_count 2");
    // the same message with one target entry works
    rm.rma_iov_count = 1;
    let liov1 = iovec { iov_base: la.as_mut_ptr().add(40000) as *mut c_void, iov_len: 256 };
    rm.msg_iov = &liov1;
    la[40000..40256].fill(0);
    let lb_first: Vec<u8> = lb[..256].to_vec();
    assert_eq!(call!(a, rma.readmsg(&rm, 0)), 0, "fi_readmsg with rma_iov_count 1");
    assert_eq!(cq_wait(cq_a).op_context as usize, 0x54);
    assert_eq!(&la[40000..40256], &lb_first[..]);

    // fi_mr_regv: one entry (mr_iov_limit 1)
    let regv = (*(*m.domain).mr).regv.expect("regv");
    let v2 = [iovec { iov_base: la.as_mut_ptr() as *mut c_void, iov_len: 4096 }, iovec { iov_base: la.as_mut_ptr().add(8192) as *mut c_void, iov_len: 4096 }];
    let mut mr_v: *mut fid_mr = null_mut();
    assert_eq!(regv(fid(m.domain), v2.as_ptr(), 2, FI_SEND as u64, 0, 0, 0, &mut mr_v, null_mut()), -(FI_EINVAL as i32), "fi_mr_regv with 2 entries");
    assert_eq!(regv(fid(m.domain), v2.as_ptr(), 1, FI_SEND as u64, 0, 0, 0, &mut mr_v, null_mut()), 0, "fi_mr_regv with 1 entry");
    assert!(!mr_v.is_null());
    close(fid(mr_v));

    // inject_size: 256 arrives (no completion), 257 is FI_EMSGSIZE; the same for fi_inject_write
    assert_eq!(call!(b, msg.recv(lb.as_ptr() as *mut c_void, 4096, db, FI_ADDR_UNSPEC, 0x55 as *mut c_void)), 0);
    assert_eq!(call!(a, msg.inject(la.as_ptr().add(1000) as *const c_void, 257, FI_ADDR_UNSPEC)), -(FI_EMSGSIZE as isize), "fi_inject of 257 bytes");
    let sent = la[1000..1256].to_vec();
    assert_eq!(call!(a, msg.inject(la.as_ptr().add(1000) as *const c_void, 256, FI_ADDR_UNSPEC)), 0, "fi_inject of 256 bytes");
    // the buffer (registered: read in place) is the application's again when the call returns
    la[1000..1256].fill(0xee);
    let r = cq_wait(cq_b);
    assert_eq!((r.op_context as usize, r.len), (0x55, 256));
    assert_eq!(&lb[..256], &sent[..], "the bytes at the time of the inject arrive");
    // an unregistered buffer goes through the provider's bounce area, under the same contract
    let mut own = pattern(100, 77);
    let own_sent = own.clone();
    assert_eq!(call!(b, msg.recv(lb.as_ptr() as *mut c_void, 4096, db, FI_ADDR_UNSPEC, 0x56 as *mut c_void)), 0);
    assert_eq!(call!(a, msg.inject(own.as_ptr() as *const c_void, 100, FI_ADDR_UNSPEC)), 0, "fi_inject from unregistered memory");
    own.fill(0xdd);
    let r = cq_wait(cq_b);
    assert_eq!((r.op_context as usize, r.len), (0x56, 100));
    assert_eq!(&lb[..100], &own_sent[..], "the unregistered bytes at the time of the inject arrive");
    assert_eq!(call!(a, rma.inject(la.as_ptr() as *const c_void, 257, FI_ADDR_UNSPEC, lb.as_ptr() as u64 + 8192, key)), -(FI_EMSGSIZE as isize), "fi_inject_write of 257 bytes");
    assert_cq_empty(cq_a, "an inject has no completion");

    // tx_size: B posts no receive, so every send waits (RNR) and keeps its send queue slot
    let mut posted = 0usize;
    let mut full = false;
    for i in 0..1024usize {
        let r = call!(a, msg.send(la.as_ptr().add(i % 4096) as *const c_void, 64, da, FI_ADDR_UNSPEC, (0x1000 + i) as *mut c_void));
        if r == -(FI_EAGAIN as isize) {
            full = true;
            break;
        }
        assert_eq!(r, 0, "send {i}");
        posted += 1;
    }
    assert!(full, "-FI_EAGAIN within 1024 posts");
    assert_eq!(posted, 256, "tx_size sends are accepted before -FI_EAGAIN");
    // receives for all of them (rx_size 256): everything completes, in order
    for k in 0..256usize {
        assert_eq!(call!(b, msg.recv(lb.as_ptr().add(k * 64) as *mut c_void, 64, db, FI_ADDR_UNSPEC, (0x2000 + k) as *mut c_void)), 0, "receive {k}");
    }
    let mut sends = Vec::new();
    for k in 0..256usize {
        let r = cq_wait(cq_b);
        assert_eq!((r.op_context as usize, r.len), (0x2000 + k, 64), "receive {k} in order");
        assert_eq!(&lb[k * 64..k * 64 + 64], &la[k % 4096..k % 4096 + 64], "data of send {k}");
        sends.push(cq_wait(cq_a).op_context as usize);
    }
    sends.sort();
    assert_eq!(sends, (0x1000..0x1000 + 256).collect::<Vec<_>>(), "every accepted send completes once");
    assert_eq!(call!(b, msg.recv(lb.as_ptr() as *mut c_void, 64, db, FI_ADDR_UNSPEC, 0x56 as *mut c_void)), 0);
    assert_eq!(call!(a, msg.send(la.as_ptr() as *const c_void, 64, da, FI_ADDR_UNSPEC, 0x57 as *mut c_void)), 0, "room again");
    assert_eq!(cq_wait(cq_a).op_context as usize, 0x57);
    assert_eq!(cq_wait(cq_b).op_context as usize, 0x56);
    for f in [fid(a), fid(b), fid(mr_a), fid(mr_b), fid(cq_a), fid(cq_b)] {
        close(f);
    }
    m.close();

    // DGRAM: max_msg_size 1024 (+ the prefix when asked for)
    for prefix in [false, true] {
        let d = dgram_open(FI_MSG as u64, prefix, 0);
        assert_eq!((*(*d.info).ep_attr).max_msg_size, 1024);
        let cq = open_cq(d.domain, FI_CQ_FORMAT_MSG, FI_WAIT_NONE);
        let (e0, _, _) = d.ep(cq, true);
        let (e1, _, a1) = d.ep(cq, true);
        let pre = d.pre;
        let rx = vec![0u8; 4096];
        let tx = pattern(65536 + 64, 23);
        let mr_rx = mr_reg(d.domain, &rx, FI_RECV as u64);
        let mr_tx = mr_reg(d.domain, &tx, FI_SEND as u64);
        // max_msg_size + 1 is refused too, whatever the port's MTU (4096 on memif)
        assert_eq!(call!(e0, msg.send(tx.as_ptr() as *const c_void, pre + 1025, (*mr_tx).mem_desc, a1, 0x73 as *mut c_void)), -(FI_EMSGSIZE as isize), "DGRAM send of 1025 bytes (prefix {prefix})");
        assert_eq!(call!(e0, msg.send(tx.as_ptr() as *const c_void, pre + 65536, (*mr_tx).mem_desc, a1, 0x70 as *mut c_void)), -(FI_EMSGSIZE as isize), "DGRAM send of 64 KiB (prefix {prefix})");
        assert_eq!(call!(e1, msg.recv(rx.as_ptr() as *mut c_void, pre + 2048, (*mr_rx).mem_desc, FI_ADDR_UNSPEC, 0x71 as *mut c_void)), 0);
        assert_eq!(call!(e0, msg.send(tx.as_ptr() as *const c_void, pre + 1024, (*mr_tx).mem_desc, a1, 0x72 as *mut c_void)), 0, "DGRAM send of 1024 bytes");
        let got = cq_collect(cq, 2);
        let (r, _) = ok_ctx(&got, 0x71).expect("1024-byte datagram received");
        assert!(ok_ctx(&got, 0x72).is_some());
        assert_eq!(r.len, pre + 1024);
        assert_eq!(&rx[pre..pre + 1024], &tx[pre..pre + 1024]);
        for f in [fid(e0), fid(e1), fid(mr_rx), fid(mr_tx), fid(cq)] {
            close(f);
        }
        d.close();
    }
}

// ------------------------------------------------------------------------- 6. EQ

/// fi_eq_write of an FI_NOTIFY entry (EQ opened with FI_WRITE): it comes back unchanged with
/// FI_PEEK twice, then with a plain read, then the EQ is empty (-FI_EAGAIN); a buffer too
/// small for the entry is -FI_ETOOSMALL and leaves it queued; fi_eq_strerror gives text.
#[test]
fn eq_write_peek_read_strerror() {
    isolated("eq_write_peek_read_strerror", "cov-eq", eq_body);
}

unsafe fn eq_body() {
    let h = hints(FI_EP_MSG, FI_MSG as u64, 0);
    let info = getinfo(h);
    let mut fabric: *mut fid_fabric = null_mut();
    assert_eq!(fi_fabric((*info).fabric_attr, &mut fabric, null_mut()), 0);
    let eq = open_eq(fabric, FI_WRITE as u64);
    let size = std::mem::size_of::<fi_eq_entry>();
    let mine = fi_eq_entry { fid: fid(eq), context: 0x5151 as *mut c_void, data: 0xfeed_beef_0042 };
    assert_eq!(call!(eq, ops.write(FI_NOTIFY, &mine as *const _ as *const c_void, size, 0)), size as isize, "fi_eq_write returns the bytes written");
    let read = |flags: u64| {
        let mut ev = u32::MAX;
        let mut e: fi_eq_entry = std::mem::zeroed();
        let n = call!(eq, ops.read(&mut ev, &mut e as *mut _ as *mut c_void, size, flags));
        (n, ev, e.fid, e.context as usize, e.data)
    };
    let want = (size as isize, FI_NOTIFY, fid(eq), 0x5151usize, 0xfeed_beef_0042u64);
    assert_eq!(read(FI_PEEK as u64), want, "first FI_PEEK");
    assert_eq!(read(FI_PEEK as u64), want, "second FI_PEEK: still there");
    assert_eq!(read(0), want, "the read takes it");
    assert_eq!(read(0).0, -(FI_EAGAIN as isize), "then the EQ is empty");
    assert_eq!(read(FI_PEEK as u64).0, -(FI_EAGAIN as isize));

    // two entries keep their order; a short buffer does not lose the first
    for k in 0..2u64 {
        let e = fi_eq_entry { fid: fid(eq), context: (0x60 + k) as *mut c_void, data: k };
        assert_eq!(call!(eq, ops.write(FI_NOTIFY, &e as *const _ as *const c_void, size, 0)), size as isize);
    }
    let mut small = [0u8; 8];
    let mut ev = 0u32;
    assert_eq!(call!(eq, ops.read(&mut ev, small.as_mut_ptr() as *mut c_void, small.len(), 0)), -(FI_ETOOSMALL as isize));
    assert_eq!(read(0).3, 0x60);
    assert_eq!(read(0).3, 0x61);
    assert_eq!(read(0).0, -(FI_EAGAIN as isize));

    let mut text = [0 as c_char; 128];
    let p = call!(eq, ops.strerror(0, null(), text.as_mut_ptr(), text.len()));
    assert_eq!(p, text.as_ptr() as *const c_char);
    assert!(!std::ffi::CStr::from_ptr(p).to_bytes().is_empty(), "fi_eq_strerror into a buffer");
    let p = call!(eq, ops.strerror(0, null(), null_mut(), 0));
    assert!(!p.is_null() && !std::ffi::CStr::from_ptr(p).to_bytes().is_empty(), "fi_eq_strerror without a buffer");
    close(fid(eq));
    close(fid(fabric));
    fi_freeinfo(info);
    fi_freeinfo(h);
}

// ------------------------------------------------------------------------- 7. CQ

/// CQ reads and wait objects on FI_EP_DGRAM: an FD-wait CQ answers FI_GETWAITOBJ with
/// FI_WAIT_FD and FI_GETWAIT with a descriptor that becomes readable when a completion is
/// queued; fi_cq_sreadfrom times out with -FI_EAGAIN, then returns the receive with its source
/// address; an FI_CQ_FORMAT_TAGGED CQ gives full entries with tag 0; a wait set of
/// FI_WAIT_YIELD opens, fi_wait times out with -FI_ETIMEDOUT and wakes for a completion.
#[test]
fn cq_sreadfrom_tagged_waitobj_yield_wait_set() {
    isolated("cq_sreadfrom_tagged_waitobj_yield_wait_set", "cov-cq", cq_body);
}

unsafe fn cq_body() {
    let d = dgram_open(FI_MSG as u64, false, 0);
    let rx = vec![0u8; 4096];
    let tx = pattern(4096, 31);
    let mr_rx = mr_reg(d.domain, &rx, FI_RECV as u64);
    let mr_tx = mr_reg(d.domain, &tx, FI_SEND as u64);
    let (drx, dtx) = ((*mr_rx).mem_desc, (*mr_tx).mem_desc);

    // FD wait object
    let cq_fd = open_cq(d.domain, FI_CQ_FORMAT_MSG, FI_WAIT_FD);
    let mut wo: fi_wait_obj = FI_WAIT_NONE;
    assert_eq!(fidcall!(fid(cq_fd), control(FI_GETWAITOBJ as i32, &mut wo as *mut _ as *mut c_void)), 0, "FI_GETWAITOBJ");
    assert_eq!(wo, FI_WAIT_FD);
    let mut fd: i32 = -1;
    assert_eq!(fidcall!(fid(cq_fd), control(FI_GETWAIT as i32, &mut fd as *mut i32 as *mut c_void)), 0, "FI_GETWAIT");
    assert!(fd >= 0);
    let (e0, _, a0) = d.ep(cq_fd, true);
    let (e1, _, a1) = d.ep(cq_fd, true);
    let mut e: fi_cq_msg_entry = std::mem::zeroed();
    let mut src: fi_addr_t = 0;
    let t0 = Instant::now();
    assert_eq!(call!(cq_fd, ops.sreadfrom(&mut e as *mut _ as *mut c_void, 1, &mut src, null(), 50)), -(FI_EAGAIN as isize), "fi_cq_sreadfrom with nothing to read");
    assert!(t0.elapsed() >= Duration::from_millis(50), "returned after {:?}", t0.elapsed());
    assert_eq!(call!(e1, msg.recv(rx.as_ptr() as *mut c_void, 2048, drx, FI_ADDR_UNSPEC, 0x80 as *mut c_void)), 0);
    assert_eq!(call!(e0, msg.send(tx.as_ptr() as *const c_void, 900, dtx, a1, 0x81 as *mut c_void)), 0);
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    assert_eq!(libc::poll(&mut pfd, 1, 10_000), 1, "the CQ's descriptor becomes readable");
    let mut seen = Vec::new();
    for _ in 0..2 {
        let mut e: fi_cq_msg_entry = std::mem::zeroed();
        let mut src: fi_addr_t = 0;
        assert_eq!(call!(cq_fd, ops.sreadfrom(&mut e as *mut _ as *mut c_void, 1, &mut src, null(), 10_000)), 1, "fi_cq_sreadfrom");
        seen.push((e.op_context as usize, e.len, e.flags, src));
    }
    let r = seen.iter().find(|s| s.0 == 0x80).expect("receive entry");
    assert_eq!(r.1, 900);
    assert_ne!(r.2 & (FI_RECV | FI_MSG) as u64, 0);
    assert_eq!(r.3, a0, "fi_cq_sreadfrom names the sender");
    assert!(seen.iter().any(|s| s.0 == 0x81 && s.2 & FI_SEND as u64 != 0), "send entry");
    assert_eq!(&rx[..900], &tx[..900]);
    // fi_cq_signal wakes a thread in poll on the descriptor too; fi_trywait then finds nothing
    // to read and the descriptor is quiet again
    let mut fids = [fid(cq_fd)];
    assert_eq!(call!(d.fabric, ops.trywait(fids.as_mut_ptr(), 1)), 0, "fi_trywait on an empty CQ");
    pfd.revents = 0;
    assert_eq!(libc::poll(&mut pfd, 1, 0), 0, "quiet before the signal");
    assert_eq!(call!(cq_fd, ops.signal()), 0);
    let t0 = Instant::now();
    assert_eq!(libc::poll(&mut pfd, 1, 5_000), 1, "fi_cq_signal makes the descriptor readable");
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert_eq!(call!(d.fabric, ops.trywait(fids.as_mut_ptr(), 1)), 0);
    pfd.revents = 0;
    assert_eq!(libc::poll(&mut pfd, 1, 0), 0, "quiet again after fi_trywait");
    // the signal also ended (or would end) one fi_cq_sread: take it back
    assert_eq!(call!(cq_fd, ops.sread(&mut e as *mut _ as *mut c_void, 1, null(), 0)), -(FI_EAGAIN as isize));

    // FI_CQ_FORMAT_TAGGED
    let cq_t = open_cq(d.domain, FI_CQ_FORMAT_TAGGED, FI_WAIT_NONE);
    let (e2, _, _) = d.ep(cq_t, true);
    let (e3, _, a3) = d.ep(cq_t, true);
    assert_eq!(call!(e3, msg.recv(rx.as_ptr().add(2048) as *mut c_void, 2048, drx, FI_ADDR_UNSPEC, 0x90 as *mut c_void)), 0);
    assert_eq!(call!(e2, msg.send(tx.as_ptr().add(1000) as *const c_void, 700, dtx, a3, 0x91 as *mut c_void)), 0);
    let start = Instant::now();
    let mut got = Vec::new();
    while got.len() < 2 {
        let mut t: fi_cq_tagged_entry = std::mem::zeroed();
        t.tag = 0xdead_beef;
        t.data = 0x1234;
        let n = call!(cq_t, ops.read(&mut t as *mut _ as *mut c_void, 1));
        if n == 1 {
            got.push(t);
        } else {
            assert_eq!(n, -(FI_EAGAIN as isize), "fi_cq_read (tagged)");
            assert!(start.elapsed() < DEADLINE, "tagged completions");
        }
    }
    let t = got.iter().find(|t| t.op_context as usize == 0x90).expect("tagged receive entry");
    assert_eq!((t.tag, t.len, t.buf as usize, t.data), (0, 700, rx.as_ptr() as usize + 2048, 0), "tagged entry: tag 0, length, buffer, no data");
    assert_ne!(t.flags & (FI_RECV | FI_MSG) as u64, 0);
    let s = got.iter().find(|t| t.op_context as usize == 0x91).expect("tagged send entry");
    assert_eq!(s.tag, 0);
    assert_eq!(&rx[2048..2748], &tx[1000..1700]);

    // a wait set of FI_WAIT_YIELD
    let mut wattr: fi_wait_attr = std::mem::zeroed();
    wattr.wait_obj = FI_WAIT_YIELD;
    let mut set: *mut fid_wait = null_mut();
    assert_eq!(call!(d.fabric, ops.wait_open(&mut wattr, &mut set)), 0, "fi_wait_open(FI_WAIT_YIELD)");
    let mut cattr: fi_cq_attr = std::mem::zeroed();
    cattr.format = FI_CQ_FORMAT_MSG;
    cattr.wait_obj = FI_WAIT_SET;
    cattr.wait_set = set;
    let mut cq_w: *mut fid_cq = null_mut();
    assert_eq!(call!(d.domain, ops.cq_open(&mut cattr, &mut cq_w, null_mut())), 0);
    let (e4, _, _) = d.ep(cq_w, true);
    let (e5, _, a5) = d.ep(cq_w, true);
    let wait = (*(*set).ops).wait.unwrap();
    let t0 = Instant::now();
    assert_eq!(wait(set, 50), -(FI_ETIMEDOUT as i32), "fi_wait on an idle set");
    assert!(t0.elapsed() >= Duration::from_millis(50));
    assert_eq!(call!(e5, msg.recv(rx.as_ptr() as *mut c_void, 2048, drx, FI_ADDR_UNSPEC, 0xa0 as *mut c_void)), 0);
    assert_eq!(call!(e4, msg.send(tx.as_ptr().add(7) as *const c_void, 333, dtx, a5, 0xa1 as *mut c_void)), 0);
    assert_eq!(wait(set, 10_000), 0, "a completion wakes the set");
    let got = cq_collect(cq_w, 2);
    let (r, _) = ok_ctx(&got, 0xa0).expect("receive through the wait set's CQ");
    assert_eq!(r.len, 333);
    assert_eq!(&rx[..333], &tx[7..340]);

    for f in [fid(e0), fid(e1), fid(e2), fid(e3), fid(e4), fid(e5), fid(mr_rx), fid(mr_tx), fid(cq_fd), fid(cq_t), fid(cq_w), fid(set)] {
        close(f);
    }
    d.close();
}

// ------------------------------------------------------------------------- 8. AV

/// fi_av_insertsvc instead of fi_av_insert: a DGRAM endpoint bound to a service port (fi_getinfo
/// FI_SOURCE) is reached through the node/service pair (the provider resolves the QPN); fi_av_lookup
/// gives back the node/service address; fi_av_straddr prints names with and without a QPN, reports
/// the size it needs and truncates into a short buffer; a non-numeric service is -FI_EINVAL.
#[test]
fn av_insertsvc_and_straddr() {
    isolated("av_insertsvc_and_straddr", "cov-av", av_body);
}

unsafe fn straddr(av: *mut fid_av, addr: &[u8], cap: usize) -> (String, usize) {
    let mut buf = vec![0 as c_char; cap.max(1)];
    let mut len = cap;
    let p = call!(av, ops.straddr(addr.as_ptr() as *const c_void, buf.as_mut_ptr(), &mut len));
    assert_eq!(p, buf.as_ptr() as *const c_char, "fi_av_straddr returns the buffer");
    (std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned(), len)
}

unsafe fn av_body() {
    const PORT: u16 = 47311;
    let h = hints(FI_EP_DGRAM, FI_MSG as u64, 0);
    let mut bound: *mut fi_info = null_mut();
    assert_eq!(fi_getinfo(API, null(), c"47311".as_ptr(), FI_SOURCE, h, &mut bound), 0, "fi_getinfo FI_SOURCE service");
    let plain = getinfo(h);
    let (fabric, domain) = open_domain(bound);
    let mut av_attr: fi_av_attr = std::mem::zeroed();
    av_attr.type_ = FI_AV_MAP;
    let mut av: *mut fid_av = null_mut();
    assert_eq!(call!(domain, ops.av_open(&mut av_attr, &mut av, null_mut())), 0);
    let cq = open_cq(domain, FI_CQ_FORMAT_MSG, FI_WAIT_NONE);
    let binds = [(fid(av), 0u64), (fid(cq), (FI_TRANSMIT | FI_RECV) as u64)];
    let e0 = new_ep(domain, bound, &binds, 0x1);
    let e1 = new_ep(domain, plain, &binds, 0x2);
    let name0 = ep_name(e0);
    assert_eq!((name0.len(), port_of(&name0)), (16, PORT), "bound to the service port");
    assert_eq!(&name0[8..10], b"DQ", "a DGRAM name carries its QPN");
    let qpn = u32::from_be_bytes([0, name0[10], name0[11], name0[12]]);
    let ip = std::net::Ipv4Addr::new(name0[4], name0[5], name0[6], name0[7]);
    let node = std::ffi::CString::new(ip.to_string()).unwrap();

    let mut dest: fi_addr_t = FI_ADDR_NOTAVAIL;
    assert_eq!(call!(av, ops.insertsvc(node.as_ptr(), c"47311".as_ptr(), &mut dest, 0, null_mut())), 1, "fi_av_insertsvc");
    assert_ne!(dest, FI_ADDR_NOTAVAIL);
    let mut bad: fi_addr_t = 0;
    assert_eq!(call!(av, ops.insertsvc(node.as_ptr(), c"http".as_ptr(), &mut bad, 0, null_mut())), -(FI_EINVAL as i32), "a non-numeric service");
    let mut back = [0u8; 64];
    let mut blen = back.len();
    assert_eq!(call!(av, ops.lookup(dest, back.as_mut_ptr() as *mut c_void, &mut blen)), 0, "fi_av_lookup");
    assert_eq!(blen, 16);
    assert_eq!(&back[..8], &name0[..8], "family, port and IP of the node/service pair");
    assert!(back[8..16].iter().all(|&b| b == 0), "no QPN in a node/service address");

    // fi_av_straddr
    let full = format!("fi_sockaddr_in://{ip}:{PORT}/qpn{qpn:#x}");
    assert_eq!(straddr(av, &name0, 128), (full.clone(), full.len() + 1), "fi_av_straddr of an endpoint name");
    let svc = format!("fi_sockaddr_in://{ip}:{PORT}");
    assert_eq!(straddr(av, &back[..16], 128), (svc.clone(), svc.len() + 1), "fi_av_straddr of a node/service address");
    assert_eq!(straddr(av, &name0, 10), (full[..9].to_string(), full.len() + 1), "truncated into a 10-byte buffer, the needed size reported");

    // the exchange through the node/service entry (the QPN is resolved on the first send)
    let rx = vec![0u8; 2048];
    let tx = pattern(2048, 41);
    let mr_rx = mr_reg(domain, &rx, FI_RECV as u64);
    let mr_tx = mr_reg(domain, &tx, FI_SEND as u64);
    assert_eq!(call!(e0, msg.recv(rx.as_ptr() as *mut c_void, 1024, (*mr_rx).mem_desc, FI_ADDR_UNSPEC, 0x52 as *mut c_void)), 0);
    let start = Instant::now();
    loop {
        let r = call!(e1, msg.send(tx.as_ptr() as *const c_void, 777, (*mr_tx).mem_desc, dest, 0x53 as *mut c_void));
        if r == 0 {
            break;
        }
        assert_eq!(r, -(FI_EAGAIN as isize), "fi_send to an fi_av_insertsvc address");
        assert!(start.elapsed() < DEADLINE, "QPN of the service never resolved");
        std::thread::sleep(Duration::from_millis(1));
    }
    let got = cq_collect(cq, 2);
    let (r, _) = ok_ctx(&got, 0x52).expect("received on the bound endpoint");
    assert_eq!(r.len, 777);
    assert!(ok_ctx(&got, 0x53).is_some());
    assert_eq!(&rx[..777], &tx[..777]);

    for f in [fid(e0), fid(e1), fid(mr_rx), fid(mr_tx), fid(cq), fid(av), fid(domain), fid(fabric)] {
        close(f);
    }
    fi_freeinfo(bound);
    fi_freeinfo(plain);
    fi_freeinfo(h);
}

// ------------------------------------------------------------------------- 9. CM

/// fi_getpeer fails with -FI_ENOTCONN (fi_errno.h) before a connection, and once connected gives
/// the connector the listener's name (= the accepted endpoint's name); a short buffer is
/// -FI_ETOOSMALL with the needed size. fi_setname on an unconnected active endpoint assigns
/// the port fi_getname then returns.
#[test]
fn getpeer_and_setname() {
    isolated("getpeer_and_setname", "cov-cm", cm_body);
}

unsafe fn cm_body() {
    let m = msg_open(|_| {});
    let cq_a = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let cq_b = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let both = (FI_TRANSMIT | FI_RECV) as u64;
    let mut a: *mut fid_ep = null_mut();
    assert_eq!(call!(m.domain, ops.endpoint(m.info, &mut a, 0xa as *mut c_void)), 0);
    assert_eq!(getpeer(a), Err(-(FI_ENOTCONN as i32)), "fi_getpeer on a new endpoint");
    assert_eq!(fidcall!(fid(a), bind(fid(m.eq), 0)), 0);
    assert_eq!(fidcall!(fid(a), bind(fid(cq_a), both)), 0);
    assert_eq!(fidcall!(fid(a), control(FI_ENABLE as i32, null_mut())), 0);
    assert_eq!(getpeer(a), Err(-(FI_ENOTCONN as i32)), "fi_getpeer on an enabled, unconnected endpoint");
    let (a, b) = m.connect_ep(a, &[(fid(cq_b), both)]);
    let pa = getpeer(a).expect("fi_getpeer on the connector");
    assert_eq!(pa, m.name, "the connector's peer is the listener's address");
    assert_eq!(pa, ep_name(b), "... which is the accepted endpoint's name");
    let pb = getpeer(b).expect("fi_getpeer on the accepted endpoint");
    assert_eq!(pb.len(), 16);
    assert_eq!(&pb[..2], &m.name[..2], "family");
    assert_eq!(&pb[4..8], &m.name[4..8], "the connector's IP (self-connect: ours)");
    // (its port is the CM's source port, not the connector's fi_getname port: a known gap,
    // docs/libfabric.md "Limits and known gaps")
    let mut small = [0u8; 4];
    let mut len = small.len();
    assert_eq!(call!(a, cm.getpeer(small.as_mut_ptr() as *mut c_void, &mut len)), -(FI_ETOOSMALL as i32));
    assert_eq!(len, 16, "the size needed");
    assert_eq!(&small[..], &pa[..4], "truncated");

    // fi_setname on an unconnected active endpoint (before fi_enable)
    const PORT: u16 = 41234;
    let mut c: *mut fid_ep = null_mut();
    assert_eq!(call!(m.domain, ops.endpoint(m.info, &mut c, 0xc as *mut c_void)), 0);
    let mut sa = m.name.clone();
    sa[2..4].copy_from_slice(&PORT.to_be_bytes());
    assert_eq!(((*(*c).cm).setname.unwrap())(fid(c), sa.as_mut_ptr() as *mut c_void, sa.len()), 0, "fi_setname");
    let nc = ep_name(c);
    assert_eq!(nc.len(), 16);
    assert_eq!(port_of(&nc), PORT, "fi_getname returns the port set");
    assert_eq!(&nc[4..8], &m.name[4..8], "and our IP");
    assert_eq!(fidcall!(fid(c), bind(fid(m.eq), 0)), 0);
    assert_eq!(fidcall!(fid(c), bind(fid(cq_a), both)), 0);
    assert_eq!(fidcall!(fid(c), control(FI_ENABLE as i32, null_mut())), 0);
    assert_eq!(port_of(&ep_name(c)), PORT, "the name survives fi_enable");
    let mut other = sa.clone();
    other[2..4].copy_from_slice(&(PORT + 1).to_be_bytes());
    assert_eq!(((*(*c).cm).setname.unwrap())(fid(c), other.as_mut_ptr() as *mut c_void, other.len()), -(FI_EINVAL as i32), "no new address once enabled");
    assert_eq!(port_of(&ep_name(c)), PORT);

    for f in [fid(a), fid(b), fid(c), fid(cq_a), fid(cq_b)] {
        close(f);
    }
    m.close();
}

// ------------------------------------------------------------------------- 10. IPv6

/// addr_format FI_SOCKADDR_IN6: names are 28-byte sockaddr_in6 (our IPv4 address mapped);
/// a DGRAM exchange through an AV of such names (readfrom names the sender both ways) and an
/// FI_EP_MSG self-connect through the listener's IPv6 name, data checked both ways.
#[test]
fn ipv6_addressing_dgram_and_msg() {
    isolated("ipv6_addressing_dgram_and_msg", "cov-ip6", ipv6_body);
}

fn mapped(v4: &[u8]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[10] = 0xff;
    b[11] = 0xff;
    b[12..16].copy_from_slice(&v4[..4]);
    b
}

fn assert_in6(name: &[u8], v4: &[u8], what: &str) {
    assert_eq!(name.len(), 28, "{what}: sockaddr_in6 length");
    assert_eq!(u16::from_ne_bytes([name[0], name[1]]), libc::AF_INET6 as u16, "{what}: family");
    assert_eq!(&name[8..24], &mapped(v4), "{what}: our IPv4 address, mapped");
}

unsafe fn ipv6_body() {
    // our IPv4 address, from an FI_SOCKADDR_IN answer
    let h4 = hints(FI_EP_DGRAM, FI_MSG as u64, 0);
    let i4 = getinfo(h4);
    assert_eq!((*i4).src_addrlen, 16);
    let v4 = std::slice::from_raw_parts((*i4).src_addr as *const u8, 16)[4..8].to_vec();
    fi_freeinfo(i4);
    fi_freeinfo(h4);

    let d = dgram_open(FI_MSG as u64, false, FI_SOCKADDR_IN6);
    assert_eq!((*d.info).addr_format, FI_SOCKADDR_IN6);
    assert_in6(std::slice::from_raw_parts((*d.info).src_addr as *const u8, (*d.info).src_addrlen), &v4, "fi_info src_addr");
    let cq = open_cq(d.domain, FI_CQ_FORMAT_MSG, FI_WAIT_NONE);
    let (e0, n0, a0) = d.ep(cq, true);
    let (e1, n1, a1) = d.ep(cq, true);
    assert_in6(&n0, &v4, "DGRAM name 0");
    assert_in6(&n1, &v4, "DGRAM name 1");
    assert_ne!(n0, n1);
    // two IN6 names in one fi_av_insert (28 bytes each, though they hold IPv4-mapped
    // addresses); lookup and straddr answer in the format inserted
    let mut two = n0.clone();
    two.extend_from_slice(&n1);
    let mut out = [0u64; 2];
    assert_eq!(call!(d.av, ops.insert(two.as_ptr() as *const c_void, 2, out.as_mut_ptr(), 0, null_mut())), 2, "fi_av_insert of two sockaddr_in6 names");
    assert!(out.iter().all(|&f| f != FI_ADDR_NOTAVAIL), "{out:x?}");
    let mut back = [0u8; 64];
    let mut blen = back.len();
    assert_eq!(call!(d.av, ops.lookup(out[1], back.as_mut_ptr() as *mut c_void, &mut blen)), 0);
    assert_eq!(&back[..blen], &n1[..], "fi_av_lookup gives back the sockaddr_in6");
    let (s6, _) = straddr(d.av, &n0, 128);
    assert!(s6.starts_with("fi_sockaddr_in6://[::ffff:"), "fi_av_straddr of a mapped sockaddr_in6, as libfabric writes it: {s6}");
    // the format is per entry: an IN name inserted beside IN6 ones looks up as 16 bytes
    let mut n4 = [0u8; 16];
    n4[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
    n4[2..4].copy_from_slice(&n0[2..4]);
    n4[4..8].copy_from_slice(&v4);
    let mut f4 = 0u64;
    assert_eq!(call!(d.av, ops.insert(n4.as_ptr() as *const c_void, 1, &mut f4, 0, null_mut())), 1);
    let mut back4 = [0u8; 16];
    let mut blen4 = back4.len();
    assert_eq!(call!(d.av, ops.lookup(f4, back4.as_mut_ptr() as *mut c_void, &mut blen4)), 0, "an IN entry fits a sockaddr_in");
    assert_eq!(&back4[..blen4], &n4[..], "16 bytes, the name inserted");
    let rx = vec![0u8; 4096];
    let tx = pattern(4096, 51);
    let mr_rx = mr_reg(d.domain, &rx, FI_RECV as u64);
    let mr_tx = mr_reg(d.domain, &tx, FI_SEND as u64);
    for (from, to, dst, src, off) in [(e0, e1, a1, a0, 0usize), (e1, e0, a0, a1, 2048)] {
        assert_eq!(call!(to, msg.recv(rx.as_ptr().add(off) as *mut c_void, 1024, (*mr_rx).mem_desc, FI_ADDR_UNSPEC, (0x100 + off) as *mut c_void)), 0);
        assert_eq!(call!(from, msg.send(tx.as_ptr().add(off) as *const c_void, 999, (*mr_tx).mem_desc, dst, (0x200 + off) as *mut c_void)), 0);
        let got = cq_collect(cq, 2);
        let (r, s) = ok_ctx(&got, 0x100 + off).expect("IPv6-addressed datagram received");
        assert_eq!(r.len, 999);
        assert_eq!(s, src, "readfrom names the sender");
        assert!(ok_ctx(&got, 0x200 + off).is_some());
        assert_eq!(&rx[off..off + 999], &tx[off..off + 999]);
    }
    for f in [fid(e0), fid(e1), fid(mr_rx), fid(mr_tx), fid(cq)] {
        close(f);
    }
    d.close();

    // FI_EP_MSG over an IPv6 name
    let m = msg_open(|h| (*h).addr_format = FI_SOCKADDR_IN6);
    assert_eq!((*m.info).addr_format, FI_SOCKADDR_IN6);
    assert_in6(&m.name, &v4, "listener name");
    let cq_a = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let cq_b = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let both = (FI_TRANSMIT | FI_RECV) as u64;
    let a = new_ep(m.domain, m.info, &[(fid(m.eq), 0), (fid(cq_a), both)], 0xa);
    assert_eq!(call!(a, cm.connect(m.name.as_ptr() as *const c_void, null(), 0)), 0, "fi_connect to a sockaddr_in6");
    let (ev, _, req, _) = eq_event(m.eq);
    assert_eq!(ev, FI_CONNREQ);
    assert_eq!((*req).addr_format, FI_SOCKADDR_IN6, "the request's info keeps the format");
    assert_in6(std::slice::from_raw_parts((*req).dest_addr as *const u8, (*req).dest_addrlen), &v4, "request dest_addr");
    assert_in6(std::slice::from_raw_parts((*req).src_addr as *const u8, (*req).src_addrlen), &v4, "request src_addr");
    let b = new_ep(m.domain, req, &[(fid(m.eq), 0), (fid(cq_b), both)], 0xb);
    fi_freeinfo(req);
    assert_eq!(call!(b, cm.accept(null(), 0)), 0);
    for _ in 0..2 {
        assert_eq!(eq_event(m.eq).0, FI_CONNECTED);
    }
    assert_eq!(getpeer(a).expect("fi_getpeer"), m.name, "peer name in sockaddr_in6 form");
    assert_in6(&ep_name(b), &v4, "accepted endpoint's name");
    let la = pattern(8192, 53);
    let lb = vec![0u8; 8192];
    let mr_a = mr_reg(m.domain, &la, (FI_SEND | FI_RECV) as u64);
    let mr_b = mr_reg(m.domain, &lb, (FI_SEND | FI_RECV) as u64);
    assert_eq!(call!(b, msg.recv(lb.as_ptr() as *mut c_void, 4096, (*mr_b).mem_desc, FI_ADDR_UNSPEC, 0x31 as *mut c_void)), 0);
    assert_eq!(call!(a, msg.send(la.as_ptr() as *const c_void, 3000, (*mr_a).mem_desc, FI_ADDR_UNSPEC, 0x32 as *mut c_void)), 0);
    assert_eq!(cq_wait(cq_a).op_context as usize, 0x32);
    assert_eq!(cq_wait(cq_b).len, 3000);
    assert_eq!(&lb[..3000], &la[..3000]);
    assert_eq!(call!(a, msg.recv(la.as_ptr().add(4096) as *mut c_void, 4096, (*mr_a).mem_desc, FI_ADDR_UNSPEC, 0x33 as *mut c_void)), 0);
    assert_eq!(call!(b, msg.send(lb.as_ptr() as *const c_void, 3000, (*mr_b).mem_desc, FI_ADDR_UNSPEC, 0x34 as *mut c_void)), 0);
    assert_eq!(cq_wait(cq_b).op_context as usize, 0x34);
    assert_eq!(cq_wait(cq_a).op_context as usize, 0x33);
    assert_eq!(&la[4096..7096], &la[..3000]);
    for f in [fid(a), fid(b), fid(mr_a), fid(mr_b), fid(cq_a), fid(cq_b)] {
        close(f);
    }
    m.close();
}

// ------------------------------------------------------------------------- 11. FI_SOURCE

/// The FI_SOURCE capability asked on FI_EP_DGRAM is returned (caps and rx_attr caps; not
/// without asking) and completions name the sender: its fi_addr when it is in the AV,
/// FI_ADDR_NOTAVAIL when not, its new fi_addr once inserted.
#[test]
fn fi_source_capability_names_the_sender() {
    isolated("fi_source_capability_names_the_sender", "cov-src", source_body);
}

unsafe fn source_body() {
    let h = hints(FI_EP_DGRAM, FI_MSG as u64, 0);
    let i = getinfo(h);
    assert_eq!((*i).caps & FI_SOURCE, 0, "FI_SOURCE only when asked for");
    fi_freeinfo(i);
    fi_freeinfo(h);

    let d = dgram_open(FI_MSG as u64 | FI_SOURCE, false, 0);
    assert_ne!((*d.info).caps & FI_SOURCE, 0, "caps");
    assert_ne!((*(*d.info).rx_attr).caps & FI_SOURCE, 0, "rx_attr caps");
    let cq = open_cq(d.domain, FI_CQ_FORMAT_MSG, FI_WAIT_NONE);
    let (e0, _, a0) = d.ep(cq, true);
    let (e1, _, a1) = d.ep(cq, true);
    let (e2, n2, _) = d.ep(cq, false);
    assert_ne!(a0, a1);
    let rx = vec![0u8; 4096];
    let tx = pattern(4096, 61);
    let mr_rx = mr_reg(d.domain, &rx, FI_RECV as u64);
    let mr_tx = mr_reg(d.domain, &tx, FI_SEND as u64);
    let exchange = |from: *mut fid_ep, k: usize| -> fi_addr_t {
        assert_eq!(call!(e1, msg.recv(rx.as_ptr() as *mut c_void, 1024, (*mr_rx).mem_desc, FI_ADDR_UNSPEC, (0x100 + k) as *mut c_void)), 0);
        assert_eq!(call!(from, msg.send(tx.as_ptr().add(k * 10) as *const c_void, 500, (*mr_tx).mem_desc, a1, (0x200 + k) as *mut c_void)), 0);
        let got = cq_collect(cq, 2);
        let (r, src) = ok_ctx(&got, 0x100 + k).expect("datagram received");
        assert_eq!(r.len, 500);
        assert_eq!(&rx[..500], &tx[k * 10..k * 10 + 500], "datagram {k}");
        src
    };
    assert_eq!(exchange(e0, 0), a0, "a sender in the AV");
    assert_eq!(exchange(e2, 1), FI_ADDR_NOTAVAIL, "a sender not in the AV");
    let mut a2: fi_addr_t = FI_ADDR_NOTAVAIL;
    assert_eq!(call!(d.av, ops.insert(n2.as_ptr() as *const c_void, 1, &mut a2, 0, null_mut())), 1);
    assert!(a2 != a0 && a2 != a1);
    assert_eq!(exchange(e2, 2), a2, "the same sender once inserted");
    assert_eq!(exchange(e0, 3), a0);
    for f in [fid(e0), fid(e1), fid(e2), fid(mr_rx), fid(mr_tx), fid(cq)] {
        close(f);
    }
    d.close();
}

// ------------------------------------------------------------------------- 12. FI_THREAD_SAFE

/// FI_THREAD_SAFE (droce's default threading): two application threads each drive their own
/// self-connected FI_EP_MSG pair of one domain (1000 send/receive round trips of 1 B to
/// 8 KiB, data checked), concurrently; both finish within the deadline.
#[test]
fn thread_safe_two_threads_two_connections() {
    isolated("thread_safe_two_threads_two_connections", "cov-thr", threads_body);
}

struct Pair {
    a: *mut fid_ep,
    b: *mut fid_ep,
    cq_a: *mut fid_cq,
    cq_b: *mut fid_cq,
    tx: *mut u8,
    rx: *mut u8,
    da: *mut c_void,
    db: *mut c_void,
    seed: u32,
}
// SAFETY: the objects are thread safe (FI_THREAD_SAFE) and the buffers are this thread's alone;
// the main thread keeps them alive until the thread is joined.
unsafe impl Send for Pair {}

const ROUNDS: usize = 1000;
const BUF: usize = 8192;

unsafe fn drive(p: Pair) -> usize {
    let sizes = [1usize, 64, 256, 257, 1000, 4096, 8192, 3];
    let tx = std::slice::from_raw_parts_mut(p.tx, BUF);
    let rx = std::slice::from_raw_parts_mut(p.rx, BUF);
    let mut bytes = 0;
    for i in 0..ROUNDS {
        let n = sizes[i % sizes.len()];
        for (k, v) in tx[..n].iter_mut().enumerate() {
            *v = (k as u32).wrapping_mul(13).wrapping_add(i as u32).wrapping_add(p.seed) as u8;
        }
        rx[..n].fill(!tx[0]);
        assert_eq!(call!(p.b, msg.recv(p.rx as *mut c_void, BUF, p.db, FI_ADDR_UNSPEC, (0x10000 + i) as *mut c_void)), 0);
        assert_eq!(call!(p.a, msg.send(p.tx as *const c_void, n, p.da, FI_ADDR_UNSPEC, (0x20000 + i) as *mut c_void)), 0);
        assert_eq!(cq_wait(p.cq_a).op_context as usize, 0x20000 + i, "send {i} (seed {})", p.seed);
        let r = cq_wait(p.cq_b);
        assert_eq!((r.op_context as usize, r.len), (0x10000 + i, n), "receive {i} (seed {})", p.seed);
        assert!(rx[..n] == tx[..n], "data of round {i} (seed {})", p.seed);
        bytes += n;
    }
    bytes
}

unsafe fn threads_body() {
    let m = msg_open(|_| {});
    assert_eq!((*(*m.info).domain_attr).threading, FI_THREAD_SAFE, "droce's default threading");
    let both = (FI_TRANSMIT | FI_RECV) as u64;
    let mut bufs = vec![vec![0u8; BUF]; 4];
    let mut pairs = Vec::new();
    let mut fids = Vec::new();
    let mut cqs = Vec::new();
    for t in 0..2usize {
        let cq_a = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
        let cq_b = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
        let (a, b) = m.connect(&[(fid(cq_a), both)], &[(fid(cq_b), both)]);
        let mr_tx = mr_reg(m.domain, &bufs[2 * t], FI_SEND as u64);
        let mr_rx = mr_reg(m.domain, &bufs[2 * t + 1], FI_RECV as u64);
        pairs.push(Pair { a, b, cq_a, cq_b, tx: bufs[2 * t].as_mut_ptr(), rx: bufs[2 * t + 1].as_mut_ptr(), da: (*mr_tx).mem_desc, db: (*mr_rx).mem_desc, seed: 1 + t as u32 * 101 });
        fids.extend([fid(a), fid(b), fid(mr_tx), fid(mr_rx)]);
        cqs.extend([fid(cq_a), fid(cq_b)]);
    }
    let handles: Vec<_> = pairs.into_iter().map(|p| std::thread::spawn(move || unsafe { drive(p) })).collect();
    let start = Instant::now();
    let limit = Duration::from_secs(120);
    while !handles.iter().all(|h| h.is_finished()) {
        assert!(start.elapsed() < limit, "the two threads did not finish within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let expect: usize = (0..ROUNDS).map(|i| [1usize, 64, 256, 257, 1000, 4096, 8192, 3][i % 8]).sum();
    for (t, h) in handles.into_iter().enumerate() {
        let bytes = h.join().unwrap_or_else(|_| panic!("thread {t} failed"));
        assert_eq!(bytes, expect, "thread {t}");
    }
    for f in fids.into_iter().chain(cqs) {
        close(f);
    }
    drop(bufs);
    m.close();
}

// ------------------------------------------------------------------------- 13. ordering

/// The message orders droce advertises for FI_EP_MSG, on the wire: SAW (a write then a send,
/// posted back to back: when the receive completes the written bytes are there), WAS (a send
/// then a writedata: the send takes the first receive, the immediate data the second), RAW (a
/// write then a read of the same range, back to back: the read returns the written bytes) and
/// WAW (two writes of one range: the second one's bytes stay), 8 rounds of 64 KiB each.
#[test]
fn message_order_saw_was_raw_waw() {
    isolated("message_order_saw_was_raw_waw", "cov-ord", order_body);
}

unsafe fn order_body() {
    let m = msg_open(|_| {});
    let order = (*(*m.info).tx_attr).msg_order;
    let want = (FI_ORDER_SAW | FI_ORDER_WAS | FI_ORDER_RAW | FI_ORDER_WAW) as u64;
    assert_eq!(order & want, want, "advertised orders");
    let cq_a = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let cq_b = open_cq(m.domain, FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
    let both = (FI_TRANSMIT | FI_RECV) as u64;
    let (a, b) = m.connect(&[(fid(cq_a), both)], &[(fid(cq_b), both)]);
    const N: usize = 65536;
    let mut la = vec![0u8; 4 * N];
    let lb = vec![0u8; 4 * N];
    let mr_a = mr_reg(m.domain, &la, (FI_SEND | FI_RECV | FI_READ | FI_WRITE) as u64);
    let mr_b = mr_reg(m.domain, &lb, (FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE) as u64);
    let (da, db, key) = ((*mr_a).mem_desc, (*mr_b).mem_desc, (*mr_b).key);
    let rb = lb.as_ptr() as u64;
    let lbm = lb.as_ptr() as *mut u8;
    let contexts = |cq: *mut fid_cq, n: usize| -> Vec<fi_cq_data_entry> { (0..n).map(|_| cq_wait(cq)).collect() };
    for round in 0..8u32 {
        // SAW: write N bytes, then a send, without waiting
        let p = pattern(N, 100 + round);
        la[..N].copy_from_slice(&p);
        std::ptr::write_bytes(lbm, 0, N);
        assert_eq!(call!(b, msg.recv(lbm.add(3 * N) as *mut c_void, 64, db, FI_ADDR_UNSPEC, 0x100 as *mut c_void)), 0);
        assert_eq!(call!(a, rma.write(la.as_ptr() as *const c_void, N, da, FI_ADDR_UNSPEC, rb, key, 0x1 as *mut c_void)), 0);
        assert_eq!(call!(a, msg.send(la.as_ptr() as *const c_void, 64, da, FI_ADDR_UNSPEC, 0x2 as *mut c_void)), 0);
        let r = cq_wait(cq_b);
        assert_eq!(r.op_context as usize, 0x100);
        assert!(lb[..N] == p[..], "SAW round {round}: the written bytes are there when the send's receive completes");
        let mut c: Vec<usize> = contexts(cq_a, 2).iter().map(|e| e.op_context as usize).collect();
        c.sort();
        assert_eq!(c, vec![0x1, 0x2]);

        // WAS: a send, then a writedata; the send takes the first receive
        assert_eq!(call!(b, msg.recv(lbm.add(3 * N) as *mut c_void, 4096, db, FI_ADDR_UNSPEC, 0x101 as *mut c_void)), 0);
        assert_eq!(call!(b, msg.recv(lbm.add(3 * N + 4096) as *mut c_void, 4096, db, FI_ADDR_UNSPEC, 0x102 as *mut c_void)), 0);
        assert_eq!(call!(a, msg.send(la.as_ptr().add(100) as *const c_void, 4000, da, FI_ADDR_UNSPEC, 0x3 as *mut c_void)), 0);
        assert_eq!(call!(a, rma.writedata(la.as_ptr().add(N) as *const c_void, N, da, 0x7700 + round as u64, FI_ADDR_UNSPEC, rb + N as u64, key, 0x4 as *mut c_void)), 0);
        let got = contexts(cq_b, 2);
        let s = got.iter().find(|e| e.op_context as usize == 0x101).expect("first receive");
        assert_eq!((s.len, s.flags & FI_REMOTE_CQ_DATA as u64), (4000, 0), "WAS round {round}: the send took the first receive");
        let w = got.iter().find(|e| e.op_context as usize == 0x102).expect("second receive");
        assert_ne!(w.flags & FI_REMOTE_CQ_DATA as u64, 0, "WAS round {round}: the write's immediate data took the second");
        assert_eq!(w.data, 0x7700 + round as u64);
        assert_eq!(&lb[3 * N..3 * N + 4000], &la[100..4100]);
        assert!(lb[N..2 * N] == la[N..2 * N]);
        let mut c: Vec<usize> = contexts(cq_a, 2).iter().map(|e| e.op_context as usize).collect();
        c.sort();
        assert_eq!(c, vec![0x3, 0x4]);

        // RAW: a write then a read of the same range, back to back
        let old = pattern(N, 200 + round);
        std::ptr::copy_nonoverlapping(old.as_ptr(), lbm.add(2 * N), N);
        let new = pattern(N, 300 + round);
        la[..N].copy_from_slice(&new);
        la[2 * N..3 * N].fill(0);
        assert_eq!(call!(a, rma.write(la.as_ptr() as *const c_void, N, da, FI_ADDR_UNSPEC, rb + 2 * N as u64, key, 0x5 as *mut c_void)), 0);
        assert_eq!(call!(a, rma.read(la.as_mut_ptr().add(2 * N) as *mut c_void, N, da, FI_ADDR_UNSPEC, rb + 2 * N as u64, key, 0x6 as *mut c_void)), 0);
        let mut c: Vec<usize> = contexts(cq_a, 2).iter().map(|e| e.op_context as usize).collect();
        c.sort();
        assert_eq!(c, vec![0x5, 0x6]);
        assert!(la[2 * N..3 * N] == new[..], "RAW round {round}: the read returns the written bytes");

        // WAW: two writes of one range; the second one's bytes stay
        let second = pattern(N, 400 + round);
        la[N..2 * N].copy_from_slice(&second);
        assert_eq!(call!(a, rma.write(la.as_ptr() as *const c_void, N, da, FI_ADDR_UNSPEC, rb + 2 * N as u64, key, 0x7 as *mut c_void)), 0);
        assert_eq!(call!(a, rma.write(la.as_ptr().add(N) as *const c_void, N, da, FI_ADDR_UNSPEC, rb + 2 * N as u64, key, 0x8 as *mut c_void)), 0);
        let mut c: Vec<usize> = contexts(cq_a, 2).iter().map(|e| e.op_context as usize).collect();
        c.sort();
        assert_eq!(c, vec![0x7, 0x8]);
        assert!(lb[2 * N..3 * N] == second[..], "WAW round {round}: the later write wins");
    }
    for f in [fid(a), fid(b), fid(mr_a), fid(mr_b), fid(cq_a), fid(cq_b)] {
        close(f);
    }
    m.close();
}
