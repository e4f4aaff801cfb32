//! The layer holding a directory: a deterministic tar (entries sorted by name, mtime 0, one
//! owner for every entry, modes as on disk), gzip'ed.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};

use crate::Error;

/// A built layer: its gzip'ed bytes, their digest, and the digest of the uncompressed tar.
pub(crate) struct Layer {
    pub gzip: Vec<u8>,
    pub digest: String,
    pub diff_id: String,
}

pub(crate) fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The numeric owner of the layer's files from an image config's `User` ("65532:65532",
/// "1000"): 0 for a name, and gid 0 when only a uid is given (what a runtime does for a uid
/// without a passwd entry).
pub(crate) fn owner_of_user(user: &str) -> (u64, u64) {
    let (uid, gid) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    match uid.trim().parse::<u64>() {
        Ok(uid) => (uid, gid.and_then(|g| g.trim().parse().ok()).unwrap_or(0)),
        Err(_) => (0, 0),
    }
}

/// "/kubeless" → ["kubeless"]; "/" or "" → [] (the image root). Refuses "." and "..".
pub(crate) fn root_components(root: &str) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    for part in root.split('/').filter(|p| !p.is_empty()) {
        if part == "." || part == ".." {
            return Err(Error::Image {
                image: root.to_string(),
                reason: format!("layer root {root:?} must be an absolute path without . or .."),
            });
        }
        out.push(part.to_string());
    }
    Ok(out)
}

/// Tars `dir` so its files land under `root` in the image.
pub(crate) fn build_layer(dir: &Path, root: &str, owner: (u64, u64)) -> Result<Layer, Error> {
    let io_err = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    };
    let meta = fs::metadata(dir).map_err(io_err("reading", dir))?;
    if !meta.is_dir() {
        return Err(Error::Io {
            action: "reading",
            path: dir.to_path_buf(),
            source: std::io::Error::other("not a directory"),
        });
    }
    let mut tar = tar::Builder::new(Vec::new());
    tar.follow_symlinks(false);
    let components = root_components(root)?;
    let mut prefix = PathBuf::new();
    for (i, part) in components.iter().enumerate() {
        prefix.push(part);
        // The root directory itself takes the mode of `dir`; directories above it are 0755.
        let mode = if i + 1 == components.len() {
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777
        } else {
            0o755
        };
        let owner = if i + 1 == components.len() {
            owner
        } else {
            (0, 0)
        };
        let mut header = header(tar::EntryType::Directory, mode, owner, 0);
        tar.append_data(&mut header, &prefix, std::io::empty())
            .map_err(io_err("writing the layer entry for", dir))?;
    }
    append_dir(&mut tar, dir, &prefix, owner)?;
    let tar = tar
        .into_inner()
        .map_err(io_err("finishing the layer of", dir))?;
    let diff_id = sha256_digest(&tar);
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&tar)
        .and_then(|_| gz.try_finish())
        .map_err(io_err("compressing the layer of", dir))?;
    let gzip = gz
        .finish()
        .map_err(io_err("compressing the layer of", dir))?;
    Ok(Layer {
        digest: sha256_digest(&gzip),
        gzip,
        diff_id,
    })
}

fn header(kind: tar::EntryType, mode: u32, owner: (u64, u64), size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_uid(owner.0);
    header.set_gid(owner.1);
    header.set_mtime(0);
    header.set_size(size);
    header
}

fn append_dir(
    tar: &mut tar::Builder<Vec<u8>>,
    dir: &Path,
    prefix: &Path,
    owner: (u64, u64),
) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let io_err = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    };
    let mut entries = fs::read_dir(dir)
        .map_err(io_err("reading", dir))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_err("reading", dir))?;
    entries.sort();
    for name in entries {
        let path = dir.join(&name);
        let in_image = prefix.join(&name);
        let meta = fs::symlink_metadata(&path).map_err(io_err("reading", &path))?;
        let mode = meta.permissions().mode() & 0o7777;
        let kind = meta.file_type();
        if kind.is_symlink() {
            let target = fs::read_link(&path).map_err(io_err("reading the link", &path))?;
            let mut header = header(tar::EntryType::Symlink, 0o777, owner, 0);
            tar.append_link(&mut header, &in_image, &target)
                .map_err(io_err("adding to the layer", &path))?;
        } else if kind.is_dir() {
            let mut header = header(tar::EntryType::Directory, mode, owner, 0);
            tar.append_data(&mut header, &in_image, std::io::empty())
                .map_err(io_err("adding to the layer", &path))?;
            append_dir(tar, &path, &in_image, owner)?;
        } else if kind.is_file() {
            let file = fs::File::open(&path).map_err(io_err("reading", &path))?;
            let mut header = header(tar::EntryType::Regular, mode, owner, meta.len());
            tar.append_data(&mut header, &in_image, file)
                .map_err(io_err("adding to the layer", &path))?;
        } else {
            return Err(Error::Io {
                action: "adding to the layer",
                path,
                source: std::io::Error::other(
                    "not a regular file, directory or symlink (sockets, FIFOs and devices cannot go into an image layer)",
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn owner_from_user() {
        assert_eq!(owner_of_user("65532:65532"), (65532, 65532));
        assert_eq!(owner_of_user("1000"), (1000, 0));
        assert_eq!(owner_of_user("app"), (0, 0));
        assert_eq!(owner_of_user("1000:staff"), (1000, 0));
        assert_eq!(owner_of_user(""), (0, 0));
    }

    #[test]
    fn root_must_be_plain() {
        assert_eq!(root_components("/kubeless").unwrap(), vec!["kubeless"]);
        assert_eq!(root_components("/opt/fn/").unwrap(), vec!["opt", "fn"]);
        assert!(root_components("/").unwrap().is_empty());
        assert!(root_components("/a/../etc").is_err());
    }

    #[test]
    fn layer_is_deterministic_sorted_and_keeps_modes() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("b")).unwrap();
        fs::write(dir.path().join("b/z.txt"), "z").unwrap();
        fs::write(dir.path().join("a.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(dir.path().join("a.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("a.sh", dir.path().join("c")).unwrap();
        let one = build_layer(dir.path(), "/kubeless", (65532, 65532)).unwrap();
        // Timestamps on disk must not matter.
        fs::write(dir.path().join("b/z.txt"), "z").unwrap();
        let two = build_layer(dir.path(), "/kubeless", (65532, 65532)).unwrap();
        assert_eq!(one.digest, two.digest);
        assert_eq!(one.diff_id, two.diff_id);

        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(&one.gzip[..])
            .read_to_end(&mut tar)
            .unwrap();
        assert_eq!(sha256_digest(&tar), one.diff_id);
        let mut archive = tar::Archive::new(&tar[..]);
        let entries: Vec<(String, u32, u64, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().display().to_string(),
                    h.mode().unwrap(),
                    h.uid().unwrap(),
                    h.mtime().unwrap(),
                )
            })
            .collect();
        let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "kubeless",
                "kubeless/a.sh",
                "kubeless/b",
                "kubeless/b/z.txt",
                "kubeless/c"
            ]
        );
        assert_eq!(entries[1].1, 0o755);
        assert!(entries.iter().all(|e| e.2 == 65532 && e.3 == 0));
    }
}
