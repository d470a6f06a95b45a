//! `fi_info` loads libdroce_fi.so through FI_PROVIDER_PATH and lists what getinfo answers.

mod common;
use common::*;
use std::process::Stdio;
use std::time::Duration;

fn fi_info(args: &[&str]) -> (Option<i32>, String) {
    let child = fi_cmd("fi_info", &unique("info")).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn fi_info");
    wait_bounded(child, Duration::from_secs(30))
}

#[test]
fn lists_msg_dgram_and_rxm_layering() {
    if !have("fi_info") {
        panic!("fi_info missing: apt-get install libfabric-bin");
    }
    let (rc, out) = fi_info(&["-p", "droce"]);
    assert_eq!(rc, Some(0), "{out}");
    let blocks: Vec<&str> = out.split("provider: ").skip(1).collect();
    let has = |prov: &str, ty: &str| blocks.iter().any(|b| b.starts_with(&format!("{prov}\n")) && b.contains(&format!("type: {ty}")));
    assert!(has("droce", "FI_EP_MSG"), "{out}");
    assert!(has("droce", "FI_EP_DGRAM"), "{out}");
    assert!(has("droce;ofi_rxm", "FI_EP_RDM"), "{out}");
    assert!(out.contains("fabric: droce") && out.contains("domain: droce0"), "{out}");
}

#[test]
fn attributes_and_addresses_follow_the_hints() {
    let (rc, out) = fi_info(&["-p", "droce", "-t", "FI_EP_MSG", "-n", "127.0.0.1", "-P", "4000", "-v"]);
    assert_eq!(rc, Some(0), "{out}");
    // the zero-config default's first process is 10.77.0.1; loopback as a destination is its peer
    assert!(out.contains("src_addr: fi_sockaddr_in://10.77.0.1:0"), "{out}");
    assert!(out.contains("dest_addr: fi_sockaddr_in://10.77.0.2:4000"), "{out}");
    assert!(out.contains("max_msg_size: 2147483648"), "{out}");
    assert!(out.contains("mr_mode: [ FI_MR_LOCAL, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, FI_MR_PROV_KEY ]"), "{out}");
    assert!(out.contains("protocol: FI_PROTO_RDMA_CM_IB_RC"), "{out}");
    assert!(!out.contains("FI_EP_DGRAM"), "ep type hint ignored: {out}");

    let (rc, out) = fi_info(&["-p", "droce", "-t", "FI_EP_DGRAM", "-a", "FI_SOCKADDR_IN6", "-v"]);
    assert_eq!(rc, Some(0), "{out}");
    assert!(out.contains("src_addr: fi_sockaddr_in6://[::ffff:10.77.0.1]:0"), "{out}");
    assert!(out.contains("msg_prefix_size: 40"), "{out}");

    let (rc, out) = fi_info(&["-p", "droce", "-s", "127.0.0.1", "-P", "9228", "-t", "FI_EP_MSG", "-v"]);
    assert_eq!(rc, Some(0), "{out}");
    assert!(out.contains("src_addr: fi_sockaddr_in://10.77.0.1:9228"), "FI_SOURCE alias: {out}");
}

#[test]
fn the_iov_limit_is_8_or_what_droce_iov_limit_says() {
    let limits = |out: &str| out.lines().filter(|l| l.trim_start().starts_with("iov_limit:")).map(|l| l.trim().to_string()).collect::<Vec<_>>();
    let (rc, out) = fi_info(&["-p", "droce", "-t", "FI_EP_MSG", "-v"]);
    assert_eq!(rc, Some(0), "{out}");
    let l = limits(&out);
    assert!(!l.is_empty() && l.iter().all(|l| l == "iov_limit: 8"), "{l:?}\n{out}");

    let child = fi_cmd("fi_info", &unique("info")).env("DROCE_IOV_LIMIT", "4").args(["-p", "droce", "-t", "FI_EP_MSG", "-v"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (rc, out) = wait_bounded(child, Duration::from_secs(30));
    assert_eq!(rc, Some(0), "{out}");
    let l = limits(&out);
    assert!(!l.is_empty() && l.iter().all(|l| l == "iov_limit: 4"), "{l:?}\n{out}");

    let child = fi_cmd("fi_info", &unique("info")).env("DROCE_IOV_LIMIT", "12").args(["-p", "droce", "-t", "FI_EP_MSG", "-v"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (rc, out) = wait_bounded(child, Duration::from_secs(30));
    assert_eq!(rc, Some(0), "{out}");
    assert!(out.contains("DROCE_IOV_LIMIT='12': want 1..=8; iov_limit stays 8"), "{out}");
    assert!(limits(&out).iter().all(|l| l == "iov_limit: 8"), "{out}");
}

/// A bad value in a DROCE_* variable of the runtime's configuration is named on stderr at the
/// default log level (no FI_LOG_LEVEL), and the provider answers nothing: before, fi_getinfo
/// answered FI_ENODATA and said why only with FI_LOG_LEVEL=warn.
#[test]
fn a_bad_droce_cc_is_named_on_stderr_at_the_default_log_level() {
    for (var, val) in [("DROCE_CC", "dcqcn:bogus=1"), ("DROCE_CC", "nonsense"), ("DROCE_HOLD_ACKS", "perhaps")] {
        let child = fi_cmd("fi_info", &unique("info")).env(var, val).env_remove("FI_LOG_LEVEL").args(["-p", "droce", "-t", "FI_EP_MSG"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let (rc, out) = wait_bounded(child, Duration::from_secs(30));
        assert_ne!(rc, Some(0), "{var}={val}: fi_info succeeded:\n{out}");
        assert!(out.contains(&format!("{var}='{val}'")), "{var}={val} not named:\n{out}");
        assert!(out.contains("the droce provider is off"), "{out}");
        assert_eq!(out.matches(&format!("{var}='{val}'")).count(), 1, "said more than once:\n{out}");
        assert!(!out.contains("provider: droce"), "{out}");
    }
}

#[test]
fn unsupported_hints_give_no_core_answer() {
    // tagged messages exist only through ofi_rxm; the core provider must not claim them
    let (_, out) = fi_info(&["-p", "droce", "-t", "FI_EP_MSG", "-c", "FI_TAGGED"]);
    assert!(!out.contains("provider: droce\n"), "{out}");
    let (_, out) = fi_info(&["-p", "droce", "-d", "mlx5_0"]);
    assert!(!out.contains("provider: droce\n"), "{out}");
    let (_, out) = fi_info(&["-p", "droce", "-t", "FI_EP_MSG", "-a", "FI_ADDR_PSMX2"]);
    assert!(!out.contains("provider: droce\n"), "{out}");
}
