"""The service's settings, each declared once: `ServiceSettings`.

Each field of `ServiceSettings` that carries an option (`_option`) declares that option: its
trait (kind of value, default, help text), in this order on the command line;
`application.GpuReclaim` has these traits as its options (and the GPU policy's, made from
`policy.config.PolicyConfig`'s fields). The launcher fills one frozen `ServiceSettings` from
the options and hands it to the service: the cycle and the web pages read the parts they
need from it, and never see the traitlets Application. A field's default is its option's,
so `ServiceSettings()` is the service as configured by default.

A few defaults come from the environment (JUPYTERHUB_API_URL and friends); the
Application computes those (``@default`` in application.py), and their help says so.
"""

from __future__ import annotations

import datetime as dt
import ssl
from dataclasses import dataclass, field, fields
from textwrap import dedent
from typing import Any
from typing import Callable as CallableType

from traitlets import Bool, Callable, Dict, Enum, Float, Int, List, TraitType, Unicode

from . import DEFAULT_STORE_URL
from .durations import parse_duration
from .policy.config import PolicyConfig
from .policy.rules import PolicyRules
from .signals.gpu_readings import PodLabel
from .signals.probe_token_client import PROBE_TOKEN_MAX_LIFETIME
from .signals.prometheus import DEFAULT_QUERY


class Duration(TraitType):
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


def _option(trait: type[TraitType], *args: Any, help: str, command_line: bool = True,
            idle_culler: bool = False, secret: bool = False, **kwargs: Any) -> Any:
    """A field set by the option of its name, the trait `trait(*args, **kwargs)` with `help`;
    the field's default is the trait's (lists as tuples). `command_line`: also
    ``--name=value`` (else the config file only); `idle_culler`: one of jupyterhub-idle-culler
    2.0's options; `secret`: kept out of the settings' repr."""
    option = trait(*args, **{**kwargs, "help": dedent(help).strip()}).tag(config=True)
    default = option.default()
    return field(default=tuple(default) if isinstance(default, list) else default, repr=not secret,
                 metadata={"option": option, "command_line": command_line, "idle_culler": idle_culler})


