//! The bindgen view of the libfabric headers (/usr/include/rdma): the lowest file of the
//! provider, which every `ffi` file and the getinfo matching in `info` read.
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case, dead_code, clippy::all)]
include!(concat!(env!("OUT_DIR"), "/fabric.rs"));
