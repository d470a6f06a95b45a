//! Zero-config mesh: three and four processes with no configuration take slots 0, 1, 2, (3)
//! through the lock files (10.77.0.1 ...), connect over one memif link per pair and exchange
//! RC messages all-to-all through IB CM; a member that exits takes only its own links: the
//! others see it lost and go on talking to each other; a process alone opens at once.

mod host_util;

use host_util::*;
use std::time::{Duration, Instant};

#[test]
fn child() {
    child_main();
}

fn link_name(tag: &str) -> String {
    format!("mesh-{}-{tag}", std::process::id())
}

fn ips(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("10.77.0.{}", i + 1)).collect()
}

fn slot_of(r: &(Option<i32>, Vec<String>, String)) -> usize {
    let role = r.1.iter().find(|l| l.contains("role ")).unwrap_or_else(|| panic!("no role line: {:?} {}", r.1, r.2));
    let i = role.find("mesh slot ").unwrap_or_else(|| panic!("{role}")) + "mesh slot ".len();
    role[i..].split(':').next().unwrap().parse().unwrap()
}

fn all_to_all(n: usize, progress: &str) {
    let link = link_name(&format!("{n}-{progress}"));
    let _locks = Locks(link.clone());
    let peers = ips(n).join(",");
    let env = vec![("DROCE_LINK", link.clone()), ("DROCE_PROGRESS", progress.to_string()), ("HOST_TEST_PEERS", peers), ("HOST_TEST_HOLD_MS", "1500".to_string())];
    // started together: the locks decide the slots, not the timing
    let procs: Vec<Proc> = (0..n).map(|_| spawn(&env)).collect();
    let done = wait_until(Duration::from_secs(90), || procs.iter().all(|p| p.has_line(|l| l.starts_with("done:"))));
    let res: Vec<_> = procs.into_iter().map(|p| p.finish(Duration::from_secs(30))).collect();
    assert!(done, "not all done: {:?}", res.iter().map(|r| (&r.1, &r.2)).collect::<Vec<_>>());
    let mut slots: Vec<usize> = res.iter().map(slot_of).collect();
    let all = ips(n);
    for r in &res {
        let s = slot_of(r);
        let me = &all[s];
        let others: Vec<&str> = all.iter().filter(|a| *a != me).map(|a| a.as_str()).collect();
        check_end(&format!("slot {s}"), r, me, &others);
        for o in &others {
            assert!(r.1.iter().any(|l| *l == format!("connected to {o} at path MTU 4096")), "slot {s}: {:?}", r.1);
        }
        // the others' exits are seen (with thread progress, also while holding), each once
        assert!(r.2.matches("went down").count() < n, "slot {s}: {}", r.2);
        assert!(!r.2.contains(&format!("link to {me} ")), "slot {s}: {}", r.2);
    }
    slots.sort();
    assert_eq!(slots, (0..n).collect::<Vec<_>>(), "distinct slots 0..{n}");
}

#[test]
fn three_processes_all_to_all_manual_progress() {
    all_to_all(3, "manual");
}

#[test]
fn four_processes_all_to_all_thread_progress() {
    all_to_all(4, "thread");
}

