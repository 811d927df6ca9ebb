//! A tick's commits through one `git fast-import`: one commit per call, in the order
//! made, on the branch HEAD names, each file's bytes inline in the stream exactly as the
//! plaintext guard judged them (fast-import applies no filter). The branch moves only
//! when the stream ends with `done`: a stream cut short (a crash, a kill) moves nothing,
//! and the next sync discards the files written for it, as after a crash between write
//! and commit. Hooks do not run (fast-import runs none). Review mode's signed commits
//! keep their own path (branch/): fast-import cannot sign.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::stage::{Attributes, refuse_conversion};
use super::{GIT_TIMEOUT, Repo, RepoError, plaintext};

const ARGS: &str = "fast-import --quiet --done --date-format=now";

/// An open `git fast-import` and what its commits need: see [`Repo::commits`].
pub struct Commits {
    /// Killed when dropped unfinished: nothing moves.
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The full ref name HEAD points to.
    branch: String,
    /// The last commit: HEAD's id when opened (None: unborn), then the last mark.
    tip: Option<String>,
    mark: u64,
    author: String,
    committer: String,
    /// Paths whose attributes were read, and those that have some.
    checked: std::collections::HashSet<String>,
    attributes: Attributes,
    endings: Option<(String, String)>,
    /// Paths committed in the stream: the index takes them from HEAD at the end.
    committed: Vec<String>,
    /// Why the stream cannot go on (git died, a write failed); its commits are lost.
    broken: Option<String>,
}

impl Repo {
    /// Opens the stream for commits on HEAD's branch; the attributes of `expected` (the
    /// paths the caller may commit) are read once here, others' when committed.
    pub async fn commits(&self, expected: &[&Path]) -> Result<Commits, RepoError> {
        let (branch, tip) = self.head().await?;
        let (author, committer) = self.idents().await?;
        let names: Vec<String> = expected
            .iter()
            .map(|r| r.to_string_lossy().into_owned())
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let attributes = self.attributes_of(&refs, &[], false).await?;
        let endings = self.line_endings().await?;
        let args: Vec<OsString> = ARGS.split(' ').map(OsString::from).collect();
        let mut cmd = self.git_command(&args);
        cmd.stdin(Stdio::piped());
        let mut child = cmd.spawn().map_err(RepoError::Spawn)?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(RepoError::Spawn(std::io::Error::other("no pipes to git")));
        };
        Ok(Commits {
            child: Some(child),
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            branch,
            tip,
            mark: 0,
            author,
            committer,
            checked: names.into_iter().collect(),
            attributes,
            endings,
            committed: Vec::new(),
            broken: None,
        })
    }

    /// HEAD's branch (full ref name) and commit (None: no commit yet).
    async fn head(&self) -> Result<(String, Option<String>), RepoError> {
        let args = ["rev-parse", "HEAD", "--symbolic-full-name", "HEAD", "--"];
        let (branch, tip) = match self.git(args).await {
            Ok(out) => {
                let mut lines = out.lines();
                let tip = lines.next().unwrap_or_default().to_string();
                (lines.next().unwrap_or_default().to_string(), Some(tip))
            }
            Err(_) => (self.git(["symbolic-ref", "-q", "HEAD"]).await?, None),
        };
        let branch = branch.trim().to_string();
        if !branch.starts_with("refs/heads/") {
            let at = tip.as_deref().unwrap_or_default();
            return Err(RepoError::Detached {
                head: crate::text::one_line(&format!("{branch} ({at})"), 100),
            });
        }
        Ok((branch, tip))
    }

    /// Author and committer as `Name <email>`, as `git commit` would take them.
    async fn idents(&self) -> Result<(String, String), RepoError> {
        if let Some((name, email)) = &self.author {
            let ident = format!("{} <{}>", no_crud(name), no_crud(email));
            return Ok((ident.clone(), ident));
        }
        let author = self.git(["var", "GIT_AUTHOR_IDENT"]).await?;
        let committer = self.git(["var", "GIT_COMMITTER_IDENT"]).await?;
        Ok((without_date(&author), without_date(&committer)))
    }

    /// Puts each of `rels` in the working tree back as the index holds it.
    pub(super) async fn restore(&self, rels: &[String]) {
        for rel in rels {
            let _ = self.git(["checkout", "--quiet", "--", rel]).await;
        }
    }
}

