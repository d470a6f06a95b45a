//! Peers exit or are killed at random instants (scripts/stress-peer-exit.sh with a count that
//! fits CI): droce-pmd RDMA pairs, forwarding pairs, fi_pingpong, ucx_perftest and two-rank MPI
//! jobs under Open MPI and MPICH. Every survivor must end by itself, with no crash and no hang.
//! The full count (>= 500 kills) is the script run by hand: `scripts/stress-peer-exit.sh -n 100`.
//!
//! STRESS_RUNS sets the runs per scenario (default 3: 5 combinations of victim and signal are
//! rotated, so 3 runs cover server/client x KILL plus one TERM).

mod harness;

use harness::*;
use std::time::Duration;

#[test]
fn survivors_never_crash_or_hang() {
    let _g = serial();
    let runs = std::env::var("STRESS_RUNS").unwrap_or_else(|_| "3".into());
    let fi = fi_provider_dir();
    let uct = workspace_cdylib("droce-ucx", "libuct_droce.so").unwrap_or_else(|e| panic!("{e}"));
    let script = repo_path("scripts/stress-peer-exit.sh");
    let logs = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique("stress"));
    let e = env(&[
        ("DROCE_PMD", env!("CARGO_BIN_EXE_droce-pmd")),
        ("DROCE_FI_DIR", fi.to_str().unwrap()),
        ("DROCE_UCT_LIB", uct.to_str().unwrap()),
        ("STRESS_LOG", logs.to_str().unwrap()),
    ]);
    let d = run("stress-peer-exit.sh", &[script.display().to_string(), "-n".into(), runs.clone()], &e, Duration::from_secs(1800));
    eprintln!("{}", d.out.lines().filter(|l| l.starts_with('|') || l.starts_with("stress:")).collect::<Vec<_>>().join("\n"));
    let last = d.out.lines().rev().find(|l| l.starts_with("stress: ")).unwrap_or_else(|| panic!("no summary line:\n{}", d.show()));
    assert!(last.contains(" crashes=0 hangs=0"), "a survivor crashed or hung:\n{}", d.show());
    assert!(d.ok(), "{}", d.show());
    // every scenario ran (none skipped for a missing tool: scripts/setup-deps.sh installs them)
    let runs: u32 = runs.parse().unwrap();
    assert!(last.contains(&format!("runs={} ", runs * 7)), "not every scenario ran:\n{}", d.show());
}
