//! `prepare` and `install`, run as the init containers would run them.
#![cfg(test)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

use base64::Engine;
use common::{BIN, Lang, Opts, Runtime, client};
use sha2::{Digest, Sha256};

const SOURCE: &str = "def handler(event, context):\n    return 'prepared'\n";

fn sha(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn prepare(
    src: &Path,
    content_type: &str,
    checksum: &str,
    dest: &Path,
    deps: Option<&Path>,
) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .arg("prepare")
        .arg("--source")
        .arg(src)
        .arg("--content-type")
        .arg(content_type)
        .arg("--checksum")
        .arg(checksum)
        .arg("--dest")
        .arg(dest);
    if let Some(d) = deps {
        cmd.arg("--deps").arg(d);
    }
    cmd.output().unwrap()
}

fn zip_bytes(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, content) in files {
        w.start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        w.write_all(content).unwrap();
    }
    w.finish().unwrap().into_inner()
}

fn targz_bytes(files: &[(&str, &[u8])]) -> Vec<u8> {
    let enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut b = tar::Builder::new(enc);
    for (name, content) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(content.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, *content).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

#[test]
fn prepare_text_copies_source_and_deps() {
    let src = tempfile::tempdir().unwrap();
    let dest = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("handler.py"), SOURCE).unwrap();
    std::fs::write(src.path().join("requirements.txt"), "six\n").unwrap();
    let out = prepare(
        &src.path().join("handler.py"),
        "text",
        &sha(SOURCE.as_bytes()),
        dest.path(),
        Some(&src.path().join("requirements.txt")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dest.path().join("handler.py")).unwrap(),
        SOURCE
    );
    assert_eq!(
        std::fs::read_to_string(dest.path().join("requirements.txt")).unwrap(),
        "six\n"
    );
}

#[test]
fn prepare_base64_decodes_and_checks_the_decoded_content() {
    let src = tempfile::tempdir().unwrap();
    let dest = tempfile::tempdir().unwrap();
    let encoded = base64::engine::general_purpose::STANDARD.encode(SOURCE);
    std::fs::write(src.path().join("handler.py"), &encoded).unwrap();
    let out = prepare(
        &src.path().join("handler.py"),
        "base64",
        &sha(SOURCE.as_bytes()),
        dest.path(),
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dest.path().join("handler.py")).unwrap(),
        SOURCE
    );
}

#[test]
fn prepare_base64_zip_extracts() {
    let src = tempfile::tempdir().unwrap();
    let dest = tempfile::tempdir().unwrap();
    let zip = zip_bytes(&[
        ("handler.py", SOURCE.as_bytes()),
        ("lib/util.py", b"X = 1\n"),
    ]);
    std::fs::write(
        src.path().join("handler.py"),
        base64::engine::general_purpose::STANDARD.encode(&zip),
    )
    .unwrap();
    let out = prepare(
        &src.path().join("handler.py"),
        "base64+zip",
        &sha(&zip),
        dest.path(),
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dest.path().join("handler.py")).unwrap(),
        SOURCE
    );
    assert_eq!(
        std::fs::read_to_string(dest.path().join("lib/util.py")).unwrap(),
        "X = 1\n"
    );
}

#[test]
fn prepare_compressedtar_with_deps_inside() {
    let src = tempfile::tempdir().unwrap();
    let dest = tempfile::tempdir().unwrap();
    let tgz = targz_bytes(&[
        ("handler.py", SOURCE.as_bytes()),
        ("requirements.txt", b"from-archive\n"),
    ]);
    std::fs::write(
        src.path().join("handler.py"),
        base64::engine::general_purpose::STANDARD.encode(&tgz),
    )
    .unwrap();
    // With +deps the archive's deps file wins over the ConfigMap's.
    std::fs::write(src.path().join("requirements.txt"), "from-configmap\n").unwrap();
    let out = prepare(
        &src.path().join("handler.py"),
        "base64+compressedtar+deps",
        &sha(&tgz),
        dest.path(),
        Some(&src.path().join("requirements.txt")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dest.path().join("handler.py")).unwrap(),
        SOURCE
    );
    assert_eq!(
        std::fs::read_to_string(dest.path().join("requirements.txt")).unwrap(),
        "from-archive\n"
    );
}

/// Serves `body` to at most `max` connections on a loopback port, then stops.
fn one_shot_http(body: Vec<u8>, max: usize) -> (String, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/fn.zip", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        for _ in 0..max {
            let Ok((mut s, _)) = l.accept() else { return };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(&body);
        }
    });
    (url, h)
}

