"""The service's web server (tornado, as JupyterHub and its services use): pages, JSON API,
/metrics and /health.

As a hub-managed service with a `url`, JupyterHub routes `/services/<name>/` to it and
sets JUPYTERHUB_SERVICE_URL (where to listen) and JUPYTERHUB_SERVICE_PREFIX (the path
prefix the proxy keeps). Every page is served under the prefix, and `/metrics` also at
the root so Prometheus can scrape the pod directly.

`/metrics` carries counts only (no user names), like JupyterHub's own metrics with
`authenticate_prometheus = False`.

Everything else needs the hub's say: a hub token (`Authorization: token …`, checked with
HubAuth) or the service's own login cookie, set by JupyterHub's OAuth at
`<prefix>oauth_callback`. Writes with the cookie need the service's XSRF token (the `_xsrf`
field of its forms, or the `X-XSRFToken` header); token-authenticated writes do not. Users
see and act on their own sessions only (another user's session is answered 404; a hub
service has none); the admin pages and API need the `admin_scope` among the scopes of the
credential used (403 otherwise). Each user's changes are rate-limited, request bodies are
small. See docs/api.md for the API and docs/api.yaml for its OpenAPI description.
"""

from __future__ import annotations

# the documented name for the hub's config (docs/api.md, helm-values): c.JupyterHub.template_paths
from .paths import HUB_TEMPLATES

__all__ = ["HUB_TEMPLATES"]
