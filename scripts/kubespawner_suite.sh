#!/usr/bin/env bash
# KubeSpawner's own test suite, unmodified, against the simulated cluster on the real
# control plane (`run`: kube-apiserver, etcd, kube-scheduler and
# kube-controller-manager, with the project's node agent; docs/sim.md, "KubeSpawner's own
# test suite"): the tests of the KubeSpawner version installed in .venv, run from a
# virtualenv of their own (their pins: pytest-asyncio <0.23) on a cluster started with
# gpu_reclaim_sim/scenarios/kubespawner.yaml, through a kubeconfig as their CI gets from k3s.
# The internal-SSL tests are deselected (-k "not ssl"; a -k of yours replaces it). Extra
# arguments go to pytest.
# Everything downloaded lives in .cache/kubespawner (git-ignored).
#
# Their pytest process reaches the pods at their addresses (the hub pod's IP, the user
# pods' URLs), as a CI job on a k3s node does: as root the script re-runs itself in a
# network namespace of a run's kind (gpu_reclaim_sim.network.namespace: the pod, Service and
# node networks local to it, nothing outside reachable), where `run` stays and pytest runs
# too; without root the cluster stays on the machine's loopback (pods get 127.x addresses).
#
# The tests: PyPI's sdist when it carries tests/ (7.1.0's does not), else the release's
# tag from GitHub, else a checkout you name: KUBESPAWNER_SRC=/path/to/kubespawner (at the
# installed version's tag).
#
# Timing, as on k3s: their hub pod is Ready once its readinessProbe (TCP 8081) passes, so a
# spawn never races the hub's start; KubeSpawner's start() returns when the user pod runs,
# and the 6 tests that exec `check_up` then give jupyterhub-singleuser about 5 s (four
# tries a second apart, each an exec) to listen. The pods run the real server from .venv
# (JupyterLab and all), compiled by `make setup` as an image is, so those 6, and the 2
# `*_override_namespace` tests that find a failed one's pod, need a core to spare for it:
# on a machine busy with other work they can fail with `Connection refused`.
# 7.1.0 on the real control plane: 205 passed, 2 deselected, in 140-144 s of pytest
# (docs/sim.md, "KubeSpawner's own test suite").
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
CACHE=${KUBESPAWNER_CACHE:-.cache/kubespawner}
SCENARIO=gpu_reclaim_sim/scenarios/kubespawner.yaml
version=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("jupyterhub-kubespawner"))')
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)

src=${KUBESPAWNER_SRC:-$CACHE/kubespawner-$version}
if [ ! -d "$src/tests" ]; then
  rm -rf "$CACHE/sdist" && mkdir -p "$CACHE/sdist"
  "$VENV/bin/pip" download -q --no-deps --no-binary :all: -d "$CACHE/sdist" "jupyterhub-kubespawner==$version"
  sdist=$(ls "$CACHE"/sdist/*.tar.gz)
  if tar tzf "$sdist" | grep -q "^[^/]*/tests/conftest.py$"; then
    tar xzf "$sdist" -C "$CACHE"
    mv "$CACHE/$(basename "$sdist" .tar.gz)" "$src"
  elif curl -fsSL --max-time 60 -o "$CACHE/tag.tar.gz" \
      "https://github.com/jupyterhub/kubespawner/archive/refs/tags/$version.tar.gz"; then
    mkdir -p "$src" && tar xzf "$CACHE/tag.tar.gz" -C "$src" --strip-components=1
  else
    echo "kubespawner-suite: KubeSpawner $version's sdist on PyPI has no tests/ and GitHub is out of reach:" >&2
    echo "  set KUBESPAWNER_SRC to a checkout of its tag $version" >&2
    exit 2
  fi
fi

suite_venv=$CACHE/venv
# pytest-asyncio <0.23 (their pin) needs a pytest before 8.4 (it reads a private table 8.4 removed);
# their object tests serialise kubernetes_asyncio's models with the sync client's ApiClient,
# which since kubernetes 37 (a new generator) no longer knows them; their ssl_app fixture
# (also used by test_variable_expansion) makes a JupyterHub app outside an event loop,
# which JupyterHub 6 refuses (the hub pod runs the simulator's JupyterHub either way)
pins=("pytest<8.4" "kubernetes<37" "jupyterhub<6")
want="kubespawner $version ${pins[*]}"
if [ "$(cat "$suite_venv/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "kubespawner-suite: installing KubeSpawner $version's test requirements into $suite_venv"
  rm -rf "$suite_venv"
  "$VENV/bin/python" -m venv "$suite_venv"
  "$suite_venv/bin/pip" install -q "jupyterhub-kubespawner[test]==$version" "${pins[@]}"
  echo "$want" > "$suite_venv/.stamp"
fi

# the network namespace (see the header) only now: nothing outside is reachable from it
if [ "$(id -u)" -eq 0 ] && [ -z "${KUBESPAWNER_SUITE_NETNS:-}" ]; then
  KUBESPAWNER_SUITE_NETNS=1 exec "$VENV/bin/python" -m gpu_reclaim_sim.network.namespace bash scripts/kubespawner_suite.sh "$@"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kubespawner-suite.XXXXXX")
"$VENV/bin/python" -m gpu_reclaim_sim run --config "$SCENARIO" --kubeconfig "$work/kubeconfig" \
  --data-dir "$work/cluster" --info-file "$work/sim.json" > "$work/sim.log" 2>&1 &
sim=$!
cleanup() {
  kill "$sim" 2>/dev/null || true
  wait "$sim" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 1200); do  # the real control plane takes 10-20 s to start, longer on a busy machine
  [ -f "$work/sim.json" ] && break
  kill -0 "$sim" 2>/dev/null || { cat "$work/sim.log" >&2; exit 1; }
  sleep 0.1
done
[ -f "$work/sim.json" ] || { echo "kubespawner-suite: the simulator did not start" >&2; cat "$work/sim.log" >&2; exit 1; }

cd "$src"
status=0
KUBECONFIG="$work/kubeconfig" "$suite_venv/bin/python" -m pytest -p no:cacheprovider -k "not ssl" tests "$@" || status=$?
[ "$status" -eq 0 ] || tail -n 50 "$work/sim.log" >&2
exit "$status"
