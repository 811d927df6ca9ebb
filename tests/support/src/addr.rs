//! Loopback addresses for lab nodes, leased through lock files so that tests in one
//! process and in several test binaries never share one.
//!
//! The lease is an flock on /tmp/spokekeeper-lab/addr/127.0.X.Y; the kernel drops it when
//! the process dies, so a crashed run frees its addresses. The lock file records the
//! sshd it started, and the next holder kills that sshd if it outlived its test.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) const LAB_DIR: &str = "/tmp/spokekeeper-lab";

/// 127.0.0.2 ..= 127.0.255.254, skipping .0 and .255 in the last octet.
const RANGE: usize = 256 * 254 - 1;

/// The lock file at `path`, created if missing and flocked by us; None when another
/// process holds it (the kernel drops the lock when the holder dies).
pub(crate) fn try_lease(path: &Path) -> Option<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .ok()?;
    file.try_lock().is_ok().then_some(file)
}

/// The lowest lease index this process may not hold (a hint: other processes' leases
/// are still found by trying).
static LOWEST_MAYBE_FREE: AtomicUsize = AtomicUsize::new(1);

fn address(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, (i / 254) as u8, (i % 254 + 1) as u8)
}

pub(crate) struct AddressLease {
    pub addr: Ipv4Addr,
    file: File,
}

impl AddressLease {
    /// The lowest free address: lock files stay few (as many as nodes ever ran at once).
    pub fn acquire() -> AddressLease {
        let dir = Path::new(LAB_DIR).join("addr");
        fs::create_dir_all(&dir).expect("create the lab's address directory");
        // Below the hint this process holds every address: a fleet of N nodes takes N
        // lock attempts, not N²/2.
        for i in LOWEST_MAYBE_FREE.load(Ordering::Relaxed).max(1)..=RANGE {
            let addr = address(i);
            let path = dir.join(addr.to_string());
            if let Some(file) = try_lease(&path) {
                let mut lease = AddressLease { addr, file };
                lease.clean_up_after_previous_holder();
                LOWEST_MAYBE_FREE.fetch_max(i + 1, Ordering::Relaxed);
                return lease;
            }
        }
        panic!("no free loopback address left in 127.0.0.0/16 (all {RANGE} lab leases are held)");
    }

    /// Records the sshd serving this address, for the next holder should we crash.
    pub fn record_sshd(&mut self, pid: u32, config: &Path) {
        let _ = self.file.set_len(0);
        let _ = self.file.seek(SeekFrom::Start(0));
        let _ = writeln!(self.file, "sshd {pid} {}", config.display());
    }

    pub fn sudoers_path(&self) -> PathBuf {
        // sudo skips files whose name contains a dot.
        PathBuf::from(format!(
            "/etc/sudoers.d/spokekeeper-lab-{}",
            self.addr.to_string().replace('.', "-")
        ))
    }

    fn index(&self) -> usize {
        let [_, _, x, y] = self.addr.octets();
        usize::from(x) * 254 + usize::from(y) - 1
    }

    fn clean_up_after_previous_holder(&mut self) {
        let mut record = String::new();
        let _ = self.file.read_to_string(&mut record);
        let mut words = record.split_whitespace();
        if let (Some("sshd"), Some(pid), Some(config)) = (words.next(), words.next(), words.next())
            && let Ok(pid) = pid.parse::<i32>()
            && let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline"))
            && cmdline
                .windows(config.len())
                .any(|w| w == config.as_bytes())
            && let Some(pid) = rustix::process::Pid::from_raw(pid)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        let _ = fs::remove_file(self.sudoers_path());
        let _ = self.file.set_len(0);
    }
}

impl Drop for AddressLease {
    fn drop(&mut self) {
        LOWEST_MAYBE_FREE.fetch_min(self.index(), Ordering::Relaxed);
    }
}
