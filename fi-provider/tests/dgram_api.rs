//! One process drives droce's FI_EP_DGRAM endpoints through the real libfabric API: two UD
//! endpoints of one process (the device loops frames to its own address) exchange datagrams
//! through an AV, with and without FI_MSG_PREFIX, and fi_cq_readfrom names the sender.

#[macro_use]
mod common;
use droce_fi::sys::*;
use std::os::raw::c_void;
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;
const DEADLINE: Duration = Duration::from_secs(30);

unsafe fn dgram_pair(prefix: bool) {
    let hints = fi_dupinfo(null());
    (*hints).caps = FI_MSG as u64;
    (*hints).mode = if prefix { FI_MSG_PREFIX } else { 0 };
    (*(*hints).ep_attr).type_ = FI_EP_DGRAM;
    (*(*hints).domain_attr).mr_mode = (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY) as i32;
    (*(*hints).fabric_attr).prov_name = libc::strdup(c"droce".as_ptr());
    let mut info: *mut fi_info = null_mut();
    assert_eq!(fi_getinfo((1 << 16) | 17, null(), null(), 0, hints, &mut info), 0, "fi_getinfo");
    let pre = (*(*info).ep_attr).msg_prefix_size;
    assert_eq!(pre, if prefix { 40 } else { 0 });
    let mut fabric: *mut fid_fabric = null_mut();
    assert_eq!(fi_fabric((*info).fabric_attr, &mut fabric, null_mut()), 0);
    let mut domain: *mut fid_domain = null_mut();
    assert_eq!(call!(fabric, ops.domain(info, &mut domain, null_mut())), 0);
    let mut av_attr: fi_av_attr = std::mem::zeroed();
    av_attr.type_ = FI_AV_TABLE;
    let mut av: *mut fid_av = null_mut();
    assert_eq!(call!(domain, ops.av_open(&mut av_attr, &mut av, null_mut())), 0);
    let mut cq_attr: fi_cq_attr = std::mem::zeroed();
    cq_attr.format = FI_CQ_FORMAT_MSG;
    let mut cq: *mut fid_cq = null_mut();
    assert_eq!(call!(domain, ops.cq_open(&mut cq_attr, &mut cq, null_mut())), 0);
    let mut eps = [null_mut::<fid_ep>(); 2];
    let mut names = [[0u8; 32]; 2];
    let mut addrs = [0u64; 2];
    for i in 0..2 {
        assert_eq!(call!(domain, ops.endpoint(info, &mut eps[i], null_mut())), 0);
        assert_eq!(fidcall!(&mut (*eps[i]).fid, bind(&mut (*av).fid, 0)), 0);
        assert_eq!(fidcall!(&mut (*eps[i]).fid, bind(&mut (*cq).fid, (FI_TRANSMIT | FI_RECV) as u64)), 0);
        assert_eq!(fidcall!(&mut (*eps[i]).fid, control(FI_ENABLE as i32, null_mut())), 0);
        let mut len = 32usize;
        assert_eq!(((*(*eps[i]).cm).getname.unwrap())(&mut (*eps[i]).fid, names[i].as_mut_ptr() as *mut c_void, &mut len), 0);
        assert_eq!(len, 16);
        assert_eq!(call!(av, ops.insert(names[i].as_ptr() as *const c_void, 1, &mut addrs[i], 0, null_mut())), 1);
    }
    assert_ne!(names[0], names[1], "the QPN makes the names differ");
    let mut back = [0u8; 32];
    let mut blen = 32usize;
    assert_eq!(call!(av, ops.lookup(addrs[1], back.as_mut_ptr() as *mut c_void, &mut blen)), 0);
    assert_eq!(&back[..16], &names[1][..16]);

    let mut rx = vec![0u8; 2048];
    let tx: Vec<u8> = (0..2048u32).map(|i| (i * 13 + 1) as u8).collect();
    let mut mr_rx: *mut fid_mr = null_mut();
    let mut mr_tx: *mut fid_mr = null_mut();
    let reg = (*(*domain).mr).reg.unwrap();
    assert_eq!(reg(&mut (*domain).fid, rx.as_ptr() as *const c_void, rx.len(), FI_RECV as u64, 0, 0, 0, &mut mr_rx, null_mut()), 0);
    assert_eq!(reg(&mut (*domain).fid, tx.as_ptr() as *const c_void, tx.len(), FI_SEND as u64, 0, 0, 0, &mut mr_tx, null_mut()), 0);
    let payload = 700usize;
    assert_eq!(call!(eps[1], msg.recv(rx.as_mut_ptr() as *mut c_void, pre + 1000, (*mr_rx).mem_desc, FI_ADDR_UNSPEC, 0x42 as *mut c_void)), 0);
    assert_eq!(call!(eps[0], msg.send(tx.as_ptr() as *const c_void, pre + payload, (*mr_tx).mem_desc, addrs[1], 0x43 as *mut c_void)), 0);
    let mut got = [(0usize, 0u64, 0usize, FI_ADDR_UNSPEC); 2];
    let start = Instant::now();
    let mut n = 0;
    while n < 2 {
        let mut e: fi_cq_msg_entry = std::mem::zeroed();
        let mut src: fi_addr_t = 0;
        let r = call!(cq, ops.readfrom(&mut e as *mut _ as *mut c_void, 1, &mut src));
        if r == 1 {
            got[n] = (e.op_context as usize, e.flags, e.len, src);
            n += 1;
        } else {
            assert_eq!(r, -(FI_EAGAIN as isize), "fi_cq_readfrom");
            assert!(start.elapsed() < DEADLINE, "no datagram");
        }
    }
    let recv = got.iter().find(|g| g.0 == 0x42).expect("receive completion");
    assert!(got.iter().any(|g| g.0 == 0x43 && g.1 & FI_SEND as u64 != 0), "send completion");
    assert_eq!(recv.3, addrs[0], "readfrom names the sender");
    assert_eq!(&rx[pre..pre + payload], &tx[pre..pre + payload], "datagram bytes");
    assert!(recv.2 >= payload);

    for f in [&mut (*eps[0]).fid as *mut fid, &mut (*eps[1]).fid, &mut (*mr_rx).fid, &mut (*mr_tx).fid, &mut (*cq).fid, &mut (*av).fid, &mut (*domain).fid, &mut (*fabric).fid] {
        assert_eq!(fidcall!(f, close()), 0);
    }
    fi_freeinfo(info);
    fi_freeinfo(hints);
}

