//! Zero-config default: two processes with no configuration find their slots through the
//! lock files (slot 0 10.77.0.1, slot 1 10.77.0.2), connect over memif and exchange RC
//! messages through IB CM; a third process on the same link joins (slot 2) instead of failing
//! (`host_mesh.rs` has the mesh itself). Manual and thread progress. The ACK watchdog: an end that stops polling right after a receive still
//! acknowledges it (held ACKs, the default, and DROCE_HOLD_ACKS=0). A server slow to answer
//! the memif handshake is waited for, not dropped.

mod host_util;

use host_util::*;
use std::time::Duration;

#[test]
fn child() {
    child_main();
}

fn pair(progress: &str, hold_ms: u32) {
    pair_with(progress, hold_ms, &[]);
}

fn pair_with(progress: &str, hold_ms: u32, more: &[(&'static str, &str)]) -> [(Option<i32>, Vec<String>, String); 2] {
    // a link of its own per variant (the values tell them apart)
    let tag: String = more.iter().map(|(_, v)| format!("-{v}")).collect();
    let link = format!("test-{}-{progress}{tag}", std::process::id());
    let _locks = Locks(link.clone());
    let env = |extra: &[(&'static str, String)]| -> Vec<(&'static str, String)> {
        let mut v: Vec<(&'static str, String)> = vec![("DROCE_LINK", link.clone()), ("DROCE_PROGRESS", progress.to_string()), ("HOST_TEST_HOLD_MS", hold_ms.to_string())];
        v.extend(more.iter().map(|(k, x)| (*k, x.to_string())));
        v.extend(extra.iter().cloned());
        v
    };
    // started together: the flock decides, not the timing
    let a = spawn(&env(&[]));
    let b = spawn(&env(&[]));
    let both_done = wait_until(Duration::from_secs(45), || a.has_line(|l| l.starts_with("done:")) && b.has_line(|l| l.starts_with("done:")));
    let third = if both_done && hold_ms > 0 {
        // both ends still hold their locks: a third process joins as slot 2
        Some(spawn(&env(&[("HOST_TEST_HOLD_MS", "0".into()), ("HOST_TEST_OPEN_ONLY", "1".into())])).finish(Duration::from_secs(30)))
    } else {
        None
    };
    let ra = a.finish(Duration::from_secs(20));
    let rb = b.finish(Duration::from_secs(20));
    let role = |r: &(Option<i32>, Vec<String>, String)| {
        r.1.iter().find(|l| l.starts_with("role ")).cloned().unwrap_or_else(|| panic!("no role line: {:?} {}", r.1, r.2))
    };
    let (sa, sb) = (role(&ra), role(&rb));
    let server_first = sa.contains("mesh slot 0: 10.77.0.1");
    let (server, client) = if server_first { (&ra, &rb) } else { (&rb, &ra) };
    assert!(role(server).contains("mesh slot 0: 10.77.0.1") && role(server).contains(&format!("link '{link}'")), "{sa} / {sb}");
    assert!(role(client).contains("mesh slot 1: 10.77.0.2"), "{sa} / {sb}");
    // the loopback alias still names the other end of the pair
    assert!(role(server).contains("peers [10.77.0.2]") && role(client).contains("peers [10.77.0.1]"), "{sa} / {sb}");
    check_end("server", server, "10.77.0.1", &["10.77.0.2"]);
    check_end("client", client, "10.77.0.2", &["10.77.0.1"]);
    // memif carries jumbo frames: the zero-config pair runs at path MTU 4096 by default
    assert!(server.1.iter().any(|l| l == "connected to 10.77.0.2 at path MTU 4096"), "server: {:?}", server.1);
    assert!(client.1.iter().any(|l| l == "connected to 10.77.0.1 at path MTU 4096"), "client: {:?}", client.1);
    if let Some((code, out, err)) = third {
        assert_eq!(code, Some(0), "third process: {out:?} {err}");
        assert!(out.iter().any(|l| l == "opened"), "third process: {out:?} {err}");
        // its exit takes only its own links: the pair saw it come and go
        for r in [&ra, &rb] {
            assert!(!r.2.contains("10.77.0.1 (zero-config") && !r.2.contains("10.77.0.2 (zero-config"), "{}", r.2);
        }
    } else if hold_ms > 0 {
        panic!("the pair did not finish: {:?} {:?}", ra.1, rb.1);
    }
    if server_first {
        [ra, rb]
    } else {
        [rb, ra]
    }
}

/// The client (10.77.0.2) stops polling for 1.5 s right after it received the quiet-check
/// message; the server's send must complete within 300 ms all the same: with held ACKs only
/// the watchdog thread sends that ACK (without it the send retries out, RETRY_EXC_ERR).
fn quiet_peer(hold: &str) {
    quiet_peer_in("1", "got the quiet-check message: not polling for 1500 ms", hold);
}

fn quiet_peer_in(mode: &str, client_line: &str, hold: &str) {
    let [server, client] = pair_with("manual", 0, &[("HOST_TEST_QUIET", mode), ("DROCE_HOLD_ACKS", hold)]);
    let line = |r: &(Option<i32>, Vec<String>, String), what: &str| r.1.iter().find(|l| l.contains(what)).cloned();
    assert!(line(&client, client_line).is_some(), "client: {:?} {}", client.1, client.2);
    let ack = line(&server, "quiet peer acknowledged in ").unwrap_or_else(|| panic!("server: {:?} {}", server.1, server.2));
    let ms: u64 = ack.rsplit("in ").next().and_then(|t| t.trim_end_matches(" ms").parse().ok()).unwrap_or(u64::MAX);
    assert!(ms < 300, "{ack}");
}

#[test]
fn quiet_peer_held_acks_leave_by_the_watchdog() {
    quiet_peer("1");
}

#[test]
fn quiet_peer_without_held_acks() {
    quiet_peer("0");
}

/// The client stops polling as soon as its main exchange is done and the server's message
/// arrives 200 ms later, while nobody polls (an application busy outside the library, or a
/// thread the scheduler leaves unrun): the watchdog receives it and acknowledges it. Without
/// that, the ACK waited for the application's return, and a sender whose peer stayed away
/// for its whole retry budget ended in RETRY_EXC_ERR.
#[test]
fn away_peer_still_receives_and_acknowledges() {
    quiet_peer_in("away", "main exchange done: not polling for 1500 ms", "1");
    quiet_peer_in("away", "main exchange done: not polling for 1500 ms", "0");
}

/// A server slow to answer the memif handshake (a loaded machine runs its interrupt thread
/// late; here it is stopped outright for longer than the client's retry delay, 5 s): the
/// client keeps the connection it has open instead of dropping it and connecting again.
/// Dropped, DPDK 22.11's memif server failed its hello to the closed connection ("sendmsg
/// fail: Broken pipe" on stderr) and then aborted in its interrupt thread (an interrupt handle
/// freed while still registered: "Error adding fd N epoll_ctl").
#[test]
fn slow_memif_handshake_is_waited_for_not_dropped() {
    let link = format!("test-{}-slow-handshake", std::process::id());
    let _locks = Locks(link.clone());
    let env: Vec<(&'static str, String)> = vec![("DROCE_LINK", link.clone()), ("DROCE_PROGRESS", "manual".into()), ("HOST_TEST_HOLD_MS", "0".into())];
    let server = spawn(&env);
    // slot 0 has started its server ports and marked itself ready once its open returned
    assert!(wait_until(Duration::from_secs(30), || server.has_line(|l| l.contains("open took"))), "slot 0 did not open");
    let pid = server.child.id() as libc::pid_t;
    // SAFETY: kill(2) on our own child process, by its pid (it has not been waited for)
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let client = spawn(&env);
    std::thread::sleep(Duration::from_secs(7));
    // SAFETY: as above
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let rc = client.finish(Duration::from_secs(45));
    let rs = server.finish(Duration::from_secs(20));
    check_end("server", &rs, "10.77.0.1", &["10.77.0.2"]);
    check_end("client", &rc, "10.77.0.2", &["10.77.0.1"]);
}

#[test]
fn zero_config_pair_manual_progress_and_third_process() {
    pair("manual", 4000);
}

#[test]
fn zero_config_pair_thread_progress() {
    pair("thread", 0);
}
