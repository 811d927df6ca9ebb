//! A network namespace joined to the host by a veth pair: the hub's API server listens on
//! the host end and proxies to the Sealed Secrets controller on the namespace end, as it
//! would to a pod (the API server refuses to proxy to loopback).
//!
//! Slots are leased with an flock under /tmp/spokekeeper-lab/netns, like the lab's
//! loopback addresses, so parallel tests and test binaries never share one; the next
//! holder of a slot removes what a crashed run left.

use std::fs::{self, File};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use super::run;

const DIR: &str = "/tmp/spokekeeper-lab/netns";
const SLOTS: u8 = 250;

pub struct Netns {
    /// `ip netns` name.
    pub name: String,
    /// The host end's address (the hub API server listens here).
    pub host: Ipv4Addr,
    /// The namespace end's address (the controller listens here).
    pub inner: Ipv4Addr,
    host_link: String,
    _lock: File,
}

impl Netns {
    pub fn create() -> Netns {
        fs::create_dir_all(DIR).expect("create the lab's netns directory");
        for slot in 0..SLOTS {
            let path = Path::new(DIR).join(slot.to_string());
            let Some(file) = crate::addr::try_lease(&path) else {
                continue;
            };
            let ns = Netns {
                name: format!("sklab{slot}"),
                host: Ipv4Addr::new(10, 213, slot, 1),
                inner: Ipv4Addr::new(10, 213, slot, 2),
                host_link: format!("sklh{slot}"),
                _lock: file,
            };
            ns.remove();
            ns.set_up();
            return ns;
        }
        panic!("all {SLOTS} lab network namespace slots are held");
    }

    fn set_up(&self) {
        let peer = format!("skln{}", self.host.octets()[2]);
        let (ns, host) = (self.name.as_str(), self.host_link.as_str());
        let host_cidr = format!("{}/30", self.host);
        let inner_cidr = format!("{}/30", self.inner);
        let steps: Vec<Vec<&str>> = vec![
            vec!["netns", "add", ns],
            vec!["link", "add", host, "type", "veth", "peer", "name", &peer],
            vec!["link", "set", &peer, "netns", ns],
            vec!["addr", "add", &host_cidr, "dev", host],
            vec!["link", "set", host, "up"],
            vec!["-n", ns, "addr", "add", &inner_cidr, "dev", &peer],
            vec!["-n", ns, "link", "set", &peer, "up"],
            vec!["-n", ns, "link", "set", "lo", "up"],
        ];
        for args in steps {
            run(Command::new("ip").args(&args)).unwrap_or_else(|e| panic!("lab netns: {e}"));
        }
    }

    /// A command that runs inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }

    fn remove(&self) {
        let _ = run(Command::new("ip").args(["netns", "del", &self.name]));
        let _ = run(Command::new("ip").args(["link", "del", &self.host_link]));
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.remove();
    }
}
