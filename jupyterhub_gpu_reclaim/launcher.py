"""Starting the reclaim service: settings → the running service.

`run_app(argv)` is what ``jupyterhub-gpu-reclaim`` runs without a subcommand. It reads the
settings (`application.GpuReclaim`: command line, then config file), checks what can be checked
before running, logs them without secrets, and hands the service the Application itself as
the `settings.ServiceSettings` it is, frozen (read-only): as in JupyterHub and
jupyterhub-idle-culler, an option is read from the object it was configured on, in one hop.
What runs the service types it as a `ServiceSettings` and never imports the Application:
`build` wires a `Reclaimer` to the real signals from the settings, `serve` runs its cycles.

Exit status: 2 for bad settings (`ConfigError`: one line on stderr, no traceback), 1 when
the service cannot run (`ServiceError`), 0 otherwise (e.g. ``--generate-config``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import ssl
import sys
from typing import Any, Callable, Coroutine, Sequence, cast
from urllib.parse import urlsplit

from traitlets.config import Application

from .service import collector
from .service.hub_stopper import HubStopper
from .application import GpuReclaim
from .errors import ConfigError, ServiceError
from .service.metrics import Metrics
from .service.notify import Dispatcher, make_notifiers, redact_url
from .policy.rules import Match
from .service.cycle import Reclaimer
from .settings.service_options import ServiceSettings, effective_cull_every
from .signals.http_source import SignalError, hide_password
from .signals.gpu_readings import PodLabel
from .signals.interfaces import GpuSource
from .store import Store
from .store.engine import StoreError

log = logging.getLogger("jupyterhub_gpu_reclaim.launcher")


_SECRET_KEYS = frozenset({"password", "headers", "token"})


def _ssl_context(location: str) -> ssl.SSLContext:
    """The TLS context for the hub and servers with --ssl-enabled (client certificate
    and CA of internal-ssl under `location`, as idle-culler uses them); ConfigError when
    the files are missing or cannot be loaded."""
    key, cert, ca = (f"{location}/hub-internal/hub-internal.key", f"{location}/hub-internal/hub-internal.crt",
                     f"{location}/hub-ca/hub-ca.crt")
    missing = [p for p in (key, cert, ca) if not os.path.isfile(p)]
    if missing:
        raise ConfigError(f"--ssl-enabled: missing internal-ssl files: {', '.join(missing)} "
                          f"(--internal-certs-location={location})")
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"--ssl-enabled: cannot load the internal-ssl files under {location}: {e}") from None
    return context


def service_settings(app: GpuReclaim) -> ServiceSettings:
    """`app` as the service reads it: its options checked as far as they can be before
    running, what derives from them set (the policy and its rules, the TLS context), then
    frozen; ConfigError names the first bad one. The Application is a ServiceSettings: its
    options are handed over as they were configured, not copied."""
    app.rules = app.load_policy_rules(app.policy_config())
    if not app.url:
        raise ConfigError("no hub API URL: pass --url or set JUPYTERHUB_API_URL")
    if not app.url.startswith(("http://", "https://")):
        raise ConfigError(f"--url must be an http(s) URL, got {app.url!r}")
    if not app.api_token:
        raise ConfigError("JUPYTERHUB_API_TOKEN is not set (the service's hub API token)")
    for u in [app.prometheus_url, *app.dcgm_exporter_urls]:
        if u and not u.startswith(("http://", "https://")):
            raise ConfigError(f"GPU source URLs must be http(s) URLs, got {u!r}")
    if app.bind_url:
        parts = urlsplit(app.bind_url)
        try:
            port = parts.port
        except ValueError:  # not a number, or out of range
            port = None
        if parts.scheme != "http" or not parts.hostname or not port:
            raise ConfigError(f"--bind-url must be http://IP:PORT, got {app.bind_url!r}")
    try:
        make_notifiers(app.notifiers)
    except (TypeError, ValueError, KeyError) as e:
        raise ConfigError(f"--notifiers: {type(e).__name__}: {e}") from None
    app.ssl_context = _ssl_context(app.internal_certs_location) if app.ssl_enabled else None
    app.freeze()
    return app


def _criteria(match: Match) -> str:
    """A rule's match as logged: its given criteria ("any" for none)."""
    given = {f.name: sorted(v) if isinstance(v, frozenset) else v
             for f in dataclasses.fields(match) if (v := getattr(match, f.name))}
    return ", ".join(f"{k}={v}" for k, v in given.items()) or "any"