/// Three processes exchange; the one in slot 2 then exits. The other two see exactly that
/// peer lost (its link down, theirs to each other still up) and exchange again over new
/// connections.
#[test]
fn a_member_exits_the_others_go_on() {
    let link = link_name("exit");
    let _locks = Locks(link.clone());
    let peers = ips(3).join(",");
    // slot order by start order: each starts once the one before has taken its slot
    let mut procs = Vec::new();
    for s in 0..3 {
        let mut env = vec![("DROCE_LINK", link.clone()), ("HOST_TEST_PEERS", peers.clone())];
        if s < 2 {
            env.push(("HOST_TEST_THEN_LOST", "10.77.0.3".to_string()));
            env.push(("HOST_TEST_THEN_PEERS", "10.77.0.1,10.77.0.2".to_string()));
            env.push(("HOST_TEST_HOLD_MS", "500".to_string()));
        }
        let p = spawn(&env);
        let took = wait_until(Duration::from_secs(30), || p.has_line(|l| l.contains(&format!("mesh slot {s}:"))));
        assert!(took, "process {s} did not take slot {s}: {:?}", p.out.lock().unwrap());
        procs.push(p);
    }
    let third = procs.pop().unwrap();
    let r3 = third.finish(Duration::from_secs(60));
    let t_exit = Instant::now();
    check_end("slot 2", &r3, "10.77.0.3", &["10.77.0.1", "10.77.0.2"]);
    let res: Vec<_> = procs.into_iter().map(|p| p.finish(Duration::from_secs(60))).collect();
    let waited = t_exit.elapsed();
    for (s, r) in res.iter().enumerate() {
        let me = format!("10.77.0.{}", s + 1);
        let other = format!("10.77.0.{}", 2 - s);
        assert_eq!(r.0, Some(0), "slot {s}: {:?} {}", r.1, r.2);
        let lost = r.1.iter().find(|l| l.starts_with("lost 10.77.0.3 after")).unwrap_or_else(|| panic!("slot {s}: {:?} {}", r.1, r.2));
        assert!(lost.ends_with(&format!("links up: [{other}]")), "slot {s}: only the exited peer's link went: {lost}");
        assert!(r.2.contains("the memif link to 10.77.0.3 (zero-config slot 2) went down"), "slot {s}: {}", r.2);
        assert_eq!(r.2.matches("went down").count(), 1, "slot {s}: one link down: {}", r.2);
        assert!(r.1.iter().any(|l| l == "second round done"), "slot {s}: {:?} {}", r.1, r.2);
        assert!(r.1.iter().any(|l| *l == format!("got text 'hello from {other} to {me}' from {other}")), "slot {s}: {:?}", r.1);
    }
    assert!(waited < Duration::from_secs(60), "{waited:?}");
}

/// A process alone on a link opens at once (it waits for nobody) and starts connecting; a
/// process that comes seconds later joins and the two exchange.
#[test]
fn alone_opens_at_once_and_a_later_process_joins() {
    let link = link_name("alone");
    let _locks = Locks(link.clone());
    let env = vec![("DROCE_LINK", link.clone()), ("HOST_TEST_PEERS", "10.77.0.1,10.77.0.2".to_string()), ("HOST_TEST_HOLD_MS", "500".to_string())];
    let first = spawn(&env);
    let opened = wait_until(Duration::from_secs(30), || first.has_line(|l| l.contains("open took ")));
    assert!(opened, "a process alone did not open: {:?}", first.out.lock().unwrap());
    std::thread::sleep(Duration::from_secs(2));
    assert!(!first.has_line(|l| l.starts_with("connected to")), "nobody to connect to yet");
    let second = spawn(&env);
    let r2 = second.finish(Duration::from_secs(60));
    let r1 = first.finish(Duration::from_secs(30));
    let ms: u64 = r1.1.iter().find_map(|l| l.split("open took ").nth(1)?.strip_suffix(" ms")?.parse().ok()).unwrap_or(u64::MAX);
    // EAL start included (seconds on a loaded machine); the mesh's open wait is 10 s
    assert!(ms < 8000, "a process alone waited {ms} ms: {:?}", r1.1);
    check_end("slot 0", &r1, "10.77.0.1", &["10.77.0.2"]);
    check_end("slot 1", &r2, "10.77.0.2", &["10.77.0.1"]);
}

/// A process beyond MESH_MAX on one link gets one clear line naming the limit and DROCE_CONF
/// (the slots are held here by this test's own flocks, no 16 processes needed).
#[test]
fn a_process_beyond_the_limit_gets_one_clear_error() {
    use std::os::unix::io::AsRawFd;
    let link = link_name("full");
    let _locks = Locks(link.clone());
    // SAFETY: getuid has no preconditions
    let dir = std::path::PathBuf::from(format!("/tmp/droce-{}", unsafe { libc::getuid() }));
    let _ = std::fs::create_dir(&dir);
    let max = droce_dpdk::runtime::MESH_MAX;
    let held: Vec<std::fs::File> = (0..max)
        .map(|s| {
            let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(format!("{link}.{s}.lock"))).unwrap();
            // SAFETY: flock on a descriptor we own; the lock lasts while `f` is open
            assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
            f
        })
        .collect();
    let p = spawn(&[("DROCE_LINK", link.clone()), ("HOST_TEST_OPEN_ONLY", "1".to_string())]);
    let (code, out, err) = p.finish(Duration::from_secs(30));
    drop(held);
    assert_eq!(code, Some(2), "{out:?} {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("droce")).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(
        lines[0].contains(&format!("zero-config default link '{link}' already has {max} processes")) && lines[0].contains("DROCE_CONF") && lines[0].contains("DROCE_LINK"),
        "{}",
        lines[0]
    );
}
