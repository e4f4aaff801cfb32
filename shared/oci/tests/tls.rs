//! HTTPS with a registry whose certificate is signed by its own CA: trusted through
//! `RegistryOptions::ca_pem`, refused without it. docker-registry is started here with a TLS
//! config (scripts/images.sh starts plain HTTP ones). Skipped without docker-registry.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::write_tree;
use kubeless_oci::{ManifestFormat, PushScratch, Registry, RegistryOptions};

/// The registry process this test started, killed when dropped.
struct TlsRegistry {
    child: Child,
    addr: String,
    ca_pem: String,
    _dir: tempfile::TempDir,
}

impl Drop for TlsRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Option<TlsRegistry> {
    let installed = Command::new("sh")
        .args(["-c", "command -v docker-registry"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !installed {
        eprintln!("SKIP: docker-registry is not installed (apt-get install -y docker-registry)");
        return None;
    }
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kubeless-oci test CA");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(d.join("key.pem"), key.serialize_pem()).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {data}\nhttp:\n  addr: 127.0.0.1:{port}\n  tls:\n    certificate: {cert}\n    key: {key}\n",
        data = d.join("data").display(),
        cert = d.join("cert.pem").display(),
        key = d.join("key.pem").display(),
    );
    std::fs::write(d.join("config.yml"), config).unwrap();
    let log = std::fs::File::create(d.join("registry.log")).unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(d.join("config.yml"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    let registry = TlsRegistry {
        child,
        addr: addr.clone(),
        ca_pem: ca_cert.pem(),
        _dir: dir,
    };
    for _ in 0..100 {
        if std::net::TcpStream::connect(&addr).is_ok() {
            return Some(registry);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("docker-registry with TLS did not listen on {addr}");
}

#[tokio::test]
async fn https_with_a_private_ca() {
    let Some(reg) = start() else {
        return;
    };
    let trusting = Registry::new(RegistryOptions {
        insecure: false,
        ca_pem: Some(reg.ca_pem.clone().into_bytes()),
        docker_config: None,
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path(), &[("file", "x", 0o644)]);
    let image = format!("{}/tls/scratch:1", reg.addr);
    let pushed = trusting
        .push_scratch(&PushScratch {
            target: &image,
            dir: dir.path(),
            root: "/data",
            user: None,
            entrypoint: vec![],
            format: ManifestFormat::Oci,
            labels: BTreeMap::new(),
        })
        .await
        .unwrap();
    assert_eq!(trusting.exists(&image).await.unwrap(), Some(pushed.digest));

    let plain = Registry::new(RegistryOptions::default()).unwrap();
    // Plain HTTP against TLS fails too, with the registry named.
    let http = Registry::new(RegistryOptions {
        insecure: true,
        ..Default::default()
    })
    .unwrap();
    let err = http.exists(&image).await.unwrap_err();
    eprintln!("plain HTTP: {err}");
    assert!(err.to_string().contains(&reg.addr), "{err}");
    let err = plain.exists(&image).await.unwrap_err();
    assert!(matches!(err, kubeless_oci::Error::Tls { .. }), "{err:?}");
    let text = err.to_string();
    eprintln!("without the CA: {text}");
    assert!(text.contains(&reg.addr), "{text}");
    assert!(text.to_lowercase().contains("certificate"), "{text}");

    let err = Registry::new(RegistryOptions {
        ca_pem: Some(b"not a certificate".to_vec()),
        ..Default::default()
    });
    assert!(err.is_err(), "a bad CA file is refused up front");
}
