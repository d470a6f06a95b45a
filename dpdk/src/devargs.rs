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
