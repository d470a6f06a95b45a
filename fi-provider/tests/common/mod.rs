//! Helpers for the tests that load the provider into the real libfabric (fi_info,
//! fi_pingpong from libfabric-bin) with FI_PROVIDER_PATH pointing at cargo's cdylib.

#![allow(dead_code, unused_macros, unused_imports)]

/// `call!(obj, table.op(args))`: the provider's op through the object's ops table, as the
/// inline wrappers of libfabric's headers do.
macro_rules! call {
    ($obj:expr, $table:ident . $op:ident ( $($arg:expr),* )) => {{
        let o = $obj;
        let f = (*(*o).$table).$op.expect(stringify!($op));
        f(o $(, $arg)*)
    }};
}

/// `fidcall!(fid, op(args))`: an op of a fid's `fi_ops` table (close, bind, control, ...).
macro_rules! fidcall {
    ($fid:expr, $op:ident ( $($arg:expr),* )) => {{
        let f: *mut fid = $fid;
        let g = (*(*f).ops).$op.expect(stringify!($op));
        g(f $(, $arg)*)
    }};
}

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A private directory holding a link to the `libdroce_fi.so` this `cargo test` built (the
/// cdylib in the deps directory next to the test binary; `target/<profile>/libdroce_fi.so`
/// is only refreshed by `cargo build`).
pub fn provider_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    let so = [deps.join("libdroce_fi.so"), deps.parent().map(|d| d.join("libdroce_fi.so")).unwrap_or_default()]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("libdroce_fi.so not built next to {}", exe.display()));
    // inside the target dir: nothing to clean up, the same link for every test binary
    let dir = deps.parent().unwrap_or(&deps).join("droce-fi-provider");
    let _ = std::fs::create_dir_all(&dir);
    let link = dir.join("libdroce_fi.so");
    if std::fs::read_link(&link).ok().as_deref() != Some(so.as_path()) {
        let _ = std::fs::remove_file(&link);
        let _ = std::os::unix::fs::symlink(&so, &link);
    }
    assert!(link.exists(), "provider link {}", link.display());
    dir
}

pub fn have(tool: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {tool}")).stdout(Stdio::null()).status().map(|s| s.success()).unwrap_or(false)
}

/// A command with the provider environment: only FI_PROVIDER_PATH, FI_PROVIDER=droce and a
/// private zero-config link name (so that parallel tests do not share memif roles).
pub fn fi_cmd(tool: &str, link: &str) -> Command {
    let mut c = Command::new(tool);
    c.env("FI_PROVIDER_PATH", provider_dir()).env("FI_PROVIDER", "droce").env("DROCE_LINK", link);
    for v in ["DROCE_CONF", "DROCE_PROGRESS", "DROCE_FAULTS", "DROCE_PCAP", "DROCE_EAL", "DROCE_IOV_LIMIT", "FI_LOG_LEVEL"] {
        c.env_remove(v);
    }
    c
}

/// Waits for `child` at most `limit`; kills it (by its pid) after that.
pub fn wait_bounded(mut child: Child, limit: Duration) -> (Option<i32>, String) {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                break;
            }
        }
    }
    let out: Output = child.wait_with_output().expect("collect output");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// A zero-config link name no other test uses.
pub fn unique(tag: &str) -> String {
    // every call its own link: parallel tests must not compete for the two zero-config roles
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("fit-{tag}-{}-{n}", std::process::id())
}

/// Runs a fi_pingpong server and client pair; returns (server, client) exit codes and output.
pub fn pingpong(tag: &str, ep: &str, port: u16, extra: &[&str], limit: Duration) -> ((Option<i32>, String), (Option<i32>, String)) {
    let link = unique(tag);
    let port_s = port.to_string();
    let mut args: Vec<&str> = vec!["-p", "droce", "-e", ep];
    args.extend_from_slice(extra);
    let server = fi_cmd("fi_pingpong", &link).args(&args).args(["-B", &port_s]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn server");
    std::thread::sleep(Duration::from_millis(700));
    let client = fi_cmd("fi_pingpong", &link).args(&args).args(["-P", &port_s, "127.0.0.1"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn client");
    let c = wait_bounded(client, limit);
    let s = wait_bounded(server, Duration::from_secs(10));
    (s, c)
}

/// The result lines of fi_pingpong: (size label, sent, acked).
pub fn result_rows(out: &str) -> Vec<(String, u64, String)> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() >= 8 && f[0].chars().next()?.is_ascii_digit() {
                let sent = f[1].trim_end_matches('k').parse().ok()?;
                Some((f[0].to_string(), sent, f[2].to_string()))
            } else {
                None
            }
        })
        .collect()
}

