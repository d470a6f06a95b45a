//! droce-pmd: the testpmd-style command line of droce.
#![deny(unsafe_code)]

mod args;
mod capture;
mod cmdline;
mod config;
mod modes;
mod pkt;
mod stats;

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match args::parse(&argv) {
        Ok(args::Parsed::Help) => print!("{}", args::usage()),
        Ok(args::Parsed::Run(_)) => {
            eprintln!("droce-pmd: error: the port engine is not wired in yet (arguments parsed fine)");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("droce-pmd: error: {e}");
            std::process::exit(2);
        }
    }
}
