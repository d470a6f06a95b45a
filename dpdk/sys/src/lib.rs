//! Raw DPDK bindings.
