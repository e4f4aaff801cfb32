//! Turning `--from-file` (a file, an archive or a URL) into the Function's `function`,
//! `function-content-type` and `checksum`.

use std::path::Path;

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The source fields of a Function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub function: String,
    pub content_type: String,
    pub checksum: String,
}

/// Archive kind told by a file name or URL path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Archive {
    None,
    Zip,
    CompressedTar,
}

impl Archive {
    pub fn from_name(name: &str) -> Self {
        let lower = name.to_ascii_lowercase();
        // Ignore a query string or fragment of a URL.
        let lower = lower.split(['?', '#']).next().unwrap_or("");
        if lower.ends_with(".zip") {
            Self::Zip
        } else if [
            ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tbz", ".tar.xz", ".txz",
        ]
        .iter()
        .any(|s| lower.ends_with(s))
        {
            Self::CompressedTar
        } else {
            Self::None
        }
    }

    /// Zip files start with `PK\x03\x04` whatever their name.
    fn sniff(self, data: &[u8]) -> Self {
        if self == Self::None && data.starts_with(b"PK\x03\x04") {
            Self::Zip
        } else {
            self
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Self::None => "",
            Self::Zip => "+zip",
            Self::CompressedTar => "+compressedtar",
        }
    }
}

pub fn sha256_checksum(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

pub fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://")
}

/// Source fields for local file content named `name`.
pub fn from_bytes(name: &str, data: &[u8]) -> Source {
    let archive = Archive::from_name(name).sniff(data);
    let checksum = sha256_checksum(data);
    match (archive, std::str::from_utf8(data)) {
        (Archive::None, Ok(text)) => Source {
            function: text.to_string(),
            content_type: "text".into(),
            checksum,
        },
        _ => Source {
            function: base64::engine::general_purpose::STANDARD.encode(data),
            content_type: format!("base64{}", archive.suffix()),
            checksum,
        },
    }
}

/// Source fields for a URL whose content is `data`.
pub fn from_url(url: &str, data: &[u8]) -> Source {
    let archive = Archive::from_name(url).sniff(data);
    Source {
        function: url.to_string(),
        content_type: format!("url{}", archive.suffix()),
        checksum: sha256_checksum(data),
    }
}

/// Reads a file or downloads a URL (the checksum is computed over the downloaded bytes).
pub async fn load(from: &str) -> Result<Source> {
    if is_url(from) {
        let data = download(from).await?;
        Ok(from_url(from, &data))
    } else {
        let path = Path::new(from);
        let data = tokio::fs::read(path).await.map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or(from);
        Ok(from_bytes(name, &data))
    }
}

/// A dependency file: read locally, or downloaded when it is an http(s) URL.
pub async fn load_text(from: &str) -> Result<String> {
    let data = if is_url(from) {
        download(from).await?
    } else {
        let path = Path::new(from);
        tokio::fs::read(path).await.map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?
    };
    String::from_utf8(data).map_err(|_| {
        Error::usage(format!(
            "The dependency file {from} is not text (UTF-8): give requirements.txt, package.json or the like"
        ))
    })
}

async fn download(url: &str) -> Result<Vec<u8>> {
    // reqwest is built without a default crypto provider; ring is the one the workspace uses.
    // An Err only means a provider is already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let err = |source| Error::Download {
        url: url.to_string(),
        source,
    };
    let resp = reqwest::Client::builder()
        .build()
        .map_err(err)?
        .get(url)
        .send()
        .await
        .map_err(err)?;
    let status = resp.status();
    if !status.is_success() {
        return Err(Error::DownloadStatus {
            url: url.to_string(),
            status: status.as_u16(),
        });
    }
    Ok(resp.bytes().await.map_err(err)?.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_zip_tar_and_binary() {
        let s = from_bytes("hello.py", b"def f(e, c):\n    return 1\n");
        assert_eq!(s.content_type, "text");
        assert_eq!(s.function, "def f(e, c):\n    return 1\n");
        assert_eq!(s.checksum, sha256_checksum(b"def f(e, c):\n    return 1\n"));
        assert!(s.checksum.starts_with("sha256:") && s.checksum.len() == 7 + 64);

        let z = from_bytes("f.zip", b"PK\x03\x04rest");
        assert_eq!(z.content_type, "base64+zip");
        assert_eq!(z.function, "UEsDBHJlc3Q=");
        assert_eq!(
            from_bytes("noext", b"PK\x03\x04x").content_type,
            "base64+zip"
        );
        assert_eq!(
            from_bytes("f.tgz", b"\x1f\x8b").content_type,
            "base64+compressedtar"
        );
        assert_eq!(
            from_bytes("f.tar", b"abc").content_type,
            "base64+compressedtar"
        );
        assert_eq!(from_bytes("f.bin", &[0xff, 0xfe]).content_type, "base64");
    }

    #[test]
    fn url_content_types() {
        assert_eq!(from_url("https://x/f.py", b"a").content_type, "url");
        assert_eq!(
            from_url("https://x/f.zip?sig=1", b"a").content_type,
            "url+zip"
        );
        assert_eq!(
            from_url("http://x/f.tar.gz", b"a").content_type,
            "url+compressedtar"
        );
        assert_eq!(
            from_url("http://x/f.tar.gz", b"a").function,
            "http://x/f.tar.gz"
        );
    }
}
