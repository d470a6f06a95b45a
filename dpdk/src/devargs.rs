//! The device arguments of an EAL command line (`--vdev`, `-a`, `-b`, ...), read as words:
//! for `Eal::init`'s checks, for its error messages and for the ports that look up their own
//! `--vdev` options later. Plain string work: nothing here touches DPDK.

/// Device arguments (`--vdev`, `-a`, `--allow`, `-b`, `--block`) as given, for messages.
pub(crate) fn device_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        for opt in ["--vdev", "--allow", "--block", "-a", "-b"] {
            if a == opt {
                if let Some(v) = it.next() {
                    out.push(v.clone());
                }
                break;
            } else if let Some(v) = a.strip_prefix(opt).and_then(|r| r.strip_prefix('=')) {
                out.push(v.to_string());
                break;
            } else if opt.len() == 2 && a.starts_with(opt) && a.len() > 2 && !a.starts_with("--") {
                out.push(a[2..].to_string());
                break;
            }
        }
    }
    out
}

/// Device names given with `--vdev X` / `--vdev=X` (the part before the first comma).
pub(crate) fn vdev_names(args: &[String]) -> Vec<String> {
    vdev_specs(args).iter().map(|spec| spec.split(',').next().unwrap_or("").trim().to_string()).filter(|n| !n.is_empty()).collect()
}

/// The `--vdev` strings EAL was started with (for [`vdev_args`]); set once by `Eal::init`.
pub(crate) static VDEVS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// The device arguments of vdev `name` as given to EAL (`role=client,socket=...`), if it was
/// created from a `--vdev` of [`Eal::init`](crate::Eal::init).
pub fn vdev_args(name: &str) -> Option<String> {
    VDEVS.get()?.iter().find_map(|spec| {
        let (n, args) = spec.split_once(',').unwrap_or((spec.as_str(), ""));
        (n.trim() == name).then(|| args.to_string())
    })
}

/// The device strings of `--vdev=X` / `--vdev X`, up to a `--`.
pub(crate) fn vdev_specs(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let spec = if let Some(v) = a.strip_prefix("--vdev=") {
            Some(v.to_string())
        } else if a == "--vdev" {
            it.next().cloned()
        } else {
            None
        };
        if let Some(spec) = spec {
            out.push(spec);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::vdev_names;

    #[test]
    fn vdev_names_parsed() {
        let a: Vec<String> = ["-l", "0", "--vdev=net_ring0", "--vdev", "net_memif0,role=server", "--no-pci"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(vdev_names(&a), vec!["net_ring0", "net_memif0"]);
    }
}

/// Why DPDK 22.11's net_memif would refuse `path` as the filesystem socket of
/// `socket=PATH,socket-abstract=no` (`memif_check_socket_filename`), if it would: the path
/// must be shorter than 108 bytes and name a file in a directory given from the root (the
/// directory is checked with `faccessat(-1, dir, ...)`, which fails for a relative one and
/// for `""`, i.e. a file right in `/`), and that directory must exist. Checked before EAL so
/// that the error is clear and a stale-socket clean-up never touches such a path (a relative
/// one would be resolved against the current directory, not where DPDK looks).
pub fn memif_socket_path_problem(path: &str) -> Option<String> {
    if path.len() >= 108 {
        return Some(format!("socket={path}: a Unix socket path must be shorter than 108 bytes"));
    }
    let dir = match path.rfind('/') {
        Some(i) if path.starts_with('/') && i > 0 => &path[..i],
        _ => {
            return Some(format!(
                "socket={path}: net_memif (DPDK 22.11) wants an absolute path in a directory other than / (e.g. socket=/tmp/memif.sock), \
                 or socket-abstract=yes for an abstract socket name"
            ))
        }
    };
    if let Some(why) = not_a_directory(std::path::Path::new(dir)) {
        return Some(format!("socket={path}: {why}"));
    }
    None
}

/// Why `dir` cannot hold a socket file, if it cannot: "the directory D does not exist", or,
/// when the path runs into something else on the way (`/tmp/x/afile/s.sock` with `afile` a
/// regular file), "P is not a directory" for the first such P, which is what the user must
/// change (saying "does not exist" there sent them looking for a missing directory).
pub fn not_a_directory(dir: &std::path::Path) -> Option<String> {
    if dir.is_dir() {
        return None;
    }
    // the longest prefix that exists (following symbolic links, as bind() does)
    match dir.ancestors().find(|a| !a.as_os_str().is_empty() && a.exists()) {
        Some(a) if !a.is_dir() => Some(format!("{} is not a directory", a.display())),
        _ => Some(format!("the directory {} does not exist", dir.display())),
    }
}

#[cfg(test)]
mod memif_path_tests {
    use super::memif_socket_path_problem as p;

    #[test]
    fn memif_socket_paths_dpdk_rejects_are_named() {
        assert_eq!(p("/tmp/m.sock"), None);
        for bad in ["./d.sock", "d.sock", "dir/d.sock", "/d.sock", "../x/d.sock"] {
            let e = p(bad).unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(e.contains("absolute path"), "{e}");
        }
        assert!(p("/no-such-dir-droce/m.sock").is_some_and(|e| e.contains("does not exist")));
        // a regular file where a directory should be is named, also further up the path
        let f = std::env::temp_dir().join(format!("droce-afile-{}", std::process::id()));
        std::fs::write(&f, b"").unwrap();
        let (a, b) = (format!("{}/s.sock", f.display()), format!("{}/sub/s.sock", f.display()));
        let (ea, eb) = (p(&a), p(&b));
        std::fs::remove_file(&f).unwrap();
        assert_eq!(ea, Some(format!("socket={a}: {} is not a directory", f.display())));
        assert_eq!(eb, Some(format!("socket={b}: {} is not a directory", f.display())));
        let long = format!("/tmp/{}", "x".repeat(110));
        assert!(p(&long).is_some_and(|e| e.contains("108")));
    }
}
