//! CPU cost of the provider's message path, independent of the machine's load: ONE process
//! and one thread, an FI_EP_MSG endpoint self-connected to its own listener (the device loops
//! frames to its own address, no wire, no peer process to wait for), then N ping-pongs of
//! `-S` bytes: A sends (fi_inject up to the inject size, else fi_send), B's CQ read returns
//! the receive, B reposts and answers, A's CQ read returns it. Every step is this thread's
//! own work, so the thread CPU time per round trip is what the provider plus the transport
//! cost (two messages, two receives, four CQ reads that find work, the ACKs), and it does
//! not depend on other processes (compare two provider builds by alternating runs).
//!
//! ```sh
//! cargo build --release -p droce-fi --example self_pingpong
//! FI_PROVIDER_PATH=<dir with libdroce_fi.so> FI_PROVIDER=droce DROCE_LINK=sp$$ \
//!   target/release/examples/self_pingpong [iterations] [size]
//! ```
//! Prints `size iterations cpu_ns_per_rt wall_ns_per_rt`.

use droce_fi::sys::*;
use std::os::raw::c_void;
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

macro_rules! call {
    ($obj:expr, $table:ident . $op:ident ( $($arg:expr),* )) => {{
        let o = $obj;
        let f = (*(*o).$table).$op.expect(stringify!($op));
        f(o $(, $arg)*)
    }};
}
macro_rules! fidcall {
    ($fid:expr, $op:ident ( $($arg:expr),* )) => {{
        let f: *mut fid = $fid;
        let g = (*(*f).ops).$op.expect(stringify!($op));
        g(f $(, $arg)*)
    }};
}

const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;
const DEADLINE: Duration = Duration::from_secs(30);

fn check(r: isize, what: &str) {
    if r != 0 {
        eprintln!("self_pingpong: {what} failed: {r}");
        std::process::exit(1);
    }
}

#[repr(C, align(8))]
struct EqBuf([u8; 512]);

unsafe fn eq_event(eq: *mut fid_eq) -> (u32, *mut fid, *mut fi_info) {
    let mut buf = EqBuf([0; 512]);
    let mut ev = 0u32;
    let start = Instant::now();
    loop {
        let n = call!(eq, ops.read(&mut ev, buf.0.as_mut_ptr() as *mut c_void, buf.0.len(), 0));
        if n > 0 {
            let e = &*(buf.0.as_ptr() as *const fi_eq_cm_entry);
            return (ev, e.fid, e.info);
        }
        if start.elapsed() > DEADLINE || (n != -(FI_EAGAIN as isize)) {
            eprintln!("self_pingpong: no EQ event ({n})");
            std::process::exit(1);
        }
    }
}

unsafe fn cq_wait(cq: *mut fid_cq) {
    let mut e: fi_cq_data_entry = std::mem::zeroed();
    let start = Instant::now();
    loop {
        let n = call!(cq, ops.read(&mut e as *mut _ as *mut c_void, 1));
        if n == 1 {
            return;
        }
        if n != -(FI_EAGAIN as isize) || start.elapsed() > DEADLINE {
            eprintln!("self_pingpong: CQ read {n}");
            std::process::exit(1);
        }
    }
}

unsafe fn ep_setup(domain: *mut fid_domain, info: *mut fi_info, eq: *mut fid_eq, cq: *mut fid_cq) -> *mut fid_ep {
    let mut ep: *mut fid_ep = null_mut();
    check(call!(domain, ops.endpoint(info, &mut ep, null_mut())) as isize, "fi_endpoint");
    check(fidcall!(&mut (*ep).fid, bind(&mut (*eq).fid, 0)) as isize, "bind eq");
    check(fidcall!(&mut (*ep).fid, bind(&mut (*cq).fid, (FI_TRANSMIT | FI_RECV) as u64)) as isize, "bind cq");
    check(fidcall!(&mut (*ep).fid, control(FI_ENABLE as i32, null_mut())) as isize, "enable");
    ep
}

fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let iters: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let size: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(64);
    // SAFETY: the libfabric API driven as documented; every object outlives its use.
    unsafe {
        let hints = fi_dupinfo(null());
        (*hints).caps = FI_MSG as u64;
        (*(*hints).ep_attr).type_ = FI_EP_MSG;
        (*(*hints).domain_attr).mr_mode = (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY) as i32;
        (*(*hints).fabric_attr).prov_name = libc::strdup(c"droce".as_ptr());
        let mut info: *mut fi_info = null_mut();
        check(fi_getinfo((1 << 16) | 17, null(), null(), 0, hints, &mut info) as isize, "fi_getinfo");
        let inject = (*(*info).tx_attr).inject_size;
        let mut fabric: *mut fid_fabric = null_mut();
        check(fi_fabric((*info).fabric_attr, &mut fabric, null_mut()) as isize, "fi_fabric");
        let mut eq_attr: fi_eq_attr = std::mem::zeroed();
        eq_attr.wait_obj = FI_WAIT_NONE;
        let mut eq: *mut fid_eq = null_mut();
        check(call!(fabric, ops.eq_open(&mut eq_attr, &mut eq, null_mut())) as isize, "eq_open");
        let mut domain: *mut fid_domain = null_mut();
        check(call!(fabric, ops.domain(info, &mut domain, null_mut())) as isize, "fi_domain");
        let mut cq_attr: fi_cq_attr = std::mem::zeroed();
        cq_attr.format = FI_CQ_FORMAT_DATA;
        let (mut cq_a, mut cq_b): (*mut fid_cq, *mut fid_cq) = (null_mut(), null_mut());
        check(call!(domain, ops.cq_open(&mut cq_attr, &mut cq_a, null_mut())) as isize, "cq_open");
        check(call!(domain, ops.cq_open(&mut cq_attr, &mut cq_b, null_mut())) as isize, "cq_open");
        let mut pep: *mut fid_pep = null_mut();
        check(call!(fabric, ops.passive_ep(info, &mut pep, null_mut())) as isize, "passive_ep");
        check(fidcall!(&mut (*pep).fid, bind(&mut (*eq).fid, 0)) as isize, "pep bind");
        check(call!(pep, cm.listen()) as isize, "listen");
        let mut name = [0u8; 64];
        let mut len = name.len();
        check(((*(*pep).cm).getname.unwrap())(&mut (*pep).fid, name.as_mut_ptr() as *mut c_void, &mut len) as isize, "getname");
        let ep_a = ep_setup(domain, info, eq, cq_a);
        check(call!(ep_a, cm.connect(name.as_ptr() as *const c_void, null(), 0)) as isize, "connect");
        let (ev, _, req) = eq_event(eq);
        assert_eq!(ev, FI_CONNREQ);
        let ep_b = ep_setup(domain, req, eq, cq_b);
        fi_freeinfo(req);
        let mut bufs = vec![0u8; 4 * size.max(64)];
        let mut mr: *mut fid_mr = null_mut();
        let reg = (*(*domain).mr).reg.expect("reg");
        check(reg(&mut (*domain).fid, bufs.as_ptr() as *const c_void, bufs.len(), (FI_SEND | FI_RECV) as u64, 0, 0, 0, &mut mr, null_mut()) as isize, "mr_reg");
        let desc = (*mr).mem_desc;
        let base = bufs.as_mut_ptr();
        let (tx_a, rx_a, tx_b, rx_b) = (base, base.add(size), base.add(2 * size), base.add(3 * size));
        check(call!(ep_a, msg.recv(rx_a as *mut c_void, size, desc, FI_ADDR_UNSPEC, null_mut())), "recv a");
        check(call!(ep_b, msg.recv(rx_b as *mut c_void, size, desc, FI_ADDR_UNSPEC, null_mut())), "recv b");
        check(call!(ep_b, cm.accept(null(), 0)) as isize, "accept");
        for _ in 0..2 {
            let (ev, _, _) = eq_event(eq);
            assert_eq!(ev, FI_CONNECTED);
        }
        let send = |ep: *mut fid_ep, buf: *mut u8, cq: *mut fid_cq| {
            if size <= inject {
                check(call!(ep, msg.inject(buf as *const c_void, size, 0)), "inject");
            } else {
                check(call!(ep, msg.send(buf as *const c_void, size, desc, 0, null_mut())), "send");
                cq_wait(cq);
            }
        };
        let warm = iters / 10 + 10;
        let (mut c0, mut w0) = (0, Instant::now());
        for i in 0..warm + iters {
            if i == warm {
                c0 = thread_cpu_ns();
                w0 = Instant::now();
            }
            *tx_a = i as u8;
            send(ep_a, tx_a, cq_a);
            cq_wait(cq_b);
            assert_eq!(*rx_b, i as u8, "payload");
            check(call!(ep_b, msg.recv(rx_b as *mut c_void, size, desc, FI_ADDR_UNSPEC, null_mut())), "recv b");
            *tx_b = !(i as u8);
            send(ep_b, tx_b, cq_b);
            cq_wait(cq_a);
            assert_eq!(*rx_a, !(i as u8), "payload");
            check(call!(ep_a, msg.recv(rx_a as *mut c_void, size, desc, FI_ADDR_UNSPEC, null_mut())), "recv a");
        }
        let cpu = thread_cpu_ns() - c0;
        let wall = w0.elapsed().as_nanos() as u64;
        println!("{size} {iters} {} {}", cpu / iters, wall / iters);
        for f in [&mut (*ep_a).fid as *mut fid, &mut (*ep_b).fid, &mut (*pep).fid] {
            fidcall!(f, close());
        }
    }
}
