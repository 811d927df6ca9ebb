//! Processes found through /proc, for tests that check what runs and what was left
//! behind. Matches are exact (one argument, a path prefix), never a substring: in one test
//! binary another test's node may be 127.0.0.23 while this one looks for 127.0.0.2, or
//! hold this address again as soon as this test's node is gone.

use std::net::IpAddr;
use std::path::Path;

/// Every pid in /proc.
fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .collect()
}

/// Every process below `root`, from /proc/*/stat parent links.
pub fn descendants(root: i32) -> Vec<i32> {
    let mut parent_of = Vec::new();
    for pid in pids() {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may contain spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// Every process's pid and arguments (those that exit while being read are skipped).
pub fn command_lines() -> Vec<(i32, Vec<String>)> {
    let mut found = Vec::new();
    for pid in pids() {
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        found.push((pid, args));
    }
    found
}

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// Pids of live processes one of whose arguments contains `needle` (a path only this
/// test made, e.g. a script in its own directory).
pub fn pids_mentioning(needle: &str) -> Vec<i32> {
    command_lines()
        .into_iter()
        .filter(|(pid, args)| args.iter().any(|a| a.contains(needle)) && alive(*pid))
        .map(|(pid, _)| pid)
        .collect()
}

/// Our ssh client processes for `address` (the destination is one of their arguments).
pub fn ssh_clients_for(address: IpAddr) -> Vec<String> {
    let address = address.to_string();
    let bracketed = format!("{address}]");
    command_lines()
        .into_iter()
        .filter(|(pid, args)| {
            let is_ssh = args
                .first()
                .is_some_and(|a| a == "ssh" || a.ends_with("/ssh") || a.starts_with("ssh: "));
            is_ssh && args.iter().any(|a| *a == address || a.contains(&bracketed)) && alive(*pid)
        })
        .map(|(_, args)| args.join(" "))
        .collect()
}

/// Pids of the live sshds whose config (`-f`) is inside `dir`, a node's directory.
pub fn sshd_pids_in(dir: &Path) -> Vec<i32> {
    command_lines()
        .into_iter()
        .filter(|(pid, args)| {
            // sshd retitles itself: "sshd: /usr/sbin/sshd -D -e -f CONFIG [listener] ...".
            let line = args.join(" ");
            line.contains("/usr/sbin/sshd -D -e -f ")
                && line
                    .split(" -f ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .is_some_and(|config| Path::new(config).starts_with(dir))
                && alive(*pid)
        })
        .map(|(pid, _)| pid)
        .collect()
}
