//! Parsers for the string-typed Function fields Kubeless defined: timeout, runtime,
//! content type and handler.

use std::{fmt, time::Duration};

use crate::Error;

/// Kubeless's default function timeout in seconds (`"180"`).
pub const DEFAULT_TIMEOUT_SECS: u64 = 180;

/// Parses `.spec.timeout`: whole seconds as a string. Absent or empty means 180 s.
pub fn parse_timeout(timeout: Option<&str>) -> Result<Duration, Error> {
    let raw = timeout.map(str::trim).unwrap_or("");
    if raw.is_empty() {
        return Ok(Duration::from_secs(DEFAULT_TIMEOUT_SECS));
    }
    match raw.parse::<u64>() {
        Ok(secs) if secs > 0 => Ok(Duration::from_secs(secs)),
        _ => Err(Error::InvalidTimeout {
            value: raw.to_string(),
        }),
    }
}

/// A runtime reference such as `python3.11`, split into its catalogue id and version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeRef {
    /// Runtime id, e.g. `python`, `nodejs`, `go`, `nodejs_distroless`.
    pub id: String,
    /// Version, e.g. `3.11`, `20`, `1.14`.
    pub version: String,
}

impl RuntimeRef {
    /// Splits at the first digit that follows the leading run of non-digits
    /// (`python3.11` -> `python` + `3.11`, `nodejsCE8` -> `nodejsCE` + `8`). The id must start
    /// with a letter and the version must start with a digit.
    pub fn parse(runtime: &str) -> Result<Self, Error> {
        let err = || Error::InvalidRuntime {
            value: runtime.to_string(),
        };
        let s = runtime.trim();
        if !s.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Err(err());
        }
        let at = s.find(|c: char| c.is_ascii_digit()).ok_or_else(err)?;
        let (id, version) = s.split_at(at);
        if version.contains(char::is_whitespace) || id.contains(char::is_whitespace) {
            return Err(err());
        }
        Ok(Self {
            id: id.to_string(),
            version: version.to_string(),
        })
    }

    /// Like [`RuntimeRef::parse`], but first tries the known catalogue ids so that ids which
    /// themselves contain digits (e.g. a hypothetical `k8sjs` + `1.0`) split correctly: the
    /// longest known id that is a prefix and is followed by a digit wins.
    pub fn parse_with_ids<'a>(
        runtime: &str,
        known_ids: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, Error> {
        let s = runtime.trim();
        let best = known_ids
            .into_iter()
            .filter(|id| {
                !id.is_empty()
                    && s.strip_prefix(id)
                        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
            })
            .max_by_key(|id| id.len());
        match best {
            Some(id) => Ok(Self {
                id: id.to_string(),
                version: s[id.len()..].to_string(),
            }),
            None => Self::parse(runtime),
        }
    }
}

impl fmt::Display for RuntimeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.id, self.version)
    }
}

/// How `.spec.function` is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Plain source text.
    Text,
    /// Base64 of the (possibly archived) source.
    Base64,
    /// A URL to download.
    Url,
}

/// Archive format of the decoded content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Archive {
    /// A single file.
    None,
    /// `+zip`.
    Zip,
    /// `+compressedtar` (gzip, bzip2 or xz, detected from the data).
    CompressedTar,
}

/// Parsed `.spec.function-content-type`, e.g. `base64+zip`, `url+compressedtar+deps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentType {
    /// How the content is encoded.
    pub encoding: Encoding,
    /// Archive format inside the encoding.
    pub archive: Archive,
    /// `+deps`: the dependency file ships inside the archive.
    pub deps_in_archive: bool,
}

impl ContentType {
    /// Parses the Kubeless content type. Empty or absent means `text`.
    pub fn parse(value: Option<&str>) -> Result<Self, Error> {
        let raw = value.map(str::trim).unwrap_or("");
        let err = |reason| Error::InvalidContentType {
            value: raw.to_string(),
            reason,
        };
        let mut out = Self {
            encoding: Encoding::Text,
            archive: Archive::None,
            deps_in_archive: false,
        };
        if raw.is_empty() {
            return Ok(out);
        }
        let mut parts = raw.split('+');
        out.encoding = match parts.next().unwrap_or("") {
            "text" => Encoding::Text,
            "base64" => Encoding::Base64,
            "url" => Encoding::Url,
            _ => return Err(err("encoding must be text, base64 or url")),
        };
        for part in parts {
            match part {
                "zip" | "compressedtar" if out.archive != Archive::None => {
                    return Err(err("more than one archive suffix"));
                }
                "zip" => out.archive = Archive::Zip,
                "compressedtar" => out.archive = Archive::CompressedTar,
                "deps" if out.deps_in_archive => return Err(err("+deps given twice")),
                "deps" => out.deps_in_archive = true,
                _ => return Err(err("suffix must be +zip, +compressedtar or +deps")),
            }
        }
        if out.deps_in_archive && out.archive == Archive::None {
            return Err(err("+deps needs +zip or +compressedtar"));
        }
        Ok(out)
    }
}

