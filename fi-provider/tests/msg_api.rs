//! One process drives droce through the real libfabric API (fi_getinfo → ops tables): an
//! FI_EP_MSG endpoint connects to its own passive endpoint (self-connect: the device loops frames
//! to its own address), with CM data both ways; SEND with data checks, RMA write/read, writedata
//! (FI_REMOTE_CQ_DATA), RoCE atomics (fetch-add, compare-swap), a rejected connect with reject data (EQ error entry), and shutdown.

#[macro_use]
mod common;
use common::{cq_wait, ep_setup, eq_event, fabric_eq_domain, mr_reg, EqBuf, FI_ADDR_UNSPEC};
use droce_fi::sys::*;
use std::os::raw::c_void;
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(30);

unsafe fn eq_error(eq: *mut fid_eq) -> fi_eq_err_entry {
    let mut buf = EqBuf([0; 512]);
    let mut ev = 0u32;
    let start = Instant::now();
    loop {
        let n = call!(eq, ops.read(&mut ev, buf.0.as_mut_ptr() as *mut c_void, buf.0.len(), 0));
        if n == -(FI_EAVAIL as isize) {
            let mut e: fi_eq_err_entry = std::mem::zeroed();
            let r = call!(eq, ops.readerr(&mut e, 0));
            assert!(r > 0, "fi_eq_readerr {r}");
            return e;
        }
        assert_eq!(n, -(FI_EAGAIN as isize), "expected an error entry, got {n} (event {ev})");
        assert!(start.elapsed() < DEADLINE, "no EQ error");
    }
}

/// The provider environment, set once for the process before any libfabric call (the tests of
/// this file share one zero-config link: the engine is one per process).
fn provider_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::env::set_var("FI_PROVIDER_PATH", common::provider_dir());
        std::env::set_var("FI_PROVIDER", "droce");
        std::env::set_var("DROCE_LINK", common::unique("msgapi"));
    });
}

