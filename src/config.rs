//! Configuration files: a droce-pmd command line spread over lines (format documented at the top
//! of `conf/default.conf`, which is also embedded as the no-argument default).

use crate::args::error::UsageError;

/// The default run, used when droce-pmd is started with no arguments.
pub const EMBEDDED_DEFAULT: &str = include_str!("../conf/default.conf");

/// Arguments read from a configuration, split at its `--` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigArgs {
    pub eal: Vec<String>,
    pub app: Vec<String>,
}

pub fn embedded() -> Result<ConfigArgs, UsageError> {
    parse(EMBEDDED_DEFAULT, std::process::id())
}

pub fn load(path: &str) -> Result<ConfigArgs, UsageError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("cannot read config file '{path}': {e} (give a readable file, e.g. --config conf/default.conf)")))?;
    parse(&text, std::process::id())
}

/// Splits `text` into EAL and app arguments; `{pid}` becomes `pid`.
pub fn parse(text: &str, pid: u32) -> Result<ConfigArgs, UsageError> {
    let pid = pid.to_string();
    let mut words = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        words.extend(line.split_whitespace().map(|w| w.replace("{pid}", &pid)));
    }
    let mut parts = words.splitn(2, |w| w == "--");
    let eal = parts.next().unwrap_or(&[]).to_vec();
    let app = parts.next().unwrap_or(&[]).to_vec();
    if app.iter().any(|w| w == "--") {
        return Err(UsageError("config has more than one '--' line; use one to separate EAL options from app options".into()));
    }
    Ok(ConfigArgs { eal, app })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_pid_and_split() {
        let c = parse("# x\n--no-huge  # inline\n--file-prefix=p{pid}\n--\n-i # prompt\n\n", 42).unwrap();
        assert_eq!(c.eal, vec!["--no-huge", "--file-prefix=p42"]);
        assert_eq!(c.app, vec!["-i"]);
    }

    #[test]
    fn no_separator_is_all_eal() {
        let c = parse("--no-huge\n", 1).unwrap();
        assert_eq!(c.app, Vec::<String>::new());
    }

    #[test]
    fn two_separators_rejected() {
        assert!(parse("--\n-i\n--\n", 1).is_err());
    }

    #[test]
    fn shipped_configs_parse() {
        for f in ["conf/default.conf", "conf/real-nic.conf"] {
            let path = format!("{}/{f}", env!("CARGO_MANIFEST_DIR"));
            let c = load(&path).unwrap();
            let mut all = c.eal.clone();
            all.push("--".into());
            all.extend(c.app);
            crate::args::parse(&all).unwrap_or_else(|e| panic!("{f}: {e}"));
        }
    }

    #[test]
    fn missing_file_is_one_line() {
        let e = load("/nonexistent/droce.conf").unwrap_err().0;
        assert!(e.contains("cannot read config file") && !e.contains('\n'), "{e}");
    }
}
