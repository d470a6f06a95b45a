//! Shared helpers for the EAL integration tests. EAL can be initialised once per process, so
//! every test file is its own process and holds one #[test] that initialises EAL.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};

static N: AtomicU32 = AtomicU32::new(0);

/// EAL arguments that need no hugepages, no PCI and leave nothing behind, plus `extra`.
pub fn eal_args(extra: &[&str]) -> Vec<String> {
    let n = N.fetch_add(1, Ordering::Relaxed);
    let mut v: Vec<String> = vec![
        "droce-test".into(),
        "--no-huge".into(),
        "-m".into(),
        "512".into(),
        "--no-pci".into(),
        "--no-shconf".into(),
        format!("--file-prefix=droce-test-{}-{n}", std::process::id()),
        "--no-telemetry".into(),
        "--log-level=lib.eal:error".into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// A directory under the system temp dir, removed on drop (also when the test panics).
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("droce-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
