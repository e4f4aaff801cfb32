//! Reaching the cluster like kubectl: `--kubeconfig` (else KUBECONFIG, else ~/.kube/config),
//! `--context`, and `-n` (else the context's namespace, else `default`).

use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

use crate::{
    args::KubeArgs,
    error::{Error, Result},
};

/// A connected client and the namespace commands work in.
#[derive(Clone)]
pub struct Ctx {
    pub client: Client,
    pub namespace: String,
    /// Host of the API server URL (used for nip.io host names).
    pub api_host: String,
}

impl Ctx {
    pub async fn connect(args: &KubeArgs) -> Result<Self> {
        let kubeconfig = match &args.kubeconfig {
            Some(path) => Kubeconfig::read_from(path),
            None => Kubeconfig::read(),
        }
        .map_err(Error::Kubeconfig)?;
        let options = KubeConfigOptions {
            context: args.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(Error::Kubeconfig)?;
        let namespace = args
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| config.default_namespace.clone());
        let api_host = config.cluster_url.host().unwrap_or("localhost").to_string();
        let client = Client::try_from(config).map_err(Error::Client)?;
        Ok(Self {
            client,
            namespace,
            api_host,
        })
    }

    pub fn api<K>(&self) -> kube::Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        kube::Api::namespaced(self.client.clone(), &self.namespace)
    }
}
