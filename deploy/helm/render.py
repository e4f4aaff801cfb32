#!/usr/bin/env python3
"""Lint and render the kubeless umbrella chart with the real Helm engine (helm-python-sdk).

Usage: render.py OUT_DIR

Writes OUT_DIR/<case>.yaml for every values case (every subchart on, every subchart off, each
subchart alone) and OUT_DIR/crds.yaml with the chart's CRDs, then prints a JSON summary. The Rust
test integration-tests/tests/helm_chart.rs runs this and parses every rendered object as its
Kubernetes type. Exits non-zero on a lint error or a render failure.
"""
import json
import pathlib
import sys

try:
    import helm_python
except ImportError:
    sys.exit("helm-python-sdk is missing: pip install helm-python-sdk (scripts/test.sh installs it)")

import yaml

CHART = pathlib.Path(__file__).resolve().parent / "kubeless"


def service_keys(values):
    return [k for k, v in values.items() if isinstance(v, dict) and "enabled" in v]


def cases(values):
    keys = service_keys(values)
    yield "all-on", {k: {"enabled": True} for k in keys}
    yield "all-off", {k: {"enabled": False} for k in keys}
    for only in keys:
        yield f"only-{only}", {k: {"enabled": k == only} for k in keys}


def main():
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

    default_values = yaml.safe_load((CHART / "values.yaml").read_text())
    summary = {"lint_messages": len(report.get("messages", [])), "cases": {}}
    for name, values in cases(default_values):
        # A fresh load per case: rendering prunes disabled subcharts from the loaded chart in place.
        chart = helm_python.Chart.load(str(CHART))
        rendered = chart.render(values=values, name="kubeless", namespace="kubeless", is_install=True)
        docs = [text for path, text in sorted(rendered.items()) if path.endswith((".yaml", ".yml")) and text.strip()]
        (out / f"{name}.yaml").write_text("\n---\n".join(docs))
        summary["cases"][name] = len(docs)

    crds = sorted((CHART / "crds").glob("*.yaml"))
    (out / "crds.yaml").write_text("\n---\n".join(p.read_text() for p in crds))
    summary["crds"] = len(crds)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
