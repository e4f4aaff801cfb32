//! A pod's ServiceAccount credentials, as the kubelet's projected `kube-api-access` volume
//! gives them: a token requested through the TokenRequest API and bound to the Pod, the CA
//! certificate and the namespace, written to `{pod_dir}/serviceaccount/`, plus a kubeconfig
//! (`{pod_dir}/kubeconfig`) that in-pod clients find through `KUBECONFIG`.

use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::PostParams;
use kube::{Api, Client};

/// The API server a pod's kubeconfig points at.
#[derive(Clone, Debug)]
pub struct ApiAccess {
    /// `https://127.0.0.1:PORT`.
    pub server: String,
    /// The CA certificate (PEM) that signed the server's certificate.
    pub ca_pem: String,
}

/// Where the kubelet mounts a pod's ServiceAccount files; `command`, `args`, env values and
/// `workingDir` naming it are rewritten to `{pod_dir}/serviceaccount`, as for volume mounts.
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What the kubelet asks for; the API server extends such pod-bound tokens to a year.
const TOKEN_SECONDS: i64 = 3607;

/// Whether the pod carries the token volume a real API server's ServiceAccount admission adds
/// when the token is to be mounted (a projected `serviceAccountToken` source): a node agent
/// reads the decision there, as a kubelet does, instead of from the ServiceAccount, which a
/// node may not read.
pub fn has_projected_token(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .any(|s| s.service_account_token.is_some())
}

/// A token for ServiceAccount `sa_name` bound to the pod, through the TokenRequest API.
pub async fn request_token(
    client: &Client,
    pod: &Pod,
    sa_name: &str,
    audiences: Vec<String>,
    expiration_seconds: i64,
) -> Result<String, String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences,
            expiration_seconds: Some(expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..Default::default()
    };
    let issued = sas
        .create_token_request(sa_name, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("requesting a token for serviceaccount {ns}/{sa_name}: {e}"))?;
    Ok(issued.status.map(|s| s.token).unwrap_or_default())
}

/// Writes the pod's token, CA, namespace and kubeconfig; returns the kubeconfig path, or
/// `None` when the token is not to be mounted: `automount` when given, else
/// `automountServiceAccountToken` (pod first, then ServiceAccount).
/// An error is the message the containers wait with (`ContainerCreating`).
pub async fn mount(
    client: &Client,
    access: &ApiAccess,
    pod: &Pod,
    pod_dir: &Path,
    automount: Option<bool>,
) -> Result<Option<PathBuf>, String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let sa_name = spec
        .service_account_name
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".to_string());
    let automount = match automount.or(spec.automount_service_account_token) {
        Some(v) => v,
        None => {
            let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
            let sa = sas
                .get(&sa_name)
                .await
                .map_err(|e| format!("reading serviceaccount {ns}/{sa_name} for its token: {e}"))?;
            sa.automount_service_account_token.unwrap_or(true)
        }
    };
    if !automount {
        return Ok(None);
    }
    let token = request_token(client, pod, &sa_name, Vec::new(), TOKEN_SECONDS).await?;
    let dir = pod_dir.join("serviceaccount");
    let kubeconfig = pod_dir.join("kubeconfig");
    let token_path = dir.join("token");
    let ca_path = dir.join("ca.crt");
    let yaml = kubeconfig_yaml(&access.server, &ca_path, &token_path, &ns);
    let files: [(&Path, &str); 4] = [
        (&token_path, &token),
        (&ca_path, &access.ca_pem),
        (&dir.join("namespace"), &ns),
        (&kubeconfig, &yaml),
    ];
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for (path, content) in files {
        tokio::fs::write(path, content)
            .await
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(Some(kubeconfig))
}

/// A kubeconfig that reads the token from its file (as in-cluster clients reread the projected
/// token) and verifies the server with the pod's `ca.crt`.
pub fn kubeconfig_yaml(server: &str, ca: &Path, token: &Path, namespace: &str) -> String {
    let q = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: devcluster\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: serviceaccount\n  user:\n    tokenFile: {}\ncontexts:\n- name: devcluster\n  context:\n    cluster: devcluster\n    user: serviceaccount\n    namespace: {}\ncurrent-context: devcluster\n",
        q(server),
        q(&ca.to_string_lossy()),
        q(&token.to_string_lossy()),
        q(namespace),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_parses_with_the_token_file() {
        let yaml = kubeconfig_yaml(
            "https://127.0.0.1:6443",
            Path::new("/p/serviceaccount/ca.crt"),
            Path::new("/p/serviceaccount/token"),
            "team-a",
        );
        let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.token_file.as_deref(), Some("/p/serviceaccount/token"));
        let ctx = kc.contexts[0].context.as_ref().unwrap();
        assert_eq!(ctx.namespace.as_deref(), Some("team-a"));
    }
}
