//! `prepare`: the first init step. Turns the ConfigMap's function entry into
//! files in the install volume, like Kubeless's `prepare` container did with
//! base64, curl, sha256sum, unzip and tar.

use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::cli::PrepareArgs;

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(
        "unknown function content type {0:?} (want text|base64|url, optionally +zip or +compressedtar, +deps)"
    )]
    ContentType(String),
    #[error("cannot read the function source {path}")]
    ReadSource {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the function source is not valid base64")]
    Base64(#[source] base64::DecodeError),
    #[error("the function source does not hold a URL")]
    EmptyUrl,
    #[error("cannot download the function from {url}")]
    Download {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("downloading the function from {url} answered HTTP {status}")]
    DownloadStatus { url: String, status: u16 },
    #[error("unsupported checksum {0:?} (want sha256:<hex> or empty)")]
    ChecksumFormat(String),
    #[error(
        "checksum mismatch: the function content has sha256:{actual}, expected sha256:{expected}"
    )]
    ChecksumMismatch { expected: String, actual: String },
    #[error("cannot unzip the function")]
    Zip(#[source] zip::result::ZipError),
    #[error("cannot untar the function")]
    Tar(#[source] std::io::Error),
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start an async runtime")]
    Runtime(#[source] std::io::Error),
}

/// How the function content is encoded and packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Text,
    Base64,
    Url,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packing {
    File,
    Zip,
    CompressedTar,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentType {
    pub encoding: Encoding,
    pub packing: Packing,
    /// The dependency file is inside the archive.
    pub deps_inside: bool,
}

impl std::str::FromStr for ContentType {
    type Err = PrepareError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || PrepareError::ContentType(s.to_owned());
        let mut parts = s.trim().split('+');
        let encoding = match parts.next().unwrap_or("") {
            "" | "text" => Encoding::Text,
            "base64" => Encoding::Base64,
            "url" => Encoding::Url,
            _ => return Err(bad()),
        };
        let mut ct = ContentType {
            encoding,
            packing: Packing::File,
            deps_inside: false,
        };
        for p in parts {
            match p {
                "zip" if ct.packing == Packing::File => ct.packing = Packing::Zip,
                "compressedtar" if ct.packing == Packing::File => {
                    ct.packing = Packing::CompressedTar
                }
                "deps" => ct.deps_inside = true,
                _ => return Err(bad()),
            }
        }
        Ok(ct)
    }
}

/// Check `content` against a `sha256:<hex>` checksum; empty passes.
pub fn verify_checksum(checksum: &str, content: &[u8]) -> Result<(), PrepareError> {
    let checksum = checksum.trim();
    if checksum.is_empty() {
        return Ok(());
    }
    let Some(expected) = checksum.strip_prefix("sha256:") else {
        return Err(PrepareError::ChecksumFormat(checksum.to_owned()));
    };
    let expected = expected.trim().to_ascii_lowercase();
    let actual = hex::encode(Sha256::digest(content));
    if actual != expected {
        return Err(PrepareError::ChecksumMismatch { expected, actual });
    }
    Ok(())
}

async fn download(url: &str) -> Result<Vec<u8>, PrepareError> {
    // reqwest is built without a default TLS provider; ring is the workspace's.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let err = |source| PrepareError::Download {
        url: url.to_owned(),
        source,
    };
    let resp = reqwest::Client::builder()
        .build()
        .map_err(err)?
        .get(url)
        .send()
        .await
        .map_err(err)?;
    if !resp.status().is_success() {
        return Err(PrepareError::DownloadStatus {
            url: url.to_owned(),
            status: resp.status().as_u16(),
        });
    }
    Ok(resp.bytes().await.map_err(err)?.to_vec())
}

fn write_file(path: &Path, content: &[u8]) -> Result<(), PrepareError> {
    std::fs::write(path, content).map_err(|source| PrepareError::Write {
        path: path.to_owned(),
        source,
    })
}

fn untar(content: &[u8], dest: &Path) -> Result<(), PrepareError> {
    // Like `tar xf`, detect the compression from the magic bytes.
    let reader: Box<dyn Read + '_> = if content.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(content))
    } else if content.starts_with(b"BZh") || content.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0])
    {
        return untar_with_system_tar(content, dest);
    } else {
        Box::new(content)
    };
    // unpack() refuses entries that would land outside `dest`.
    tar::Archive::new(reader)
        .unpack(dest)
        .map_err(PrepareError::Tar)
}

