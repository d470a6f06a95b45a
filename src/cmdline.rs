//! Interactive prompt commands: one table (`COMMANDS`) gives the syntax shown by `help` and the
//! first words used to recognise a command; `parse` turns a line into a typed `Command`.
//! An unknown or malformed command is a one-line error, and the prompt goes on.

use crate::modes;

/// `all` or one port id (checked against the real port count by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortSel {
    All,
    One(u16),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help(Option<String>),
    ShowPortInfo(PortSel),
    ShowPortStats(PortSel),
    ShowPortXstats(PortSel),
    ClearPortStats(PortSel),
    ShowFwdStats,
    ClearFwdStats,
    ShowConfigFwd,
    SetFwd(&'static str),
    SetBurst(u16),
    SetTxpkts(u16),
    SetNbCores(u16),
    SetPromisc(PortSel, bool),
    Start { tx_first: bool },
    Stop,
    Quit,
}

/// Syntax and help of every command, in the order `help` lists them.
pub const COMMANDS: &[(&str, &str)] = &[
    ("help [COMMAND]", "list commands, or show the help of one"),
    ("show port info all|N", "port description: driver, MAC, link, queues"),
    ("show port stats all|N", "port counters and throughput since the last show"),
    ("show port xstats all|N", "extended (driver) counters that are not zero"),
    ("clear port stats all|N", "reset port counters"),
    ("show fwd stats all", "forward statistics of the current or last run"),
    ("clear fwd stats all", "reset forward statistics"),
    ("show config fwd", "forwarding mode, streams, lcores, burst, frame size"),
    ("set fwd MODE", "forwarding mode: io, mac, macswap, rxonly, txonly, switch"),
    ("set burst N", "packets per burst (1..512), while stopped"),
    ("set txpkts SIZE", "txonly frame size (42..mbuf room), while stopped"),
    ("set nbcore N", "forwarding lcores to use, while stopped"),
    ("set promisc all|N on|off", "promiscuous mode"),
    ("start [tx_first]", "start forwarding (tx_first: send one burst per port first)"),
    ("stop", "stop forwarding and print forward statistics"),
    ("quit", "stop, close ports and exit (also: exit, Ctrl-D)"),
];

/// One line on stderr, prompt continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdError(pub String);

fn err<T>(s: impl Into<String>) -> Result<T, CmdError> {
    Err(CmdError(s.into()))
}

fn port_sel(word: Option<&str>, cmd: &str) -> Result<PortSel, CmdError> {
    match word {
        Some("all") => Ok(PortSel::All),
        Some(w) => match w.parse::<u16>() {
            Ok(n) => Ok(PortSel::One(n)),
            Err(_) => err(format!("'{cmd} {w}': '{w}' is not a port id; write '{cmd} all' or '{cmd} 0'")),
        },
        None => err(format!("'{cmd}' needs a port: '{cmd} all' or '{cmd} 0'")),
    }
}

fn number(word: Option<&str>, cmd: &str, lo: u16, hi: u16) -> Result<u16, CmdError> {
    match word.map(|w| w.parse::<u16>()) {
        Some(Ok(n)) if (lo..=hi).contains(&n) => Ok(n),
        Some(_) => err(format!("'{cmd} {}': expected a number in {lo}..={hi}", word.unwrap_or(""))),
        None => err(format!("'{cmd}' needs a number in {lo}..={hi}")),
    }
}

fn no_more(rest: &[&str], cmd: &str) -> Result<(), CmdError> {
    match rest.first() {
        None => Ok(()),
        Some(w) => err(format!("'{cmd}' takes nothing after it, got '{w}'")),
    }
}

/// Parses one prompt line. `Ok(None)` for an empty line or a comment.
pub fn parse(line: &str) -> Result<Option<Command>, CmdError> {
    let line = line.split('#').next().unwrap_or("");
    let w: Vec<&str> = line.split_whitespace().collect();
    let Some(&first) = w.first() else { return Ok(None) };
    let c = match (first, w.get(1).copied(), w.get(2).copied()) {
        ("help", topic, _) => {
            if w.len() > 2 {
                Command::Help(Some(w[1..].join(" ")))
            } else {
                Command::Help(topic.map(String::from))
            }
        }
        ("show", Some("port"), Some(what @ ("info" | "stats" | "xstats"))) => {
            let cmd = format!("show port {what}");
            let sel = port_sel(w.get(3).copied(), &cmd)?;
            no_more(&w[4..], &cmd)?;
            match what {
                "info" => Command::ShowPortInfo(sel),
                "stats" => Command::ShowPortStats(sel),
                _ => Command::ShowPortXstats(sel),
            }
        }
        ("clear", Some("port"), Some("stats")) => {
            let sel = port_sel(w.get(3).copied(), "clear port stats")?;
            no_more(&w[4..], "clear port stats")?;
            Command::ClearPortStats(sel)
        }
        ("show", Some("fwd"), Some("stats")) => {
            no_more(&w[3.min(w.len())..].iter().copied().filter(|x| *x != "all").collect::<Vec<_>>(), "show fwd stats all")?;
            Command::ShowFwdStats
        }
        ("clear", Some("fwd"), Some("stats")) => {
            no_more(&w[3.min(w.len())..].iter().copied().filter(|x| *x != "all").collect::<Vec<_>>(), "clear fwd stats all")?;
            Command::ClearFwdStats
        }
        ("show", Some("config"), Some("fwd")) => {
            no_more(&w[3..], "show config fwd")?;
            Command::ShowConfigFwd
        }
        ("set", Some("fwd"), mode) => {
            let Some(mode) = mode else {
                return err(format!("'set fwd' needs a mode: one of {}", modes::names().join(", ")));
            };
            let m = modes::lookup(mode)
                .ok_or_else(|| CmdError(format!("'set fwd {mode}': unknown mode; choose one of {}", modes::names().join(", "))))?;
            no_more(&w[3..], "set fwd")?;
            Command::SetFwd(m.name)
        }
        ("set", Some("burst"), n) => Command::SetBurst(number(n, "set burst", 1, crate::pkt::MAX_BURST)?),
        ("set", Some("txpkts"), n) => Command::SetTxpkts(number(n, "set txpkts", crate::pkt::MIN_TXPKTS, 9600)?),
        ("set", Some("nbcore"), n) => Command::SetNbCores(number(n, "set nbcore", 1, 1024)?),
        ("set", Some("promisc"), _) => {
            let sel = port_sel(w.get(2).copied(), "set promisc")?;
            let on = match w.get(3).copied() {
                Some("on") => true,
                Some("off") => false,
                _ => return err("'set promisc' needs on|off: 'set promisc all on'"),
            };
            Command::SetPromisc(sel, on)
        }
        ("start", arg, _) => match arg {
            None => Command::Start { tx_first: false },
            Some("tx_first") => Command::Start { tx_first: true },
            Some(other) => return err(format!("'start {other}': write 'start' or 'start tx_first'")),
        },
        ("stop", _, _) => {
            no_more(&w[1..], "stop")?;
            Command::Stop
        }
        ("quit" | "exit", _, _) => Command::Quit,
        _ => return err(unknown(&w)),
    };
    Ok(Some(c))
}