def loggable_settings(app: GpuReclaim) -> dict[str, Any]:
    """Every option's effective value (--cull-every 0: half of --timeout), without secrets
    (safe to log): no token, URLs reduced to scheme and host (a Slack webhook's path is its
    secret), no passwords."""
    application = frozenset(Application.class_trait_names())  # logging, --show-config: not ours
    out: dict[str, Any] = {}
    for name in sorted(app.class_trait_names(config=True)):
        if name in ("api_token", "generate_config") or name in application:
            continue
        value = getattr(app, name)
        out[name] = sorted(value) if isinstance(value, (set, frozenset)) else value
    out["cull_every"] = effective_cull_every(app.cull_every, app.timeout)
    out["notifiers"] = [{k: ("***" if k in _SECRET_KEYS else redact_url(v) if k == "url" else v)
                         for k, v in spec.items()} for spec in app.notifiers]
    out["store_url"] = hide_password(app.store_url)
    out["prometheus_url"] = hide_password(app.prometheus_url)
    out["dcgm_exporter_urls"] = [hide_password(u) for u in app.dcgm_exporter_urls]
    return out


# ---------------------------------------------------------------------- the running service

def build(settings: ServiceSettings, store: Store, metrics: Metrics) -> Reclaimer:
    """A Reclaimer wired to the real signals as `settings` describe them."""
    from .signals.dcgm import DcgmScrapeSignal
    from .signals.hub import HubSignal
    from .signals.kernels import KernelSignal
    from .signals.pods import PodSignal, kubernetes_configuration
    from .signals.probe_token_client import ProbeTokens
    from .signals.prometheus import DEFAULT_QUERY, PrometheusSignal, default_query

    s = settings
    context = s.ssl_context
    url = s.url
    assert url, "service_settings refuses settings without a hub API URL"
    hub = HubSignal(url, s.api_token, page_size=s.api_page_size,
                    concurrency=s.concurrency or 1_000_000, ssl_context=context,
                    keep_models=s.cull_arbiter_hook is not None)
    found = kubernetes_configuration(s.kubeconfig)
    pods = None
    if s.kubernetes == "true" or s.kubernetes == "auto" and found:
        pods = PodSignal(s.namespace, s.kubeconfig or None, label_selector=s.pod_label_selector)
        log.info("servers are pods in namespace %s (Kubernetes: %s)", s.namespace,
                 found or "none found; --kubernetes=true")
    else:
        log.warning("no Kubernetes (%s): every server is culled by idle-culler's rule as a server without "
                    "GPUs; no pods, GPU utilization or kernels are read", "--kubernetes=false"
                    if s.kubernetes == "false" else "not in a pod, no --kubeconfig, $KUBECONFIG or ~/.kube/config")
    gpu: GpuSource | None = None
    if pods is None:
        pass
    elif s.prometheus_url:
        query = default_query(s.prometheus_gpu_matchers) if s.prometheus_query == DEFAULT_QUERY else s.prometheus_query
        gpu = PrometheusSignal(s.prometheus_url, query, timeout=s.gpu_request_timeout,
                               pod_label=cast(PodLabel, s.prometheus_pod_label))
    elif s.dcgm_exporter_urls:
        gpu = DcgmScrapeSignal(list(s.dcgm_exporter_urls), timeout=s.gpu_request_timeout)
    else:
        log.warning("no GPU source (--prometheus-url or --dcgm-exporter-urls): GPU sessions are "
                    "held, never reclaimed; servers without GPUs are culled as idle-culler does")
    kernels = None
    if s.probe_kernels and pods is not None:
        credentials = None
        if s.kernel_probe_credential == "user-token":
            credentials = ProbeTokens(url, s.api_token, lifetime=int(s.kernel_probe_token_lifetime),
                                      ssl_context=context)
        else:
            log.warning("kernel probes have no credential (kernel_probe_credential = 'none'): GPU sessions "
                        "whose GPUs look idle are held, never reclaimed (no kernel data)")
        kernels = KernelSignal(credentials, timeout=s.kernel_probe_timeout,
                               concurrency=s.concurrency or 100)
        kernels.ssl_context = context

    async def pod_gone(user: str, server: str) -> bool:
        assert pods is not None
        return f"{user}/{server}" not in pods.snapshot(s.policy.stale_after.total_seconds()).by_session

    stopper = HubStopper(url, s.api_token, remove_named_servers=s.remove_named_servers, stop_timeout=s.stop_timeout,
                         pod_gone=pod_gone if s.verify_pod_gone and pods is not None else None)
    stopper.ssl_context = context
    dispatcher = Dispatcher(make_notifiers(s.notifiers), admin_recipients=list(s.admin_recipients),
                            copy_admins=s.copy_admins, users_in_dry_run=s.notify_users_in_dry_run,
                            dry_run=s.dry_run)
    return Reclaimer(hub=hub, pods=pods, gpu=gpu, kernels=kernels, stopper=stopper, dispatcher=dispatcher,
                     store=store, settings=s, metrics=metrics)


