//! The fleet repo over HTTP, for source-controller: Debian's `git http-backend` (the CGI
//! program git ships for smart HTTP) behind a small HTTP/1.1 server on loopback. Read
//! only: http-backend refuses pushes from an unauthenticated client unless told
//! otherwise, and it is not told.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

const BACKEND: &str = "/usr/lib/git-core/git-http-backend";

pub struct GitHttp {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicUsize>,
    handle: Option<JoinHandle<()>>,
}

impl GitHttp {
    /// Serves the bare repositories under `root` as http://ADDR/NAME.
    pub fn serve(root: &Path) -> GitHttp {
        assert!(
            Path::new(BACKEND).is_file(),
            "{BACKEND} is missing: install Debian's git"
        );
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the git HTTP server");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let (s, n, root) = (stop.clone(), served.clone(), root.to_owned());
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (root, n) = (root.clone(), n.clone());
                        std::thread::spawn(move || {
                            if handle(conn, &root).is_ok() {
                                n.fetch_add(1, Ordering::Relaxed);
                            }
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        GitHttp {
            addr,
            stop,
            served,
            handle: Some(handle),
        }
    }

    /// The URL of the repository `name` (a directory under the root).
    pub fn url(&self, name: &str) -> String {
        format!("http://{}/{name}", self.addr)
    }

    /// How many requests were answered.
    pub fn served(&self) -> usize {
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for GitHttp {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One request, one response, then the connection is closed.
fn handle(conn: TcpStream, root: &PathBuf) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = match (parts.next(), parts.next()) {
        (Some(m), Some(t)) => (m.to_string(), t.to_string()),
        _ => return respond(conn, "400 Bad Request", &[], b""),
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
            break;
        }
        if let Some((k, v)) = line.trim_end().split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let body = if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        read_chunked(&mut reader)?
    } else {
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        body
    };
    let mut cmd = Command::new(BACKEND);
    cmd.env_clear()
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("PATH", "/usr/bin:/bin");
    for (name, var) in [
        ("content-type", "CONTENT_TYPE"),
        ("git-protocol", "GIT_PROTOCOL"),
        ("content-encoding", "HTTP_CONTENT_ENCODING"),
    ] {
        if let Some(v) = header(name) {
            cmd.env(var, v);
        }
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(&body));
    let out = child.wait_with_output()?;
    let _ = writer.join();
    // CGI output: headers (Status: gives the status), a blank line, the body.
    let split = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4))
        .or_else(|| {
            out.stdout
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| (i, i + 2))
        });
    let Some((end, start)) = split else {
        return respond(
            conn,
            "502 Bad Gateway",
            &[],
            b"git http-backend: no headers",
        );
    };
    let head = String::from_utf8_lossy(&out.stdout[..end]).into_owned();
    let mut status = "200 OK".to_string();
    let mut cgi_headers = Vec::new();
    for l in head.lines() {
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("status") {
                status = v.trim().to_string();
            } else {
                cgi_headers.push(format!("{}: {}", k.trim(), v.trim()));
            }
        }
    }
    respond(conn, &status, &cgi_headers, &out.stdout[start..])
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        if size == 0 {
            // Trailers, up to the blank line.
            loop {
                line.clear();
                if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                    return Ok(body);
                }
            }
        }
        let at = body.len();
        body.resize(at + size, 0);
        reader.read_exact(&mut body[at..])?;
        line.clear();
        reader.read_line(&mut line)?;
    }
}

fn respond(
    mut conn: TcpStream,
    status: &str,
    headers: &[String],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status}\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)?;
    conn.flush()
}