#[test]
fn self_connect_send_rma_writedata_reject_shutdown() {
    provider_env();
    unsafe {
        let hints = fi_dupinfo(null());
        (*hints).caps = (FI_MSG | FI_RMA) as u64;
        (*hints).mode = FI_RX_CQ_DATA;
        (*(*hints).ep_attr).type_ = FI_EP_MSG;
        (*(*hints).domain_attr).mr_mode = (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY) as i32;
        (*(*hints).fabric_attr).prov_name = libc::strdup(c"droce".as_ptr());
        let mut info: *mut fi_info = null_mut();
        assert_eq!(fi_getinfo((1 << 16) | 17, null(), null(), 0, hints, &mut info), 0, "fi_getinfo");
        assert_eq!((*(*info).ep_attr).type_, FI_EP_MSG);

        let (fabric, eq, domain) = fabric_eq_domain(info);
        let mut cq_attr: fi_cq_attr = std::mem::zeroed();
        cq_attr.format = FI_CQ_FORMAT_DATA;
        cq_attr.size = 128;
        let (mut cq_a, mut cq_b): (*mut fid_cq, *mut fid_cq) = (null_mut(), null_mut());
        assert_eq!(call!(domain, ops.cq_open(&mut cq_attr, &mut cq_a, null_mut())), 0);
        assert_eq!(call!(domain, ops.cq_open(&mut cq_attr, &mut cq_b, null_mut())), 0);

        // passive endpoint on an ephemeral port
        let mut pep: *mut fid_pep = null_mut();
        assert_eq!(call!(fabric, ops.passive_ep(info, &mut pep, null_mut())), 0);
        assert_eq!(fidcall!(&mut (*pep).fid, bind(&mut (*eq).fid, 0)), 0);
        assert_eq!(call!(pep, cm.listen()), 0);
        let mut name = [0u8; 64];
        let mut len = name.len();
        assert_eq!(((*(*pep).cm).getname.unwrap())(&mut (*pep).fid, name.as_mut_ptr() as *mut c_void, &mut len), 0);
        assert_eq!(len, 16, "sockaddr_in");
        let port = u16::from_be_bytes([name[2], name[3]]);
        assert_ne!(port, 0, "listen assigned a port");

        // active side connects to its own listener with 24 bytes of CM data
        let ep_a = ep_setup(domain, info, eq, cq_a, 0xa);
        let cm_req = *b"connect-data-24-bytes-ok";
        assert_eq!(call!(ep_a, cm.connect(name.as_ptr() as *const c_void, cm_req.as_ptr() as *const c_void, cm_req.len())), 0);
        let (ev, f, req_info, data) = eq_event(eq);
        assert_eq!(ev, FI_CONNREQ);
        assert_eq!(f, &mut (*pep).fid as *mut fid);
        assert_eq!(data, cm_req, "CM data reaches the listener byte-exact");
        assert!(!(*req_info).handle.is_null());
        assert_eq!((*req_info).dest_addrlen, 16);
        let ep_b = ep_setup(domain, req_info, eq, cq_b, 0xb);
        fi_freeinfo(req_info);

        let mut rx = vec![0u8; 8192];
        let mut tx: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
        let mr_rx = mr_reg(domain, &mut rx, (FI_RECV | FI_REMOTE_WRITE | FI_REMOTE_READ) as u64);
        let mr_tx = mr_reg(domain, &mut tx, (FI_SEND | FI_READ | FI_WRITE) as u64);
        let desc_rx = (*mr_rx).mem_desc;
        let desc_tx = (*mr_tx).mem_desc;
        assert_eq!(call!(ep_b, msg.recv(rx.as_mut_ptr() as *mut c_void, 4096, desc_rx, FI_ADDR_UNSPEC, 0x1111 as *mut c_void)), 0);

        let cm_rep = *b"accept-16-bytes!";
        assert_eq!(call!(ep_b, cm.accept(cm_rep.as_ptr() as *const c_void, cm_rep.len())), 0);
        let mut connected = Vec::new();
        while connected.len() < 2 {
            let (ev, f, _, data) = eq_event(eq);
            assert_eq!(ev, FI_CONNECTED);
            if std::ptr::eq(f, &(*ep_a).fid) {
                assert_eq!(data, cm_rep, "accept data reaches the connector");
            }
            connected.push(f);
        }
        assert!(connected.contains(&(&mut (*ep_a).fid as *mut fid)) && connected.contains(&(&mut (*ep_b).fid as *mut fid)));

        // a zero-config peer with no process behind it (this process is slot 0 of its own
        // link, slot 1 is free): refused at once, as a TCP connect to a port nobody listens on,
        // not after the CM's retries (a fi_pingpong client whose server exited between the
        // name exchange and fi_connect waited past the stress test's 45 s)
        let ep_g = ep_setup(domain, info, eq, cq_a, 0x9);
        let mut gone = name;
        gone[4..8].copy_from_slice(&[10, 77, 0, 2]);
        let t0 = Instant::now();
        let r = call!(ep_g, cm.connect(gone.as_ptr() as *const c_void, null(), 0));
        assert_eq!(r, -(FI_ECONNREFUSED as i32), "connect to the free slot 1 (10.77.0.2)");
        assert!(t0.elapsed() < Duration::from_secs(2), "refused after {:?}", t0.elapsed());

        // SEND 4 KiB, data checked
        assert_eq!(call!(ep_a, msg.send(tx.as_ptr() as *const c_void, 4096, desc_tx, FI_ADDR_UNSPEC, 0x2222 as *mut c_void)), 0);
        let s = cq_wait(cq_a);
        assert_eq!(s.op_context as usize, 0x2222);
        assert_eq!(s.flags & (FI_SEND | FI_MSG) as u64, (FI_SEND | FI_MSG) as u64);
        let r = cq_wait(cq_b);
        assert_eq!(r.op_context as usize, 0x1111);
        assert_eq!(r.len, 4096);
        assert_eq!(r.flags & (FI_RECV | FI_MSG) as u64, (FI_RECV | FI_MSG) as u64);
        assert_eq!(&rx[..4096], &tx[..4096]);

        // RMA write into B's buffer (second half), then read it back into A's buffer
        let key = (*mr_rx).key;
        let remote = rx.as_ptr() as u64 + 4096;
        assert_eq!(call!(ep_a, rma.write(tx.as_ptr().add(100) as *const c_void, 3000, desc_tx, FI_ADDR_UNSPEC, remote, key, 0x3333 as *mut c_void)), 0);
        let w = cq_wait(cq_a);
        assert_eq!((w.op_context as usize, w.flags & (FI_RMA | FI_WRITE) as u64), (0x3333, (FI_RMA | FI_WRITE) as u64));
        assert_eq!(&rx[4096..7096], &tx[100..3100]);
        tx[4096..8192].fill(0);
        assert_eq!(call!(ep_a, rma.read(tx.as_mut_ptr().add(4096) as *mut c_void, 3000, desc_tx, FI_ADDR_UNSPEC, remote, key, 0x4444 as *mut c_void)), 0);
        let rd = cq_wait(cq_a);
        assert_eq!((rd.op_context as usize, rd.flags & (FI_RMA | FI_READ) as u64), (0x4444, (FI_RMA | FI_READ) as u64));
        assert_eq!(&tx[4096..7096], &rx[4096..7096]);

        // writedata: the immediate data completes a posted receive at B (FI_RX_CQ_DATA)
        // a zero-length receive is enough for the immediate data (fabtests rma_bw posts those)
        assert_eq!(call!(ep_b, msg.recv(rx.as_mut_ptr() as *mut c_void, 0, desc_rx, FI_ADDR_UNSPEC, 0x5555 as *mut c_void)), 0);
        assert_eq!(call!(ep_a, rma.writedata(tx.as_ptr() as *const c_void, 512, desc_tx, 0xdead_beef, FI_ADDR_UNSPEC, remote, key, 0x6666 as *mut c_void)), 0);
        assert_eq!(cq_wait(cq_a).op_context as usize, 0x6666);
        let wd = cq_wait(cq_b);
        assert_ne!(wd.flags & FI_REMOTE_CQ_DATA as u64, 0);
        assert_eq!(wd.data, 0xdead_beef);
        assert_eq!(&rx[4096..4608], &tx[..512]);

        // RoCE atomics on a 64-bit word of B: fetch-and-add, compare-and-swap, add
        let word = rx.as_ptr() as u64;
        assert_eq!(word % 8, 0);
        rx[..8].copy_from_slice(&40u64.to_ne_bytes());
        let (operand, compare) = (2u64, 42u64);
        let res = tx.as_mut_ptr() as *mut c_void;
        let r = call!(ep_a, atomic.readwrite(&operand as *const u64 as *const c_void, 1, null_mut(), res, desc_tx, FI_ADDR_UNSPEC, word, key, FI_UINT64, FI_SUM, 0x7777 as *mut c_void));
        assert_eq!(r, 0, "fi_fetch_atomic");
        let c = cq_wait(cq_a);
        assert_eq!((c.op_context as usize, c.flags & (FI_ATOMIC | FI_READ) as u64), (0x7777, (FI_ATOMIC | FI_READ) as u64));
        assert_eq!(u64::from_ne_bytes(tx[..8].try_into().unwrap()), 40, "fetched the old value");
        assert_eq!(u64::from_ne_bytes(rx[..8].try_into().unwrap()), 42);
        let swap = 7u64;
        let r = call!(ep_a, atomic.compwrite(&swap as *const u64 as *const c_void, 1, null_mut(), &compare as *const u64 as *const c_void, null_mut(), res, desc_tx, FI_ADDR_UNSPEC, word, key, FI_UINT64, FI_CSWAP, 0x8888 as *mut c_void));
        assert_eq!(r, 0, "fi_compare_atomic");
        assert_eq!(cq_wait(cq_a).op_context as usize, 0x8888);
        assert_eq!(u64::from_ne_bytes(tx[..8].try_into().unwrap()), 42);
        assert_eq!(u64::from_ne_bytes(rx[..8].try_into().unwrap()), 7, "swapped");
        let add = 3u64;
        assert_eq!(call!(ep_a, atomic.write(&add as *const u64 as *const c_void, 1, null_mut(), FI_ADDR_UNSPEC, word, key, FI_UINT64, FI_SUM, 0x9999 as *mut c_void)), 0);
        assert_eq!(cq_wait(cq_a).op_context as usize, 0x9999);
        assert_eq!(u64::from_ne_bytes(rx[..8].try_into().unwrap()), 10);
        let mut cnt = 0usize;
        assert_eq!(call!(ep_a, atomic.writevalid(FI_UINT32, FI_SUM, &mut cnt)), -(FI_EOPNOTSUPP as i32), "only 64-bit atomics");

        // a third endpoint is rejected with reject data
        let ep_c = ep_setup(domain, info, eq, cq_a, 0xc);
        assert_eq!(call!(ep_c, cm.connect(name.as_ptr() as *const c_void, null(), 0)), 0);
        let (ev, _, req, data) = eq_event(eq);
        assert_eq!(ev, FI_CONNREQ);
        assert!(data.is_empty(), "no CM data sent, none reported");
        let rej = [1u8, 2];
        assert_eq!(call!(pep, cm.reject((*req).handle, rej.as_ptr() as *const c_void, 2)), 0);
        (*req).handle = null_mut();
        fi_freeinfo(req);
        let err = eq_error(eq);
        assert_eq!(err.err, FI_ECONNREFUSED as i32);
        assert_eq!(err.fid, &mut (*ep_c).fid as *mut fid);
        assert_eq!(std::slice::from_raw_parts(err.err_data as *const u8, err.err_data_size), &rej);

        // shutdown: the peer sees FI_SHUTDOWN
        assert_eq!(call!(ep_a, cm.shutdown(0)), 0);
        let start = Instant::now();
        let mut saw_b = false;
        while !saw_b {
            let (ev, f, _, _) = eq_event(eq);
            assert_eq!(ev, FI_SHUTDOWN);
            saw_b = std::ptr::eq(f, &(*ep_b).fid);
            assert!(start.elapsed() < DEADLINE);
        }

        for f in [&mut (*ep_c).fid as *mut fid, &mut (*ep_g).fid, &mut (*ep_a).fid, &mut (*ep_b).fid, &mut (*mr_rx).fid, &mut (*mr_tx).fid, &mut (*pep).fid, &mut (*cq_a).fid, &mut (*cq_b).fid, &mut (*domain).fid, &mut (*eq).fid, &mut (*fabric).fid] {
            assert_eq!(fidcall!(f, close()), 0);
        }
        fi_freeinfo(info);
        fi_freeinfo(hints);
    }
}

