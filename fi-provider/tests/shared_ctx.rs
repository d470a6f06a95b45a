//! Shared contexts on FI_EP_MSG (fi_srx_context over an SRQ, fi_stx_context) through the real
//! libfabric API in one process: two self-connections whose passive endpoints share one
//! receive context.

#[macro_use]
mod common;
use common::{cq_wait, ep_setup, eq_event, fabric_eq_domain, mr_reg, FI_ADDR_UNSPEC};
use droce_fi::sys::*;
use std::os::raw::c_void;
use std::ptr::{null, null_mut};

unsafe fn recv_cntr(domain: *mut fid_domain) -> *mut fid_cntr {
    let mut attr: fi_cntr_attr = std::mem::zeroed();
    attr.events = FI_CNTR_EVENTS_COMP;
    let mut c: *mut fid_cntr = null_mut();
    assert_eq!(call!(domain, ops.cntr_open(&mut attr, &mut c, null_mut())), 0, "fi_cntr_open");
    c
}

/// Two connections whose passive endpoints share one receive context (an SRQ) and one
/// transmit context: receives posted to the shared context before the connections exist
/// complete for whichever connection's message arrives, with the right endpoint's counter.
#[test]
fn shared_receive_and_transmit_contexts() {
    std::env::set_var("FI_PROVIDER_PATH", common::provider_dir());
    std::env::set_var("FI_PROVIDER", "droce");
    std::env::set_var("DROCE_LINK", common::unique("srx"));
    unsafe {
        // getinfo: shared contexts only on FI_EP_MSG, echoed in ep_attr
        let hints = fi_dupinfo(null());
        (*hints).caps = FI_MSG as u64;
        (*(*hints).ep_attr).type_ = FI_EP_DGRAM;
        (*(*hints).ep_attr).rx_ctx_cnt = FI_SHARED_CONTEXT as usize;
        (*(*hints).fabric_attr).prov_name = libc::strdup(c"droce".as_ptr());
        let mut info: *mut fi_info = null_mut();
        assert_eq!(fi_getinfo((1 << 16) | 17, null(), null(), 0, hints, &mut info), -(FI_ENODATA as i32), "no shared contexts on DGRAM");
        (*(*hints).ep_attr).type_ = FI_EP_MSG;
        (*(*hints).ep_attr).tx_ctx_cnt = FI_SHARED_CONTEXT as usize;
        (*(*hints).domain_attr).mr_mode = (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY) as i32;
        assert_eq!(fi_getinfo((1 << 16) | 17, null(), null(), 0, hints, &mut info), 0, "fi_getinfo");
        assert_eq!((*(*info).ep_attr).rx_ctx_cnt, FI_SHARED_CONTEXT as usize);
        assert_eq!((*(*info).ep_attr).tx_ctx_cnt, FI_SHARED_CONTEXT as usize);
        assert_eq!((*(*info).domain_attr).max_ep_srx_ctx, 1);

        let (fabric, eq, domain) = fabric_eq_domain(info);
        let mut cq_attr: fi_cq_attr = std::mem::zeroed();
        cq_attr.format = FI_CQ_FORMAT_DATA;
        cq_attr.size = 128;
        let (mut cq_a, mut cq_b): (*mut fid_cq, *mut fid_cq) = (null_mut(), null_mut());
        assert_eq!(call!(domain, ops.cq_open(&mut cq_attr, &mut cq_a, null_mut())), 0);
        assert_eq!(call!(domain, ops.cq_open(&mut cq_attr, &mut cq_b, null_mut())), 0);

        // the shared contexts of the passive side
        let mut srx: *mut fid_ep = null_mut();
        // an SRQ takes one message per receive: multi-receive op_flags are refused, not ignored
        let mut multi = *(*info).rx_attr;
        multi.op_flags |= FI_MULTI_RECV as u64;
        assert_eq!(call!(domain, ops.srx_ctx(&mut multi, &mut srx, null_mut())), -(FI_EOPNOTSUPP as i32), "fi_srx_context with FI_MULTI_RECV");
        assert_eq!(call!(domain, ops.srx_ctx((*info).rx_attr, &mut srx, 0x5a as *mut c_void)), 0, "fi_srx_context");
        let mut stx: *mut fid_stx = null_mut();
        assert_eq!(call!(domain, ops.stx_ctx((*info).tx_attr, &mut stx, null_mut())), 0, "fi_stx_context");
        // a shared receive context only receives
        let x = [0u8; 8];
        assert_eq!(call!(srx, msg.send(x.as_ptr() as *const c_void, 8, null_mut(), FI_ADDR_UNSPEC, null_mut())), -(FI_ENOSYS as isize));

        let mut rx = vec![0u8; 4 * 1024];
        let mut tx: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 5) as u8).collect();
        let mr_rx = mr_reg(domain, &mut rx, FI_RECV as u64);
        let mr_tx = mr_reg(domain, &mut tx, FI_SEND as u64);
        let (desc_rx, desc_tx) = ((*mr_rx).mem_desc, (*mr_tx).mem_desc);
        // three receives on the shared context before any connection exists, the last one a
        // NULL buffer (takes zero-byte messages only)
        for i in 0..2usize {
            let buf = rx.as_mut_ptr().add(i * 1024) as *mut c_void;
            assert_eq!(call!(srx, msg.recv(buf, 1024, desc_rx, FI_ADDR_UNSPEC, (0x100 + i) as *mut c_void)), 0);
        }
        assert_eq!(call!(srx, msg.recv(null_mut(), 64, null_mut(), FI_ADDR_UNSPEC, 0x102 as *mut c_void)), 0);

        let mut pep: *mut fid_pep = null_mut();
        assert_eq!(call!(fabric, ops.passive_ep(info, &mut pep, null_mut())), 0);
        assert_eq!(fidcall!(&mut (*pep).fid, bind(&mut (*eq).fid, 0)), 0);
        assert_eq!(call!(pep, cm.listen()), 0);
        let mut name = [0u8; 64];
        let mut len = name.len();
        assert_eq!(((*(*pep).cm).getname.unwrap())(&mut (*pep).fid, name.as_mut_ptr() as *mut c_void, &mut len), 0);

        let cntrs = [recv_cntr(domain), recv_cntr(domain)];
        let mut actives = Vec::new();
        let mut passives = Vec::new();
        for k in 0..2usize {
            let a = ep_setup(domain, info, eq, cq_a, 0xa0 + k);
            assert_eq!(call!(a, cm.connect(name.as_ptr() as *const c_void, null(), 0)), 0);
            let (ev, _, req_info, _) = eq_event(eq);
            assert_eq!(ev, FI_CONNREQ);
            let mut b: *mut fid_ep = null_mut();
            assert_eq!(call!(domain, ops.endpoint(req_info, &mut b, (0xb0 + k) as *mut c_void)), 0);
            fi_freeinfo(req_info);
            assert_eq!(fidcall!(&mut (*b).fid, bind(&mut (*eq).fid, 0)), 0);
            assert_eq!(fidcall!(&mut (*b).fid, bind(&mut (*srx).fid, 0)), 0, "bind the shared receive context");
            assert_eq!(fidcall!(&mut (*b).fid, bind(&mut (*stx).fid, 0)), 0, "bind the shared transmit context");
            assert_eq!(fidcall!(&mut (*b).fid, bind(&mut (*cq_b).fid, (FI_TRANSMIT | FI_RECV) as u64)), 0);
            assert_eq!(fidcall!(&mut (*b).fid, bind(&mut (*cntrs[k]).fid, FI_RECV as u64)), 0);
            assert_eq!(fidcall!(&mut (*b).fid, control(FI_ENABLE as i32, null_mut())), 0);
            // the endpoint's own receive queue is the SRQ's now
            assert_eq!(call!(b, msg.recv(rx.as_mut_ptr() as *mut c_void, 8, desc_rx, FI_ADDR_UNSPEC, null_mut())), -(FI_EINVAL as isize));
            assert_eq!(call!(b, cm.accept(null(), 0)), 0);
            let mut connected = 0;
            while connected < 2 {
                let (ev, _, _, _) = eq_event(eq);
                assert_eq!(ev, FI_CONNECTED);
                connected += 1;
            }
            actives.push(a);
            passives.push(b);
        }

        // connection 1 sends first, then connection 0; each message lands in the next
        // shared receive, and the counter of the endpoint that received it moves
        for (k, n, off) in [(1usize, 700usize, 0usize), (0, 1000, 1000)] {
            assert_eq!(call!(actives[k], msg.send(tx.as_ptr().add(off) as *const c_void, n, desc_tx, FI_ADDR_UNSPEC, (0x200 + k) as *mut c_void)), 0);
            let s = cq_wait(cq_a);
            assert_eq!(s.op_context as usize, 0x200 + k);
            let r = cq_wait(cq_b);
            let slot = if k == 1 { 0 } else { 1 };
            assert_eq!(r.op_context as usize, 0x100 + slot);
            assert_eq!(r.len, n);
            assert_eq!(r.buf as usize, rx.as_ptr() as usize + slot * 1024);
            assert_eq!(&rx[slot * 1024..slot * 1024 + n], &tx[off..off + n], "data of connection {k}");
            let read = (*(*cntrs[k]).ops).read.unwrap();
            assert_eq!(read(cntrs[k]), 1, "receive counter of connection {k}");
            assert_eq!(read(cntrs[1 - k]), if k == 1 { 0 } else { 1 });
        }
        // a zero-byte message takes the NULL receive
        assert_eq!(call!(actives[0], msg.send(tx.as_ptr() as *const c_void, 0, desc_tx, FI_ADDR_UNSPEC, 0x300 as *mut c_void)), 0);
        assert_eq!(cq_wait(cq_a).op_context as usize, 0x300);
        let r = cq_wait(cq_b);
        assert_eq!((r.op_context as usize, r.len), (0x102, 0));

        // the passive side sends back through its endpoints (shared transmit context bound)
        assert_eq!(call!(passives[1], msg.send(tx.as_ptr() as *const c_void, 64, desc_tx, FI_ADDR_UNSPEC, 0x400 as *mut c_void)), 0);
        let mut back = vec![0u8; 64];
        let mr_back = mr_reg(domain, &mut back, FI_RECV as u64);
        let _ = mr_back;
        assert_eq!(call!(actives[1], msg.recv(back.as_mut_ptr() as *mut c_void, 64, (*mr_back).mem_desc, FI_ADDR_UNSPEC, 0x401 as *mut c_void)), 0);
        let mut seen = Vec::new();
        while seen.len() < 2 {
            let e = if seen.is_empty() { cq_wait(cq_b) } else { cq_wait(cq_a) };
            seen.push(e.op_context as usize);
        }
        assert_eq!(seen, vec![0x400, 0x401]);
        assert_eq!(&back[..], &tx[..64]);

        for f in passives.into_iter().chain(actives) {
            assert_eq!(fidcall!(&mut (*f).fid, close()), 0);
        }
        assert_eq!(fidcall!(&mut (*srx).fid, close()), 0);
        assert_eq!(fidcall!(&mut (*stx).fid, close()), 0);
        fi_freeinfo(info);
        fi_freeinfo(hints);
    }
}