impl Commits {
    /// Commits the files at `rels` as they are in the working tree, with `message`: the
    /// new commit's id, or None when none of them changed. A file with plaintext, or
    /// one git would convert, is refused and put back; nothing is committed.
    pub async fn commit(
        &mut self,
        repo: &Repo,
        rels: &[&Path],
        message: &str,
    ) -> Result<Option<String>, RepoError> {
        let names: Vec<String> = rels
            .iter()
            .map(|r| r.to_string_lossy().into_owned())
            .collect();
        let mut files = Vec::with_capacity(rels.len());
        for (rel, name) in rels.iter().zip(&names) {
            let bytes = repo.no_links(rel).and_then(|path| {
                crate::fsutil::read_under(&path, &repo.path).map_err(|e| repo.io(&path, e))
            })?;
            let judged = match change(name, &bytes) {
                Ok(c) => self.unconverted(repo, name).await.map(|()| c),
                Err(e) => Err(e),
            };
            match judged {
                Ok(c) => files.push((name, bytes, c)),
                Err(e) => {
                    repo.restore(&names).await;
                    return Err(e);
                }
            }
        }
        let made = self.write(message, &files).await;
        if made.is_err() {
            repo.restore(&names).await;
        }
        if let Ok(Some(_)) = &made {
            self.committed.extend(names);
        }
        made
    }

    /// The commit of `files` (name, bytes, their change), unless the last holds them all.
    async fn write(
        &mut self,
        message: &str,
        files: &[(&String, Vec<u8>, Vec<u8>)],
    ) -> Result<Option<String>, RepoError> {
        let mut changed = false;
        for (name, bytes, _) in files {
            changed |= !self.holds(name, bytes).await?;
        }
        if !changed {
            return Ok(None);
        }
        self.mark += 1;
        let mut cmd = self.header(message);
        for (_, _, c) in files {
            cmd.extend_from_slice(c);
        }
        cmd.extend(format!("get-mark :{}\n", self.mark).into_bytes());
        self.send(&cmd).await?;
        let id = self.line().await?;
        self.tip = Some(format!(":{}", self.mark));
        Ok(Some(id))
    }

