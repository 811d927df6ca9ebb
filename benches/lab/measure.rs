//! What the fleet and scale benchmarks measure of a process run: wall, the CPU of it and
//! everything it started (under this bench as a child subreaper), its peak RSS; /proc
//! fields; and the descriptor limit they raise.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The fields of /proc/self/stat after the command name, from the state field (3) on.
fn self_stat() -> Vec<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let rest = stat.rsplit_once(')').expect("stat").1;
    rest.split_whitespace()
        .map(|w| w.parse().unwrap_or(0))
        .collect()
}

/// CPU time of every child this process has reaped (and theirs): cutime + cstime.
pub fn children_cpu() -> Duration {
    let f = self_stat();
    // Fields 16 and 17 (cutime, cstime), counted from the state field (3); in USER_HZ,
    // which the /proc ABI fixes at 100.
    Duration::from_millis((f[13] + f[14]) * 10)
}

/// CPU time of this process itself (utime + stime): in the scale bench, the lab's servers.
#[allow(dead_code)] // not every bench that includes this file asks
pub fn self_cpu() -> Duration {
    let f = self_stat();
    // Fields 14 and 15 (utime, stime), counted from the state field (3).
    Duration::from_millis((f[11] + f[12]) * 10)
}

/// Raises the descriptor limit: both limits to `want` when allowed (CAP_SYS_RESOURCE, e.g.
/// root) and higher than the hard one, else the soft one to the hard one. Returns (soft
/// before, soft now), for the bench to say so.
pub fn raise_nofile(want: u64) -> (Option<u64>, Option<u64>) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let raised = limit.maximum.is_some_and(|hard| hard < want)
        && setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(want),
                maximum: Some(want),
            },
        )
        .is_ok();
    if !raised {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        )
        .expect("raise RLIMIT_NOFILE to its hard limit");
    }
    (limit.current, getrlimit(Resource::Nofile).current)
}

/// One process run: wall, CPU of it and everything it waited for, its peak RSS.
pub struct Measured {
    pub wall: Duration,
    pub cpu: Duration,
    pub peak_kib: u64,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Set in the environment of this bench re-executed as a wrapper (see [`reaper_main`]): the
/// file it writes the command's peak RSS to.
const REAPER: &str = "SPOKEKEEPER_BENCH_REAPER";

/// Runs `cmd` under this bench as a child subreaper (see [`reaper_main`]), so the CPU of
/// everything it started lands in this process's cutime+cstime, including anything it
/// detached (the ssh mux masters of earlier versions).
pub fn measure(cmd: Command) -> Measured {
    let peak_file = tempfile::NamedTempFile::new().expect("peak file");
    let mut wrapped = Command::new(std::env::current_exe().expect("current exe"));
    wrapped
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .env(REAPER, peak_file.path());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        wrapped.current_dir(d);
    }
    let cpu0 = children_cpu();
    let started = Instant::now();
    let mut child = wrapped
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = String::new();
    let mut stderr = String::new();
    let mut err_pipe = child.stderr.take().expect("stderr");
    let err_reader = std::thread::spawn(move || {
        let _ = err_pipe.read_to_string(&mut stderr);
        stderr
    });
    let _ = child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout);
    let status = child.wait().expect("wait");
    let wall = started.elapsed();
    Measured {
        wall,
        cpu: children_cpu().saturating_sub(cpu0),
        peak_kib: std::fs::read_to_string(peak_file.path())
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0),
        code: status.code().unwrap_or(-1),
        stdout,
        stderr: err_reader.join().expect("stderr reader"),
    }
}

/// The wrapper: runs its arguments as a command, sampling the command's VmHWM until it
/// exits, then waits for every orphan reparented to it (a child subreaper): whatever the
/// command detached (earlier versions' ssh mux masters).
fn reaper_main(peak_file: &std::ffi::OsStr) -> ! {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).expect("subreaper");
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let mut child = Command::new(&args[0])
        .args(&args[1..])
        .env_remove(REAPER)
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let mut peak = 0;
    let status = loop {
        if let Some(kib) = spokekeeper_test_support::status_kib(pid, "VmHWM:") {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::empty()) {}
    std::fs::write(peak_file, peak.to_string()).expect("peak file");
    std::process::exit(status.code().unwrap_or(-1));
}

/// At the top of a bench's main: when re-executed as the wrapper, be it.
pub fn reaper_if_asked() {
    if let Some(peak_file) = std::env::var_os(REAPER) {
        reaper_main(&peak_file);
    }
}