def effective_cull_every(cull_every: int, timeout: int) -> int:
    """--cull-every as the service runs it: 0 (not given) is half of --timeout (at least 1 s),
    as in jupyterhub-idle-culler."""
    return cull_every or max(1, timeout // 2)


def options() -> dict[str, TraitType]:
    """The options the fields of `ServiceSettings` declare, by name, in command-line order."""
    return {f.name: f.metadata["option"] for f in _OPTION_FIELDS}


@dataclass(frozen=True, kw_only=True)
class ServiceSettings:
    """Everything the running service needs, as plain typed values: the options (fields
    made with `_option`, in command-line order) and what the launcher derives from them."""

    # derived by the launcher
    # the GPU policy's options and idle-culler's timeout rule (`policy`), and --policy-rules over it
    rules: PolicyRules = PolicyRules(PolicyConfig())
    ssl_context: ssl.SSLContext | None = None  # --ssl-enabled: internal-ssl's client certificate and CA

    # ------------------------------------------------------------------ idle-culler 2.0
    # in its --help order

    api_page_size: int = _option(Int, 0, idle_culler=True, help="""
        Number of users to request per page, when using JupyterHub 2.0's paginated
        user list API.

        Default (0): use the server-side default configured page size.
        """)

    concurrency: int = _option(Int, 10, idle_culler=True, help="""
        Limit the number of concurrent requests made to the Hub.

        Deleting a lot of users at the same time can slow down the Hub, so limit the
        number of API requests we have outstanding at any given time. 0: no limit.
        """)

    cull_admin_users: bool = _option(Bool, True, idle_culler=True, help="""
        Whether admin users should be culled (only if --cull-users=true).

        As in jupyterhub-idle-culler 2.0 this only concerns deleting users: admins'
        servers are stopped like anyone's.
        """)

    cull_default_servers: bool = _option(Bool, True, idle_culler=True, help="""
        Whether default servers should be culled (only if --cull-default-servers=true).

        Applies to idle-culler's timeout rule for servers without GPUs.
        """)

    cull_arbiter_hook: CallableType[..., Any] | None = _option(
        Callable, None, allow_none=True, command_line=False, idle_culler=True, help="""
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
        """)

    cull_arbiter_timeout: float = _option(Float, 10.0, min=0.1, help="""
        Seconds to wait for the cull_arbiter_hook's answer about one server (at least
        0.1). A server whose hook has not answered in time is held: kept, as when the
        hook raises. A synchronous hook's call cannot be stopped and runs on in its
        thread: the hook is not called again for that server (which stays held) until
        that call returns. Not an option of jupyterhub-idle-culler, which waits for ever.
        """)

    # 0: half of --timeout (`cycle_interval`)
    cull_every: int = _option(Int, 0, idle_culler=True, help="""
        The interval (in seconds) for checking for idle servers to cull.

        Default: half of --timeout, as in jupyterhub-idle-culler.
        """)

    cull_named_servers: bool = _option(Bool, True, idle_culler=True, help="""
        Whether named servers should be culled (only if --cull-named-servers=true).

        Applies to idle-culler's timeout rule for servers without GPUs.
        """)

    cull_users: bool = _option(Bool, False, idle_culler=True, help="""
        Cull users in addition to servers.

        This is for use in temporary-user cases such as tmpnb.
        """)

    internal_certs_location: str = _option(Unicode, "internal-ssl", idle_culler=True, help="""
        The location of generated internal-ssl certificates (only needed with
        --ssl-enabled=true).
        """)

    max_age: int = _option(Int, 0, idle_culler=True, help="""
        The maximum age (in seconds) of servers that should be culled even if they are
        active.

        jupyterhub-idle-culler's rule, applied to servers without GPUs. 0: off. For a
        hard lifetime of GPU sessions (with warnings) see --gpu-max-age.
        """)

    remove_named_servers: bool = _option(Bool, False, idle_culler=True, help="""
        Remove named servers in addition to stopping them.

        This is useful for a BinderHub that uses authentication and named servers.
        """)

    ssl_enabled: bool = _option(Bool, False, idle_culler=True, help="""
        Whether the Jupyter API endpoint has TLS enabled.

        Uses the hub's internal-ssl key, certificate and CA from
        --internal-certs-location.
        """)

    timeout: int = _option(Int, 600, idle_culler=True, help="""
        The idle timeout (in seconds).

        jupyterhub-idle-culler's rule, applied to servers without GPUs: a server whose
        hub last_activity is this old is stopped. GPU sessions follow the GPU policy
        instead (the hub's last_activity alone never keeps a GPU session). Default 600,
        as in jupyterhub-idle-culler (the z2jh chart passes 3600).
        """)

    url: str = _option(Unicode, None, allow_none=True, idle_culler=True, help="""
        The JupyterHub API URL.

        Default: the JUPYTERHUB_API_URL environment variable (set by JupyterHub for
        its managed services), as in jupyterhub-idle-culler.
        """)

    # ------------------------------------------------------------------ the service

    dry_run: bool = _option(Bool, False, help="""
        Decide, record and report everything, but stop nothing.

        Warnings go to the admins only. The recommended first step of a rollout:
        run with --dry-run for a while, read what it would have reclaimed, then turn
        it off. Default off (the service reclaims, as idle-culler culls).
        """)

    policy_rules: str = _option(Unicode, "", help="""
        A YAML or JSON file of policy rules: GPU policy settings by profile, GPU type,
        group, user, or default/named server, each overriding the options here for the
        sessions it matches; first match wins (docs/policy.md, "Rules by profile and
        group"). Checked at start: a bad rule stops the service with its name. Empty
        (default): every session has the options here.
        """)

    api_token: str = _option(Unicode, command_line=False, secret=True, help="""
        The JupyterHub API token of the service.

        Default: the JUPYTERHUB_API_TOKEN environment variable, as in
        jupyterhub-idle-culler (JupyterHub sets it for managed services). Prefer the
        environment variable to writing the token into a config file. Never logged.
        """)

    # ------------------------------------------------------------------ signals

    namespace: str = _option(Unicode, help="""
        The Kubernetes namespace of the single-user pods (the hub's namespace).

        Default: the POD_NAMESPACE environment variable, else the namespace of the
        service account the service runs under, else "default".
        """)

    kubernetes: str = _option(Enum, ["auto", "true", "false"], "auto", help="""
        Whether the hub's servers are Kubernetes pods (KubeSpawner), whose GPUs the
        service reads from the pod list.

        "auto" (default): when the service has a Kubernetes configuration: --kubeconfig,
        a pod's service account (KUBERNETES_SERVICE_HOST), $KUBECONFIG or
        ~/.kube/config. "false" (and "auto" without one): a hub without Kubernetes
        (LocalProcessSpawner, SystemdSpawner, DockerSpawner, ...): no pod is read, every
        server is a server without GPUs, culled by idle-culler's rule. "true": pods are
        read; a server whose pod cannot be seen is held, never culled unseen.
        """)

    kubeconfig: str = _option(Unicode, "", help="""
        A kubeconfig file for reading pods. Default: the in-cluster service account,
        else $KUBECONFIG / ~/.kube/config. Needs get/list/watch on pods.
        """)

    pod_label_selector: str = _option(Unicode, "component=singleuser-server", help="""
        Label selector of the single-user pods (KubeSpawner's default labels).
        """)

    prometheus_url: str = _option(Unicode, "", secret=True, help="""
        Prometheus base URL (e.g. http://prometheus-server) to read GPU utilization
        from with one query per cycle. Leave empty to scrape --dcgm-exporter-urls
        directly. With neither, GPU sessions are held (never reclaimed) for lack of data.
        """)

    prometheus_query: str = _option(Unicode, DEFAULT_QUERY, help="""
        The PromQL instant query for per-GPU utilization (and framebuffer use). The
        default returns DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_GR_ENGINE_ACTIVE and
        DCGM_FI_DEV_FB_USED, each in its own `field`; engine activity is the utilization
        of a MIG instance and of a GPU without GPU_UTIL.
        """)

    prometheus_gpu_matchers: str = _option(Unicode, "", help="""
        PromQL label matchers selecting the dcgm-exporter series the service reads, e.g.
        job="nvidia-dcgm-exporter", where other targets write GPU metrics to the same
        Prometheus (another cluster, a second scrape of the exporter): the default
        --prometheus-query and the usage report's Prometheus days read only those series.
        Empty: every series of the GPU metrics.
        """)

    prometheus_pod_label: PodLabel = _option(Enum, ["auto", "pod", "exported_pod"], "auto", help="""
        Which label names the pod holding a GPU: "exported_pod" when Prometheus scrapes
        dcgm-exporter with honor_labels: false (the default), "pod" with honor_labels:
        true; "auto" picks per answer, for pod and namespace apart (a job that labels its
        target with namespace but not pod renames only namespace).
        """)

    dcgm_exporter_urls: tuple[str, ...] = _option(List, Unicode(), secret=True, help="""
        dcgm-exporter /metrics URLs to scrape directly each cycle, for clusters without
        Prometheus (one per GPU node, or a Service).
        """)

    gpu_request_timeout: float = _option(Float, 10.0, help="""
        Seconds to wait for Prometheus or a dcgm-exporter before counting the GPU data
        of that cycle missing.
        """)

    probe_kernels: bool = _option(Bool, True, help="""
        Ask GPU sessions whose GPUs look idle for their kernels and terminals
        (GET /api/kernels?no_track_activity=1), so a busy kernel keeps the session.
        The probe goes to the pod's own address (the proxy would move the hub's
        last_activity); on z2jh the service needs the label
        hub.jupyter.org/network-access-singleuser=true. Its credential: see
        kernel_probe_credential.
        """)

    kernel_probe_credential: str = _option(Enum, ["user-token", "none"], default_value="user-token", help="""
        What a kernel probe authenticates with. The service's own token never goes to a
        user's server (the user can record every request to it). "user-token": per
        probed server, a token owned by that server's user and good for that server only
        (scope access:servers!server=USER/NAME), minted from the hub and deleted when the
        server stops; the service's role needs the scope custom:gpu-reclaim:probe-tokens
        (the hub-side API that configure_hub(c) installs; docs/security.md), or tokens,
        which is worth any user's token and is warned of at start. "none": no credential,
        so no probe: a session whose GPUs look idle is held, never reclaimed (no kernel
        data), and a busy kernel cannot be told from an idle one.
        """)

    kernel_probe_token_lifetime: float = _option(Duration, float(PROBE_TOKEN_MAX_LIFETIME), help=f"""
        How long a kernel-probe token lives (seconds or "1h"), from 60 s to
        {PROBE_TOKEN_MAX_LIFETIME} s, the most the hub's probe-token API mints. It is reused
        until a quarter of this is left, then replaced; a hub whose
        token_expires_in_max_seconds is lower shortens it to that.
        """)

    kernel_probe_timeout: float = _option(Float, 5.0, help="""
        Seconds to wait for a server's kernel list; a server that does not answer has
        no kernel data and is held, not reclaimed.
        """)

    # ------------------------------------------------------------------ actions, store

    stop_timeout: float = _option(Duration, 300.0, help="""
        How long a stop may take (the hub's stop, then the pod's removal) before it is
        reported as stuck (log, metric, store) and retried next cycle (seconds or "5m").
        """)

    save_before_stop: float = _option(Duration, 15.0, help=f"""
        Before it stops a GPU server, how long the service waits for the server's open
        JupyterLab tabs to save their documents with unsaved changes (seconds or "30s"; at
        most {SAVE_WAIT_MAX:g}; 0: it does not ask). A server without a tab open answers at once, and a
        save still running then is cut by the stop (jupyter-server keeps the last whole save).
        In dry run the tabs only say what they would save. Needs the JupyterLab extension
        in the user image and the kernel probe's credential (docs/lab.md).
        """)

    verify_pod_gone: bool = _option(Bool, True, help="""
        After the hub stops a server, wait until its pod is gone, so the GPU is really
        free before the reclaim counts as done.
        """)

    store_url: str = _option(Unicode, DEFAULT_STORE_URL, secret=True, help="""
        Where intents, warnings, reclaims and observations are kept: any SQLAlchemy URL
        (sqlite:///path, postgresql://...). Default: gpu_reclaim.sqlite in the working
        directory. `backtest --from-store --store URL` reads the same database.
        """)

    observation_retention: float = _option(Duration, 14 * 86400.0, help="""
        How long the observations of each cycle are kept for `backtest --from-store`
        (seconds or "14d"). Intents, warnings and reclaims are kept (--record-retention).
        """)

    # ------------------------------------------------------------------ notifications

    notifiers: tuple[dict[str, Any], ...] = _option(List, Dict(), [{"type": "log"}], command_line=False, secret=True, help="""
        Where warnings and reclaim notices go: a list of {"type": ..., options}.
        {"type": "log"}; {"type": "webhook", "url": ...} (JSON); {"type": "slack",
        "url": ...} (Slack-compatible text); {"type": "email", "host": ..., "port":
        ..., "sender": ..., "address_template": "{user}@example.edu" (users get no
        e-mail without it; see docs/service.md for what an address must be),
        "username"/"password", "starttls", "ssl"}. See docs/service.md.
        """)

    admin_recipients: tuple[str, ...] = _option(List, Unicode(), help="""
        Who gets a copy of every warning and reclaim notice (user names or e-mail
        addresses), and the only recipients in --dry-run.
        """)

    copy_admins: bool = _option(Bool, True, help="""
        Send --admin-recipients a copy of the notices users get.
        """)

    notify_users_in_dry_run: bool = _option(Bool, False, help="""
        In --dry-run, warn the users too (not only the admins).
        """)

    keepalive_url: str = _option(Unicode, help="""
        The keep-alive page linked from every warning. Default: this service's
        keepalive page (JUPYTERHUB_PUBLIC_URL, else JUPYTERHUB_SERVICE_PREFIX, + "keepalive").
        """)

    hub_name: str = _option(Unicode, "JupyterHub", help="""
        The hub's name in notices ("Physics GPU Hub").
        """)

    # ------------------------------------------------------------------ web pages

    bind_url: str = _option(Unicode, help="""
        Where the service's web server (/metrics, the pages) listens, http://IP:PORT.
        Default: JUPYTERHUB_SERVICE_URL, set by JupyterHub from the service's url;
        empty, or a service registered without a url (as idle-culler's README
        registers the culler): no web server, the cycles run alone.
        """)

    cookie_secret_file: str = _option(Unicode, help="""
        A file holding the secret that signs the web pages' login cookie (hex or raw
        bytes, as JupyterHub's own cookie secret file). Empty: a new random secret at
        each start, so users go through the hub's OAuth once more after a restart
        (a redirect, no password). Default: $GPU_RECLAIM_COOKIE_SECRET_FILE if set.
        """)

    admin_scope: str = _option(Unicode, "custom:gpu-reclaim:admin", help="""
        The scope that opens the admin page and admin API besides the hub's admin flag.
        Define it in c.JupyterHub.custom_scopes, grant it in a role, and list it in the
        service's oauth_client_allowed_scopes so it reaches the service's login token.
        """)

    record_retention: float = _option(Duration, 90 * 86400.0, help="""
        How long what has ended is kept in the store (seconds or "90d"): intents cleared
        or expired, warnings of closed episodes, admins' exemptions, and the audit log of
        what users and admins did on the web pages. Current intents, open warnings and
        reclaims are kept. Pruned once an hour.
        """)

    user_writes_per_minute: int = _option(Int, 30, help="""
        How many changes (keep-alive, clear, stop) each user may make per minute through
        the web pages and API, in bursts of as many; beyond it the answer is 429 with
        Retry-After. 0: no limit.
        """)

    @property
    def policy(self) -> PolicyConfig:
        """The base policy: the GPU policy's options and idle-culler's timeout rule."""
        return self.rules.base

    @property
    def cycle_interval(self) -> dt.timedelta:
        """--cull-every; 0 (its default): half of --timeout, as in jupyterhub-idle-culler."""
        return dt.timedelta(seconds=effective_cull_every(self.cull_every, self.timeout))


_OPTION_FIELDS = tuple(f for f in fields(ServiceSettings) if "option" in f.metadata)
