"""Series lists bounded before they are decoded (issue 36), on Debian's Prometheus 2.42 (which
ignores the `limit` of later versions) holding the two days of tests/support/report_history.py
and, beside them, another target's GPU series (a second cluster's dcgm-exporter, its own user
pods), more than the admin page's bound: the report reads only the series of the exporter it
is given (--gpu-matchers, the service's --prometheus-gpu-matchers), its figures those of the
history alone, and a list past the bound is one clear line, refused having read only about as
many series as the bound."""

from __future__ import annotations

import datetime as dt
import json
import random
import time
import tracemalloc
import urllib.parse
import urllib.request

import pytest

# imported ahead, so that what the report allocates is measured without its imports
import jupyterhub_gpu_reclaim.report.run  # noqa: F401
from jupyterhub_gpu_reclaim.cli import main
from jupyterhub_gpu_reclaim.report.series_count import SeriesCounter, TooManySeries
from jupyterhub_gpu_reclaim.settings.service_options import ServiceSettings
from jupyterhub_gpu_reclaim.store import Store
from jupyterhub_gpu_reclaim.web import usage_report as page
from tests.support.prometheus_history import create_blocks, end_file, history_prometheus, write_family
from tests.support.report_history import EXPORTER_TARGET, HOURS, SCHEMES, history_file, history_rows

