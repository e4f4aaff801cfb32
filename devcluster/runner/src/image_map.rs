//! The image map: which local command stands in for a container image.
//!
//! A map file is a YAML list of entries; the first entry whose `image` glob
//! matches wins. `${BIN_DIR}` and `${MAP_DIR}` are expanded when loading.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// One image map entry, with variables already expanded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageEntry {
    /// Glob over the image name; `*` matches any run of characters, `?` one character.
    pub image: String,
    /// Replaces the image ENTRYPOINT; a container `command` overrides it.
    #[serde(default)]
    pub entrypoint: Vec<String>,
    /// The image CMD; a container `args` overrides it.
    #[serde(default)]
    pub cmd: Vec<String>,
    /// Default working directory; a container `workingDir` overrides it.
    #[serde(default)]
    pub working_dir: Option<String>,
    /// Image environment; container env wins.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The file this entry came from (not part of the YAML).
    #[serde(skip)]
    pub source: PathBuf,
}

/// An ordered list of image entries.
#[derive(Clone, Debug, Default)]
pub struct ImageMap {
    entries: Vec<ImageEntry>,
    sources: Vec<PathBuf>,
}

impl ImageMap {
    /// An empty map (every image is unmapped).
    pub fn empty() -> Self {
        Self::default()
    }

    /// Reads every `*.yaml` / `*.yml` file of `dir` in file-name order.
    pub fn load_dir(dir: &Path) -> Result<Self> {
        let read = std::fs::read_dir(dir).map_err(|source| Error::ImageMapRead {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut files = Vec::new();
        for item in read {
            let item = item.map_err(|source| Error::ImageMapRead {
                path: dir.to_path_buf(),
                source,
            })?;
            let path = item.path();
            let is_yaml = path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| e == "yaml" || e == "yml");
            if is_yaml && path.is_file() {
                files.push(path);
            }
        }
        files.sort();
        let mut map = Self::default();
        for file in files {
            map.append_file(&file)?;
        }
        if map.sources.is_empty() {
            map.sources.push(dir.to_path_buf());
        }
        Ok(map)
    }

    /// Reads one map file.
    pub fn load_file(path: &Path) -> Result<Self> {
        let mut map = Self::default();
        map.append_file(path)?;
        Ok(map)
    }

    /// Parses map text as if it was read from `path` (used for `${MAP_DIR}`).
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let mut map = Self::default();
        map.append_text(text, path)?;
        Ok(map)
    }