fn unknown(w: &[&str]) -> String {
    let typed = w.join(" ");
    // The closest command by its leading words, if it is close enough to be a typo.
    let best = COMMANDS
        .iter()
        .map(|(syn, _)| {
            let head: Vec<&str> = syn.split_whitespace().take_while(|x| x.chars().all(|c| c.is_ascii_lowercase() || c == '_')).collect();
            let n = head.len().min(w.len());
            (crate::args::edit_distance(&w[..n].join(" "), &head[..n].join(" ")), *syn)
        })
        .min();
    match best {
        Some((d, syn)) if d <= 2 => format!("unknown command '{typed}'; did you mean '{syn}'? (type 'help' for the list)"),
        _ => format!("unknown command '{typed}'; type 'help' for the list of commands"),
    }
}

/// The `help` output, or the help of commands starting with `topic`.
pub fn help(topic: Option<&str>) -> Result<String, CmdError> {
    let rows: Vec<_> = COMMANDS
        .iter()
        .filter(|(syn, _)| topic.map(|t| syn.starts_with(t)).unwrap_or(true))
        .collect();
    if rows.is_empty() {
        return err(format!("no command starts with '{}'; type 'help' for the list", topic.unwrap_or("")));
    }
    let mut s = String::new();
    if topic.is_none() {
        s.push_str("Commands (ports: a number or 'all'):\n");
    }
    for (syn, h) in rows {
        s.push_str(&format!("  {syn:<28} {h}\n"));
    }
    if topic.is_none() || topic.is_some_and(|t| "set fwd".starts_with(t) || t.starts_with("set fwd")) {
        s.push_str("Forwarding modes:\n");
        for m in modes::MODES {
            s.push_str(&format!("  {:<28} {}\n", m.name, m.summary));
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Command {
        parse(s).unwrap().unwrap()
    }

    fn e(s: &str) -> String {
        parse(s).unwrap_err().0
    }

    #[test]
    fn the_issue_commands() {
        assert_eq!(p("help"), Command::Help(None));
        assert_eq!(p("show port info all"), Command::ShowPortInfo(PortSel::All));
        assert_eq!(p("show port stats 1"), Command::ShowPortStats(PortSel::One(1)));
        assert_eq!(p("  clear   port stats all "), Command::ClearPortStats(PortSel::All));
        assert_eq!(p("set fwd txonly"), Command::SetFwd("txonly"));
        assert_eq!(p("set fwd macswap"), Command::SetFwd("macswap"));
        assert_eq!(p("start"), Command::Start { tx_first: false });
        assert_eq!(p("start tx_first"), Command::Start { tx_first: true });
        assert_eq!(p("stop"), Command::Stop);
        assert_eq!(p("show config fwd"), Command::ShowConfigFwd);
        assert_eq!(p("quit"), Command::Quit);
        assert_eq!(p("show fwd stats all"), Command::ShowFwdStats);
        assert_eq!(p("set promisc 0 off"), Command::SetPromisc(PortSel::One(0), false));
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(parse("# note").unwrap(), None);
    }

    #[test]
    fn errors_are_one_line_and_helpful() {
        for (line, want) in [
            ("frobnicate", "unknown command 'frobnicate'; type 'help'"),
            ("shwo port stats all", "did you mean 'show port stats all|N'"),
            ("shwo config", "did you mean 'show config fwd'"),
            ("show port stats", "needs a port"),
            ("show port stats x", "not a port id"),
            ("show port stats all extra", "takes nothing after it"),
            ("set fwd bogus", "choose one of io, mac, macswap, rxonly, txonly"),
            ("set fwd", "needs a mode"),
            ("set burst 0", "1..=512"),
            ("start now", "'start tx_first'"),
            ("set promisc all maybe", "on|off"),
        ] {
            let m = e(line);
            assert!(m.contains(want), "{line}: {m}");
            assert!(!m.contains('\n'), "{line}: {m}");
        }
    }

    #[test]
    fn help_lists_every_command() {
        let h = help(None).unwrap();
        for (syn, _) in COMMANDS {
            assert!(h.contains(syn));
        }
        assert!(help(Some("show port")).unwrap().contains("show port stats"));
        assert!(help(Some("zzz")).is_err());
    }
}
