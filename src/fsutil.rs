//! Files written so that a crash never leaves a half-written one behind, and files
//! inside the fleet repo read and written without following symbolic links.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

/// How temporary files start; a process killed mid-write leaves one behind.
pub(crate) const TEMP_PREFIX: &str = ".spokekeeper-";

/// Writes `bytes` to a temporary file beside `path`, fsyncs it, renames it over `path`
/// and fsyncs the directory. Readers see the old file or the new one, never a mix.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
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

/// Reads `path`, refusing (ELOOP) when its last component is a symbolic link.
pub(crate) fn read_nofollow(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut open = std::fs::OpenOptions::new();
    open.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        open.custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
    }
    let mut bytes = Vec::new();
    open.open(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads `path`; when it lies under `root` (the fleet clone), refuses a symbolic link on
/// any component below `root` with a [`SymlinkError`].
pub(crate) fn read_under(path: &Path, root: &Path) -> std::io::Result<Vec<u8>> {
    let Ok(rel) = path.strip_prefix(root) else {
        return std::fs::read(path);
    };
    if let Some(link) = symlink_in(root, rel)? {
        return Err(std::io::Error::other(SymlinkError { path: link }));
    }
    read_nofollow(path)
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
        // The root itself may be reached through a link.
        let via = dir.path().join("via");
        symlink(&root, &via).unwrap();

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
            read_nofollow(&root.join("file-link")).is_err(),
            "O_NOFOLLOW"
        );
        // Outside the root, links are the operator's business.
        assert_eq!(read_under(&root.join("file-link"), &outside).unwrap(), b"s");
    }
}
