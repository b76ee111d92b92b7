"""The service's options: `ServiceSettings`, each option a trait declared in its body.

Each option is declared once, where it is read: a trait of `ServiceSettings` (kind of value,
default, help text), in command-line order, tagged `idle_culler` for jupyterhub-idle-culler
2.0's and `command_line=False` for those of the config file only. `application.GpuReclaim`
is a `ServiceSettings`, so these are its options as they are (``c.GpuReclaim.timeout``,
``--timeout``), and it is what the service reads: the launcher sets what it derives from them
(`rules`, `ssl_context`), freezes it and hands it to the cycle and the web pages, which read
the options they need from it, typed, as a `ServiceSettings` (they never import the
Application). `ServiceSettings()` is the service as configured by default.

A few defaults come from the environment (JUPYTERHUB_API_URL and friends); the
Application computes those (``@default`` in application.py), and their help says so.
"""

from __future__ import annotations

import datetime as dt
import ssl
from textwrap import dedent
from typing import Any

from traitlets import Bool, Callable, Dict, Enum, Float, HasTraits, Instance, Int, List, TraitType, Unicode, default

from .. import DEFAULT_STORE_URL
from ..durations import parse_duration, seconds_or_off
from ..policy.config import PolicyConfig
from ..policy.rules import PolicyRules
from ..signals.probe_token_client import PROBE_TOKEN_MAX_LIFETIME
from ..signals.prometheus import DEFAULT_QUERY


class Duration(TraitType[float, Any]):
    """A duration in seconds (float). Accepts a number of seconds or a string such as
    "90", "90s", "30m", "2h", "1d", "1h30m". Never negative."""

    default_value = 0.0
    info_text = 'a duration: seconds (>= 0) or a string like "30m", "2h", "1h30m"'

    def validate(self, obj: Any, value: Any) -> float:
        try:
            seconds = parse_duration(value).total_seconds()
        except (TypeError, ValueError):
            self.error(obj, value)
        if seconds < 0:
            self.error(obj, value)
        return float(seconds)

    def from_string(self, s: str) -> Any:
        return s


#: the longest a stop waits for the tabs' saves (the lab package's saving.MAX_WAIT)
SAVE_WAIT_MAX = 120.0


def option_help(text: str) -> str:
    """An option's help as written in its declaration (indented, in triple quotes), dedented."""
    return dedent(text).strip()


