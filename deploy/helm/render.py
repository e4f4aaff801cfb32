#!/usr/bin/env python3
"""Lint and render the kubeless umbrella chart with the real Helm engine (helm-python-sdk).

Usage: render.py OUT_DIR
       render.py template NAME CHART [-n NS] [-f FILE] [--set K=V] [--set-string K=V] [--set-json K=J]

The second form is `helm template` for a machine without the helm binary: it prints the chart's
objects (not its CRDs, as `helm template` without --include-crds) rendered by the real Helm engine
with those values, for `kubectl apply -f -`. docs/helm.md uses it. Both forms put the objects in
Helm's install order by kind (ServiceAccounts, RBAC, ConfigMaps and Services before Deployments),
as `helm install` creates them.

Writes OUT_DIR/<case>.yaml for every case below and OUT_DIR/crds.yaml with the chart's CRDs,
then prints a JSON summary. The Rust test integration-tests/tests/helm_chart.rs runs this and
checks the output. Cases:
  all-on, all-off, only-<subchart>   each subchart switched on and off
  namespaced                         a namespace-scoped install (global.functionsNamespace)
  options                            every optional object, registry, digests and pull secrets
  doc-<n>                            every `helm install|upgrade|template` command in docs/helm.md
  rejected-<name>                    values with a misspelt key or a wrong value: the chart's
                                     values.schema.json must make these fail (the summary holds
                                     the error, or null if one rendered)
Exits non-zero on a lint error, a render failure of an expected-good case, or a docs command
this script cannot replay.
"""
import copy
import json
import pathlib
import re
import shlex
import sys

try:
    import helm_python
except ImportError:
    sys.exit("helm-python-sdk is missing: pip install helm-python-sdk (scripts/test.sh installs it)")

import yaml

HELM = pathlib.Path(__file__).resolve().parent
CHART = HELM / "kubeless"
REPO = HELM.parent.parent
DOCS = REPO / "docs" / "helm.md"
DIGEST = "sha256:" + "ab" * 32

# Values the schema must refuse, each for one reason.
REJECTED = {
    # docs/helm.md once said this; the key is kafka-trigger.kafka.brokers.
    "kafka-brokers-top-level": {"kafka-trigger": {"enabled": True, "brokers": "kafka:9092"}},
    "global-misspelt": {"global": {"imageRegistery": "127.0.0.1:5000"}},
    "umbrella-unknown-key": {"functionsNamespace": "team-a"},
    "wrong-enum": {"nats-trigger": {"enabled": True, "endpointResolution": "ip"}},
    "wrong-type": {"function-controller": {"replicas": "two"}},
    "bad-digest": {"function-controller": {"image": {"digest": "latest"}}},
    "pull-secret-shape": {"global": {"imagePullSecrets": ["regcred"]}},
    "template-policy-mode": {"function-controller": {"templatePolicy": {"mode": "permissive"}}},
}


def subcharts():
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return [d["name"] for d in meta.get("dependencies", []) if d.get("condition")]


def merge(base, extra):
    """Deep-merge extra into base, as Helm merges values files and --set."""
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


def standard_cases():
    keys = subcharts()
    yield "all-on", {k: {"enabled": True} for k in keys}, "kubeless"
    yield "all-off", {k: {"enabled": False} for k in keys}, "kubeless"
    for only in keys:
        yield f"only-{only}", {k: {"enabled": k == only} for k in keys}, "kubeless"
    # Every rule-shaping option on, so the namespace-scoped RBAC is checked with all of them.
    everything = {k: {"enabled": True} for k in keys}
    merge(everything, {
        "http-trigger-controller": {"gateway": {"enabled": True}},
        "cronjob-trigger-controller": {"invoker": {"resolver": "endpointslices"}},
        "kinesis-trigger": {"shardLeases": True, "kinesis": {"credentialsSecret": "aws"}},
        "nats-trigger": {"replicas": 2},
    })
    yield "namespaced", merge(copy.deepcopy(everything), {"global": {"functionsNamespace": "functions"}}), "kubeless"
    yield "options", merge(copy.deepcopy(everything), {
        "global": {
            "imageRegistry": "127.0.0.1:5000",
            "imageTag": "1.2.3",
            "imagePullSecrets": [{"name": "global-pull"}],
            "podDisruptionBudget": {"enabled": True},
            "networkPolicy": {"enabled": True},
            "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
        },
        "grafanaDashboard": {"enabled": True},
        "function-controller": {
            "image": {"digest": DIGEST},
            "imagePullSecrets": [{"name": "fc-pull"}],
            "templatePolicy": {"allowHostNetwork": True, "allowedServiceAccounts": ["builder", "metrics"]},
        },
        "kafka-trigger": {"image": {"registry": "registry.example:5000", "tag": "9.9.9"}},
        "cronjob-trigger-controller": {"invoker": {"image": {"digest": DIGEST}}},
    }), "kubeless"