#[test]
fn prepare_url_zip_downloads() {
    let src = tempfile::tempdir().unwrap();
    let dest = tempfile::tempdir().unwrap();
    let zip = zip_bytes(&[("handler.py", SOURCE.as_bytes())]);
    let (url, server) = one_shot_http(zip.clone(), 1);
    std::fs::write(src.path().join("handler.py"), format!("{url}\n")).unwrap();
    let out = prepare(
        &src.path().join("handler.py"),
        "url+zip",
        &sha(&zip),
        dest.path(),
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.join().unwrap();
    assert_eq!(
        std::fs::read_to_string(dest.path().join("handler.py")).unwrap(),
        SOURCE
    );
}

#[test]
fn prepare_checksum_mismatch_fails_clearly() {
    let src = tempfile::tempdir().unwrap();
    let dest = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("handler.py"), SOURCE).unwrap();
    let wrong = sha(b"something else");
    let out = prepare(
        &src.path().join("handler.py"),
        "text",
        &wrong,
        dest.path(),
        None,
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("checksum mismatch"), "{stderr}");
    assert!(stderr.contains(&wrong), "{stderr}");
    assert!(
        !dest.path().join("handler.py").exists(),
        "nothing is written on a mismatch"
    );
}

#[test]
fn prepare_bad_content_type_fails() {
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("handler.py"), SOURCE).unwrap();
    let out = prepare(&src.path().join("handler.py"), "rar", "", src.path(), None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("content type"));
}

fn install(runtime: &str, deps: &Path, dir: &Path) -> Output {
    Command::new(BIN)
        .env("npm_config_update_notifier", "false")
        .arg("install")
        .arg("--runtime")
        .arg(runtime)
        .arg("--deps")
        .arg(deps)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap()
}

