//! Multi-rank: three processes with conf/ranks.conf (rank-templated af_packet on veth
//! droce<rank>, 10.78.0.<rank+1>) over the segment scripts/droce-netns.sh builds; every rank
//! connects to every other over RC through IB CM. The test runs in a network namespace of its
//! own (so its droce<i> links never meet the machine's) and removes the bridge namespace the
//! script made.

mod host_util;

use host_util::*;
use std::process::Command;
use std::time::Duration;

#[test]
fn child() {
    child_main();
}

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/droce-netns.sh");
const CONF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../conf/ranks.conf");

fn netns(ns: &str, args: &[&str]) -> (bool, String) {
    let o = Command::new("sh").arg(SCRIPT).args(args).env("DROCE_NETNS", ns).output().expect("run droce-netns.sh");
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// Runs `droce-netns.sh down` when the test ends, also on a panic.
struct Down(String);

impl Drop for Down {
    fn drop(&mut self) {
        let (ok, out) = netns(&self.0, &["down"]);
        assert!(ok || std::thread::panicking(), "droce-netns.sh down: {out}");
    }
}

#[test]
#[allow(unsafe_code)]
fn three_ranks_over_af_packet_veth_bridge() {
    // SAFETY: unshare(CLONE_NEWNET) moves only this thread (and the children it spawns) into a
    // fresh network namespace; nothing else in this process uses the network.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        eprintln!("SKIPPED: cannot create a network namespace: {}", std::io::Error::last_os_error());
        return;
    }
    let ns = format!("droce-test-{}", std::process::id());
    let (ok, out) = netns(&ns, &["up", "3"]);
    let _down = Down(ns.clone());
    assert!(ok, "droce-netns.sh up 3: {out}");
    let (ok, out) = netns(&ns, &["up", "3"]);
    assert!(ok, "up is idempotent: {out}");
    let (_, status) = netns(&ns, &["status"]);
    for i in 0..3 {
        assert!(status.contains(&format!("droce{i} UP")), "{status}");
    }
    let peers = "10.78.0.1,10.78.0.2,10.78.0.3";
    let procs: Vec<Proc> = (0..3)
        .map(|r| {
            // the rank through a different variable each time: all three are honoured
            let var = ["DROCE_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK"][r];
            spawn(&[(var, r.to_string()), ("DROCE_CONF", CONF.to_string()), ("HOST_TEST_PEERS", peers.to_string())])
        })
        .collect();
    let results: Vec<_> = procs.into_iter().map(|p| p.finish(Duration::from_secs(60))).collect();
    let ips = ["10.78.0.1", "10.78.0.2", "10.78.0.3"];
    if results.iter().any(|r| r.0 != Some(0)) {
        for (r, res) in results.iter().enumerate() {
            eprintln!("rank {r}: exit {:?}\nstdout:\n{}\nstderr:\n{}", res.0, res.1.join("\n"), res.2);
        }
    }
    for (r, res) in results.iter().enumerate() {
        let role = res.1.iter().find(|l| l.starts_with("role ")).cloned().unwrap_or_default();
        assert!(role.contains(&format!("DROCE_CONF={CONF} rank {r}")) && role.contains(&format!("ip {}", ips[r])), "rank {r}: {role} {:?} {}", res.1, res.2);
        let others: Vec<&str> = ips.iter().copied().filter(|ip| *ip != ips[r]).collect();
        check_end(&format!("rank {r}"), res, ips[r], &others);
        // af_packet over veth at the kernel's 1500-byte MTU: no jumbo default, path MTU 1024
        for o in &others {
            let want = format!("connected to {o} at path MTU 1024");
            assert!(res.1.iter().any(|l| *l == want), "rank {r}: want '{want}' in {:?}", res.1);
        }
    }
    drop(_down);
    let (_, status) = netns(&ns, &["status"]);
    assert!(!status.contains("droce0"), "down removed the links: {status}");
    let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&listed.stdout).contains(&ns), "down removed namespace {ns}");
}
