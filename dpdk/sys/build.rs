//! Finds the system DPDK 22.11 with pkg-config, generates bindings with bindgen and compiles the
//! C shim that exports DPDK's `static inline` fast-path API as real symbols.
//!
//! Linking is dynamic (`librte_*.so`). Poll-mode drivers are not linked into the binary: EAL
//! `dlopen`s every driver in its built-in driver directory (Debian: `/usr/lib/<triple>/dpdk/pmds-23.0`)
//! when it detects that it was itself loaded as a shared library. The directory is exported to
//! dependents as `DEP_DPDK_PMD_DIR` and to the crate as `DPDK_PMD_DIR` for diagnostics.

use std::env;
use std::path::PathBuf;

const MIN_VERSION: &str = "22.11";
const HINT: &str = "install it with `apt-get install libdpdk-dev` (Debian 12 ships DPDK 22.11)";

fn fail(msg: &str) -> ! {
    // One line, no panic backtrace: cargo prints `error: ...` for this and stops.
    println!("cargo:warning={msg}");
    eprintln!("error: {msg}");
    std::process::exit(1);
}

fn main() {
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-changed=shim/shim.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let lib = match pkg_config::Config::new()
        .atleast_version(MIN_VERSION)
        .cargo_metadata(true)
        .probe("libdpdk")
    {
        Ok(lib) => lib,
        Err(pkg_config::Error::Failure { .. }) | Err(pkg_config::Error::ProbeFailure { .. }) => fail(&format!(
            "DPDK >= {MIN_VERSION} (pkg-config `libdpdk`) not found: {HINT}"
        )),
        Err(e) => {
            let first = e.to_string().lines().next().unwrap_or("").to_string();
            fail(&format!("DPDK >= {MIN_VERSION} (pkg-config `libdpdk`) not usable ({first}): {HINT}"))
        }
    };

    // The cflags carry `-include rte_config.h` and `-march=...`, which the DPDK headers need;
    // the pkg-config crate keeps only include paths and defines, so ask pkg-config itself.
    let cflags = cflags_from_cli();
    let clang_args: Vec<String> = cflags.clone();

    if let Ok(dir) = pkg_config::get_variable("libdpdk", "libdir") {
        let pmd = PathBuf::from(&dir).join("dpdk").join("pmds-23.0");
        let pmd = if pmd.is_dir() { pmd.display().to_string() } else { String::new() };
        println!("cargo:pmd_dir={pmd}");
        println!("cargo:rustc-env=DPDK_PMD_DIR={pmd}");
    } else {
        println!("cargo:rustc-env=DPDK_PMD_DIR=");
    }

    let mut build = cc::Build::new();
    build.file("shim/shim.c").include("shim").opt_level(3).warnings(true);
    for f in &cflags {
        build.flag(f);
    }
    build.compile("droce_dpdk_shim");

    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header("shim/shim.h")
        .clang_args(&clang_args)
        .clang_arg("-Ishim")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_function("rte_eal_.*")
        .allowlist_function("rte_eth_.*")
        .allowlist_function("rte_pktmbuf_.*")
        .allowlist_function("rte_mempool_.*")
        .allowlist_function("rte_mbuf_.*")
        .allowlist_function("rte_lcore_.*")
        .allowlist_function("rte_get_next_lcore")
        .allowlist_function("rte_thread_(un)?register")
        .allowlist_function("rte_get_main_lcore")
        .allowlist_function("rte_socket_.*")
        .allowlist_function("rte_strerror")
        .allowlist_function("rte_dev_.*")
        .allowlist_function("rte_ether_.*")
        .allowlist_function("rte_get_tsc_hz")
        .allowlist_function("rte_vdev_.*")
        .allowlist_function("droce_.*")
        .allowlist_type("rte_mbuf")
        .allowlist_type("rte_mempool")
        .allowlist_type("rte_eth_.*")
        .allowlist_type("rte_ether_.*")
        .allowlist_var("RTE_MAX_ETHPORTS")
        .allowlist_var("RTE_MAX_LCORE")
        .allowlist_var("RTE_PKTMBUF_HEADROOM")
        .allowlist_var("RTE_MBUF_DEFAULT_.*")
        .allowlist_var("RTE_ETHER_.*")
        .allowlist_var("RTE_ETH_LINK_.*")
        .allowlist_var("RTE_MBUF_F_.*")
        .allowlist_var("RTE_ETH_SPEED_NUM_.*")
        .allowlist_var("RTE_ETH_XSTATS_NAME_SIZE")
        .allowlist_var("RTE_ETH_NAME_MAX_LEN")
        .allowlist_var("RTE_MEMPOOL_NAMESIZE")
        .allowlist_var("SOCKET_ID_ANY")
        .allowlist_var("LCORE_ID_ANY")
        .allowlist_var("E_RTE_.*")
        .blocklist_type("max_align_t")
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .unwrap_or_else(|e| fail(&format!("bindgen failed on the DPDK headers ({e}); is libclang-dev installed? `apt-get install libclang-dev libdpdk-dev`")));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .unwrap_or_else(|e| fail(&format!("cannot write bindings: {e}")));
    let _ = lib;
}

fn cflags_from_cli() -> Vec<String> {
    let out = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .unwrap_or_else(|e| fail(&format!("cannot run pkg-config: {e}: `apt-get install pkg-config libdpdk-dev`")));
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect()
}
