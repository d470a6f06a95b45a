//! droce-pmd: the testpmd-style command line of droce.
//!
//! `droce-pmd [--config FILE] [EAL args] -- [app args]`; with no arguments it runs the embedded
//! demo `conf/default.conf`. See `droce-pmd --help`.
#![deny(unsafe_code)]

mod app;
mod args;
mod capture;
mod cmdline;
mod config;
mod fwd;
mod modes;
mod pkt;
mod rdma;
mod stats;
mod switch;

fn main() {
    capture::default_sigpipe();
    // Messages of the droce crates (log facade); RUST_LOG=debug shows more.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if let Some(code) = rdma::dispatch(&argv) {
        std::process::exit(code);
    }
    let code = match args::parse(&argv) {
        Ok(args::Parsed::Help) => {
            print!("{}", args::usage());
            0
        }
        Ok(args::Parsed::Run(cl)) => app::run(cl),
        Err(e) => {
            eprintln!("droce-pmd: error: {e}");
            2
        }
    };
    std::process::exit(code);
}
