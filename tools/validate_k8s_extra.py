#!/usr/bin/env python3
"""What the Kubernetes schemas cannot check in deploy/kubernetes/ (run by
tools/validate-k8s.sh, in its venv for PyYAML):

- the ServiceMonitor, a custom resource: its structure, by hand;
- kustomization.yaml: every resource it lists exists, and every manifest is
  listed (servicemonitor.yaml is opt-in, it needs the Operator's CRDs);
- that the manifests agree with each other and with the daemon's config:
  replicas = ROADSEG_SHARDS, the grace period above shutdown_timeout_s,
  ports, the config's mount path, Secret keys, Service selectors.

Prints one line per problem and exits 1 if there is any.
"""

import re
import sys
import tomllib
from pathlib import Path

import yaml

problems = []


def check(ok, message):
    if not ok:
        problems.append(message)
    return ok


def load(dir_):
    docs = {}
    for path in sorted(dir_.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.setdefault(doc.get("kind"), []).append((path.name, doc))
    return docs


def one(docs, kind):
    found = docs.get(kind, [])
    check(len(found) == 1, f"expected one {kind}, found {len(found)}")
    return found[0][1] if found else {}


def check_kustomization(dir_, docs):
    k = one(docs, "Kustomization")
    check(k.get("apiVersion") == "kustomize.config.k8s.io/v1beta1", "kustomization.yaml: apiVersion")
    listed = set(k.get("resources", []))
    for r in listed:
        check((dir_ / r).is_file(), f"kustomization.yaml lists {r}, which does not exist")
    for path in dir_.glob("*.yaml"):
        if path.name not in ("kustomization.yaml", "servicemonitor.yaml"):
            check(path.name in listed, f"{path.name} is not in kustomization.yaml's resources")


DURATION = re.compile(r"^(\d+(ms|s|m|h))+$")
ENDPOINT_KEYS = {"port", "targetPort", "path", "scheme", "interval", "scrapeTimeout", "basicAuth", "honorLabels", "relabelings", "metricRelabelings"}


def check_servicemonitor(docs, services, secret):
    sm = one(docs, "ServiceMonitor")
    check(sm.get("apiVersion") == "monitoring.coreos.com/v1", "ServiceMonitor: apiVersion must be monitoring.coreos.com/v1")
    check(set(sm) <= {"apiVersion", "kind", "metadata", "spec"}, f"ServiceMonitor: unknown top-level keys {set(sm) - {'apiVersion', 'kind', 'metadata', 'spec'}}")
    check(isinstance(sm.get("metadata", {}).get("name"), str), "ServiceMonitor: metadata.name")
    spec = sm.get("spec", {})
    labels = spec.get("selector", {}).get("matchLabels", {})
    check(isinstance(labels, dict) and labels and all(isinstance(v, str) for v in labels.values()), "ServiceMonitor: spec.selector.matchLabels must be a map of strings")
    matched = [s for s in services if labels.items() <= s["metadata"].get("labels", {}).items()]
    check(len(matched) == 1, f"ServiceMonitor: selector {labels} matches {len(matched)} Services, expected the metrics one")
    endpoints = spec.get("endpoints")
    if not check(isinstance(endpoints, list) and endpoints, "ServiceMonitor: spec.endpoints must be a non-empty list"):
        return
    port_names = {p.get("name") for s in matched for p in s["spec"].get("ports", [])}
    for i, e in enumerate(endpoints):
        at = f"ServiceMonitor: spec.endpoints[{i}]"
        check(set(e) <= ENDPOINT_KEYS, f"{at}: unknown keys {set(e) - ENDPOINT_KEYS}")
        check(e.get("port") in port_names, f"{at}.port {e.get('port')!r} is not a port name of the selected Service ({port_names})")
        check(str(e.get("path", "/metrics")).startswith("/"), f"{at}.path must start with /")
        for key in ("interval", "scrapeTimeout"):
            if key in e:
                check(DURATION.match(str(e[key])), f"{at}.{key} {e[key]!r} is not a duration like 15s")
        for field in ("username", "password"):
            ref = e.get("basicAuth", {}).get(field, {})
            check(ref.get("name") == secret["metadata"]["name"] and ref.get("key") in secret.get("stringData", {}), f"{at}.basicAuth.{field} must name a key of Secret {secret['metadata']['name']}")


def check_consistency(docs):
    sts = one(docs, "StatefulSet")
    cm = one(docs, "ConfigMap")
    secret = one(docs, "Secret")
    services = [d for _, d in docs.get("Service", [])]
    spec = sts.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    pod_labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
    (container,) = pod.get("containers", [{}])
    env = {e["name"]: e for e in container.get("env", [])}
    replicas = spec.get("replicas", 1)
    check(env.get("ROADSEG_SHARDS", {}).get("value") == str(replicas), f"StatefulSet: env ROADSEG_SHARDS must equal replicas ({replicas})")
    check(env.get("HOSTNAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name", "StatefulSet: HOSTNAME must come from metadata.name (the shard index)")
    for name, e in env.items():
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            check(ref.get("name") == secret["metadata"]["name"] and ref.get("key") in secret.get("stringData", {}), f"StatefulSet: env {name} names a missing Secret key {ref}")
    check(container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu") == 1, "StatefulSet: limits nvidia.com/gpu: 1")
    # The daemon config, as the pod reads it.
    (key,) = cm.get("data", {}).keys()
    config = tomllib.loads(cm["data"][key])
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    config_volume = next((v["name"] for v in pod.get("volumes", []) if v.get("configMap", {}).get("name") == cm["metadata"]["name"]), None)
    args = container.get("args", [])
    check(config_volume in mounts and f"{mounts[config_volume]}/{key}" in args, f"StatefulSet: args {args} must read the ConfigMap's {key} where it is mounted")
    daemon = config.get("daemon", {})
    check(daemon.get("shard") == "auto", "ConfigMap: [daemon] shard must be \"auto\" (each pod its own shard)")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    shutdown = daemon.get("shutdown_timeout_s", 10)
    check(grace > shutdown, f"StatefulSet: terminationGracePeriodSeconds {grace} must be above [daemon] shutdown_timeout_s {shutdown}")
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    for section, port_name in (("metrics", "metrics"), ("rtsp", "rtsp")):
        listen = config.get(section, {}).get("listen", "")
        check(listen.startswith("0.0.0.0:") and int(listen.rsplit(":", 1)[1]) == ports.get(port_name), f"ConfigMap: {section}.listen {listen!r} must be 0.0.0.0 on containerPort {port_name} ({ports.get(port_name)})")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container.get(probe, {}).get("httpGet", {})
        check(get.get("path") == path and get.get("port") in ("metrics", ports.get("metrics")), f"StatefulSet: {probe} must GET {path} on the metrics port")
    check(any(m == "/var/lib/roadseg" for m in mounts.values()) and spec.get("volumeClaimTemplates"), "StatefulSet: a volumeClaimTemplate mounted at /var/lib/roadseg")
    headless = [s for s in services if s["metadata"]["name"] == spec.get("serviceName")]
    check(headless and headless[0]["spec"].get("clusterIP") == "None", f"StatefulSet: serviceName {spec.get('serviceName')!r} must be a headless Service")
    pod_names = {f"{sts['metadata']['name']}-{i}" for i in range(replicas)}
    for s in services:
        sel = s["spec"].get("selector", {})
        pod_name = sel.get("statefulset.kubernetes.io/pod-name")
        ok = pod_name in pod_names if pod_name else sel.items() <= pod_labels.items()
        check(ok and sel, f"Service {s['metadata']['name']}: selector {sel} matches no roadseg pod")
        for p in s["spec"].get("ports", []):
            check(p.get("targetPort") in ports or p.get("targetPort") in ports.values(), f"Service {s['metadata']['name']}: targetPort {p.get('targetPort')} is not a container port")
    return services, secret


def main():
    dir_ = Path(sys.argv[1] if len(sys.argv) > 1 else "deploy/kubernetes")
    docs = load(dir_)
    check_kustomization(dir_, docs)
    services, secret = check_consistency(docs)
    check_servicemonitor(docs, services, secret)
    for p in problems:
        print(f"validate-k8s: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"validate-k8s: ServiceMonitor structure, kustomization and cross-checks passed ({dir_})")


if __name__ == "__main__":
    main()