    /// Commits the removal of the files at `rels` with `message`: the new commit's id, or
    /// None when the last commit holds none of them. Their copies in the working tree go
    /// too; when the stream breaks, [`Commits::finish`] puts them back.
    pub async fn remove(
        &mut self,
        repo: &Repo,
        rels: &[&Path],
        message: &str,
    ) -> Result<Option<String>, RepoError> {
        let mut held = Vec::new();
        for rel in rels {
            let name = rel.to_string_lossy().into_owned();
            if self.blob(&name).await?.is_some() {
                held.push((repo.no_links(rel)?, name));
            }
        }
        if held.is_empty() {
            return Ok(None);
        }
        self.mark += 1;
        let mut cmd = self.header(message);
        for (_, name) in &held {
            cmd.extend_from_slice(b"D ");
            cmd.extend(quoted(name));
            cmd.push(b'\n');
        }
        cmd.extend(format!("get-mark :{}\n", self.mark).into_bytes());
        self.send(&cmd).await?;
        let id = self.line().await?;
        self.tip = Some(format!(":{}", self.mark));
        for (path, name) in held {
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(file = %name, error = %e, "removed in the commit, but not from the clone's working tree");
            }
            self.committed.push(name);
        }
        Ok(Some(id))
    }

    /// Whether the stream broke: its commits are lost, and [`Commits::finish`] says why.
    pub fn broken(&self) -> bool {
        self.broken.is_some()
    }

    /// Ends the stream: the branch moves to the last commit, and the index takes the
    /// committed files from it (the working tree already holds them). On failure nothing
    /// moved, and the working tree's committed files are put back as the index holds them.
    pub async fn finish(mut self, repo: &Repo) -> Result<(), RepoError> {
        let ended = self.end().await;
        let paths = std::mem::take(&mut self.committed);
        if let Err(e) = ended {
            repo.restore(&paths).await;
            return Err(e);
        }
        if paths.is_empty() {
            return Ok(());
        }
        let mut input = Vec::new();
        for p in &paths {
            input.extend_from_slice(p.as_bytes());
            input.push(0);
        }
        let args = [
            "reset",
            "--quiet",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
        ];
        // The commits are made: an index left behind is only stale, and the next sync
        // (which finds it differs from HEAD) resets it.
        if let Err(e) = repo.git_with(args, &[], Some(&input)).await {
            tracing::warn!(error = %e, "the index could not take the committed files");
        }
        Ok(())
    }

    async fn end(&mut self) -> Result<(), RepoError> {
        if self.broken.is_none() {
            let _ = self.send(b"done\n").await;
        }
        self.stdin = None;
        let Some(mut child) = self.child.take() else {
            return Err(self.fail("the stream was closed".into()));
        };
        if self.broken.is_some() {
            let _ = child.start_kill();
        }
        let out = tokio::time::timeout(GIT_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| RepoError::Timeout {
                args: ARGS.into(),
                secs: GIT_TIMEOUT.as_secs(),
            })?
            .map_err(RepoError::Spawn)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        match (out.status.success(), self.broken.take()) {
            (true, None) => Ok(()),
            (_, why) => Err(RepoError::Git {
                args: ARGS.into(),
                stderr: format!("{} {}", why.unwrap_or_default(), stderr.trim())
                    .trim()
                    .to_string(),
            }),
        }
    }

    /// Refuses `name` when git attributes apply to it or the clone converts line endings.
    async fn unconverted(&mut self, repo: &Repo, name: &str) -> Result<(), RepoError> {
        if self.checked.insert(name.to_string()) {
            self.attributes
                .extend(repo.attributes_of(&[name], &[], false).await?);
        }
        refuse_conversion(name, &self.attributes, self.endings.as_ref())
    }

    /// Whether the last commit holds exactly `bytes` at `name` (asked of fast-import).
    async fn holds(&mut self, name: &str, bytes: &[u8]) -> Result<bool, RepoError> {
        let Some(id) = self.blob(name).await? else {
            return Ok(false);
        };
        self.send(format!("cat-blob {id}\n").as_bytes()).await?;
        let header = self.line().await?;
        let size: usize = header
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| self.fail(format!("cat-blob answered {header:?}")))?;
        // The blob and its line feed, read whole even when the size differs: the answer
        // must be consumed. In chunks: the fleet repo's blob may be large.
        let mut same = size == bytes.len();
        let mut chunk = vec![0; (size + 1).min(64 << 10)];
        let mut at = 0;
        while at <= size {
            let n = (size + 1 - at).min(chunk.len());
            self.read_exact(&mut chunk[..n]).await?;
            let end = (at + n).min(size);
            same = same && chunk[..end - at] == bytes[at..end];
            at += n;
        }
        Ok(same)
    }

    /// The id of the regular file the last commit holds at `name` (asked of fast-import).
    async fn blob(&mut self, name: &str) -> Result<Option<String>, RepoError> {
        let Some(tip) = self.tip.clone() else {
            return Ok(None);
        };
        let mut ask = format!("ls {tip} ").into_bytes();
        ask.extend(quoted(name));
        ask.push(b'\n');
        self.send(&ask).await?;
        let entry = self.line().await?;
        let meta: Vec<&str> = entry
            .split_once('\t')
            .map(|(meta, _)| meta.split(' ').collect())
            .unwrap_or_default();
        Ok(match meta.as_slice() {
            ["100644", "blob", id] => Some(id.to_string()),
            _ => None,
        })
    }

    /// `commit`, `mark`, idents, the message and the parent.
    fn header(&self, message: &str) -> Vec<u8> {
        let message = cleaned(message);
        let mut cmd = format!(
            "commit {}\nmark :{}\nauthor {} now\ncommitter {} now\ndata {}\n",
            self.branch,
            self.mark,
            self.author,
            self.committer,
            message.len()
        )
        .into_bytes();
        cmd.extend_from_slice(message.as_bytes());
        cmd.push(b'\n');
        if let Some(tip) = &self.tip {
            cmd.extend(format!("from {tip}\n").into_bytes());
        }
        cmd
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<(), RepoError> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(self.fail("the stream was closed".into()));
        };
        let sent = async {
            stdin.write_all(bytes).await?;
            stdin.flush().await
        };
        match tokio::time::timeout(GIT_TIMEOUT, sent).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.fail(format!("writing to git: {e}"))),
            Err(_) => Err(self.fail("git did not read within the timeout".into())),
        }
    }

    async fn line(&mut self) -> Result<String, RepoError> {
        let mut line = String::new();
        match tokio::time::timeout(GIT_TIMEOUT, self.stdout.read_line(&mut line)).await {
            Ok(Ok(n)) if n > 0 && line.ends_with('\n') => Ok(line.trim_end().to_string()),
            Ok(Ok(_)) => Err(self.fail("git ended the stream".into())),
            Ok(Err(e)) => Err(self.fail(format!("reading from git: {e}"))),
            Err(_) => Err(self.fail("git did not answer within the timeout".into())),
        }
    }

    async fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), RepoError> {
        match tokio::time::timeout(GIT_TIMEOUT, self.stdout.read_exact(buf)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(self.fail(format!("reading from git: {e}"))),
            Err(_) => Err(self.fail("git did not answer within the timeout".into())),
        }
    }

    /// Marks the stream broken; the error for the call that found it.
    fn fail(&mut self, why: String) -> RepoError {
        self.broken.get_or_insert(why.clone());
        RepoError::Git {
            args: ARGS.into(),
            stderr: why,
        }
    }
}

