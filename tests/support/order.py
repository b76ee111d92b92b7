"""The order in which `make test` hands the test modules to pytest-xdist's workers: the
slowest first (as measured, docs/architecture.md#the-tests), so that a pass ends on short
modules on both workers rather than on one worker carrying a long module while the other
idles (`--dist loadfile --no-loadscope-reorder` keeps the collection's order; tests/conftest.py
sorts by `rank`). The modules of a package that share a package-scoped fixture (tests/web: one
hub) stay together, or a worker that left the package would start that fixture again."""

from __future__ import annotations

# the modules of make test that take 12 s or more, slowest first, as measured on two cores
# (GPU_RECLAIM_TEST_SPANS of a full run, 2026-12-07; tests/web/ its modules together), the
# release module first; the rest follow in collection order, so the pass ends on short ones
SLOWEST_FIRST = (
    "tests/release/test_release.py",
    "tests/web/",
    "tests/lab/test_save_before_stop.py",
    "tests/lab/test_lab.py",
    "tests/service/test_without_kubernetes_live.py",
    "tests/lab/test_workspace_back.py",
    "tests/integration/test_spawn.py",
    "tests/service/test_kernel_window_live.py",
    "tests/spawner/test_spawner_live.py",
    "tests/service/test_probe_credentials.py",
    "tests/service/test_service_live.py",
    "tests/lab/test_way_back.py",
    "tests/service/test_shared_gpus_live.py",
    "tests/signals/test_signals_live.py",
    "tests/integration/test_demo_command.py",
    "tests/sim/test_kubelet.py",
    "tests/service/test_service_rules_live.py",
    "tests/sim/test_netpol.py",
    "tests/service/test_pods_down_live.py",
    "tests/service/test_service_dry_run.py",
    "tests/lab/test_kernel_window.py",
    "tests/lab/test_after_stop.py",
    "tests/service/test_service_hostile.py",
    "tests/service/test_service_registration.py",
    "tests/controlplane/test_run.py",
    "tests/sim/test_workloads.py",
    "tests/browser/test_demo.py",
    "tests/controlplane/test_node_pods.py",
    "tests/spawner/test_offer_by_kind_live.py",
    "tests/integration/test_demo_prometheus.py",
    "tests/controlplane/test_port_forward.py",
    "tests/policy/test_policy_properties.py",
    "tests/lab/test_warning_text.py",
    "tests/controlplane/test_gpus.py",
    "tests/spawner/test_rbac.py",
    "tests/policy/test_shared_gpu.py",
    "tests/report/test_report_page_data.py",
    "tests/benchmarks/test_cluster_history.py",
    "tests/controlplane/test_kubelet_api.py",
    "tests/faults/test_faults.py",
    "tests/lab/test_saving.py",
    "tests/report/test_report_messy_history.py",
    "tests/report/test_series_bound.py",
    "tests/controlplane/test_services.py",
    "tests/controlplane/test_autoscaler.py",
    "tests/architecture/test_imports.py",
    "tests/controlplane/test_nodes.py",
    "tests/backtest/test_tracegen.py",
    "tests/backtest/test_backtest.py",
    "tests/report/test_report_groups_live.py",
)
# packages whose modules share a package-scoped fixture: one unit, ranked as the package
TOGETHER = ("tests/web/",)


def rank(nodeid: str) -> int:
    """Where the test `nodeid` (tests/...::name) goes: its module's (or its package's) place
    in SLOWEST_FIRST, after all of them if it is not there."""
    module = nodeid.split("::", 1)[0]
    unit = next((package for package in TOGETHER if module.startswith(package)), module)
    return SLOWEST_FIRST.index(unit) if unit in SLOWEST_FIRST else len(SLOWEST_FIRST)
