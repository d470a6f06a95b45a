//! DPDK poll-mode engine.
