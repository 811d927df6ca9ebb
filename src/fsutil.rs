//! Files written so that a crash never leaves a half-written one behind, and files
//! inside the fleet repo read and written without following symbolic links.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

/// How temporary files start; a process killed mid-write leaves one behind.
pub(crate) const TEMP_PREFIX: &str = ".spokekeeper-";

/// Writes `bytes` to a temporary file beside `path`, fsyncs it, renames it over `path`
/// and fsyncs the directory. Readers see the old file or the new one, never a mix.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}

/// A symbolic link where spokekeeper reads or writes inside the fleet repo: one committed
/// there could point at any file this process can read or write.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} is a symbolic link: spokekeeper never reads or writes through a link inside the fleet repo; replace it with a regular file or directory",
    path.display()
)]
pub struct SymlinkError {
    pub path: PathBuf,
}

/// The first of `root/rel`'s components below `root` that is a symbolic link. A
/// component that does not exist ends the walk: what is created there is a real
/// directory or file. `root` itself may be a link (the operator chose it).
pub(crate) fn symlink_in(root: &Path, rel: &Path) -> std::io::Result<Option<PathBuf>> {
    let mut path = root.to_path_buf();
    for c in rel.components() {
        match c {
            Component::Normal(name) => path.push(name),
            Component::CurDir => continue,
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("{} leaves {}", rel.display(), root.display()),
                ));
            }
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => return Ok(Some(path)),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// The most spokekeeper reads of one file: the fleet repo holds YAML of a few KiB per
/// file, and a pushed file of any size (or a link to `/dev/zero`) must not exhaust memory.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// A file over [`MAX_FILE_BYTES`], or one that is not a regular file (a device, a FIFO):
/// either could be read without end.
#[derive(Debug, thiserror::Error)]
pub enum UnboundedError {
    #[error(
        "{} is larger than {MAX_FILE_BYTES} bytes, the most spokekeeper reads of one file: replace it with the small text file it should be",
        path.display()
    )]
    TooLarge { path: PathBuf },
    #[error(
        "{} is not a regular file (a device, FIFO or socket): spokekeeper reads only regular files; replace it with one",
        path.display()
    )]
    NotRegular { path: PathBuf },
}

