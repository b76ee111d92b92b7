#!/usr/bin/env bash
# Everything a fresh Debian 12 machine needs for the demo and the tests: Debian packages,
# the real Kubernetes control plane built from its Go modules (Go 1.26 on PATH),
# a virtualenv with the package and its test extras (and the JupyterLab extension's
# distribution, lab/, for the single-user servers), configurable-http-proxy, and a second
# virtualenv with the z2jh chart's hub image (JupyterHub 5.5) plus the package, from which
# `make test` runs a JupyterHub 5 for the hub-facing tests.
# Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
VENV_JH5=${VENV_JH5:-.venv-jh5}
HUB_IMAGE_REQUIREMENTS=scripts/z2jh-hub-image-requirements.txt
# what the hub image has besides that file (built from C sources there; wheels here): the
# chart's jupyterhub_config.py makes the hub use curl, and hub.db.type postgres needs psycopg2
HUB_IMAGE_C_PACKAGES=("pycurl>=7.45" "psycopg2-binary>=2.9")
# Debian packages the demo and tests use (binaries checked first, installed when missing)
declare -A APT=([setsid]=util-linux [node]=nodejs [npm]=npm [/usr/bin/chromium]=chromium [/usr/bin/prometheus]=prometheus
             [/usr/sbin/nft]=nftables  # nft: the simulator's data plane (Services, NetworkPolicy)
             [/usr/sbin/ip]=iproute2  # the run's network namespace (gpu_reclaim_sim/network/namespace.py)
             # the store's tests on PostgreSQL (tests/support/postgres.py) and the release tests' database
             [/usr/lib/postgresql/15/bin/postgres]=postgresql)