/// bzip2 and xz archives go through the system `tar`, as Kubeless did.
fn untar_with_system_tar(content: &[u8], dest: &Path) -> Result<(), PrepareError> {
    let mut tmp = tempfile::NamedTempFile::new().map_err(PrepareError::Tar)?;
    std::io::Write::write_all(&mut tmp, content).map_err(PrepareError::Tar)?;
    let status = std::process::Command::new("tar")
        .arg("xf")
        .arg(tmp.path())
        .arg("-C")
        .arg(dest)
        .status()
        .map_err(PrepareError::Tar)?;
    if !status.success() {
        return Err(PrepareError::Tar(std::io::Error::other(format!(
            "tar exited with {status}"
        ))));
    }
    Ok(())
}

/// Run the whole prepare step.
pub fn prepare(args: &PrepareArgs) -> Result<(), PrepareError> {
    let ct: ContentType = args.content_type.parse()?;
    let raw = std::fs::read(&args.source).map_err(|source| PrepareError::ReadSource {
        path: args.source.clone(),
        source,
    })?;
    let content = match ct.encoding {
        Encoding::Text => raw,
        Encoding::Base64 => {
            // ConfigMap values may be wrapped; base64 ignores whitespace.
            let compact: Vec<u8> = raw
                .into_iter()
                .filter(|b| !b.is_ascii_whitespace())
                .collect();
            base64::engine::general_purpose::STANDARD
                .decode(&compact)
                .map_err(PrepareError::Base64)?
        }
        Encoding::Url => {
            let url = String::from_utf8_lossy(&raw).trim().to_owned();
            if url.is_empty() {
                return Err(PrepareError::EmptyUrl);
            }
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(PrepareError::Runtime)?
                .block_on(download(&url))?
        }
    };
    verify_checksum(&args.checksum, &content)?;
    std::fs::create_dir_all(&args.dest).map_err(|source| PrepareError::Write {
        path: args.dest.clone(),
        source,
    })?;
    match ct.packing {
        Packing::Zip => zip::ZipArchive::new(Cursor::new(content.as_slice()))
            .and_then(|mut z| z.extract(&args.dest))
            .map_err(PrepareError::Zip)?,
        Packing::CompressedTar => untar(&content, &args.dest)?,
        Packing::File => {
            let name = match &args.file_name {
                Some(n) => PathBuf::from(n),
                None => args
                    .source
                    .file_name()
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from("function")),
            };
            write_file(&args.dest.join(name), &content)?;
        }
    }
    if let Some(deps) = &args.deps
        && !ct.deps_inside
    {
        match std::fs::read(deps) {
            Ok(bytes) => {
                let name = deps
                    .file_name()
                    .map(PathBuf::from)
                    .unwrap_or_else(|| "deps".into());
                write_file(&args.dest.join(name), &bytes)?;
            }
            // The ConfigMap has no deps entry when the function has none.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(PrepareError::ReadSource {
                    path: deps.clone(),
                    source,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_content_types() {
        let ct: ContentType = "base64+zip+deps".parse().unwrap();
        assert_eq!(ct.encoding, Encoding::Base64);
        assert_eq!(ct.packing, Packing::Zip);
        assert!(ct.deps_inside);
        let ct: ContentType = "url+compressedtar".parse().unwrap();
        assert_eq!(
            (ct.encoding, ct.packing, ct.deps_inside),
            (Encoding::Url, Packing::CompressedTar, false)
        );
        assert_eq!("".parse::<ContentType>().unwrap().encoding, Encoding::Text);
        assert!("gzip".parse::<ContentType>().is_err());
        assert!("text+zip+compressedtar".parse::<ContentType>().is_err());
    }

    #[test]
    fn checksum_checks() {
        let sum = "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
        verify_checksum(sum, b"hello").unwrap();
        verify_checksum("", b"anything").unwrap();
        assert!(matches!(
            verify_checksum(sum, b"hellO"),
            Err(PrepareError::ChecksumMismatch { .. })
        ));
        assert!(matches!(
            verify_checksum("md5:abc", b"x"),
            Err(PrepareError::ChecksumFormat(_))
        ));
    }
}