/// Reads at most [`MAX_FILE_BYTES`] of the regular file `path`; with `nofollow`,
/// refusing (ELOOP) when its last component is a symbolic link.
fn read_capped(path: &Path, nofollow: bool) -> std::io::Result<Vec<u8>> {
    let mut open = std::fs::OpenOptions::new();
    open.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking: opening a FIFO must not wait for a writer.
        let mut flags = rustix::fs::OFlags::NONBLOCK;
        if nofollow {
            flags |= rustix::fs::OFlags::NOFOLLOW;
        }
        open.custom_flags(flags.bits() as i32);
    }
    let file = open.open(path)?;
    let unbounded = |e: UnboundedError| Err(std::io::Error::other(e));
    if !file.metadata()?.is_file() {
        return unbounded(UnboundedError::NotRegular {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return unbounded(UnboundedError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// Reads `path`; when it lies under `root` (the fleet clone), refuses a symbolic link on
/// any component below `root` with a [`SymlinkError`]. Both are resolved physically
/// first, so neither a `root` named through a link or `..` nor a `path` written with
/// `..` or through a link outside the clone slips past as text that does not match.
/// Inside or out, at most [`MAX_FILE_BYTES`] of a regular file are read
/// ([`UnboundedError`]). This is the only way spokekeeper reads a file in the clone
/// (tests/suite/docs/clone_reads.rs holds it so).
pub fn read_under(path: &Path, root: &Path) -> std::io::Result<Vec<u8>> {
    let root = match root.canonicalize() {
        Ok(r) => r,
        // No clone there: nothing can lie under it.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return read_capped(path, false),
        Err(e) => return Err(e),
    };
    match resolve(path, &root)? {
        Resolved::Link(link) => Err(std::io::Error::other(SymlinkError { path: link })),
        Resolved::Real(real) if real.starts_with(&root) => read_capped(&real, true),
        // Outside the clone, links are the operator's business.
        Resolved::Real(_) => read_capped(path, false),
    }
}

/// How many links one resolution follows before giving up, as the kernel's ELOOP.
const MAX_LINKS: usize = 40;

enum Resolved {
    /// The path with every link and `..` resolved; no link below the root was met.
    Real(PathBuf),
    /// The first symbolic link met below the root.
    Link(PathBuf),
}

/// Resolves `path` one component at a time, as the kernel would, following links
/// outside `root` (canonical) and stopping at the first one below it.
fn resolve(path: &Path, root: &Path) -> std::io::Result<Resolved> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let mut todo: std::collections::VecDeque<PathBuf> = absolute
        .components()
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect();
    let mut real = PathBuf::from("/");
    let mut links = 0;
    while let Some(next) = todo.pop_front() {
        match next.components().next() {
            Some(Component::RootDir | Component::Prefix(_)) => real = next,
            Some(Component::ParentDir) => {
                real.pop();
            }
            Some(Component::Normal(name)) => {
                let candidate = real.join(name);
                if !std::fs::symlink_metadata(&candidate)?
                    .file_type()
                    .is_symlink()
                {
                    real = candidate;
                    continue;
                }
                if candidate.starts_with(root) {
                    return Ok(Resolved::Link(candidate));
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("{}: too many levels of symbolic links", path.display()),
                    ));
                }
                // The target's components go first; a relative one starts from `real`.
                let target = std::fs::read_link(&candidate)?;
                for c in target.components().rev() {
                    todo.push_front(PathBuf::from(c.as_os_str()));
                }
            }
            Some(Component::CurDir) | None => {}
        }
    }
    Ok(Resolved::Real(real))
}

/// `path` relative to the clone `repo`, when it is inside it.
pub(crate) fn inside(path: &Path, repo: &Path) -> Option<PathBuf> {
    if let Ok(rel) = path.strip_prefix(repo) {
        return Some(rel.to_path_buf());
    }
    let (p, r) = (path.canonicalize().ok()?, repo.canonicalize().ok()?);
    p.strip_prefix(r).ok().map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.yaml");
        std::fs::write(&path, "old contents that are longer").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn links_below_the_root_are_found_and_not_followed() {
        let (dir, root) = clone_with_links();
        let outside = dir.path().join("outside");
        // The root itself may be reached through a link.
        let via = dir.path().join("via");

        assert_eq!(symlink_in(&via, Path::new("real/f")).unwrap(), None);
        assert_eq!(symlink_in(&root, Path::new("real/new/x")).unwrap(), None);
        assert_eq!(
            symlink_in(&root, Path::new("file-link")).unwrap(),
            Some(root.join("file-link"))
        );
        assert_eq!(
            symlink_in(&root, Path::new("dir-link/secret")).unwrap(),
            Some(root.join("dir-link"))
        );
        assert!(symlink_in(&root, Path::new("../x")).is_err());

        assert_eq!(read_under(&via.join("real/f"), &via).unwrap(), b"f");
        for rel in ["file-link", "dir-link/secret"] {
            let e = read_under(&root.join(rel), &root).unwrap_err().to_string();
            assert!(
                e.contains("symbolic link") && e.contains(&*root.display().to_string()),
                "{e}"
            );
        }
        assert!(
            read_capped(&root.join("file-link"), true).is_err(),
            "O_NOFOLLOW"
        );
        // Outside the root, links are the operator's business.
        assert_eq!(read_under(&root.join("file-link"), &outside).unwrap(), b"s");
    }

    /// A clone with a real file, a link to a file outside and a link to a directory
    /// outside, and the root reachable through a link (`via`).
    #[cfg(unix)]
    fn clone_with_links() -> (tempfile::TempDir, PathBuf) {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        let root = dir.path().join("clone");
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::fs::write(root.join("real/f"), "f").unwrap();
        symlink(outside.join("secret"), root.join("file-link")).unwrap();
        symlink(&outside, root.join("dir-link")).unwrap();
        symlink(&root, dir.path().join("via")).unwrap();
        (dir, root)
    }

    #[cfg(unix)]
    fn refused(path: &Path, root: &Path) {
        let e = read_under(path, root).unwrap_err();
        let inner = e.get_ref().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            inner.contains("symbolic link"),
            "{} under {}: {e}",
            path.display(),
            root.display()
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_root_named_through_a_link_still_guards_the_clone() {
        let (dir, root) = clone_with_links();
        let via = dir.path().join("via");
        refused(&root.join("file-link"), &via);
        refused(&via.join("dir-link/secret"), &root);
        assert_eq!(read_under(&root.join("real/f"), &via).unwrap(), b"f");
    }

    #[cfg(unix)]
    #[test]
    fn a_root_written_with_dotdot_still_guards_the_clone() {
        let (_dir, root) = clone_with_links();
        refused(&root.join("file-link"), &root.join("real/.."));
        assert_eq!(
            read_under(&root.join("real/f"), &root.join("real/..")).unwrap(),
            b"f"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_path_written_with_dotdot_is_checked_where_it_lands() {
        let (dir, root) = clone_with_links();
        // Enters the clone from outside it, and wanders inside it.
        refused(&dir.path().join("outside/../clone/file-link"), &root);
        refused(&root.join("real/../file-link"), &root);
        refused(&root.join("real/../dir-link/secret"), &root);
        assert_eq!(
            read_under(&root.join("real/../real/./f"), &root).unwrap(),
            b"f"
        );
    }

    #[cfg(unix)]
    #[test]
    fn an_operators_link_into_the_clone_does_not_launder_a_link_inside_it() {
        let (dir, root) = clone_with_links();
        let operator = dir.path().join("pinned.crt");
        std::os::unix::fs::symlink(root.join("file-link"), &operator).unwrap();
        refused(&operator, &root);
        let to_real = dir.path().join("to-real");
        std::os::unix::fs::symlink(root.join("real/f"), &to_real).unwrap();
        assert_eq!(read_under(&to_real, &root).unwrap(), b"f");
    }

    #[cfg(unix)]
    #[test]
    fn a_link_loop_outside_the_clone_is_an_error_not_a_hang() {
        let (dir, root) = clone_with_links();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        assert!(read_under(&a, &root).is_err());
    }

    /// The inner error of a refused read, as text.
    #[cfg(unix)]
    fn why(path: &Path, root: &Path) -> String {
        let e = read_under(path, root).unwrap_err();
        e.get_ref().map(|e| e.to_string()).unwrap_or_default()
    }

    #[cfg(unix)]
    #[test]
    fn a_file_over_the_cap_is_refused_inside_and_outside_the_clone() {
        let (dir, root) = clone_with_links();
        let max = usize::try_from(MAX_FILE_BYTES).unwrap();
        std::fs::write(root.join("real/big"), vec![b'a'; max + 1]).unwrap();
        std::fs::write(root.join("real/full"), vec![b'a'; max]).unwrap();
        let outside = dir.path().join("outside/big");
        std::fs::write(&outside, vec![b'a'; max + 1]).unwrap();
        for path in [root.join("real/big"), outside] {
            let e = why(&path, &root);
            assert!(
                e.contains(&path.display().to_string()) && e.contains("larger than"),
                "{e}"
            );
        }
        assert_eq!(
            read_under(&root.join("real/full"), &root).unwrap().len(),
            max
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_device_or_fifo_is_refused_not_read_without_end() {
        let (dir, root) = clone_with_links();
        // An operator's path outside the clone that names /dev/zero, through a link too.
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for path in [Path::new("/dev/zero"), zero.as_path()] {
            assert!(why(path, &root).contains("not a regular file"), "{path:?}");
        }
        // Inside the clone a link to it is refused as a link.
        std::os::unix::fs::symlink("/dev/zero", root.join("zero")).unwrap();
        assert!(why(&root.join("zero"), &root).contains("symbolic link"));
        // A FIFO with no writer: refused at once, not waited on.
        let fifo = root.join("real/fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::RWXU).unwrap();
        assert!(why(&fifo, &root).contains("not a regular file"));
    }
}