    /// Appends the entries of another file after the current ones.
    pub fn append_file(&mut self, path: &Path) -> Result<()> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ImageMapRead {
            path: path.to_path_buf(),
            source,
        })?;
        self.append_text(&text, path)
    }

    fn append_text(&mut self, text: &str, path: &Path) -> Result<()> {
        let parsed: Option<Vec<ImageEntry>> =
            serde_yaml_ng::from_str(text).map_err(|source| Error::ImageMapParse {
                path: path.to_path_buf(),
                source,
            })?;
        let map_dir = path
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bin_dir = bin_dir();
        for (index, mut entry) in parsed.unwrap_or_default().into_iter().enumerate() {
            if entry.image.trim().is_empty() {
                return Err(Error::ImageMapEntry {
                    path: path.to_path_buf(),
                    index,
                });
            }
            let expand = |s: &str| expand_map_vars(s, &bin_dir, &map_dir);
            entry.entrypoint = entry.entrypoint.iter().map(|s| expand(s)).collect();
            entry.cmd = entry.cmd.iter().map(|s| expand(s)).collect();
            entry.working_dir = entry.working_dir.as_deref().map(expand);
            entry.env = entry
                .env
                .iter()
                .map(|(k, v)| (k.clone(), expand(v)))
                .collect();
            entry.source = path.to_path_buf();
            self.entries.push(entry);
        }
        self.sources.push(path.to_path_buf());
        Ok(())
    }

    /// The first entry matching `image` (also tried without a `docker.io/`
    /// / `library/` prefix and with `:latest` added when it has no tag).
    pub fn resolve(&self, image: &str) -> Option<&ImageEntry> {
        let candidates = image_candidates(image);
        self.entries
            .iter()
            .find(|e| candidates.iter().any(|c| glob_match(&e.image, c)))
    }

    /// The entries, in match order.
    pub fn entries(&self) -> &[ImageEntry] {
        &self.entries
    }

    /// Files (or the folder) the map was read from, for error messages.
    pub fn sources(&self) -> &[PathBuf] {
        &self.sources
    }

    /// Human-readable description of where the map came from.
    pub fn describe_sources(&self) -> String {
        if self.sources.is_empty() {
            return "(no image map loaded)".to_string();
        }
        self.sources
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `${BIN_DIR}`: env DEVCLUSTER_BIN_DIR, else the folder of the current executable; for a cargo
/// test binary (in `target/<profile>/deps`) the profile folder, where cargo puts the binaries.
fn bin_dir() -> String {
    if let Ok(dir) = std::env::var("DEVCLUSTER_BIN_DIR")
        && !dir.is_empty()
    {
        return dir;
    }
    let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    else {
        return String::new();
    };
    let dir = match dir.parent() {
        Some(profile) if dir.file_name().is_some_and(|n| n == "deps") => profile.to_path_buf(),
        _ => dir,
    };
    dir.to_string_lossy().into_owned()
}

pub(crate) fn expand_map_vars(s: &str, bin_dir: &str, map_dir: &str) -> String {
    s.replace("${BIN_DIR}", bin_dir)
        .replace("${MAP_DIR}", map_dir)
}

/// Name variants an image reference is matched under, most specific first.
fn image_candidates(image: &str) -> Vec<String> {
    let mut out = vec![image.to_string()];
    let mut short = image;
    for prefix in ["docker.io/", "index.docker.io/"] {
        if let Some(rest) = short.strip_prefix(prefix) {
            short = rest;
        }
    }
    if let Some(rest) = short.strip_prefix("library/") {
        short = rest;
    }
    if short != image {
        out.push(short.to_string());
    }
    // A tag is a ':' after the last '/'; a digest is '@'.
    let last = short.rsplit('/').next().unwrap_or(short);
    if !last.contains(':') && !last.contains('@') {
        out.push(format!("{short}:latest"));
    }
    out
}

/// Glob match where `*` matches any run (also empty) and `?` one character.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_basics() {
        assert!(glob_match("python:*", "python:3.12"));
        assert!(glob_match("python:*", "python:"));
        assert!(!glob_match("python:*", "pythonx:3"));
        assert!(glob_match(
            "*/runtime-*:*",
            "kubeless-rs/runtime-python:3.12"
        ));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("abc", "abcd"));
        assert!(glob_match("*a*b", "xxaxxb"));
        assert!(!glob_match("*a*b", "xxaxxbc"));
    }

    #[test]
    fn first_match_wins_and_vars_expand() {
        let text = r#"
- image: "python:3.12"
  entrypoint: ["${MAP_DIR}/special"]
- image: "python:*"
  entrypoint: ["python3"]
  workingDir: "${MAP_DIR}"
  env: {A: "${MAP_DIR}/x"}
"#;
        let map = ImageMap::parse(text, Path::new("/maps/base.yaml")).unwrap();
        assert_eq!(
            map.resolve("python:3.12").unwrap().entrypoint,
            vec!["/maps/special"]
        );
        let e = map.resolve("python:3.11").unwrap();
        assert_eq!(e.entrypoint, vec!["python3"]);
        assert_eq!(e.working_dir.as_deref(), Some("/maps"));
        assert_eq!(e.env.get("A").map(String::as_str), Some("/maps/x"));
        assert!(map.resolve("node:20").is_none());
    }

    #[test]
    fn docker_hub_prefixes_and_latest() {
        let text = "- image: \"busybox:*\"\n  cmd: [sh]\n";
        let map = ImageMap::parse(text, Path::new("/m/a.yaml")).unwrap();
        assert!(map.resolve("docker.io/library/busybox:1.36").is_some());
        assert!(map.resolve("busybox").is_some());
        assert!(map.resolve("quay.io/busybox:1").is_none());
    }

    #[test]
    fn load_dir_reads_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.yaml"), "- image: \"x:*\"\n  cmd: [b]\n").unwrap();
        std::fs::write(dir.path().join("a.yaml"), "- image: \"x:*\"\n  cmd: [a]\n").unwrap();
        std::fs::write(dir.path().join("c.txt"), "not yaml").unwrap();
        let map = ImageMap::load_dir(dir.path()).unwrap();
        assert_eq!(map.entries().len(), 2);
        assert_eq!(map.resolve("x:1").unwrap().cmd, vec!["a"]);
    }

    #[test]
    fn bad_yaml_is_an_error() {
        let err = ImageMap::parse("- image: [", Path::new("/m/bad.yaml")).unwrap_err();
        assert!(matches!(err, Error::ImageMapParse { .. }));
        let err = ImageMap::parse("- image: \"\"\n", Path::new("/m/bad.yaml")).unwrap_err();
        assert!(matches!(err, Error::ImageMapEntry { .. }));
    }

    #[test]
    fn shipped_base_map_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../images.d/base.yaml");
        let map = ImageMap::load_file(&dir).unwrap();
        assert!(map.resolve("python:3.12").is_some());
        assert!(map.resolve("busybox:1.36").is_some());
    }
}
