//! A child process of the lab: its output goes to a log file, it is killed on drop, and
//! the kernel kills it should the test thread that started it die first.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct Proc {
    pub name: String,
    pub log: PathBuf,
    child: Child,
}

impl Proc {
    /// Starts `cmd` with stdout and stderr appended to `dir/NAME.log`.
    pub fn spawn(name: &str, dir: &Path, mut cmd: Command) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .expect("open the process log");
        let err = out.try_clone().expect("clone the log handle");
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: only an async-signal-safe prctl between fork and exec.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))
                .map_err(std::io::Error::from)
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {name} ({:?}): {e}", cmd.get_program()));
        Proc {
            name: name.into(),
            log,
            child,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Still running?
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The last lines of its log, for failure messages.
    pub fn tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: std::time::Duration) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if !self.running() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        self.kill();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
