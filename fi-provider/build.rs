//! Bindings over the installed libfabric headers (libfabric-dev 1.17: /usr/include/rdma) and
//! the link line of libfabric (the provider calls fi_dupinfo/fi_freeinfo/fi_log of the
//! framework that loads it).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    let lib = match pkg_config::Config::new().atleast_version("1.17").probe("libfabric") {
        Ok(l) => l,
        Err(e) => {
            println!("cargo:warning=libfabric >= 1.17 not found by pkg-config ({e}); apt-get install libfabric-dev");
            std::process::exit(1);
        }
    };
    let mut b = bindgen::Builder::default()
        .header("wrapper.h")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_type("fi_.*|fid_.*|fid|fi_ops.*")
        .allowlist_function("fi_getinfo|fi_fabric|fi_dupinfo|fi_freeinfo|fi_log|fi_log_enabled|fi_strerror|fi_param_.*")
        .allowlist_var("FI_.*|FID_.*")
        .derive_default(true)
        .layout_tests(true)
        .prepend_enum_name(false)
        .default_enum_style(bindgen::EnumVariation::Consts);
    for p in &lib.include_paths {
        b = b.clang_arg(format!("-I{}", p.display()));
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    b.generate().expect("bindgen over libfabric headers").write_to_file(out.join("fabric.rs")).expect("write bindings");
}
