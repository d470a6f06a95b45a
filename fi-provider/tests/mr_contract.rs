//! The memory-registration contract of the modes droce advertises, through the real libfabric
//! API: FI_MR_LOCAL (local buffers need a descriptor: fi_mr_desc is non-null), FI_MR_VIRT_ADDR
//! (RMA addresses are virtual addresses: exercised by msg_api.rs's write/read at
//! buffer + 4096 with the MR's key),
//! FI_MR_ALLOCATED (registering unallocated memory / null with a length fails),
//! FI_MR_PROV_KEY (the provider picks distinct keys; requested keys are ignored), and
//! FI_MR_ENDPOINT not asked for: fi_getinfo strips it, while fi_mr_bind to one of our endpoints
//! and fi_mr_enable are accepted and a counter bind (FI_RMA_EVENT, not offered) is ENOSYS.

#[macro_use]
mod common;
use droce_fi::sys::*;
use std::os::raw::c_void;
use std::ptr::{null, null_mut};

const MODES: u32 = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;

unsafe fn reg(domain: *mut fid_domain, addr: *const c_void, len: usize, access: u64, key: u64) -> Result<*mut fid_mr, i32> {
    let mut mr: *mut fid_mr = null_mut();
    let f = (*(*domain).mr).reg.expect("reg");
    match f(&mut (*domain).fid, addr, len, access, 0, key, 0, &mut mr, null_mut()) {
        0 => Ok(mr),
        r => Err(r),
    }
}

#[test]
fn advertised_mr_modes_hold() {
    std::env::set_var("FI_PROVIDER_PATH", common::provider_dir());
    std::env::set_var("FI_PROVIDER", "droce");
    std::env::set_var("DROCE_LINK", common::unique("mrc"));
    unsafe {
        let hints = fi_dupinfo(null());
        (*hints).caps = (FI_MSG | FI_RMA) as u64;
        (*hints).mode = FI_RX_CQ_DATA;
        (*(*hints).ep_attr).type_ = FI_EP_MSG;
        // the application offers FI_MR_ENDPOINT too: droce must not ask for it
        (*(*hints).domain_attr).mr_mode = (MODES | FI_MR_ENDPOINT) as i32;
        (*(*hints).fabric_attr).prov_name = libc::strdup(c"droce".as_ptr());
        let mut info: *mut fi_info = null_mut();
        assert_eq!(fi_getinfo((1 << 16) | 17, null(), null(), 0, hints, &mut info), 0, "fi_getinfo");
        let mode = (*(*info).domain_attr).mr_mode as u32;
        assert_eq!(mode, MODES, "exactly the advertised modes, FI_MR_ENDPOINT stripped");

        let mut fabric: *mut fid_fabric = null_mut();
        assert_eq!(fi_fabric((*info).fabric_attr, &mut fabric, null_mut()), 0);
        let mut domain: *mut fid_domain = null_mut();
        assert_eq!(call!(fabric, ops.domain(info, &mut domain, null_mut())), 0);

        // FI_MR_ALLOCATED: no registration of a null address with a length
        assert!(reg(domain, null(), 4096, FI_SEND as u64, 0).is_err(), "null buffer registered");

        // FI_MR_PROV_KEY / FI_MR_LOCAL: provider keys, distinct, a descriptor for local use
        let mut a = vec![0u8; 8192];
        let mut b = vec![0u8; 8192];
        let ma = reg(domain, a.as_ptr() as *const c_void, a.len(), (FI_SEND | FI_RECV | FI_WRITE | FI_READ) as u64, 0x1234).expect("reg a");
        let mb = reg(domain, b.as_ptr() as *const c_void, b.len(), (FI_RECV | FI_REMOTE_WRITE | FI_REMOTE_READ) as u64, 0x1234).expect("reg b");
        assert_ne!((*ma).key, (*mb).key, "the provider picks distinct keys even when the same one is requested");
        assert!(!(*ma).mem_desc.is_null() && !(*mb).mem_desc.is_null(), "FI_MR_LOCAL: a descriptor");

        // FI_MR_ENDPOINT not required, but bind to our endpoint and enable are accepted
        let mut ep: *mut fid_ep = null_mut();
        assert_eq!(call!(domain, ops.endpoint(info, &mut ep, null_mut())), 0);
        assert_eq!(fidcall!(&mut (*ma).fid, bind(&mut (*ep).fid, 0)), 0, "fi_mr_bind(ep)");
        assert_eq!(fidcall!(&mut (*ma).fid, control(FI_ENABLE as i32, null_mut())), 0, "fi_mr_enable");
        // a counter bind is a remote-access event: FI_RMA_EVENT is not offered
        let mut cattr: fi_cntr_attr = std::mem::zeroed();
        cattr.events = FI_CNTR_EVENTS_COMP;
        let mut cntr: *mut fid_cntr = null_mut();
        assert_eq!(call!(domain, ops.cntr_open(&mut cattr, &mut cntr, null_mut())), 0, "fi_cntr_open");
        assert_eq!(fidcall!(&mut (*mb).fid, bind(&mut (*cntr).fid, FI_REMOTE_WRITE as u64)), -(FI_ENOSYS as i32));
        assert_eq!(fidcall!(&mut (*cntr).fid, close()), 0);
        // binding to something that is not an endpoint of ours is an error
        assert_ne!(fidcall!(&mut (*ma).fid, bind(&mut (*domain).fid, 0)), 0, "bind to a domain");
        assert_eq!(fidcall!(&mut (*ep).fid, close()), 0);

        a[0] = 1;
        b[0] = 1;
        for f in [&mut (*ma).fid as *mut fid, &mut (*mb).fid, &mut (*domain).fid, &mut (*fabric).fid] {
            assert_eq!(fidcall!(f, close()), 0);
        }
        fi_freeinfo(info);
        fi_freeinfo(hints);
    }
}
