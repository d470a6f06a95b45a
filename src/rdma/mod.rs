//! RDMA test modes of droce-pmd: perftest 4.5 compatible `--test=send_lat|send_bw|write_lat|
//! write_bw|read_lat|read_bw|atomic_lat|atomic_bw` and ibv_rc_pingpong / ibv_ud_pingpong
//! compatible `--test=rc_pingpong|ud_pingpong`, over a [`droce_dpdk::roce::RoceDevice`] on the
//! first DPDK port (see [`opts::USAGE`]).
//!
//! The TCP exchange follows docs/interop.md byte for byte; every wait polls the device (manual
//! progress) and is bounded by `--timeout`. Exit codes: 0 success, 1 test failure (completion
//! error with its IBA status, verify mismatch, peer gone, timeout), 2 bad arguments.

pub mod dev;
pub mod exchange;
pub mod opts;
pub mod perf;
pub mod pingpong;
pub mod report;
pub mod rping;

/// Runs an RDMA test when the app arguments select one of ours; `None` otherwise.
pub fn dispatch(argv: &[String]) -> Option<i32> {
    let (eal, app) = match argv.iter().position(|a| a == "--") {
        Some(i) => (&argv[..i], &argv[i + 1..]),
        None => return None,
    };
    if let Some(code) = rping::dispatch(eal, app) {
        return Some(code);
    }
    if app.iter().any(|a| a == "-h" || a == "--help") && app.iter().any(|a| a.starts_with("--test")) {
        print!("{}", opts::USAGE);
        return Some(0);
    }
    let o = match opts::parse(app) {
        Ok(Some(o)) => o,
        Ok(None) => return None,
        Err(e) => {
            eprintln!("droce-pmd: error: {e}");
            return Some(2);
        }
    };
    let mut eal_argv = vec!["droce-pmd".to_string()];
    eal_argv.extend(eal.iter().cloned());
    Some(run(&eal_argv, &o))
}

fn run(eal_argv: &[String], o: &opts::Opts) -> i32 {
    if let Err(e) = perf::check_plan(o) {
        eprintln!("droce-pmd: error: {e}");
        return 1;
    }
    let mut setup = match dev::setup(eal_argv, o) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("droce-pmd: error: {e}");
            return 1;
        }
    };
    let res = if o.test.is_pingpong() { pingpong::run(&mut setup, o) } else { perf::run(&mut setup, o) };
    let code = match &res {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("droce-pmd: error: {e}");
            1
        }
    };
    use std::io::Write;
    let _ = std::io::stdout().flush();
    setup.finish(o.stats);
    code
}