SCHEME = "honorlabels-false_ksm-1.9"
STEP = 60
DAY = 86400
START = (int(time.time()) // DAY - 4) * DAY
UTC = dt.timezone.utc
SINCE, UNTIL = (dt.datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") for t in (START, START + HOURS * 3600))
OURS = f'job="{EXPORTER_TARGET["job"]}"'
OTHER_SERIES = 40_000  # more than the admin page's bound (20,000 a list), a list of some 25 MB


def other_target(path, start: float) -> None:
    """Another cluster's dcgm-exporter, scraped into the same Prometheus: a GPU series for each
    of its users' pods, busy, twice in the window."""
    series = []
    for i in range(OTHER_SERIES):
        labels = {"gpu": str(i % 8), "UUID": f"GPU-{i:08d}-1111-2222-3333-444444444444", "device": f"nvidia{i % 8}",
                  "modelName": "NVIDIA H100 80GB HBM3", "Hostname": f"lab-node-{i // 8}",
                  "pci_bus_id": f"00000000:{i % 8 + 0x18:02X}:00.0", "DCGM_FI_DRIVER_VERSION": "550.54.15",
                  "exported_container": "notebook", "exported_namespace": "jhub", "exported_pod": f"jupyter-lab{i}",
                  "namespace": "gpu-operator", "pod": f"nvidia-dcgm-exporter-lab-{i // 8}",
                  "container": "nvidia-dcgm-exporter", "service": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics",
                  "job": "lab-cluster-dcgm-exporter", "instance": f"10.9.{i // 2000}.{i % 250}:9400"}
        series.append((labels, [(start + 3600 + 7, 80.0), (start + 7200 + 7, 80.0)]))
    with open(path, "w") as out:
        write_family(out, "DCGM_FI_DEV_GPU_UTIL", series)
        end_file(out)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("two-targets")
    create_blocks(history_file(workdir, START, SCHEMES[SCHEME]), workdir / "data")
    other_target(workdir / "other.om", START)
    create_blocks(workdir / "other.om", workdir / "data")  # blocks beside the history's
    with history_prometheus(workdir) as url:
        yield url


def series_list(url: str, selector: str) -> tuple[int, int]:
    """How many series Prometheus lists for `selector` in the window, and the list's bytes."""
    query = urllib.parse.urlencode({"match[]": selector, "start": START, "end": START + HOURS * 3600})
    with urllib.request.urlopen(f"{url}/api/v1/series?{query}", timeout=60) as r:
        body = r.read()
    return len(json.loads(body)["data"]), len(body)


def report(capsys, url: str, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(["report", "--prometheus-url", url, "--since", SINCE, "--until", UNTIL, *args])
    out, err = capsys.readouterr()
    return done.value.code, out, err


def expected() -> dict[tuple[str, str, str], dict[str, float]]:
    return history_rows(START, STEP, HOURS * 3600 // STEP + 1, SCHEMES[SCHEME])


def hours(report: dict) -> dict[tuple[str, str, str], dict[str, float]]:
    return {(r["day"], r["user"], r["profile"]): {k: r[k] for k in ("held", "used", "idle", "no_reading", "idle_long")}
            for r in report["rows"]}


HOSTILE = ['"', "\\", "{", "}", '"}, {"', "\\u0022", "é", "\u2028", "\n", "[", "]", ":", ","]


@pytest.mark.parametrize("seed", range(20))
def test_label_sets_are_counted_whatever_their_values_and_wherever_a_piece_ends(seed):
    """Values a user or an admin writes (a profile, a label) with quotes, backslashes, braces;
    the answer cut anywhere: the count is the list's length."""
    rng = random.Random(seed)
    data = [{f"k{j}" + rng.choice(HOSTILE): "".join(rng.choices(HOSTILE, k=rng.randint(0, 9))) for j in range(4)}
            for _ in range(rng.randint(1, 300))]
    body = json.dumps({"status": "success", "data": data, "warnings": ['{"'] * seed}, ensure_ascii=seed % 2 == 0)
    counter = SeriesCounter(10**6)
    raw, i = body.encode(), 0
    while i < len(raw):
        n = rng.randint(1, 64)
        counter(raw[i:i + n])
        i += n
    assert counter.series == len(data)
    with pytest.raises(TooManySeries):  # one more than the bound is refused
        SeriesCounter(len(data) - 1)(raw)


def test_a_list_past_the_bound_is_refused_having_read_about_the_bound(prometheus, capsys):
    everyone, size = series_list(prometheus, "DCGM_FI_DEV_GPU_UTIL")
    assert everyone > OTHER_SERIES and size > 20_000_000  # the whole list, as Prometheus 2.42 sends it
    tracemalloc.start()
    try:
        code, out, err = report(capsys, prometheus, "--max-series", "1000")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "more than --max-series 1000 series of DCGM_FI_DEV_GPU_UTIL" in err and "--gpu-matchers" in err, err
    # the list was not read whole, let alone decoded: the report never held half its bytes
    # (read whole, it holds them all, then the decoded list, several times as much)
    assert peak < size / 2, (peak, size)


def test_another_targets_series_are_not_counted_by_the_command(prometheus, capsys):
    ours, _ = series_list(prometheus, f"DCGM_FI_DEV_GPU_UTIL{{{OURS}}}")
    assert 0 < ours < 100
    code, out, err = report(capsys, prometheus, "--json", "--gpu-matchers", OURS, "--max-series", "1000")
    assert code == 0, err
    got = json.loads(out)
    assert hours(got) == expected()
    assert not any(r["user"].startswith("lab") or "lab" in r["user"] for r in got["by_user"])


async def test_the_admin_page_reads_only_its_exporters_series_and_says_when_a_list_is_too_long(prometheus, tmp_path):
    now = dt.datetime.fromtimestamp(START, UTC) + dt.timedelta(days=2, hours=12)
    with Store.open(tmp_path / "reclaim.sqlite") as store:  # no record yet: Prometheus has every day
        settings = ServiceSettings(cull_every=60, prometheus_url=prometheus)
        refused = await page.usage_report(store, settings, now, 3)
        (note,) = refused["notes"]
        assert note.startswith("Prometheus could not be read") and "more than --max-series 20000 series" in note, note
        assert "--prometheus-gpu-matchers" in note and refused["rows"] == []
        assert [d["source"] for d in refused["by_day"]] == ["none"] * 3
        settings = ServiceSettings(cull_every=60, prometheus_url=prometheus, prometheus_gpu_matchers=OURS)
        report = await page.usage_report(store, settings, now, 3)
    assert hours(report) == expected()
    assert [d["source"] for d in report["by_day"]] == ["prometheus"] * 3