missing=()
for bin in "${!APT[@]}"; do
  command -v "$bin" >/dev/null 2>&1 || missing+=("${APT[$bin]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v configurable-http-proxy >/dev/null 2>&1; then
  echo "setup: installing configurable-http-proxy (npm)"
  npm install -g --no-fund --no-audit configurable-http-proxy@5 >/dev/null
fi

# The images' Python compiled, as an image's build compiles it (pip's default): containers
# run these environments read-only (sim.kubelet.sandbox), where Python cannot write the
# bytecode it compiles, so without it every container start compiled each module it
# imported (a single-user server: 2.6 CPU-s more for its imports alone; on a busy machine
# it listened 17 s after its start instead of 6 s, where KubeSpawner's suite gives it 5 s).
# Once per install (its stamp).
compile_image_python() {  # $1: a virtualenv
  local want
  want=$(cat "$1/.setup-stamp")
  if [ "$(cat "$1/.compile-stamp" 2>/dev/null)" != "$want" ]; then
    echo "setup: compiling $1's bytecode (containers run it read-only)"
    "$1/bin/python" -m compileall -q -j 0 "$1/lib" >/dev/null
    echo "$want" > "$1/.compile-stamp"
  fi
}

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
# the stamp says what the install was of, the record of its packages that they are all still
# there (scripts/venv_packages.py): one gone since, e.g. uninstalled by a `pip install`, is
# installed again; `make test` checks the record at its end
stamp="$VENV/.setup-stamp"
want=$(cat setup.cfg pyproject.toml lab/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$VENV/bin/python" scripts/venv_packages.py check; then
  echo "setup: installing the package, its test dependencies and the JupyterLab extension into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # the demo extra names jupyterhub-gpu-reclaim-lab: the same command installs it from lab/.
  # --no-compile: compile_image_python compiles in parallel, also what an earlier install left
  "$VENV/bin/python" -m pip install -q --no-compile -e ./lab -e ".[test]"
  "$VENV/bin/python" scripts/venv_packages.py record
  echo "$want" > "$stamp"
fi
compile_image_python "$VENV"

# The chart's hub image: its requirements, then the package installed as
# examples/hub-image/Dockerfile installs it (constrained to the image's versions: it adds
# packages and changes none). First a plain `pip install` of the package, dry-run, must not
# upgrade the image's JupyterHub or KubeSpawner either.
hub_image_venv() {
  if [ ! -x "$VENV_JH5/bin/python" ]; then
    echo "setup: creating $VENV_JH5"
    "$PYTHON" -m venv "$VENV_JH5"
  fi
  stamp="$VENV_JH5/.setup-stamp"
  want=$(cat setup.cfg pyproject.toml "$HUB_IMAGE_REQUIREMENTS" <(echo "${HUB_IMAGE_C_PACKAGES[*]}") | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$VENV_JH5/bin/python" scripts/venv_packages.py check; then
    echo "setup: installing the z2jh hub image's requirements (JupyterHub 5.5) and the package into $VENV_JH5"
    pip=("$VENV_JH5/bin/python" -m pip)
    "${pip[@]}" install -q --upgrade pip
    "${pip[@]}" install -q --no-compile -r "$HUB_IMAGE_REQUIREMENTS" "${HUB_IMAGE_C_PACKAGES[@]}"
    "${pip[@]}" freeze --exclude-editable > "$VENV_JH5/hub-image.txt"
    report=$(mktemp)
    "${pip[@]}" install -q --dry-run --report "$report" -e .
    "$VENV_JH5/bin/python" - "$report" <<'PY'
import json, sys
upgraded = sorted(f"{i['metadata']['name']} {i['metadata']['version']}"
                  for i in json.load(open(sys.argv[1]))["install"]
                  if i["metadata"]["name"].lower() in {"jupyterhub", "jupyterhub-kubespawner"})
if upgraded:
    sys.exit(f"setup: `pip install jupyterhub-gpu-reclaim` would upgrade the hub image's {', '.join(upgraded)}")
PY
    rm -f "$report"
    "${pip[@]}" install -q -c "$VENV_JH5/hub-image.txt" -e .
    "$VENV_JH5/bin/python" scripts/venv_packages.py record
    echo "$want" > "$stamp"
  fi
  compile_image_python "$VENV_JH5"
}
# ... in the background while the JupyterLab extension builds (pip waits on the network and
# the disk, npm on the CPU): they share no file, and the package's editable install into
# $VENV (its egg-info in the worktree) is done above
hub_image_venv &
hub_image_pid=$!

# The JupyterLab extension (labextension/, docs/lab.md): its npm packages when
# package-lock.json changed, its build when its sources or JupyterLab changed, and the build
# linked where the venv's jupyter-server finds it (as `jupyter labextension develop` links
# it: a rebuild needs no reinstall), with the config that enables its server side (an
# editable install installs no data files). lab/'s wheel ships both as data files.
LAB=labextension
LAB_BUILD=lab/jupyterhub_gpu_reclaim_lab/labextensions/jupyterhub-gpu-reclaim
LAB_CONFIG=lab/jupyter-config/jupyter_server_config.d/jupyterhub_gpu_reclaim_lab.json
# the build's place before the extension had its own distribution (lab/)
rm -rf jupyterhub_gpu_reclaim/labext/labextensions jupyterhub_gpu_reclaim/labext/__pycache__
rmdir jupyterhub_gpu_reclaim/labext 2>/dev/null || true
want=$(sha256sum "$LAB/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$LAB/node_modules/.setup-stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing the JupyterLab extension's npm packages (npm ci)"
  (cd "$LAB" && npm ci --no-fund --no-audit >/dev/null)
  echo "$want" > "$LAB/node_modules/.setup-stamp"
fi
core=$("$VENV/bin/python" -c 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging", "package.json"))')
# (static/localtime.*: the service pages' time rule, which the extension bundles)
want=$(cat "$LAB/package.json" "$LAB/tsconfig.json" "$LAB"/src/* "$LAB"/style/* static/localtime.* "$core" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$LAB_BUILD/.setup-stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: building the JupyterLab extension"
  rm -rf "$LAB_BUILD"
  (cd "$LAB" && JUPYTERLAB_CORE_PACKAGE="$core" npm run -s build >/dev/null)
  echo "$want" > "$LAB_BUILD/.setup-stamp"
fi
labext_dir="$VENV/share/jupyter/labextensions/jupyterhub-gpu-reclaim"
if [ "$(readlink "$labext_dir" 2>/dev/null)" != "$PWD/$LAB_BUILD" ]; then
  mkdir -p "$(dirname "$labext_dir")"
  rm -rf "$labext_dir"
  ln -s "$PWD/$LAB_BUILD" "$labext_dir"
fi
labext_config="$VENV/etc/jupyter/jupyter_server_config.d/$(basename "$LAB_CONFIG")"
if [ "$(readlink "$labext_config" 2>/dev/null)" != "$PWD/$LAB_CONFIG" ]; then
  mkdir -p "$(dirname "$labext_config")"
  ln -sf "$PWD/$LAB_CONFIG" "$labext_config"
fi
# both halves where the single-user servers find them, or the set-up fails saying which is
# missing (a half-installed extension gives users nothing: docs/troubleshooting.md)
"$VENV/bin/python" -m jupyterhub_gpu_reclaim_lab.install_check >/dev/null

wait "$hub_image_pid"  # its exit status: set -e stops here when it failed

# The real Kubernetes control plane (controlplane/, issue 37), built once through the Go module
# proxy and cached outside the clone; after the rest, as a cold build takes both cores
bash scripts/build-controlplane.sh >/dev/null
