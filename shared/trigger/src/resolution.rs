//! How a trigger finds a function's pods: the `--endpoint-resolution` and `--cluster-domain`
//! flags every trigger has, and the resolver they build.

use std::sync::Arc;

use kube::Client;
use kubeless_invoke::{ClusterDnsResolver, EndpointSliceResolver, Resolve};
use tokio_util::task::AbortOnDropHandle;

/// How function endpoints are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EndpointResolution {
    /// `http://<fn>.<ns>.svc.<cluster-domain>:<port>` through the Service's cluster IP.
    Dns,
    /// The Service's EndpointSlices, balanced per call across ready pods (needs list/watch on
    /// endpointslices).
    Endpointslices,
}

/// The resolution flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ResolutionArgs {
    /// How to find a function's pods.
    #[arg(
        long = "endpoint-resolution",
        visible_alias = "resolver",
        env = "KUBELESS_ENDPOINT_RESOLUTION",
        value_enum,
        default_value_t = EndpointResolution::Endpointslices
    )]
    pub endpoint_resolution: EndpointResolution,
    /// Cluster DNS domain (with --endpoint-resolution dns).
    #[arg(
        long = "cluster-domain",
        env = "KUBELESS_CLUSTER_DOMAIN",
        default_value = "cluster.local"
    )]
    pub cluster_domain: String,
}

impl ResolutionArgs {
    /// What the flags ask for.
    pub fn resolution(self) -> Resolution {
        match self.endpoint_resolution {
            EndpointResolution::Dns => Resolution::Dns {
                cluster_domain: self.cluster_domain,
            },
            EndpointResolution::Endpointslices => Resolution::EndpointSlices,
        }
    }
}

/// Where function endpoints come from.
#[derive(Clone)]
pub enum Resolution {
    Dns {
        cluster_domain: String,
    },
    EndpointSlices,
    /// A resolver the caller built (benches, tests).
    Custom(Arc<dyn Resolve>),
}

impl Resolution {
    /// The resolver, and the EndpointSlice watch feeding it (it runs until dropped).
    pub fn build(
        self,
        client: &Client,
        namespace: Option<&str>,
    ) -> (Arc<dyn Resolve>, Option<AbortOnDropHandle<()>>) {
        match self {
            Self::Dns { cluster_domain } => {
                (Arc::new(ClusterDnsResolver::new(cluster_domain)), None)
            }
            Self::EndpointSlices => {
                let r = Arc::new(EndpointSliceResolver::default());
                let watch = AbortOnDropHandle::new(r.spawn_watch(client.clone(), namespace));
                (r, Some(watch))
            }
            Self::Custom(r) => (r, None),
        }
    }
}