// ------------------------------------------------------------ through the libfabric API

use droce_fi::sys::*;
use std::os::raw::c_void;
use std::ptr::null_mut;

/// How long an API test waits for one event or completion.
pub const API_DEADLINE: Duration = Duration::from_secs(30);

/// `FI_ADDR_UNSPEC` of libfabric's headers (a macro bindgen does not carry over).
pub const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;

/// The fabric of `info`, an event queue without a wait object, and the domain of `info`.
pub unsafe fn fabric_eq_domain(info: *mut fi_info) -> (*mut fid_fabric, *mut fid_eq, *mut fid_domain) {
    let mut fabric: *mut fid_fabric = null_mut();
    assert_eq!(fi_fabric((*info).fabric_attr, &mut fabric, null_mut()), 0);
    let mut eq_attr: fi_eq_attr = std::mem::zeroed();
    eq_attr.wait_obj = FI_WAIT_NONE;
    let mut eq: *mut fid_eq = null_mut();
    assert_eq!(call!(fabric, ops.eq_open(&mut eq_attr, &mut eq, null_mut())), 0);
    let mut domain: *mut fid_domain = null_mut();
    assert_eq!(call!(fabric, ops.domain(info, &mut domain, null_mut())), 0);
    (fabric, eq, domain)
}

/// An endpoint of `info` bound to `eq` and, for both directions, to `cq`; enabled.
pub unsafe fn ep_setup(domain: *mut fid_domain, info: *mut fi_info, eq: *mut fid_eq, cq: *mut fid_cq, ctx: usize) -> *mut fid_ep {
    let mut ep: *mut fid_ep = null_mut();
    assert_eq!(call!(domain, ops.endpoint(info, &mut ep, ctx as *mut c_void)), 0, "fi_endpoint");
    assert_eq!(fidcall!(&mut (*ep).fid, bind(&mut (*eq).fid, 0)), 0);
    assert_eq!(fidcall!(&mut (*ep).fid, bind(&mut (*cq).fid, (FI_TRANSMIT | FI_RECV) as u64)), 0);
    assert_eq!(fidcall!(&mut (*ep).fid, control(FI_ENABLE as i32, null_mut())), 0);
    ep
}

/// `buf` registered with `access` (fi_mr_reg; the provider picks the key).
pub unsafe fn mr_reg(domain: *mut fid_domain, buf: &mut [u8], access: u64) -> *mut fid_mr {
    let mut mr: *mut fid_mr = null_mut();
    let reg = (*(*domain).mr).reg.expect("reg");
    let r = reg(&mut (*domain).fid, buf.as_ptr() as *const c_void, buf.len(), access, 0, 0, 0, &mut mr, null_mut());
    assert_eq!(r, 0, "fi_mr_reg");
    mr
}

#[repr(C, align(8))]
pub struct EqBuf(pub [u8; 512]);

/// The next EQ event: (event, fid, info, CM data after the fi_eq_cm_entry).
pub unsafe fn eq_event(eq: *mut fid_eq) -> (u32, *mut fid, *mut fi_info, Vec<u8>) {
    let mut buf = EqBuf([0; 512]);
    let mut ev = 0u32;
    let start = Instant::now();
    loop {
        let n = call!(eq, ops.read(&mut ev, buf.0.as_mut_ptr() as *mut c_void, buf.0.len(), 0));
        if n > 0 {
            let e = &*(buf.0.as_ptr() as *const fi_eq_cm_entry);
            let hdr = std::mem::size_of::<fi_eq_cm_entry>();
            let data = buf.0[hdr..n as usize].to_vec();
            return (ev, e.fid, e.info, data);
        }
        assert_eq!(n, -(FI_EAGAIN as isize), "fi_eq_read");
        assert!(start.elapsed() < API_DEADLINE, "no EQ event");
    }
}

/// The next successful completion (panics on an error entry or after API_DEADLINE).
pub unsafe fn cq_wait(cq: *mut fid_cq) -> fi_cq_data_entry {
    let mut e: fi_cq_data_entry = std::mem::zeroed();
    let start = Instant::now();
    loop {
        let n = call!(cq, ops.read(&mut e as *mut _ as *mut c_void, 1));
        if n == 1 {
            return e;
        }
        if n == -(FI_EAVAIL as isize) {
            let mut x: fi_cq_err_entry = std::mem::zeroed();
            call!(cq, ops.readerr(&mut x, 0));
            panic!("CQ error entry: err {} prov_errno {} ctx {:?}", x.err, x.prov_errno, x.op_context);
        }
        assert_eq!(n, -(FI_EAGAIN as isize), "fi_cq_read");
        assert!(start.elapsed() < API_DEADLINE, "no completion");
    }
}