async def serve(settings: ServiceSettings) -> None:
    """Run cycles every --cull-every seconds until SIGTERM/SIGINT (the first at once)."""
    from .web.app import listen, make_app
    from .web.base import Context

    s = settings
    collector.set_thresholds()
    try:
        store = Store.open(s.store_url)
    except StoreError as e:
        raise ServiceError(str(e)) from None
    metrics = Metrics()
    reclaimer = build(s, store, metrics)
    server = None
    if s.bind_url:
        from jupyterhub.services.auth import HubOAuth

        url = s.url
        assert url, "service_settings refuses settings without a hub API URL"

        name = os.environ.get("JUPYTERHUB_SERVICE_NAME", "gpu-reclaim")
        prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")
        # HubOAuth: a hub token in the Authorization header, or the pages' OAuth login cookie
        hub_auth = HubOAuth(api_token=s.api_token, api_url=url, cache_max_age=30,
                            access_scopes={f"access:services!service={name}", "access:services"})
        hub_prefix = urlsplit(url).path.rsplit("/api", 1)[0].rstrip("/") + "/"
        web_app = make_app(Context(metrics=metrics, prefix=prefix, settings=s, store=store, hub_auth=hub_auth,
                                   reclaimer=reclaimer, hub_prefix=hub_prefix))
        server = listen(web_app, s.bind_url)
        log.info("serving /metrics on %s", s.bind_url)
    else:
        log.info("no web server (no url in the service's entry in c.JupyterHub.services, no "
                 "--bind-url): the cycles run; the pages, the JSON API and /metrics are unavailable")
    try:  # connect and list before the first cycle, so that cycle is like the others
        if reclaimer.pods is not None:
            await reclaimer.pods.start()
    except SignalError as e:
        log.warning("%s (the cycles will try again)", e)
    # the probe credential's scopes now, so that an unfiltered `tokens` is warned of at start
    check_scopes = getattr(getattr(reclaimer.kernels, "credentials", None), "check_scopes", None)
    if check_scopes is not None:
        try:
            await check_scopes()
        except SignalError:
            pass  # check_scopes logged why; the first mint tries again
    interval = s.cycle_interval.total_seconds()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    try:
        while not stopping.is_set():
            try:
                await reclaimer.run_cycle()
            except Exception:  # one bad cycle must not end the service
                log.exception("the cycle failed; trying again in %d s", interval)
            try:
                await asyncio.wait_for(stopping.wait(), interval)
            except asyncio.TimeoutError:
                pass
        log.info("stopping")
    finally:
        await reclaimer.cancel()
        if server is not None:
            server.stop()
        for part in (reclaimer.hub, reclaimer.gpu, reclaimer.kernels, reclaimer.stopper):
            close = getattr(part, "close", None)
            if close is not None:
                await close()
        if reclaimer.pods is not None:
            await reclaimer.pods.stop()  # type: ignore[attr-defined]
        store.close()


# ---------------------------------------------------------------------- the command

def run_app(argv: Sequence[str] | None = None,
            run: Callable[[ServiceSettings], Coroutine[Any, Any, None]] = serve) -> int:
    """Run the service with `argv` (default: sys.argv[1:]); return the exit status.
    `run`: what runs the service from its settings (tests pass their own)."""
    app = GpuReclaim()
    try:
        app.initialize(argv)
        if app.generate_config:
            print(app.generate_config_file())
            return 0
        settings = service_settings(app)
        app.log.info("jupyterhub-gpu-reclaim settings%s:", " (DRY RUN: nothing is stopped)"
                     if settings.dry_run else "")
        for name, value in loggable_settings(app).items():
            app.log.info("  %s = %r", name, value)
        for rule in settings.rules.rules:
            app.log.info("  policy rule %r: %s -> %s", rule.name, _criteria(rule.match), rule.overrides)
        # the modules' loggers write through the application's handler and format
        package = logging.getLogger("jupyterhub_gpu_reclaim")
        # traitlets types the Enum as object; Application's observer has made it a level number
        package.setLevel(cast(int, app.log_level))
        package.propagate = False
        for handler in app.log.handlers:
            package.addHandler(handler)
        asyncio.run(run(settings))
    except ConfigError as e:
        print(f"{app.name}: error: {e}", file=sys.stderr)
        return 2
    except ServiceError as e:
        print(f"{app.name}: {e}", file=sys.stderr)
        return 1
    return 0
