//! Unpacking a layer into a directory without trusting it: no entry may leave the destination
//! (`..`, absolute paths, writing through a symlink, a symlink or hard link pointing outside),
//! and device files or FIFOs are refused. Whiteouts (`.wh.*`) are skipped: they delete files of
//! lower layers, which are not unpacked here.

use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use crate::Error;

pub(crate) fn unpack_tar(reader: impl Read, dest: &Path, image: &str) -> Result<(), Error> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

    let unsafe_entry = |entry: &Path, reason: String| Error::Unsafe {
        image: image.to_string(),
        entry: entry.display().to_string(),
        reason,
    };
    let io_err = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    };
    let layer_err = |source| Error::Io {
        action: "reading a layer of",
        path: PathBuf::from(image),
        source,
    };
    fs::create_dir_all(dest).map_err(io_err("creating", dest))?;
    let mut archive = tar::Archive::new(reader);
    // Directory modes are applied last, so a read-only directory can still receive its files.
    let mut dir_modes = Vec::new();
    for entry in archive.entries().map_err(layer_err)? {
        let mut entry = entry.map_err(layer_err)?;
        let raw = entry.path().map_err(layer_err)?.into_owned();
        let Some(rel) = relative(&raw) else {
            return Err(unsafe_entry(
                &raw,
                "leaves the destination (.. or a prefix)".into(),
            ));
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        if rel
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(".wh."))
        {
            continue;
        }
        let kind = entry.header().entry_type();
        let mode = entry.header().mode().map_err(layer_err)? & 0o777;
        make_parents(dest, &rel).map_err(|reason| unsafe_entry(&raw, reason))?;
        let target = dest.join(&rel);
        match kind {
            tar::EntryType::Directory => {
                match fs::symlink_metadata(&target) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => {
                        remove(&target)?;
                        fs::create_dir(&target).map_err(io_err("creating", &target))?;
                    }
                    Err(_) => fs::create_dir(&target).map_err(io_err("creating", &target))?,
                }
                dir_modes.push((target, mode));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                remove(&target)?;
                let mut file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&target)
                    .map_err(io_err("creating", &target))?;
                std::io::copy(&mut entry, &mut file).map_err(io_err("writing", &target))?;
                fs::set_permissions(&target, fs::Permissions::from_mode(mode))
                    .map_err(io_err("setting the mode of", &target))?;
            }
            tar::EntryType::Symlink => {
                let link = entry
                    .link_name()
                    .map_err(layer_err)?
                    .ok_or_else(|| unsafe_entry(&raw, "is a symlink without a target".into()))?
                    .into_owned();
                if link.is_absolute() {
                    return Err(unsafe_entry(
                        &raw,
                        format!(
                            "is an absolute symlink to {} (outside the destination)",
                            link.display()
                        ),
                    ));
                }
                let parent = rel.parent().unwrap_or(Path::new(""));
                if relative(&parent.join(&link)).is_none() {
                    return Err(unsafe_entry(
                        &raw,
                        format!(
                            "is a symlink to {} (outside the destination)",
                            link.display()
                        ),
                    ));
                }
                remove(&target)?;
                std::os::unix::fs::symlink(&link, &target)
                    .map_err(io_err("creating the symlink", &target))?;
            }
            tar::EntryType::Link => {
                let link = entry
                    .link_name()
                    .map_err(layer_err)?
                    .ok_or_else(|| unsafe_entry(&raw, "is a hard link without a target".into()))?
                    .into_owned();
                let Some(source) = relative(&link) else {
                    return Err(unsafe_entry(
                        &raw,
                        format!(
                            "is a hard link to {} (outside the destination)",
                            link.display()
                        ),
                    ));
                };
                make_parents(dest, &source).map_err(|reason| unsafe_entry(&raw, reason))?;
                let source = dest.join(source);
                match fs::symlink_metadata(&source) {
                    Ok(m) if m.is_file() => {}
                    _ => {
                        return Err(unsafe_entry(
                            &raw,
                            format!(
                                "is a hard link to {}, which is not a file unpacked before it",
                                link.display()
                            ),
                        ));
                    }
                }
                remove(&target)?;
                fs::hard_link(&source, &target).map_err(io_err("creating the link", &target))?;
            }
            tar::EntryType::Char | tar::EntryType::Block => {
                return Err(unsafe_entry(&raw, "is a device file".into()));
            }
            tar::EntryType::Fifo => {
                return Err(unsafe_entry(&raw, "is a FIFO".into()));
            }
            // PAX global headers and other metadata-only entries.
            _ => {}
        }
    }
    for (dir, mode) in dir_modes.into_iter().rev() {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode))
            .map_err(io_err("setting the mode of", &dir))?;
    }
    Ok(())
}