unsafe fn cntr_open(domain: *mut fid_domain) -> *mut fid_cntr {
    let mut attr: fi_cntr_attr = std::mem::zeroed();
    attr.events = FI_CNTR_EVENTS_COMP;
    attr.wait_obj = FI_WAIT_UNSPEC;
    let mut c: *mut fid_cntr = null_mut();
    assert_eq!(call!(domain, ops.cntr_open(&mut attr, &mut c, null_mut())), 0, "fi_cntr_open");
    c
}

/// Reads `c` (which drives progress) until it reaches `want`, within the deadline.
unsafe fn cntr_until(c: *mut fid_cntr, want: u64, what: &str) {
    let start = Instant::now();
    loop {
        let v = call!(c, ops.read());
        if v >= want {
            assert_eq!(v, want, "{what}: counter overshot");
            return;
        }
        assert!(start.elapsed() < DEADLINE, "{what}: counter at {v}, want {want}");
    }
}

/// Nothing more on `cq` for a while (each read drives progress).
unsafe fn cq_stays_empty(cq: *mut fid_cq, what: &str) {
    let mut e: fi_cq_data_entry = std::mem::zeroed();
    for _ in 0..2000 {
        let n = call!(cq, ops.read(&mut e as *mut _ as *mut c_void, 1));
        assert_eq!(n, -(FI_EAGAIN as isize), "{what}: unexpected entry, context {:#x}", e.op_context as usize);
    }
}