/// A DGRAM endpoint bound to a service port is reachable through an address that carries
/// only IP + port (node/service, no QPN): the sender's provider asks the receiver's CM for
/// the QPN (SIDR over QP1; here the device loops both MADs to its own address).
unsafe fn dgram_by_service() {
    let hints = fi_dupinfo(null());
    (*hints).caps = FI_MSG as u64;
    (*(*hints).ep_attr).type_ = FI_EP_DGRAM;
    (*(*hints).domain_attr).mr_mode = (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY) as i32;
    (*(*hints).fabric_attr).prov_name = libc::strdup(c"droce".as_ptr());
    let mut bound: *mut fi_info = null_mut();
    assert_eq!(fi_getinfo((1 << 16) | 17, null(), c"47123".as_ptr(), FI_SOURCE, hints, &mut bound), 0, "fi_getinfo FI_SOURCE service");
    assert_eq!((*(*bound).ep_attr).type_, FI_EP_DGRAM);
    assert_eq!((*bound).src_addrlen, 16);
    let mut plain: *mut fi_info = null_mut();
    assert_eq!(fi_getinfo((1 << 16) | 17, null(), null(), 0, hints, &mut plain), 0, "fi_getinfo");
    let mut fabric: *mut fid_fabric = null_mut();
    assert_eq!(fi_fabric((*bound).fabric_attr, &mut fabric, null_mut()), 0);
    let mut domain: *mut fid_domain = null_mut();
    assert_eq!(call!(fabric, ops.domain(bound, &mut domain, null_mut())), 0);
    let mut av_attr: fi_av_attr = std::mem::zeroed();
    av_attr.type_ = FI_AV_TABLE;
    let mut av: *mut fid_av = null_mut();
    assert_eq!(call!(domain, ops.av_open(&mut av_attr, &mut av, null_mut())), 0);
    let mut cq_attr: fi_cq_attr = std::mem::zeroed();
    cq_attr.format = FI_CQ_FORMAT_MSG;
    let mut cq: *mut fid_cq = null_mut();
    assert_eq!(call!(domain, ops.cq_open(&mut cq_attr, &mut cq, null_mut())), 0);
    let mut eps = [null_mut::<fid_ep>(); 2];
    for (i, info) in [bound, plain].into_iter().enumerate() {
        assert_eq!(call!(domain, ops.endpoint(info, &mut eps[i], null_mut())), 0);
        assert_eq!(fidcall!(&mut (*eps[i]).fid, bind(&mut (*av).fid, 0)), 0);
        assert_eq!(fidcall!(&mut (*eps[i]).fid, bind(&mut (*cq).fid, (FI_TRANSMIT | FI_RECV) as u64)), 0);
        assert_eq!(fidcall!(&mut (*eps[i]).fid, control(FI_ENABLE as i32, null_mut())), 0);
    }
    let mut name = [0u8; 32];
    let mut len = 32usize;
    assert_eq!(((*(*eps[0]).cm).getname.unwrap())(&mut (*eps[0]).fid, name.as_mut_ptr() as *mut c_void, &mut len), 0);
    assert_eq!(u16::from_be_bytes([name[2], name[3]]), 47123, "the bound port stays in the name");
    // the address as node/service give it: IP + port, no QPN
    let sa = std::slice::from_raw_parts((*bound).src_addr as *const u8, 16);
    assert_eq!(&sa[..8], &name[..8]);
    assert!(sa[8..].iter().all(|b| *b == 0), "no QPN in a node/service address");
    let mut dest: fi_addr_t = 0;
    assert_eq!(call!(av, ops.insert(sa.as_ptr() as *const c_void, 1, &mut dest, 0, null_mut())), 1);

    let mut rx = vec![0u8; 1024];
    let tx: Vec<u8> = (0..1024u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut mr_rx: *mut fid_mr = null_mut();
    let mut mr_tx: *mut fid_mr = null_mut();
    let reg = (*(*domain).mr).reg.unwrap();
    assert_eq!(reg(&mut (*domain).fid, rx.as_ptr() as *const c_void, rx.len(), FI_RECV as u64, 0, 0, 0, &mut mr_rx, null_mut()), 0);
    assert_eq!(reg(&mut (*domain).fid, tx.as_ptr() as *const c_void, tx.len(), FI_SEND as u64, 0, 0, 0, &mut mr_tx, null_mut()), 0);
    assert_eq!(call!(eps[0], msg.recv(rx.as_mut_ptr() as *mut c_void, 1024, (*mr_rx).mem_desc, FI_ADDR_UNSPEC, 0x52 as *mut c_void)), 0);
    let start = Instant::now();
    let mut tries = 0;
    loop {
        let r = call!(eps[1], msg.send(tx.as_ptr() as *const c_void, 600, (*mr_tx).mem_desc, dest, 0x53 as *mut c_void));
        tries += 1;
        if r == 0 {
            break;
        }
        assert_eq!(r, -(FI_EAGAIN as isize), "fi_send to a node/service address");
        assert!(start.elapsed() < DEADLINE, "QPN never resolved");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(tries >= 1);
    let mut got = Vec::new();
    while got.len() < 2 {
        let mut e: fi_cq_msg_entry = std::mem::zeroed();
        let r = call!(cq, ops.read(&mut e as *mut _ as *mut c_void, 1));
        if r == 1 {
            got.push((e.op_context as usize, e.len));
        } else {
            assert_eq!(r, -(FI_EAGAIN as isize), "fi_cq_read");
            assert!(start.elapsed() < DEADLINE, "no datagram");
        }
    }
    assert!(got.contains(&(0x52, 600)), "receive completion on the bound endpoint: {got:?}");
    assert!(got.iter().any(|g| g.0 == 0x53), "send completion");
    assert_eq!(&rx[..600], &tx[..600], "datagram bytes");
    // resolved once: the next send goes at once
    assert_eq!(call!(eps[0], msg.recv(rx.as_mut_ptr() as *mut c_void, 1024, (*mr_rx).mem_desc, FI_ADDR_UNSPEC, 0x54 as *mut c_void)), 0);
    assert_eq!(call!(eps[1], msg.send(tx.as_ptr() as *const c_void, 100, (*mr_tx).mem_desc, dest, 0x55 as *mut c_void)), 0);

    for f in [&mut (*eps[0]).fid as *mut fid, &mut (*eps[1]).fid, &mut (*mr_rx).fid, &mut (*mr_tx).fid, &mut (*cq).fid, &mut (*av).fid, &mut (*domain).fid, &mut (*fabric).fid] {
        assert_eq!(fidcall!(f, close()), 0);
    }
    fi_freeinfo(bound);
    fi_freeinfo(plain);
    fi_freeinfo(hints);
}

#[test]
fn dgram_through_an_av_with_and_without_prefix() {
    std::env::set_var("FI_PROVIDER_PATH", common::provider_dir());
    std::env::set_var("FI_PROVIDER", "droce");
    std::env::set_var("DROCE_LINK", common::unique("dgramapi"));
    unsafe {
        dgram_pair(true);
        dgram_pair(false);
        dgram_by_service();
    }
}
