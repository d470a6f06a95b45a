//! FI_MULTI_RECV on FI_EP_MSG endpoints and wait sets (fi_wait_open / fi_wait) through the
//! real libfabric API in one process.

#[macro_use]
mod common;
use common::{cq_wait, ep_setup, eq_event, fabric_eq_domain, mr_reg, FI_ADDR_UNSPEC};
use droce_fi::sys::*;
use std::os::raw::c_void;
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

/// FI_MULTI_RECV on an FI_EP_MSG endpoint (self-connect in one process): two buffers posted
/// with fi_recvmsg(FI_MULTI_RECV) fill in order, each message is reported at its offset, and
/// the message after which less than FI_OPT_MIN_MULTI_RECV is left carries FI_MULTI_RECV.
/// The receiving CQ belongs to a wait set: fi_wait times out with nothing to read and
/// returns once a completion is there.
#[test]
fn multi_recv_buffers_fill_in_order_wait_set() {
    std::env::set_var("FI_PROVIDER_PATH", common::provider_dir());
    std::env::set_var("FI_PROVIDER", "droce");
    std::env::set_var("DROCE_LINK", common::unique("mrecv"));
    unsafe {
        let hints = fi_dupinfo(null());
        (*hints).caps = (FI_MSG | FI_MULTI_RECV) as u64;
        (*(*hints).ep_attr).type_ = FI_EP_MSG;
        (*(*hints).rx_attr).op_flags = FI_MULTI_RECV as u64;
        (*(*hints).domain_attr).mr_mode = (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY) as i32;
        (*(*hints).fabric_attr).prov_name = libc::strdup(c"droce".as_ptr());
        let mut info: *mut fi_info = null_mut();
        assert_eq!(fi_getinfo((1 << 16) | 17, null(), null(), 0, hints, &mut info), 0, "fi_getinfo");
        assert_ne!((*info).caps & FI_MULTI_RECV as u64, 0);
        assert_ne!((*(*info).rx_attr).op_flags & FI_MULTI_RECV as u64, 0, "the op flag asked for is the endpoints' default");

        let (fabric, eq, domain) = fabric_eq_domain(info);
        let mut cq_attr: fi_cq_attr = std::mem::zeroed();
        cq_attr.format = FI_CQ_FORMAT_DATA;
        cq_attr.size = 128;
        let (mut cq_a, mut cq_b): (*mut fid_cq, *mut fid_cq) = (null_mut(), null_mut());
        assert_eq!(call!(domain, ops.cq_open(&mut cq_attr, &mut cq_a, null_mut())), 0);
        // the receive CQ waits through a wait set
        let mut wait_attr: fi_wait_attr = std::mem::zeroed();
        wait_attr.wait_obj = FI_WAIT_UNSPEC;
        let mut set: *mut fid_wait = null_mut();
        assert_eq!(call!(fabric, ops.wait_open(&mut wait_attr, &mut set)), 0, "fi_wait_open");
        cq_attr.wait_obj = FI_WAIT_SET;
        let mut bad: *mut fid_cq = null_mut();
        assert_eq!(call!(domain, ops.cq_open(&mut cq_attr, &mut bad, null_mut())), -(FI_EINVAL as i32), "FI_WAIT_SET without a set");
        cq_attr.wait_set = set;
        assert_eq!(call!(domain, ops.cq_open(&mut cq_attr, &mut cq_b, null_mut())), 0);
        let fi_wait = (*(*set).ops).wait.unwrap();
        let t0 = Instant::now();
        assert_eq!(fi_wait(set, 50), -(FI_ETIMEDOUT as i32), "nothing to read yet");
        assert!(t0.elapsed() >= Duration::from_millis(50));

        let mut pep: *mut fid_pep = null_mut();
        assert_eq!(call!(fabric, ops.passive_ep(info, &mut pep, null_mut())), 0);
        assert_eq!(fidcall!(&mut (*pep).fid, bind(&mut (*eq).fid, 0)), 0);
        assert_eq!(call!(pep, cm.listen()), 0);
        let mut name = [0u8; 64];
        let mut len = name.len();
        assert_eq!(((*(*pep).cm).getname.unwrap())(&mut (*pep).fid, name.as_mut_ptr() as *mut c_void, &mut len), 0);
        let a = ep_setup(domain, info, eq, cq_a, 0xa);
        assert_eq!(call!(a, cm.connect(name.as_ptr() as *const c_void, null(), 0)), 0);
        let (ev, _, req_info, _) = eq_event(eq);
        assert_eq!(ev, FI_CONNREQ);
        let b = ep_setup(domain, req_info, eq, cq_b, 0xb);
        fi_freeinfo(req_info);

        // FI_OPT_MIN_MULTI_RECV: 1024 (default 64)
        let mut min = 0usize;
        let mut optlen = std::mem::size_of::<usize>();
        assert_eq!(((*(*b).ops).getopt.unwrap())(&mut (*b).fid, FI_OPT_ENDPOINT as i32, FI_OPT_MIN_MULTI_RECV as i32, &mut min as *mut usize as *mut c_void, &mut optlen), 0);
        assert_eq!(min, 64);
        // a size_t option: too short a buffer and a null pointer are refused; FI_OPT_CM_DATA_SIZE
        // is the provider's CM data limit, and optlen comes back as the size written
        let getopt = (*(*b).ops).getopt.unwrap();
        let mut short = 4usize;
        assert_eq!(getopt(&mut (*b).fid, FI_OPT_ENDPOINT as i32, FI_OPT_MIN_MULTI_RECV as i32, &mut min as *mut usize as *mut c_void, &mut short), -(FI_ETOOSMALL as i32));
        assert_eq!(getopt(&mut (*b).fid, FI_OPT_ENDPOINT as i32, FI_OPT_MIN_MULTI_RECV as i32, null_mut(), &mut optlen), -(FI_EINVAL as i32));
        let mut cm_data = [0usize; 2];
        optlen = std::mem::size_of_val(&cm_data);
        assert_eq!(getopt(&mut (*b).fid, FI_OPT_ENDPOINT as i32, FI_OPT_CM_DATA_SIZE as i32, cm_data.as_mut_ptr() as *mut c_void, &mut optlen), 0);
        assert_eq!((cm_data, optlen), ([54, 0], std::mem::size_of::<usize>()));
        assert_eq!(getopt(&mut (*b).fid, FI_OPT_ENDPOINT as i32, FI_OPT_CM_DATA_SIZE as i32, null_mut(), &mut optlen), -(FI_EINVAL as i32));
        let want = 1024usize;
        assert_eq!(((*(*b).ops).setopt.unwrap())(&mut (*b).fid, FI_OPT_ENDPOINT as i32, FI_OPT_MIN_MULTI_RECV as i32, &want as *const usize as *const c_void, optlen), 0);

        // two 4 KiB buffers, posted before the connection is up
        let mut rx = vec![0u8; 8192];
        let mut tx: Vec<u8> = (0..8192u32).map(|i| (i * 31 + 7) as u8).collect();
        let mr_rx = mr_reg(domain, &mut rx, FI_RECV as u64);
        let mr_tx = mr_reg(domain, &mut tx, FI_SEND as u64);
        let (mut desc_rx, desc_tx) = ((*mr_rx).mem_desc, (*mr_tx).mem_desc);
        for k in 0..2usize {
            let iov = iovec { iov_base: rx.as_mut_ptr().add(k * 4096) as *mut c_void, iov_len: 4096 };
            let msg = fi_msg { msg_iov: &iov, desc: &mut desc_rx, iov_count: 1, addr: 0, context: (0x100 + k) as *mut c_void, data: 0 };
            assert_eq!(call!(b, msg.recvmsg(&msg, FI_MULTI_RECV as u64)), 0);
        }
        assert_eq!(call!(b, cm.accept(null(), 0)), 0);
        for _ in 0..2 {
            assert_eq!(eq_event(eq).0, FI_CONNECTED);
        }

        // five messages of 1000 bytes: four land in buffer 0 (the fourth leaves 96 < 1024 and
        // releases it), the fifth at the start of buffer 1
        for i in 0..5usize {
            assert_eq!(call!(a, msg.send(tx.as_ptr().add(i * 1000) as *const c_void, 1000, desc_tx, FI_ADDR_UNSPEC, (0x200 + i) as *mut c_void)), 0);
            assert_eq!(cq_wait(cq_a).op_context as usize, 0x200 + i);
            assert_eq!(fi_wait(set, 10_000), 0, "the receive completion wakes the set");
            let r = cq_wait(cq_b);
            let (buf, off) = if i < 4 { (0usize, i * 1000) } else { (1, 0) };
            assert_eq!(r.op_context as usize, 0x100 + buf, "message {i}");
            assert_eq!(r.len, 1000);
            assert_eq!(r.buf as usize, rx.as_ptr() as usize + buf * 4096 + off, "message {i} offset");
            assert_ne!(r.flags & (FI_RECV | FI_MSG) as u64, 0);
            assert_eq!(r.flags & FI_MULTI_RECV as u64 != 0, i == 3, "FI_MULTI_RECV only when buffer 0 is released (message {i})");
            let at = buf * 4096 + off;
            assert_eq!(&rx[at..at + 1000], &tx[i * 1000..i * 1000 + 1000], "data of message {i}");
        }

        // a message longer than what is left (buffer 1 has 3096) fails on that buffer alone
        assert_eq!(call!(a, msg.send(tx.as_ptr() as *const c_void, 3096, desc_tx, FI_ADDR_UNSPEC, 0x300 as *mut c_void)), 0);
        assert_eq!(cq_wait(cq_a).op_context as usize, 0x300);
        let r = cq_wait(cq_b);
        assert_eq!((r.op_context as usize, r.len, r.buf as usize), (0x101, 3096, rx.as_ptr() as usize + 5096));
        assert_ne!(r.flags & FI_MULTI_RECV as u64, 0, "nothing left: released");
        assert_eq!(&rx[5096..8192], &tx[..3096]);

        for f in [b, a] {
            assert_eq!(fidcall!(&mut (*f).fid, close()), 0);
        }
        assert_eq!(fidcall!(&mut (*cq_b).fid, close()), 0);
        assert_eq!(fidcall!(&mut (*set).fid, close()), 0);
        fi_freeinfo(info);
        fi_freeinfo(hints);
    }
}