fn word(b: &[u8]) -> u64 {
    u64::from_ne_bytes(b[..8].try_into().unwrap())
}

/// The vector, message and inject forms of the RoCE atomics, the counters each kind of
/// operation moves (fi_endpoint(3): base atomics and writes FI_WRITE, fetching and compare
/// atomics and reads FI_READ), selective completion on both sides of an endpoint, and
/// fi_cq_signal waking a blocked fi_cq_sread.
#[test]
fn atomic_forms_counters_selective_completion_and_cq_signal() {
    provider_env();
    unsafe {
        let hints = fi_dupinfo(null());
        (*hints).caps = (FI_MSG | FI_RMA | FI_ATOMIC) as u64;
        (*hints).mode = FI_RX_CQ_DATA;
        (*(*hints).ep_attr).type_ = FI_EP_MSG;
        (*(*hints).domain_attr).mr_mode = (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY) as i32;
        (*(*hints).fabric_attr).prov_name = libc::strdup(c"droce".as_ptr());
        let mut info: *mut fi_info = null_mut();
        assert_eq!(fi_getinfo((1 << 16) | 17, null(), null(), 0, hints, &mut info), 0, "fi_getinfo");
        assert_eq!((*(*info).ep_attr).max_order_war_size, 0, "no FI_ORDER_WAR, no WAR size");

        let (fabric, eq, domain) = fabric_eq_domain(info);
        let mut cq_attr: fi_cq_attr = std::mem::zeroed();
        cq_attr.format = FI_CQ_FORMAT_DATA;
        cq_attr.size = 128;
        cq_attr.wait_obj = FI_WAIT_UNSPEC;
        let (mut cq_a, mut cq_b): (*mut fid_cq, *mut fid_cq) = (null_mut(), null_mut());
        assert_eq!(call!(domain, ops.cq_open(&mut cq_attr, &mut cq_a, null_mut())), 0);
        assert_eq!(call!(domain, ops.cq_open(&mut cq_attr, &mut cq_b, null_mut())), 0);

        let mut pep: *mut fid_pep = null_mut();
        assert_eq!(call!(fabric, ops.passive_ep(info, &mut pep, null_mut())), 0);
        assert_eq!(fidcall!(&mut (*pep).fid, bind(&mut (*eq).fid, 0)), 0);
        assert_eq!(call!(pep, cm.listen()), 0);
        let mut name = [0u8; 64];
        let mut len = name.len();
        assert_eq!(((*(*pep).cm).getname.unwrap())(&mut (*pep).fid, name.as_mut_ptr() as *mut c_void, &mut len), 0);

        // A: transmit completions only when asked; B: receive completions only when asked
        let mut ep_a: *mut fid_ep = null_mut();
        assert_eq!(call!(domain, ops.endpoint(info, &mut ep_a, 0xa as *mut c_void)), 0);
        assert_eq!(fidcall!(&mut (*ep_a).fid, bind(&mut (*eq).fid, 0)), 0);
        assert_eq!(fidcall!(&mut (*ep_a).fid, bind(&mut (*cq_a).fid, FI_TRANSMIT as u64 | FI_SELECTIVE_COMPLETION)), 0);
        assert_eq!(fidcall!(&mut (*ep_a).fid, bind(&mut (*cq_a).fid, FI_RECV as u64)), 0);
        let (cw, cr, cs) = (cntr_open(domain), cntr_open(domain), cntr_open(domain));
        assert_eq!(fidcall!(&mut (*ep_a).fid, bind(&mut (*cw).fid, FI_WRITE as u64)), 0);
        assert_eq!(fidcall!(&mut (*ep_a).fid, bind(&mut (*cr).fid, FI_READ as u64)), 0);
        assert_eq!(fidcall!(&mut (*ep_a).fid, bind(&mut (*cs).fid, FI_SEND as u64)), 0);
        // remote-access counters would need FI_RMA_EVENT, which droce does not offer
        assert_eq!(fidcall!(&mut (*ep_a).fid, bind(&mut (*cw).fid, FI_REMOTE_WRITE as u64)), -(FI_ENOSYS as i32));
        assert_eq!(fidcall!(&mut (*ep_a).fid, control(FI_ENABLE as i32, null_mut())), 0);
        assert_eq!(call!(ep_a, cm.connect(name.as_ptr() as *const c_void, null(), 0)), 0);
        let (ev, _, req_info, _) = eq_event(eq);
        assert_eq!(ev, FI_CONNREQ);
        let mut ep_b: *mut fid_ep = null_mut();
        assert_eq!(call!(domain, ops.endpoint(req_info, &mut ep_b, 0xb as *mut c_void)), 0);
        fi_freeinfo(req_info);
        assert_eq!(fidcall!(&mut (*ep_b).fid, bind(&mut (*eq).fid, 0)), 0);
        assert_eq!(fidcall!(&mut (*ep_b).fid, bind(&mut (*cq_b).fid, FI_TRANSMIT as u64)), 0);
        assert_eq!(fidcall!(&mut (*ep_b).fid, bind(&mut (*cq_b).fid, FI_RECV as u64 | FI_SELECTIVE_COMPLETION)), 0);
        assert_eq!(fidcall!(&mut (*ep_b).fid, control(FI_ENABLE as i32, null_mut())), 0);

        let mut rx = vec![0u8; 8192];
        let mut tx = vec![0u8; 8192];
        let mr_rx = mr_reg(domain, &mut rx, (FI_RECV | FI_REMOTE_WRITE | FI_REMOTE_READ) as u64);
        let mr_tx = mr_reg(domain, &mut tx, (FI_SEND | FI_READ | FI_WRITE) as u64);
        let (desc_rx, mut desc_tx) = ((*mr_rx).mem_desc, (*mr_tx).mem_desc);
        assert_eq!(call!(ep_b, cm.accept(null(), 0)), 0);
        for _ in 0..2 {
            assert_eq!(eq_event(eq).0, FI_CONNECTED);
        }

        let key = (*mr_rx).key;
        let target = rx.as_ptr() as u64;
        rx[..8].copy_from_slice(&100u64.to_ne_bytes());
        let one = |p: *mut c_void| fi_ioc { addr: p, count: 1 };

        // fi_atomicv: selective, so no entry; the FI_WRITE counter moves
        let mut v5 = 5u64;
        let iov = one(&mut v5 as *mut u64 as *mut c_void);
        let mut d = null_mut();
        assert_eq!(call!(ep_a, atomic.writev(&iov, &mut d, 1, FI_ADDR_UNSPEC, target, key, FI_UINT64, FI_SUM, 0x10 as *mut c_void)), 0);
        cntr_until(cw, 1, "fi_atomicv");
        assert_eq!(word(&rx), 105);
        // two ioc entries or two elements: not a RoCE atomic
        let two = [iov, iov];
        let mut dd = [null_mut(), null_mut()];
        assert_eq!(call!(ep_a, atomic.writev(two.as_ptr(), dd.as_mut_ptr(), 2, FI_ADDR_UNSPEC, target, key, FI_UINT64, FI_SUM, null_mut())), -(FI_EINVAL as isize));
        let wide = fi_ioc { addr: iov.addr, count: 2 };
        assert_eq!(call!(ep_a, atomic.writev(&wide, &mut d, 1, FI_ADDR_UNSPEC, target, key, FI_UINT64, FI_SUM, null_mut())), -(FI_EOPNOTSUPP as isize));

        // fi_atomicmsg with FI_COMPLETION: an entry with its context
        let mut v1 = 1u64;
        let iov1 = one(&mut v1 as *mut u64 as *mut c_void);
        let rma = fi_rma_ioc { addr: target, count: 1, key };
        let msg = fi_msg_atomic { msg_iov: &iov1, desc: &mut d, iov_count: 1, addr: FI_ADDR_UNSPEC, rma_iov: &rma, rma_iov_count: 1, datatype: FI_UINT64, op: FI_SUM, context: 0x11 as *mut c_void, data: 0 };
        assert_eq!(call!(ep_a, atomic.writemsg(&msg, FI_COMPLETION as u64)), 0);
        let c = cq_wait(cq_a);
        assert_eq!((c.op_context as usize, c.flags & (FI_ATOMIC | FI_WRITE) as u64), (0x11, (FI_ATOMIC | FI_WRITE) as u64));
        cntr_until(cw, 2, "fi_atomicmsg");
        assert_eq!(word(&rx), 106);

        // fi_inject_atomic: the operand may change at once; no entry
        let mut v10 = 10u64;
        assert_eq!(call!(ep_a, atomic.inject(&v10 as *const u64 as *const c_void, 1, FI_ADDR_UNSPEC, target, key, FI_UINT64, FI_SUM)), 0);
        v10 = 0;
        cntr_until(cw, 3, "fi_inject_atomic");
        assert_eq!(word(&rx), 116, "the injected operand was 10 ({v10} after the call)");

        // fi_fetch_atomicv FI_ATOMIC_READ (no operand), selective: the FI_READ counter moves
        let res = tx.as_mut_ptr() as *mut c_void;
        let mut rio = one(res);
        let mut rd = desc_tx;
        assert_eq!(call!(ep_a, atomic.readwritev(null(), null_mut(), 0, &mut rio, &mut rd, 1, FI_ADDR_UNSPEC, target, key, FI_UINT64, FI_ATOMIC_READ, null_mut())), 0);
        cntr_until(cr, 1, "fi_fetch_atomicv read");
        assert_eq!(word(&tx), 116);
        assert_eq!(word(&rx), 116, "an atomic read leaves the target alone");

        // fi_fetch_atomicmsg FI_SUM with FI_COMPLETION
        let mut v4 = 4u64;
        let iov4 = one(&mut v4 as *mut u64 as *mut c_void);
        let msg = fi_msg_atomic { msg_iov: &iov4, desc: &mut d, iov_count: 1, addr: FI_ADDR_UNSPEC, rma_iov: &rma, rma_iov_count: 1, datatype: FI_INT64, op: FI_SUM, context: 0x12 as *mut c_void, data: 0 };
        assert_eq!(call!(ep_a, atomic.readwritemsg(&msg, &mut rio, &mut rd, 1, FI_COMPLETION as u64)), 0);
        let c = cq_wait(cq_a);
        assert_eq!((c.op_context as usize, c.flags & (FI_ATOMIC | FI_READ) as u64), (0x12, (FI_ATOMIC | FI_READ) as u64));
        cntr_until(cr, 2, "fi_fetch_atomicmsg");
        assert_eq!((word(&tx), word(&rx)), (116, 120));
        // a target that is not 8-byte aligned is refused at post (the responder's NAK would
        // end the connection); a target of two elements is not a RoCE atomic
        let rma_odd = fi_rma_ioc { addr: target + 4, count: 1, key };
        let msg_odd = fi_msg_atomic { rma_iov: &rma_odd, ..msg };
        assert_eq!(call!(ep_a, atomic.readwritemsg(&msg_odd, &mut rio, &mut rd, 1, FI_COMPLETION as u64)), -(FI_EINVAL as isize));
        let rma2 = fi_rma_ioc { addr: target, count: 2, key };
        let msg2 = fi_msg_atomic { rma_iov: &rma2, ..msg };
        assert_eq!(call!(ep_a, atomic.readwritemsg(&msg2, &mut rio, &mut rd, 1, 0)), -(FI_EOPNOTSUPP as isize));

        // fi_compare_atomicv (selective) then fi_compare_atomicmsg (FI_COMPLETION)
        let (mut swap, mut cmp) = (7u64, 120u64);
        let (sio, cio) = (one(&mut swap as *mut u64 as *mut c_void), one(&mut cmp as *mut u64 as *mut c_void));
        let mut cd = null_mut();
        assert_eq!(call!(ep_a, atomic.compwritev(&sio, &mut d, 1, &cio, &mut cd, 1, &mut rio, &mut rd, 1, FI_ADDR_UNSPEC, target, key, FI_UINT64, FI_CSWAP, null_mut())), 0);
        cntr_until(cr, 3, "fi_compare_atomicv");
        assert_eq!((word(&tx), word(&rx)), (120, 7), "swapped");
        // no match (compare 1, target 7): the target keeps 7, not the swap value 9
        std::ptr::write_volatile(&mut cmp, 1);
        std::ptr::write_volatile(&mut swap, 9);
        let msg = fi_msg_atomic { msg_iov: &sio, desc: &mut d, iov_count: 1, addr: FI_ADDR_UNSPEC, rma_iov: &rma, rma_iov_count: 1, datatype: FI_UINT64, op: FI_CSWAP, context: 0x13 as *mut c_void, data: 0 };
        assert_eq!(call!(ep_a, atomic.compwritemsg(&msg, &cio, &mut cd, 1, &mut rio, &mut desc_tx, 1, FI_COMPLETION as u64)), 0);
        assert_eq!(cq_wait(cq_a).op_context as usize, 0x13);
        cntr_until(cr, 4, "fi_compare_atomicmsg");
        assert_eq!((word(&tx), word(&rx)), (7, 7));
        assert_eq!(call!(cw, ops.read()), 3, "no fetching atomic moved the FI_WRITE counter");
        cq_stays_empty(cq_a, "selective transmit side");
        // the FI_INJECT flag hands the operand back at return; the op still completes when asked
        let mut v0 = 0u64;
        let iov0 = one(&mut v0 as *mut u64 as *mut c_void);
        let msg = fi_msg_atomic { msg_iov: &iov0, desc: &mut d, iov_count: 1, addr: FI_ADDR_UNSPEC, rma_iov: &rma, rma_iov_count: 1, datatype: FI_UINT64, op: FI_SUM, context: 0x14 as *mut c_void, data: 0 };
        assert_eq!(call!(ep_a, atomic.writemsg(&msg, (FI_INJECT | FI_COMPLETION) as u64)), 0);
        assert_eq!(cq_wait(cq_a).op_context as usize, 0x14, "FI_INJECT | FI_COMPLETION completes");
        cntr_until(cw, 4, "fi_atomicmsg FI_INJECT");

        // receive-side selective completion: a plain fi_recv completes silently, a recvmsg
        // with FI_COMPLETION reports; both receive their data
        let (r1, r2) = (rx.as_mut_ptr().add(1024), rx.as_mut_ptr().add(2048));
        assert_eq!(call!(ep_b, msg.recv(r1 as *mut c_void, 512, desc_rx, FI_ADDR_UNSPEC, 0x21 as *mut c_void)), 0);
        let mut riov = libc::iovec { iov_base: r2 as *mut c_void, iov_len: 512 };
        let mut rdesc = desc_rx;
        let rmsg = fi_msg { msg_iov: &mut riov as *mut libc::iovec as *const _, desc: &mut rdesc, iov_count: 1, addr: FI_ADDR_UNSPEC, context: 0x22 as *mut c_void, data: 0 };
        assert_eq!(call!(ep_b, msg.recvmsg(&rmsg, FI_COMPLETION as u64)), 0);
        tx[..512].fill(0xa1);
        tx[512..1024].fill(0xb2);
        assert_eq!(call!(ep_a, msg.send(tx.as_ptr() as *const c_void, 512, desc_tx, FI_ADDR_UNSPEC, null_mut())), 0);
        assert_eq!(call!(ep_a, msg.send(tx.as_ptr().add(512) as *const c_void, 512, desc_tx, FI_ADDR_UNSPEC, null_mut())), 0);
        cntr_until(cs, 2, "sends");
        let r = cq_wait(cq_b);
        assert_eq!((r.op_context as usize, r.len), (0x22, 512), "only the receive that asked reports");
        cq_stays_empty(cq_b, "selective receive side");
        assert!(rx[1024..1536].iter().all(|&b| b == 0xa1) && rx[2048..2560].iter().all(|&b| b == 0xb2));
        // remote CQ data reaches the CQ even through a receive that asked for no completion
        assert_eq!(call!(ep_b, msg.recv(rx.as_mut_ptr() as *mut c_void, 0, desc_rx, FI_ADDR_UNSPEC, 0x23 as *mut c_void)), 0);
        assert_eq!(call!(ep_a, rma.writedata(tx.as_ptr() as *const c_void, 64, desc_tx, 0xfeed, FI_ADDR_UNSPEC, target + 4096, key, null_mut())), 0);
        let wd = cq_wait(cq_b);
        assert_eq!((wd.data, wd.flags & FI_REMOTE_CQ_DATA as u64), (0xfeed, FI_REMOTE_CQ_DATA as u64), "write with data into a quiet receive");

        // fi_cq_signal wakes a thread blocked in fi_cq_sread, which returns -FI_EAGAIN
        let cq = cq_b as usize;
        let t0 = Instant::now();
        let h = std::thread::spawn(move || {
            let cq = cq as *mut fid_cq;
            let mut e: fi_cq_data_entry = std::mem::zeroed();
            let r = call!(cq, ops.sread(&mut e as *mut _ as *mut c_void, 1, null(), 20_000));
            (r, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(call!(cq_b, ops.signal()), 0);
        let (r, woke) = h.join().unwrap();
        assert_eq!(r, -(FI_EAGAIN as isize));
        let after = woke.duration_since(t0);
        assert!(after >= Duration::from_millis(200) && after < Duration::from_secs(10), "sread returned after {after:?}");

        for f in [&mut (*ep_a).fid as *mut fid, &mut (*ep_b).fid, &mut (*mr_rx).fid, &mut (*mr_tx).fid, &mut (*cw).fid, &mut (*cr).fid, &mut (*cs).fid, &mut (*pep).fid, &mut (*cq_a).fid, &mut (*cq_b).fid, &mut (*domain).fid, &mut (*eq).fid, &mut (*fabric).fid] {
            assert_eq!(fidcall!(f, close()), 0);
        }
        fi_freeinfo(info);
        fi_freeinfo(hints);
    }
}
