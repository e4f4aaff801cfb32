//! Label keys, finalizer and naming conventions shared with Kubeless.

use std::collections::BTreeMap;

/// Label put on every object Kubeless creates: `created-by=kubeless`.
pub const CREATED_BY: &str = "created-by";
/// Value of [`CREATED_BY`].
pub const CREATED_BY_VALUE: &str = "kubeless";
/// Label that ties an EndpointSlice to its Service (Kubernetes').
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Label naming an EndpointSlice's manager (Kubernetes').
pub const SLICE_MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// Label naming the function an object belongs to: `function=<name>`.
pub const FUNCTION: &str = "function";
/// Finalizer the function-controller puts on Functions.
pub const FUNCTION_FINALIZER: &str = "kubeless.io/function";
/// CRD annotation the CLI reads to find the controller namespace.
pub const NAMESPACE_ANNOTATION: &str = "kubeless.io/namespace";
/// CRD annotation the CLI reads to find the controller ConfigMap name.
pub const CONFIG_ANNOTATION: &str = "kubeless.io/config";

/// The labels Kubeless adds to a function and its children:
/// `created-by=kubeless`, `function=<name>`.
pub fn function_labels(function: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CREATED_BY.to_string(), CREATED_BY_VALUE.to_string()),
        (FUNCTION.to_string(), function.to_string()),
    ])
}

/// Label selector string matching a function's children: `created-by=kubeless,function=<name>`.
pub fn function_selector(function: &str) -> String {
    format!("{CREATED_BY}={CREATED_BY_VALUE},{FUNCTION}={function}")
}

/// Kubeless's consumer-group / queue-group name: `<ns>_<trigger>_<fn>_<topic>`. One group per
/// (trigger, function) pair, so every selected function receives every message.
pub fn consumer_group_name(namespace: &str, trigger: &str, function: &str, topic: &str) -> String {
    format!("{namespace}_{trigger}_{function}_{topic}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            consumer_group_name("default", "kt", "hello", "orders"),
            "default_kt_hello_orders"
        );
        let labels = function_labels("hello");
        assert_eq!(
            labels.get("created-by").map(String::as_str),
            Some("kubeless")
        );
        assert_eq!(labels.get("function").map(String::as_str), Some("hello"));
        assert_eq!(
            function_selector("hello"),
            "created-by=kubeless,function=hello"
        );
    }
}