impl fmt::Display for ContentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.encoding {
            Encoding::Text => "text",
            Encoding::Base64 => "base64",
            Encoding::Url => "url",
        })?;
        match self.archive {
            Archive::None => {}
            Archive::Zip => f.write_str("+zip")?,
            Archive::CompressedTar => f.write_str("+compressedtar")?,
        }
        if self.deps_in_archive {
            f.write_str("+deps")?;
        }
        Ok(())
    }
}

/// `.spec.handler` split into module (file name without suffix) and function name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handler {
    /// The module / file, becomes `MOD_NAME`.
    pub module: String,
    /// The function, becomes `FUNC_HANDLER`.
    pub function: String,
}

impl Handler {
    /// Splits `file.func` at the last dot. Kubeless required exactly one dot; we also accept
    /// modules containing dots (`pkg.mod.func` -> `pkg.mod` + `func`).
    pub fn parse(handler: &str) -> Result<Self, Error> {
        let err = || Error::InvalidHandler {
            value: handler.to_string(),
        };
        let (module, function) = handler.trim().rsplit_once('.').ok_or_else(err)?;
        if module.is_empty() || function.is_empty() {
            return Err(err());
        }
        Ok(Self {
            module: module.to_string(),
            function: function.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout(None).unwrap(), Duration::from_secs(180));
        assert_eq!(parse_timeout(Some("")).unwrap(), Duration::from_secs(180));
        assert_eq!(parse_timeout(Some("30")).unwrap(), Duration::from_secs(30));
        assert_eq!(parse_timeout(Some(" 7 ")).unwrap(), Duration::from_secs(7));
        for bad in ["0", "-1", "1.5", "30s", "abc"] {
            assert!(
                matches!(parse_timeout(Some(bad)), Err(Error::InvalidTimeout { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn runtimes() {
        let cases = [
            ("python3.11", "python", "3.11"),
            ("nodejs20", "nodejs", "20"),
            ("go1.14", "go", "1.14"),
            ("dotnetcore3.1", "dotnetcore", "3.1"),
            ("nodejs_distroless8", "nodejs_distroless", "8"),
            ("nodejsCE8", "nodejsCE", "8"),
            ("ballerina0.981.0", "ballerina", "0.981.0"),
        ];
        for (input, id, version) in cases {
            let r = RuntimeRef::parse(input).unwrap();
            assert_eq!((r.id.as_str(), r.version.as_str()), (id, version));
            assert_eq!(r.to_string(), input);
        }
        for bad in ["", "python", "3.8", "_py3", "py thon3"] {
            assert!(RuntimeRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn runtime_ids_with_digits() {
        let known = ["k8sjs", "python", "k8s"];
        let r = RuntimeRef::parse_with_ids("k8sjs1.0", known).unwrap();
        assert_eq!((r.id.as_str(), r.version.as_str()), ("k8sjs", "1.0"));
        let r = RuntimeRef::parse_with_ids("k8s2", known).unwrap();
        assert_eq!((r.id.as_str(), r.version.as_str()), ("k8s", "2"));
        // Unknown ids fall back to the first-digit rule.
        let r = RuntimeRef::parse_with_ids("ruby2.6", known).unwrap();
        assert_eq!((r.id.as_str(), r.version.as_str()), ("ruby", "2.6"));
        // Without the catalogue the first-digit rule would split "k8sjs1.0" wrongly.
        assert_eq!(RuntimeRef::parse("k8sjs1.0").unwrap().id, "k");
    }

    #[test]
    fn content_types() {
        let ct = ContentType::parse(Some("base64+zip")).unwrap();
        assert_eq!(
            (ct.encoding, ct.archive, ct.deps_in_archive),
            (Encoding::Base64, Archive::Zip, false)
        );
        let ct = ContentType::parse(Some("url+compressedtar+deps")).unwrap();
        assert_eq!(
            (ct.encoding, ct.archive, ct.deps_in_archive),
            (Encoding::Url, Archive::CompressedTar, true)
        );
        assert_eq!(ct.to_string(), "url+compressedtar+deps");
        assert_eq!(ContentType::parse(None).unwrap().encoding, Encoding::Text);
        assert_eq!(
            ContentType::parse(Some("text")).unwrap().to_string(),
            "text"
        );
        for bad in [
            "binary",
            "base64+rar",
            "text+deps",
            "base64+zip+zip",
            "+zip",
        ] {
            assert!(ContentType::parse(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn handlers() {
        let h = Handler::parse("hello.handler").unwrap();
        assert_eq!(
            (h.module.as_str(), h.function.as_str()),
            ("hello", "handler")
        );
        let h = Handler::parse("pkg.mod.run").unwrap();
        assert_eq!((h.module.as_str(), h.function.as_str()), ("pkg.mod", "run"));
        for bad in ["", "nodot", ".func", "file."] {
            assert!(Handler::parse(bad).is_err(), "{bad}");
        }
    }
}