/// Serve the fixture's `uses_dep` from `vol` and call it once.
async fn call_uses_dep(lang: Lang, vol: &Path) -> String {
    let rt = Runtime::start(
        lang,
        Opts {
            handler: "uses_dep",
            volume: Some(vol.to_path_buf()),
            workers: 1,
            ..Opts::default()
        },
    )
    .await;
    client()
        .get(rt.url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Copy the fixture functions into a fresh install volume.
fn volume_with_fixture(lang: Lang) -> tempfile::TempDir {
    let vol = tempfile::tempdir().unwrap();
    let f = lang.fixture_file();
    std::fs::copy(lang.fixtures().join(f), vol.path().join(f)).unwrap();
    vol
}

#[tokio::test]
async fn install_requirements_txt_and_use_it() {
    let vol = volume_with_fixture(Lang::Python);
    std::fs::write(vol.path().join("requirements.txt"), "six==1.16.0\n").unwrap();
    let out = install(
        "python3.11",
        &vol.path().join("requirements.txt"),
        vol.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(call_uses_dep(Lang::Python, vol.path()).await, "six 1.16.0");
}

#[tokio::test]
async fn install_package_json_and_use_it() {
    let vol = volume_with_fixture(Lang::Nodejs);
    let deps = tempfile::tempdir().unwrap();
    // The deps file lives elsewhere (the ConfigMap), like in a pod.
    std::fs::write(
        deps.path().join("package.json"),
        r#"{"name":"fixture","version":"1.0.0","dependencies":{"is-number":"7.0.0"}}"#,
    )
    .unwrap();
    let out = install("nodejs20", &deps.path().join("package.json"), vol.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        vol.path()
            .join("node_modules/is-number/package.json")
            .exists()
    );
    assert_eq!(
        call_uses_dep(Lang::Nodejs, vol.path()).await,
        "is-number true"
    );
}

#[test]
fn install_bad_requirement_fails() {
    let vol = tempfile::tempdir().unwrap();
    std::fs::write(vol.path().join("requirements.txt"), "six==999.0.0\n").unwrap();
    let out = install(
        "python3.11",
        &vol.path().join("requirements.txt"),
        vol.path(),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("six==999.0.0") && stderr.contains("failed"),
        "{stderr}"
    );
}

#[test]
fn install_bad_package_json_fails() {
    let vol = tempfile::tempdir().unwrap();
    std::fs::write(
        vol.path().join("package.json"),
        r#"{"name":"fixture","version":"1.0.0","dependencies":{"is-number":"999.0.0"}}"#,
    )
    .unwrap();
    let out = install("nodejs20", &vol.path().join("package.json"), vol.path());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("npm") && stderr.contains("failed"),
        "{stderr}"
    );
}

#[test]
fn install_without_deps_is_a_no_op() {
    let vol = tempfile::tempdir().unwrap();
    let out = install(
        "python3.11",
        &vol.path().join("requirements.txt"),
        vol.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(vol.path().join("requirements.txt"), "\n").unwrap();
    let out = install(
        "python3.11",
        &vol.path().join("requirements.txt"),
        vol.path(),
    );
    assert!(out.status.success());
    assert!(!vol.path().join(".python-packages").exists());
}

fn deps_fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/deps")
        .join(name)
}

/// `gem build` the fixture gem into `<vol>/vendor/cache`, as `bundle cache` would leave it.
fn cache_fixture_gem(vol: &Path) {
    let cache = vol.join("vendor/cache");
    std::fs::create_dir_all(&cache).unwrap();
    let out = Command::new("gem")
        .current_dir(deps_fixture("kl_greeter"))
        .args(["build", "kl_greeter.gemspec", "--output"])
        .arg(cache.join("kl_greeter-1.0.0.gem"))
        .output()
        .expect("`gem` not found: install Debian's ruby (scripts/lib.sh ensure_tools does)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn install_gemfile_with_bundler_and_use_it() {
    let vol = volume_with_fixture(Lang::Ruby);
    cache_fixture_gem(vol.path());
    let deps = tempfile::tempdir().unwrap();
    std::fs::write(
        deps.path().join("Gemfile"),
        "source 'https://rubygems.org'\ngem 'kl_greeter', '1.0.0'\n",
    )
    .unwrap();
    let out = install("ruby3.1", &deps.path().join("Gemfile"), vol.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // bundler really installed the gem into the volume, not just pointed at the cache.
    let gems = vol.path().join("vendor/bundle/ruby");
    let installed = std::fs::read_dir(&gems).unwrap().any(|d| {
        d.unwrap()
            .path()
            .join("gems/kl_greeter-1.0.0/lib/kl_greeter.rb")
            .is_file()
    });
    assert!(installed, "kl_greeter is not under {}", gems.display());
    assert!(vol.path().join("Gemfile.lock").is_file());
    assert_eq!(
        call_uses_dep(Lang::Ruby, vol.path()).await,
        "hello gem from kl_greeter 1.0.0"
    );
}

#[test]
fn install_bad_gemfile_fails() {
    let vol = tempfile::tempdir().unwrap();
    cache_fixture_gem(vol.path());
    std::fs::write(
        vol.path().join("Gemfile"),
        "source 'https://rubygems.org'\ngem 'kl_greeter', '9.9.9'\n",
    )
    .unwrap();
    let out = install("ruby3.1", &vol.path().join("Gemfile"), vol.path());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bundle") && stderr.contains("failed"),
        "{stderr}"
    );
}

fn composer_json(version: &str) -> String {
    serde_json::json!({
        "name": "kubeless-rs/fixture",
        "require": {"kubeless-rs/kl-greeter": version},
        "repositories": [
            {"type": "path", "url": deps_fixture("kl-greeter-php"), "options": {"symlink": false}},
            {"packagist.org": false}
        ]
    })
    .to_string()
}

#[tokio::test]
async fn install_composer_json_and_use_it() {
    let vol = volume_with_fixture(Lang::Php);
    let deps = tempfile::tempdir().unwrap();
    std::fs::write(deps.path().join("composer.json"), composer_json("1.0.0")).unwrap();
    let out = install("php8.2", &deps.path().join("composer.json"), vol.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A copy (not a symlink) in the volume, with composer's autoloader.
    let src = vol
        .path()
        .join("vendor/kubeless-rs/kl-greeter/src/Greeter.php");
    assert!(
        src.is_file()
            && !vol
                .path()
                .join("vendor/kubeless-rs/kl-greeter")
                .is_symlink()
    );
    assert!(vol.path().join("vendor/autoload.php").is_file());
    assert_eq!(
        call_uses_dep(Lang::Php, vol.path()).await,
        "hello composer from kl-greeter 1.0.0"
    );
}

#[test]
fn install_bad_composer_json_fails() {
    let vol = tempfile::tempdir().unwrap();
    std::fs::write(vol.path().join("composer.json"), composer_json("9.9.9")).unwrap();
    let out = install("php8.2", &vol.path().join("composer.json"), vol.path());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("composer") && stderr.contains("failed"),
        "{stderr}"
    );
}
