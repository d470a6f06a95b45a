//! Compiles the UCT shim (shim/droce_uct.c and shim/droce_uct_ep.c) against the internal headers
//! of the installed UCX, fetched by scripts/setup-ucx-src.sh into $DROCE_UCX_SRC (default
//! /var/cache/droce/ucx-<ver>), and links it whole-archive: its ELF constructor registers the
//! component, and a plain static link would drop the object since nothing in Rust calls into it.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=shim/droce_uct.c");
    println!("cargo:rerun-if-changed=shim/droce_uct_ep.c");
    println!("cargo:rerun-if-changed=shim/droce_uct_int.h");
    println!("cargo:rerun-if-changed=shim/droce_abi.h");
    println!("cargo:rerun-if-env-changed=DROCE_UCX_SRC");

    let ucx = match pkg_config::Config::new().atleast_version("1.13").cargo_metadata(false).probe("ucx") {
        Ok(l) => l,
        Err(e) => fail(&format!("UCX >= 1.13 not found by pkg-config ({e}); apt-get install -y libucx-dev ucx-utils")),
    };
    let src = match env::var_os("DROCE_UCX_SRC") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(format!("/var/cache/droce/ucx-{}", ucx.version)),
    };
    let probe = src.join("src/uct/base/uct_iface.h");
    if !probe.is_file() || !src.join("config.h").is_file() {
        fail(&format!("UCX internal headers missing ({} not found): run scripts/setup-ucx-src.sh", probe.display()));
    }
    println!("cargo:rerun-if-changed={}", src.join("config.h").display());

    let mut b = cc::Build::new();
    b.file("shim/droce_uct.c")
        .file("shim/droce_uct_ep.c")
        .include("shim")
        .include(&src)
        .include(src.join("src"))
        .define("HAVE_CONFIG_H", None)
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-missing-field-initializers")
        .flag_if_supported("-Wno-sign-compare")
        .warnings(true);
    for p in &ucx.include_paths {
        b.include(p);
    }
    b.link_lib_modifier("+whole-archive");
    b.compile("droce_uct_shim");

    // libuct/libucs: the shim calls their exported base-class functions.
    println!("cargo:rustc-link-lib=dylib=uct");
    println!("cargo:rustc-link-lib=dylib=ucs");
}

fn fail(msg: &str) -> ! {
    println!("cargo:warning={msg}");
    eprintln!("error: {msg}");
    std::process::exit(1);
}
