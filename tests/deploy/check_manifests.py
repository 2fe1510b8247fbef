#!/usr/bin/env python3
"""deploy/ checked statically (label deploy; exit 77 = skipped when kubernetes-validate is not
installed for any interpreter at hand):

- each kustomization builds (`kubectl kustomize` when kubectl is there, else its `resources`
  read as they are), and every Kubernetes object validates against the Kubernetes schemas of
  kubernetes-validate, strictly (an unknown field is an error);
- the pieces agree: the Service, the PodDisruptionBudget and the HPA select or name the
  Deployment; the probes ask /health on the container's port; every `fluxrt serve` flag the
  Deployment passes is one `fluxrt serve --help` lists; the HPA's metric is one GET /metrics shows;
- the RayService's Serve config names fluxrt.ray:app with arguments its builder accepts;
- the Containerfile's images install the tarball and the wheel (scripts/build-tarball,
  scripts/build-wheel) and no Debian library package (scripts/check-packages runs them in a
  fresh root).

Usage: check_manifests.py SOURCE_DIR FLUXRT_BINARY
"""
import os
import re
import shutil
import subprocess
import sys

try:
    import kubernetes_validate
    import yaml
except ImportError as missing:
    other = os.environ.get("FLUXRT_PYPI_PYTHON")
    if other and os.path.realpath(other) != os.path.realpath(sys.executable):
        os.execv(other, [other] + sys.argv)
    print(f"{missing.name} not installed (pip install kubernetes-validate): skipped")
    sys.exit(77)

KUBERNETES_VERSION = "1.30.0"  # a release that every supported cluster serves these API groups in


def kustomize(folder):
    """The objects a kustomization makes."""
    if shutil.which("kubectl"):
        text = subprocess.run(["kubectl", "kustomize", folder], check=True, capture_output=True, text=True).stdout
        return [d for d in yaml.safe_load_all(text) if d]
    with open(os.path.join(folder, "kustomization.yaml")) as f:
        kustomization = yaml.safe_load(f)
    objects = []
    for name in kustomization["resources"]:
        with open(os.path.join(folder, name)) as f:
            objects += [d for d in yaml.safe_load_all(f) if d]
    return objects


def validate(obj):
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        raise AssertionError(f"{obj['kind']} {obj['metadata']['name']}: {e.message} at {list(e.path)}")


def by_kind(objects):
    out = {}
    for obj in objects:
        assert obj["kind"] not in out, f"two {obj['kind']} objects"
        out[obj["kind"]] = obj
    return out


def check_serve(source, binary):
    objects = kustomize(os.path.join(source, "deploy", "kubernetes", "serve"))
    for obj in objects:
        validate(obj)
    k = by_kind(objects)
    assert set(k) == {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"}, set(k)
    deployment = k["Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    for kind, selector in (("Service", k["Service"]["spec"]["selector"]),
                           ("PodDisruptionBudget", k["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"])):
        assert selector.items() <= pod_labels.items(), f"the {kind} selects no pod of the Deployment"
    target = k["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])

    container = deployment["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert k["Service"]["spec"]["ports"][0]["targetPort"] in ports
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/health" and get["port"] in ports, f"{probe}: {get}"
    args = container["args"]
    assert args[0] == "serve"
    assert f"--port={ports['http']}" in args, "fluxrt serve listens on another port than the container's"
    help_text = subprocess.run([binary, "serve", "--help"], check=True, capture_output=True, text=True).stdout
    for arg in args[1:]:
        flag = arg.split("=", 1)[0]
        assert re.search(rf"^\s+{re.escape(flag)}\b", help_text, re.M), f"fluxrt serve has no flag {flag}"
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ports["http"])

    metric = k["HorizontalPodAutoscaler"]["spec"]["metrics"][0]["pods"]["metric"]["name"]
    with open(os.path.join(source, "apps", "server", "metrics.cpp")) as f:
        assert re.search(rf"\b{metric}\b", f.read()), f"GET /metrics has no {metric}"
    with open(os.path.join(source, "deploy", "kubernetes", "serve", "prometheus-adapter-rules.yaml")) as f:
        rules = yaml.safe_load(f)["rules"]
    assert any(r["name"]["as"] == metric for r in rules), "the adapter's rules do not serve the HPA's metric"
    print(f"deploy: serve: {', '.join(sorted(k))} valid for Kubernetes {KUBERNETES_VERSION}, and consistent")


def check_ray(source):
    objects = kustomize(os.path.join(source, "deploy", "kubernetes", "ray"))
    (service,) = objects
    assert (service["apiVersion"], service["kind"]) == ("ray.io/v1", "RayService")
    config = yaml.safe_load(service["spec"]["serveConfigV2"])
    (application,) = config["applications"]
    assert application["import_path"] == "fluxrt.ray:app"
    import fluxrt.ray

    parsed = fluxrt.ray._parse_args(application["args"])  # raises on an argument the builder refuses
    # Each replica's CPUs (its engine's threads) fit in a worker pod.
    for group in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        cpus = group["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]
        assert int(cpus) >= parsed.get("threads", 1), f"worker group {group['groupName']}: {cpus} CPUs"
    # Its pods are ordinary pod templates: validated as such.
    cluster = service["spec"]["rayClusterConfig"]
    for template in [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]:
        validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template})
    print("deploy: ray: RayService's Serve config accepted by fluxrt.ray:app, pod templates valid")


def check_containerfile(source):
    """The images install the self-contained packages (scripts/build-tarball, scripts/build-wheel),
    whose libraries scripts/check-packages checks in a fresh root, and no Debian library package."""
    with open(os.path.join(source, "deploy", "Containerfile")) as f:
        text = f.read()
    stages = {m.group(1): m.start() for m in re.finditer(r"^FROM \S+ AS (\w+)$", text, re.M)}
    assert set(stages) >= {"build", "runtime", "serve", "ray"}, f"Containerfile stages: {sorted(stages)}"
    build = text[stages["build"]:min(v for k, v in stages.items() if k != "build")]
    for script in ("scripts/build-tarball", "scripts/build-wheel"):
        assert script in build, f"the Containerfile's build stage does not run {script}"
    images = text[min(v for k, v in stages.items() if k != "build"):]
    installed = re.findall(r"apt-get install[^&]*", images)
    libraries = [p for line in installed for p in line.split() if p.startswith("lib") or p.endswith("-dev")]
    assert not libraries, f"the images install Debian libraries the packages carry: {libraries}"
    assert "COPY --from=build /opt/fluxrt /opt/fluxrt" in text, "the serve image does not copy the unpacked tarball"
    assert re.search(r"pip install [^\n]*/wheels/fluxrt-\*\.whl", text), "the ray image does not install the wheel"
    print("deploy: Containerfile: the images take the tarball and the wheel, no Debian library package")


def main():
    source, binary = sys.argv[1], sys.argv[2]
    check_serve(source, binary)
    check_ray(source)
    check_containerfile(source)


if __name__ == "__main__":
    main()