def effective_cull_every(cull_every: int, timeout: int) -> int:
    """--cull-every as the service runs it: 0 (not given) is half of --timeout (at least 1 s),
    as in jupyterhub-idle-culler."""
    return cull_every or max(1, timeout // 2)


def declared_options(cls: type[HasTraits]) -> list[str]:
    """The options `cls` declares in its own body, in the order it declares them."""
    return [name for name, value in vars(cls).items() if isinstance(value, TraitType) and value.metadata.get("config")]


class ServiceSettings(HasTraits):
    """Everything the running service needs, as typed traits: the options (in command-line
    order) and what the launcher derives from them (`rules`, `ssl_context`)."""

    # derived by the launcher
    # the GPU policy's options and idle-culler's timeout rule (`policy`), and --policy-rules over it
    rules = Instance(PolicyRules)
    ssl_context = Instance(ssl.SSLContext, allow_none=True)  # --ssl-enabled: internal-ssl's client certificate and CA

    @default("rules")
    def _rules_default(self) -> PolicyRules:
        return PolicyRules(PolicyConfig())

    def freeze(self) -> None:
        """From now on no option can be set: what the service was started with stays (the
        launcher freezes what it hands the service)."""
        self._frozen = True

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False) and not name.startswith("_"):
            raise AttributeError(f"the service's settings are read-only: cannot set {name}")
        super().__setattr__(name, value)

    # ------------------------------------------------------------------ idle-culler 2.0
    # in its --help order

    api_page_size = Int(0, help=option_help("""
        Number of users to request per page, when using JupyterHub 2.0's paginated
        user list API.

        Default (0): use the server-side default configured page size.
        """)).tag(config=True, idle_culler=True)

    concurrency = Int(10, help=option_help("""
        Limit the number of concurrent requests made to the Hub.

        Deleting a lot of users at the same time can slow down the Hub, so limit the
        number of API requests we have outstanding at any given time. 0: no limit.
        """)).tag(config=True, idle_culler=True)

    cull_admin_users = Bool(PolicyConfig.cull_admin_users, help=option_help("""
        Whether admin users should be culled (only if --cull-users=true).

        As in jupyterhub-idle-culler 2.0 this only concerns deleting users: admins'
        servers are stopped like anyone's.
        """)).tag(config=True, idle_culler=True)

    cull_default_servers = Bool(PolicyConfig.cull_default_servers, help=option_help("""
        Whether default servers should be culled (only if --cull-default-servers=true).

        Applies to idle-culler's timeout rule for servers without GPUs.
        """)).tag(config=True, idle_culler=True)

    cull_arbiter_hook = Callable(None, allow_none=True, help=option_help("""
        Custom culling logic for servers without GPUs, as in jupyterhub-idle-culler 2.0
        (config file only; c.IdleCuller.cull_arbiter_hook in its idle_culler_config.py
        is read too).

        A callable called each cycle for each ready server without GPUs with the
        keyword arguments inactive (a timedelta: the time since the server's
        last_activity, else since it started), inactive_limit (--timeout, in seconds)
        and server (the server's model from the hub's API, a dict: "state" is in it
        when the service's role has admin:server_state). It returns true to cull the
        server (if --cull-default-servers / --cull-named-servers allow), false to keep
        it; it may be async. --max-age still applies. A hook that raises (anything,
        SystemExit included) or does not answer within --cull-arbiter-timeout holds
        that server (logged, never culled on it), as a failed hook keeps it in
        idle-culler. A synchronous hook runs in a thread of its own, off the service's
        event loop; the servers are asked together. Default (None): cull when inactive
        >= --timeout, idle-culler's default_cull_arbiter. GPU sessions follow the GPU
        policy and are never passed to it.
        """)).tag(config=True, command_line=False, idle_culler=True)

    cull_arbiter_timeout = Float(10.0, min=0.1, help=option_help("""
        Seconds to wait for the cull_arbiter_hook's answer about one server (at least
        0.1). A server whose hook has not answered in time is held: kept, as when the
        hook raises. A synchronous hook's call cannot be stopped and runs on in its
        thread: the hook is not called again for that server (which stays held) until
        that call returns. Not an option of jupyterhub-idle-culler, which waits for ever.
        """)).tag(config=True)

    # 0: half of --timeout (`cycle_interval`)
    cull_every = Int(0, help=option_help("""
        The interval (in seconds) for checking for idle servers to cull.

        Default: half of --timeout, as in jupyterhub-idle-culler.
        """)).tag(config=True, idle_culler=True)

    cull_named_servers = Bool(PolicyConfig.cull_named_servers, help=option_help("""
        Whether named servers should be culled (only if --cull-named-servers=true).

        Applies to idle-culler's timeout rule for servers without GPUs.
        """)).tag(config=True, idle_culler=True)

    cull_users = Bool(False, help=option_help("""
        Cull users in addition to servers.

        This is for use in temporary-user cases such as tmpnb.
        """)).tag(config=True, idle_culler=True)

    internal_certs_location = Unicode("internal-ssl", help=option_help("""
        The location of generated internal-ssl certificates (only needed with
        --ssl-enabled=true).
        """)).tag(config=True, idle_culler=True)

    max_age = Int(int(seconds_or_off(PolicyConfig.cpu_max_age)), help=option_help("""
        The maximum age (in seconds) of servers that should be culled even if they are
        active.

        jupyterhub-idle-culler's rule, applied to servers without GPUs. 0: off. For a
        hard lifetime of GPU sessions (with warnings) see --gpu-max-age.
        """)).tag(config=True, idle_culler=True)

    remove_named_servers = Bool(False, help=option_help("""
        Remove named servers in addition to stopping them.

        This is useful for a BinderHub that uses authentication and named servers.
        """)).tag(config=True, idle_culler=True)

    ssl_enabled = Bool(False, help=option_help("""
        Whether the Jupyter API endpoint has TLS enabled.

        Uses the hub's internal-ssl key, certificate and CA from
        --internal-certs-location.
        """)).tag(config=True, idle_culler=True)

    timeout = Int(int(PolicyConfig.cpu_timeout.total_seconds()), help=option_help("""
        The idle timeout (in seconds).

        jupyterhub-idle-culler's rule, applied to servers without GPUs: a server whose
        hub last_activity is this old is stopped. GPU sessions follow the GPU policy
        instead (the hub's last_activity alone never keeps a GPU session). Default 600,
        as in jupyterhub-idle-culler (the z2jh chart passes 3600).
        """)).tag(config=True, idle_culler=True)

    url = Unicode(None, allow_none=True, help=option_help("""
        The JupyterHub API URL.

        Default: the JUPYTERHUB_API_URL environment variable (set by JupyterHub for
        its managed services), as in jupyterhub-idle-culler.
        """)).tag(config=True, idle_culler=True)

    # ------------------------------------------------------------------ the service

    dry_run = Bool(False, help=option_help("""
        Decide, record and report everything, but stop nothing.

        Warnings go to the admins only. The recommended first step of a rollout:
        run with --dry-run for a while, read what it would have reclaimed, then turn
        it off. Default off (the service reclaims, as idle-culler culls).
        """)).tag(config=True)

    policy_rules = Unicode("", help=option_help("""
        A YAML or JSON file of policy rules: GPU policy settings by profile, GPU type,
        group, user, or default/named server, each overriding the options here for the
        sessions it matches; first match wins (docs/policy.md, "Rules by profile and
        group"). Checked at start: a bad rule stops the service with its name. Empty
        (default): every session has the options here.
        """)).tag(config=True)

    api_token = Unicode(help=option_help("""
        The JupyterHub API token of the service.

        Default: the JUPYTERHUB_API_TOKEN environment variable, as in
        jupyterhub-idle-culler (JupyterHub sets it for managed services). Prefer the
        environment variable to writing the token into a config file. Never logged.
        """)).tag(config=True, command_line=False)

    # ------------------------------------------------------------------ signals

    namespace = Unicode(help=option_help("""
        The Kubernetes namespace of the single-user pods (the hub's namespace).

        Default: the POD_NAMESPACE environment variable, else the namespace of the
        service account the service runs under, else "default".
        """)).tag(config=True)

    kubernetes = Enum(["auto", "true", "false"], "auto", help=option_help("""
        Whether the hub's servers are Kubernetes pods (KubeSpawner), whose GPUs the
        service reads from the pod list.

        "auto" (default): when the service has a Kubernetes configuration: --kubeconfig,
        a pod's service account (KUBERNETES_SERVICE_HOST), $KUBECONFIG or
        ~/.kube/config. "false" (and "auto" without one): a hub without Kubernetes
        (LocalProcessSpawner, SystemdSpawner, DockerSpawner, ...): no pod is read, every
        server is a server without GPUs, culled by idle-culler's rule. "true": pods are
        read; a server whose pod cannot be seen is held, never culled unseen.
        """)).tag(config=True)

    kubeconfig = Unicode("", help=option_help("""
        A kubeconfig file for reading pods. Default: the in-cluster service account,
        else $KUBECONFIG / ~/.kube/config. Needs get/list/watch on pods.
        """)).tag(config=True)

    pod_label_selector = Unicode("component=singleuser-server", help=option_help("""
        Label selector of the single-user pods (KubeSpawner's default labels).
        """)).tag(config=True)

    prometheus_url = Unicode("", help=option_help("""
        Prometheus base URL (e.g. http://prometheus-server) to read GPU utilization
        from with one query per cycle. Leave empty to scrape --dcgm-exporter-urls
        directly. With neither, GPU sessions are held (never reclaimed) for lack of data.
        """)).tag(config=True)

    prometheus_query = Unicode(DEFAULT_QUERY, help=option_help("""
        The PromQL instant query for per-GPU utilization (and framebuffer use). The
        default returns DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_GR_ENGINE_ACTIVE and
        DCGM_FI_DEV_FB_USED, each in its own `field`; engine activity is the utilization
        of a MIG instance and of a GPU without GPU_UTIL.
        """)).tag(config=True)

    prometheus_gpu_matchers = Unicode("", help=option_help("""
        PromQL label matchers selecting the dcgm-exporter series the service reads, e.g.
        job="nvidia-dcgm-exporter", where other targets write GPU metrics to the same
        Prometheus (another cluster, a second scrape of the exporter): the default
        --prometheus-query and the usage report's Prometheus days read only those series.
        Empty: every series of the GPU metrics.
        """)).tag(config=True)

    prometheus_pod_label = Enum(["auto", "pod", "exported_pod"], "auto", help=option_help("""
        Which label names the pod holding a GPU: "exported_pod" when Prometheus scrapes
        dcgm-exporter with honor_labels: false (the default), "pod" with honor_labels:
        true; "auto" picks per answer, for pod and namespace apart (a job that labels its
        target with namespace but not pod renames only namespace).
        """)).tag(config=True)

    dcgm_exporter_urls = List(Unicode(), help=option_help("""
        dcgm-exporter /metrics URLs to scrape directly each cycle, for clusters without
        Prometheus (one per GPU node, or a Service).
        """)).tag(config=True)

    gpu_request_timeout = Float(10.0, help=option_help("""
        Seconds to wait for Prometheus or a dcgm-exporter before counting the GPU data
        of that cycle missing.
        """)).tag(config=True)

    probe_kernels = Bool(True, help=option_help("""
        Ask GPU sessions whose GPUs look idle for their kernels and terminals
        (GET /api/kernels?no_track_activity=1), so a busy kernel keeps the session.
        The probe goes to the pod's own address (the proxy would move the hub's
        last_activity); on z2jh the service needs the label
        hub.jupyter.org/network-access-singleuser=true. Its credential: see
        kernel_probe_credential.
        """)).tag(config=True)

    kernel_probe_credential = Enum(["user-token", "none"], default_value="user-token", help=option_help("""
        What a kernel probe authenticates with. The service's own token never goes to a
        user's server (the user can record every request to it). "user-token": per
        probed server, a token owned by that server's user and good for that server only
        (scope access:servers!server=USER/NAME), minted from the hub and deleted when the
        server stops; the service's role needs the scope custom:gpu-reclaim:probe-tokens
        (the hub-side API that configure_hub(c) installs; docs/security.md), or tokens,
        which is worth any user's token and is warned of at start. "none": no credential,
        so no probe: a session whose GPUs look idle is held, never reclaimed (no kernel
        data), and a busy kernel cannot be told from an idle one.
        """)).tag(config=True)

    kernel_probe_token_lifetime = Duration(float(PROBE_TOKEN_MAX_LIFETIME), help=option_help(f"""
        How long a kernel-probe token lives (seconds or "1h"), from 60 s to
        {PROBE_TOKEN_MAX_LIFETIME} s, the most the hub's probe-token API mints. It is reused
        until a quarter of this is left, then replaced; a hub whose
        token_expires_in_max_seconds is lower shortens it to that.
        """)).tag(config=True)

    kernel_probe_timeout = Float(5.0, help=option_help("""
        Seconds to wait for a server's kernel list; a server that does not answer has
        no kernel data and is held, not reclaimed.
        """)).tag(config=True)

    # ------------------------------------------------------------------ actions, store

    stop_timeout = Duration(300.0, help=option_help("""
        How long a stop may take (the hub's stop, then the pod's removal) before it is
        reported as stuck (log, metric, store) and retried next cycle (seconds or "5m").
        """)).tag(config=True)

    save_before_stop = Duration(15.0, help=option_help(f"""
        Before it stops a GPU server, how long the service waits for the server's open
        JupyterLab tabs to save their documents with unsaved changes (seconds or "30s"; at
        most {SAVE_WAIT_MAX:g}; 0: it does not ask). A server without a tab open answers at once, and a
        save still running then is cut by the stop (jupyter-server keeps the last whole save).
        In dry run the tabs only say what they would save. Needs the JupyterLab extension
        in the user image and the kernel probe's credential (docs/lab.md).
        """)).tag(config=True)

    verify_pod_gone = Bool(True, help=option_help("""
        After the hub stops a server, wait until its pod is gone, so the GPU is really
        free before the reclaim counts as done.
        """)).tag(config=True)

    store_url = Unicode(DEFAULT_STORE_URL, help=option_help("""
        Where intents, warnings, reclaims and observations are kept: any SQLAlchemy URL
        (sqlite:///path, postgresql://...). Default: gpu_reclaim.sqlite in the working
        directory. `backtest --from-store --store URL` reads the same database.
        """)).tag(config=True)

    observation_retention = Duration(14 * 86400.0, help=option_help("""
        How long the observations of each cycle are kept for `backtest --from-store`
        (seconds or "14d"). Intents, warnings and reclaims are kept (--record-retention).
        """)).tag(config=True)

    # ------------------------------------------------------------------ notifications

    notifiers = List(Dict(), [{"type": "log"}], help=option_help("""
        Where warnings and reclaim notices go: a list of {"type": ..., options}.
        {"type": "log"}; {"type": "webhook", "url": ...} (JSON); {"type": "slack",
        "url": ...} (Slack-compatible text); {"type": "email", "host": ..., "port":
        ..., "sender": ..., "address_template": "{user}@example.edu" (users get no
        e-mail without it; see docs/service.md for what an address must be),
        "username"/"password", "starttls", "ssl"}. See docs/service.md.
        """)).tag(config=True, command_line=False)

    admin_recipients = List(Unicode(), help=option_help("""
        Who gets a copy of every warning and reclaim notice (user names or e-mail
        addresses), and the only recipients in --dry-run.
        """)).tag(config=True)

    copy_admins = Bool(True, help=option_help("""
        Send --admin-recipients a copy of the notices users get.
        """)).tag(config=True)

    notify_users_in_dry_run = Bool(False, help=option_help("""
        In --dry-run, warn the users too (not only the admins).
        """)).tag(config=True)

    keepalive_url = Unicode(help=option_help("""
        The keep-alive page linked from every warning. Default: this service's
        keepalive page (JUPYTERHUB_PUBLIC_URL, else JUPYTERHUB_SERVICE_PREFIX, + "keepalive").
        """)).tag(config=True)

    hub_name = Unicode("JupyterHub", help=option_help("""
        The hub's name in notices ("Physics GPU Hub").
        """)).tag(config=True)

    # ------------------------------------------------------------------ web pages

    bind_url = Unicode(help=option_help("""
        Where the service's web server (/metrics, the pages) listens, http://IP:PORT.
        Default: JUPYTERHUB_SERVICE_URL, set by JupyterHub from the service's url;
        empty, or a service registered without a url (as idle-culler's README
        registers the culler): no web server, the cycles run alone.
        """)).tag(config=True)

    cookie_secret_file = Unicode(help=option_help("""
        A file holding the secret that signs the web pages' login cookie (hex or raw
        bytes, as JupyterHub's own cookie secret file). Empty: a new random secret at
        each start, so users go through the hub's OAuth once more after a restart
        (a redirect, no password). Default: $GPU_RECLAIM_COOKIE_SECRET_FILE if set.
        """)).tag(config=True)

    admin_scope = Unicode("custom:gpu-reclaim:admin", help=option_help("""
        The scope that opens the admin page and admin API besides the hub's admin flag.
        Define it in c.JupyterHub.custom_scopes, grant it in a role, and list it in the
        service's oauth_client_allowed_scopes so it reaches the service's login token.
        """)).tag(config=True)

    record_retention = Duration(90 * 86400.0, help=option_help("""
        How long what has ended is kept in the store (seconds or "90d"): intents cleared
        or expired, warnings of closed episodes, admins' exemptions, and the audit log of
        what users and admins did on the web pages. Current intents, open warnings and
        reclaims are kept. Pruned once an hour.
        """)).tag(config=True)

    user_writes_per_minute = Int(30, help=option_help("""
        How many changes (keep-alive, clear, stop) each user may make per minute through
        the web pages and API, in bursts of as many; beyond it the answer is 429 with
        Retry-After. 0: no limit.
        """)).tag(config=True)

    @property
    def policy(self) -> PolicyConfig:
        """The base policy: the GPU policy's options and idle-culler's timeout rule."""
        return self.rules.base

    @property
    def cycle_interval(self) -> dt.timedelta:
        """--cull-every; 0 (its default): half of --timeout, as in jupyterhub-idle-culler."""
        return dt.timedelta(seconds=effective_cull_every(self.cull_every, self.timeout))