/// One file's change in the stream: the bytes the plaintext guard judges, and nothing
/// else, follow `data`. A file the guard refuses never becomes a change.
fn change(name: &str, bytes: &[u8]) -> Result<Vec<u8>, RepoError> {
    if let Some(what) = plaintext::refused_to_commit(name, bytes) {
        return Err(RepoError::Plaintext {
            file: name.into(),
            what,
        });
    }
    let mut out = b"M 100644 inline ".to_vec();
    out.extend(quoted(name));
    out.extend(format!("\ndata {}\n", bytes.len()).into_bytes());
    out.extend_from_slice(bytes);
    out.push(b'\n');
    Ok(out)
}

/// A path as fast-import reads a quoted one (C style): no byte of it can end the line.
fn quoted(path: &str) -> Vec<u8> {
    let mut out = vec![b'"'];
    for &b in path.as_bytes() {
        match b {
            b'"' | b'\\' => out.extend([b'\\', b]),
            b'\n' => out.extend(b"\\n"),
            0..=0x1f | 0x7f => out.extend(format!("\\{b:03o}").into_bytes()),
            _ => out.push(b),
        }
    }
    out.push(b'"');
    out
}

/// The message as `git commit -m` stores it: trailing whitespace and blank lines at
/// either end dropped, runs of blank lines made one, each line ended.
fn cleaned(message: &str) -> String {
    let mut out = String::with_capacity(message.len() + 1);
    let mut blank = false;
    for line in message.lines().map(str::trim_end) {
        if line.is_empty() {
            blank = !out.is_empty();
            continue;
        }
        if blank {
            out.push('\n');
            blank = false;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `Name <email> 1700000000 +0000` (git var) without the date: each commit is dated now.
fn without_date(ident: &str) -> String {
    let ident = ident.trim();
    match ident.rfind('>') {
        Some(end) => ident[..=end].to_string(),
        None => ident.to_string(),
    }
}

/// What git itself drops from a name or an email (`<`, `>`, line breaks): none can
/// end the ident's line in the stream or its fields.
fn no_crud(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, '<' | '>' | '\n' | '\r' | '\0'))
        .collect::<String>()
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bytes_in_the_stream_are_the_bytes_the_guard_judged() {
        let sealed = b"apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nspec:\n  encryptedData:\n    value: AgB=\n";
        let out = change("fluxcd/a.yaml", sealed).unwrap();
        let head = format!("M 100644 inline \"fluxcd/a.yaml\"\ndata {}\n", sealed.len());
        assert_eq!(&out[..head.len()], head.as_bytes());
        assert_eq!(&out[head.len()..out.len() - 1], sealed);
        for leak in [
            &b"apiVersion: v1\nkind: Secret\ndata:\n  value: aGk=\n"[..],
            b"-----BEGIN EC PRIVATE KEY-----\nMHc=\n",
            b"kind: SealedSecret\0",
        ] {
            let e = change("a.yaml", leak).unwrap_err();
            assert_eq!(
                e.to_string(),
                RepoError::Plaintext {
                    file: "a.yaml".into(),
                    what: plaintext::refused_to_commit("a.yaml", leak).unwrap(),
                }
                .to_string()
            );
        }
        assert!(matches!(
            change("a\nM 100644 inline x", sealed),
            Err(RepoError::Plaintext { .. })
        ));
    }

    #[test]
    fn no_path_or_ident_can_end_its_line_in_the_stream() {
        assert_eq!(quoted("a/b.yaml"), b"\"a/b.yaml\"");
        assert_eq!(quoted("a\"b\\c"), b"\"a\\\"b\\\\c\"");
        assert_eq!(quoted("a\nb\tc"), b"\"a\\nb\\011c\"");
        assert_eq!(no_crud(" Bot\n<x> "), "Botx");
        assert_eq!(without_date("A B <a@b> 1700000000 +0100\n"), "A B <a@b>");
    }

    #[test]
    fn a_message_is_cleaned_as_git_commit_m_cleans_it() {
        assert_eq!(cleaned("s: x"), "s: x\n");
        assert_eq!(
            cleaned("\n\ns: x  \n\n\n\nbody\t\nk: v\n\n"),
            "s: x\n\nbody\nk: v\n"
        );
        assert_eq!(cleaned("a\r\nb"), "a\nb\n");
    }
}
