//! The cluster's certificates: one CA signs every serving and client certificate (ECDSA P-256,
//! PEM files in the state directory), and kubeconfig files that embed them.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::Error;

/// A certificate and its key, as PEM, and where they were written.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
}

/// The cluster CA: kept in memory to mint more certificates after start (node credentials).
pub(crate) struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub files: CertFiles,
}

impl Ca {
    pub fn create(dir: &Path) -> Result<Self, Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-control-plane-ca");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        let files = write_pair(dir, "ca", cert.pem(), key.serialize_pem())?;
        Ok(Self {
            issuer: Issuer::new(params, key),
            files,
        })
    }

    /// A client certificate for user `cn` in `groups` (the API server reads CN and O).
    pub fn client(
        &self,
        dir: &Path,
        name: &str,
        cn: &str,
        groups: &[&str],
    ) -> Result<CertFiles, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, cn);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(dir, name, params)
    }

    /// A serving certificate for `names` (IP addresses become IP SANs).
    pub fn serving(
        &self,
        dir: &Path,
        name: &str,
        cn: &str,
        names: &[&str],
    ) -> Result<CertFiles, Error> {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(dir, name, params)
    }

    fn sign(
        &self,
        dir: &Path,
        name: &str,
        mut params: CertificateParams,
    ) -> Result<CertFiles, Error> {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        write_pair(dir, name, cert.pem(), key.serialize_pem())
    }
}

/// A bare key pair (the service-account token signing key): (private key, public key) files.
pub(crate) fn key_files(dir: &Path, name: &str) -> Result<(PathBuf, PathBuf), Error> {
    let key = KeyPair::generate()?;
    let private = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    write(&private, key.serialize_pem())?;
    write(&public, key.public_key_pem())?;
    Ok((private, public))
}

fn write_pair(
    dir: &Path,
    name: &str,
    cert_pem: String,
    key_pem: String,
) -> Result<CertFiles, Error> {
    let cert_path = dir.join(format!("{name}.crt"));
    let key_path = dir.join(format!("{name}.key"));
    write(&cert_path, &cert_pem)?;
    write(&key_path, &key_pem)?;
    Ok(CertFiles {
        cert_pem,
        key_pem,
        cert_path,
        key_path,
    })
}

pub(crate) fn write(path: &Path, contents: impl AsRef<[u8]>) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// A kubeconfig for `server` that trusts `ca_pem` and presents `client`.
pub(crate) fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca_pem: &str,
    user: &str,
    client: &CertFiles,
) -> Result<(), Error> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-control-plane\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: {user}\n  context:\n    cluster: kube-control-plane\n    user: {user}\n    namespace: default\ncurrent-context: {user}\n",
        ca = b64(ca_pem),
        cert = b64(&client.cert_pem),
        key = b64(&client.key_pem),
    );
    write(path, yaml)
}
