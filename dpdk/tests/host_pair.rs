//! Zero-config default: two processes with no configuration find their roles through the
//! lock files (server 10.77.0.1, client 10.77.0.2), connect over memif and exchange RC
//! messages through IB CM; a third process on the same link gets one clear error. Manual and
//! thread progress. The ACK watchdog: an end that stops polling right after a receive still
//! acknowledges it (held ACKs, the default, and DROCE_HOLD_ACKS=0).

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
        // both ends still hold their locks: a third process must get a clear error at once
        Some(spawn(&env(&[("HOST_TEST_HOLD_MS", "0".into())])).finish(Duration::from_secs(20)))
    } else {
        None
    };
    let ra = a.finish(Duration::from_secs(20));
    let rb = b.finish(Duration::from_secs(20));
    let role = |r: &(Option<i32>, Vec<String>, String)| {
        r.1.iter().find(|l| l.starts_with("role ")).cloned().unwrap_or_else(|| panic!("no role line: {:?} {}", r.1, r.2))
    };
    let (sa, sb) = (role(&ra), role(&rb));
    let server_first = sa.contains("memif server 10.77.0.1");
    let (server, client) = if server_first { (&ra, &rb) } else { (&rb, &ra) };
    assert!(role(server).contains("memif server 10.77.0.1 <-> 10.77.0.2") && role(server).contains(&format!("link '{link}'")), "{sa} / {sb}");
    assert!(role(client).contains("memif client 10.77.0.2 <-> 10.77.0.1"), "{sa} / {sb}");
    check_end("server", server, "10.77.0.1", &["10.77.0.2"]);
    check_end("client", client, "10.77.0.2", &["10.77.0.1"]);
    // memif carries jumbo frames: the zero-config pair runs at path MTU 4096 by default
    assert!(server.1.iter().any(|l| l == "connected to 10.77.0.2 at path MTU 4096"), "server: {:?}", server.1);
    assert!(client.1.iter().any(|l| l == "connected to 10.77.0.1 at path MTU 4096"), "client: {:?}", client.1);
    if let Some((code, out, err)) = third {
        assert_eq!(code, Some(2), "third process: {out:?} {err}");
        let line = err.lines().find(|l| l.contains("droce")).unwrap_or_else(|| panic!("third process stderr: {err}"));
        assert!(
            line.contains(&format!("zero-config default link '{link}' already has its two processes")) && line.contains("DROCE_LINK"),
            "{line}"
        );
        assert_eq!(err.lines().filter(|l| l.contains("droce")).count(), 1, "one line: {err}");
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
    let [server, client] = pair_with("manual", 0, &[("HOST_TEST_QUIET", "1"), ("DROCE_HOLD_ACKS", hold)]);
    let line = |r: &(Option<i32>, Vec<String>, String), what: &str| r.1.iter().find(|l| l.contains(what)).cloned();
    assert!(line(&client, "got the quiet-check message: not polling for 1500 ms").is_some(), "client: {:?} {}", client.1, client.2);
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

#[test]
fn zero_config_pair_manual_progress_and_third_process() {
    pair("manual", 4000);
}

#[test]
fn zero_config_pair_thread_progress() {
    pair("thread", 0);
}

/// A client that took its role while its server ran, and opens its port only after the server
/// has exited (fabtests: fi_getinfo, then fi_domain after the server ended a failed test),
/// gets one clear error at once: not a memif connect failure after 30 s.
#[test]
fn client_opening_after_its_server_exited_fails_at_once() {
    let link = format!("test-{}-gone", std::process::id());
    let go = std::env::temp_dir().join(format!("droce-host-pair-{}-go", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let env = |extra: &[(&'static str, String)]| -> Vec<(&'static str, String)> {
        let mut v: Vec<(&'static str, String)> = vec![("DROCE_LINK", link.clone())];
        v.extend(extra.iter().cloned());
        v
    };
    let mut server = spawn(&env(&[("HOST_TEST_OPEN_ONLY", "1".into()), ("HOST_TEST_HOLD_MS", "60000".into())]));
    let opened = wait_until(Duration::from_secs(30), || server.has_line(|l| l == "opened"));
    let client = spawn(&env(&[("HOST_TEST_ROLE_FIRST", go.display().to_string())]));
    let took = wait_until(Duration::from_secs(30), || client.has_line(|l| l.contains("role taken:")));
    // our own child, by its handle
    let _ = server.child.kill();
    let _ = server.child.wait();
    std::fs::write(&go, b"go").unwrap();
    let (code, out, err) = client.finish(Duration::from_secs(60));
    let _ = std::fs::remove_file(&go);
    let rs = server.finish(Duration::from_secs(5));
    // both processes have ended: their lock files go too
    // SAFETY: getuid has no preconditions
    let dir = std::path::PathBuf::from(format!("/tmp/droce-{}", unsafe { libc::getuid() }));
    for r in ["server", "client"] {
        let _ = std::fs::remove_file(dir.join(format!("{link}.{r}.lock")));
    }
    assert!(opened, "server did not open: {:?} {}", rs.1, rs.2);
    assert!(took && out.iter().any(|l| l.contains("memif client 10.77.0.2")), "client: {out:?} {err}");
    assert_eq!(code, Some(2), "client exit {code:?}: {out:?} {err}");
    let line = err.lines().find(|l| l.contains("droce")).unwrap_or_else(|| panic!("client stderr: {err}"));
    assert!(
        line.contains(&format!("the zero-config server of link '{link}'")) && line.contains("started its port and has exited since") && line.contains("start the pair again"),
        "{line}"
    );
    let ms: u64 = out.iter().find_map(|l| l.strip_prefix("open failed after ")?.strip_suffix(" ms")?.parse().ok()).unwrap_or(u64::MAX);
    // the time includes EAL start (seconds on a loaded machine); the connect timeout is 30 s
    assert!(ms < 25000, "the client waited {ms} ms: {out:?}");
}