/// The entry path relative to the destination: leading `/` and `.` dropped, `..` resolved
/// lexically; None when it climbs above the destination.
fn relative(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(p) => out.push(p),
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Creates the directories above `rel` inside `dest`; refuses when one of them exists as a
/// symlink or a file (writing through it could leave the destination).
fn make_parents(dest: &Path, rel: &Path) -> Result<(), String> {
    let Some(parent) = rel.parent() else {
        return Ok(());
    };
    let mut at = dest.to_path_buf();
    for part in parent.components() {
        at.push(part);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!(
                    "would be written through the symlink {}",
                    at.display()
                ));
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "is below {}, which is not a directory",
                    at.display()
                ));
            }
            Err(_) => {
                fs::create_dir(&at).map_err(|e| format!("cannot create {}: {e}", at.display()))?
            }
        }
    }
    Ok(())
}

/// Removes what is at `path` (a file or a symlink, never following it); a directory stays.
fn remove(path: &Path) -> Result<(), Error> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(_) => Ok(()),
    }
    .map_err(|source| Error::Io {
        action: "replacing",
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_with(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        b.into_inner().unwrap()
    }

    fn entry(kind: tar::EntryType, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(0o755);
        h.set_size(size);
        h
    }

    /// Writes a raw path (tar::Builder refuses `..` itself).
    fn raw_path(h: &mut tar::Header, path: &str) {
        let name = &mut h.as_old_mut().name;
        name[..path.len()].copy_from_slice(path.as_bytes());
        h.set_cksum();
    }

    #[test]
    fn files_dirs_links_and_modes() {
        let data = tar_with(|b| {
            b.append_data(
                &mut entry(tar::EntryType::Directory, 0),
                "kubeless/",
                std::io::empty(),
            )
            .unwrap();
            let mut h = entry(tar::EntryType::Regular, 2);
            b.append_data(&mut h, "kubeless/run", &b"hi"[..]).unwrap();
            let mut h = entry(tar::EntryType::Symlink, 0);
            b.append_link(&mut h, "kubeless/link", "run").unwrap();
            let mut h = entry(tar::EntryType::Link, 0);
            b.append_link(&mut h, "kubeless/hard", "kubeless/run")
                .unwrap();
        });
        let dest = tempfile::tempdir().unwrap();
        unpack_tar(&data[..], dest.path(), "img").unwrap();
        use std::os::unix::fs::PermissionsExt;
        let run = dest.path().join("kubeless/run");
        assert_eq!(fs::read(&run).unwrap(), b"hi");
        assert_eq!(
            fs::metadata(&run).unwrap().permissions().mode() & 0o777,
            0o755
        );
        assert_eq!(
            fs::read_link(dest.path().join("kubeless/link")).unwrap(),
            Path::new("run")
        );
        assert_eq!(fs::read(dest.path().join("kubeless/hard")).unwrap(), b"hi");
    }

    #[test]
    fn refuses_escapes_and_devices() {
        let dest = tempfile::tempdir().unwrap();
        let inner = dest.path().join("d");

        let dotdot = tar_with(|b| {
            let mut h = entry(tar::EntryType::Regular, 1);
            raw_path(&mut h, "../evil");
            b.append(&h, &b"x"[..]).unwrap();
        });
        let err = unpack_tar(&dotdot[..], &inner, "img").unwrap_err();
        assert!(err.to_string().contains("leaves the destination"), "{err}");

        let abs_link = tar_with(|b| {
            let mut h = entry(tar::EntryType::Symlink, 0);
            b.append_link(&mut h, "etc", "/etc").unwrap();
        });
        let err = unpack_tar(&abs_link[..], &inner, "img").unwrap_err();
        assert!(err.to_string().contains("absolute symlink"), "{err}");

        let up_link = tar_with(|b| {
            let mut h = entry(tar::EntryType::Symlink, 0);
            b.append_link(&mut h, "a/up", "../../x").unwrap();
        });
        assert!(unpack_tar(&up_link[..], &inner, "img").is_err());

        // A symlink inside, then a file through it.
        let through = tar_with(|b| {
            let mut h = entry(tar::EntryType::Symlink, 0);
            b.append_link(&mut h, "sub", ".").unwrap();
            let mut h = entry(tar::EntryType::Regular, 1);
            b.append_data(&mut h, "sub/f", &b"x"[..]).unwrap();
        });
        let err = unpack_tar(&through[..], &inner, "img").unwrap_err();
        assert!(err.to_string().contains("through the symlink"), "{err}");

        let device = tar_with(|b| {
            let mut h = entry(tar::EntryType::Char, 0);
            b.append_data(&mut h, "null", std::io::empty()).unwrap();
        });
        let err = unpack_tar(&device[..], &inner, "img").unwrap_err();
        assert!(err.to_string().contains("device"), "{err}");
        assert!(!dest.path().join("evil").exists());
    }
}