def docs_commands():
    """Every helm install/upgrade/template command in docs/helm.md's code blocks."""
    text = DOCS.read_text()
    for block in re.findall(r"```(?:sh|bash|shell)\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip()
            if re.match(r"^helm (install|upgrade|template)\b", line):
                yield line.split(" | ")[0]


def replay(command):
    """The values, release name and namespace a docs helm command would render with."""
    args = shlex.split(command)[1:]
    sub, args = args[0], args[1:]
    files, sets, positional, namespace = [], [], [], "default"
    i = 0
    while i < len(args):
        a = args[i]
        flag, eq, inline = a.partition("=")
        takes_value = flag in ("-n", "--namespace", "-f", "--values", "--set", "--set-string", "--set-json", "--version")
        if takes_value:
            value = inline if eq else args[i + 1]
            i += 1 if eq else 2
            if flag in ("-n", "--namespace"):
                namespace = value
            elif flag in ("-f", "--values"):
                files.append(value)
            elif flag == "--set":
                sets.append(helm_python.parse_set_string(value))
            elif flag == "--set-string":
                sets.append(helm_python.parse_set_string_values(value))
            elif flag == "--set-json":
                sets.append(helm_python.parse_set_json(value))
            continue
        if a in ("--create-namespace", "--install", "--wait", "--atomic"):
            i += 1
            continue
        if a.startswith("-"):
            raise SystemExit(f"the helm command uses {a}, which render.py cannot replay: {command}")
        positional.append(a)
        i += 1
    if len(positional) != 2:
        raise SystemExit(f"expected `helm {sub} NAME CHART`: {command}")
    name, chart = positional
    if (REPO / chart).resolve() != CHART:
        raise SystemExit(f"the helm command installs {chart}, not deploy/helm/kubeless: {command}")
    values = {}
    for f in files:
        merge(values, helm_python.values_from_yaml((REPO / f).read_text()))
    for s in sets:
        merge(values, s)
    return name, namespace, values


# Helm's install order by kind (InstallOrder in helm.sh/helm/v4 pkg/release/v1/util/kind_sorter.go):
# `helm install` creates objects in this order, so a ServiceAccount, its Role and RoleBinding and
# the ConfigMaps exist before the Deployment whose pods use them. Unknown kinds go last, by kind.
INSTALL_ORDER = [
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
    "PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
    "ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
    "CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
    "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
    "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
    "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
    "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
]


def install_order(docs):
    """Sorts YAML documents (text) as Helm does before installing: by file path (the caller's
    order), then stably by kind in INSTALL_ORDER."""
    def key(text):
        kind = (yaml.safe_load(text) or {}).get("kind", "")
        if kind in INSTALL_ORDER:
            return (INSTALL_ORDER.index(kind), "")
        return (len(INSTALL_ORDER), kind)
    return sorted(docs, key=key)


def split_documents(text):
    return [d for d in re.split(r"^---[ \t]*$", text, flags=re.M) if yaml.safe_load(d) is not None]


def render(values, name="kubeless", namespace="kubeless"):
    # A fresh load per case: rendering prunes disabled subcharts from the loaded chart in place.
    chart = helm_python.Chart.load(str(CHART))
    rendered = chart.render(values=values, name=name, namespace=namespace, is_install=True)
    docs = [d.strip("\n") for path, text in sorted(rendered.items())
            if path.endswith((".yaml", ".yml")) for d in split_documents(text)]
    return install_order(docs)


def template(args):
    release, namespace, values = replay(shlex.join(["helm", "template", *args]))
    try:
        docs = render(values, name=release, namespace=namespace)
    except helm_python.HelmError as e:
        sys.exit(f"render.py template: {e}")
    print("\n---\n".join(docs))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "template":
        template(sys.argv[2:])
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)

    report = helm_python.lint(str(CHART), strict=True, with_subcharts=True, namespace="kubeless")
    problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    problems += [{"severity": 3, "error": e} for e in report.get("errors", [])]
    if problems:
        print(json.dumps(problems, indent=2), file=sys.stderr)
        sys.exit("helm lint found problems")

    summary = {"lint_messages": len(report.get("messages", [])), "cases": {}, "docs": [], "rejected": {}}
    for name, values, namespace in standard_cases():
        docs = render(values, namespace=namespace)
        (out / f"{name}.yaml").write_text("\n---\n".join(docs))
        summary["cases"][name] = len(docs)

    for n, command in enumerate(docs_commands(), start=1):
        release, namespace, values = replay(command)
        try:
            docs = render(values, name=release, namespace=namespace)
        except helm_python.HelmError as e:
            sys.exit(f"docs/helm.md command does not render: {command}\n{e}")
        case = f"doc-{n}"
        (out / f"{case}.yaml").write_text("\n---\n".join(docs))
        summary["cases"][case] = len(docs)
        summary["docs"].append({"case": case, "command": command, "release": release,
                                "namespace": namespace, "values": values})

    for name, values in REJECTED.items():
        try:
            render(values)
            summary["rejected"][name] = None
        except helm_python.HelmError as e:
            summary["rejected"][name] = str(e)

    crds = sorted((CHART / "crds").glob("*.yaml"))
    (out / "crds.yaml").write_text("\n---\n".join(p.read_text() for p in crds))
    summary["crds"] = len(crds)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
