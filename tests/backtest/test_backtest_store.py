"""`backtest --from-store`: replaying the observations recorded in the store (real SQLite
files) under another policy config."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3

import pytest

from jupyterhub_gpu_reclaim import cli
from jupyterhub_gpu_reclaim.store import Store

from ..support.records import NOW, UTC, record, slow_loader, training, used_then_idle


@pytest.fixture
def db(tmp_path):
    """A store with last week's idle session (3 days ago, stopped) and, over the last 4 h,
    one used-then-idle session (3.5 h idle), one training and one at 5%."""
    path = tmp_path / "reclaim.sqlite"
    with Store.open(f"sqlite:///{path}") as s:
        record(s, NOW - dt.timedelta(days=3), 4, {"dave/": used_then_idle}, stop=True)
        record(s, NOW - dt.timedelta(hours=4), 4,
               {"alice/": used_then_idle, "bob/train": training, "carol/": slow_loader})
    return path


def backtest(*args, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["backtest", *map(str, args)])
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def reclaimed(report) -> set[str]:
    return {r["session"] for r in report["reclaims"]}


def test_default_config_reclaims_the_idle_session_not_the_busy_ones(db, capsys):
    code, out, err = backtest("--from-store", "--store", f"sqlite:///{db}", "--json", capsys=capsys)
    assert code == 0, err
    report = json.loads(out)
    assert reclaimed(report) == {"alice/", "dave/"}
    assert report["trace"]["sessions"] == 4
    assert report["trace"]["source"] == f"store sqlite:///{db}"
    assert report["policy"]["gpu_idle_threshold"] == 1.0
    # text report; a plain path is a SQLite file too
    code, out, err = backtest("--from-store", "--store", db, capsys=capsys)
    assert code == 0, err
    assert "Reclaims: 2" in out and f"(store sqlite:///{db})" in out
    assert "reclaim alice/" in out and "reclaim bob/train" not in out


def test_what_would_a_9_percent_threshold_have_done(db, tmp_path, capsys):
    conf = tmp_path / "nine.yaml"
    conf.write_text("gpu_idle_threshold: 9\n")
    code, out, err = backtest("--from-store", "--store", db, "--since", "1d", "--config", conf,
                              "--json", capsys=capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["policy"]["gpu_idle_threshold"] == 9.0
    assert reclaimed(report) == {"alice/", "carol/"}  # the 5% loader now counts as idle
    code, out, err = backtest("--from-store", "--store", db, "--since", "1d", "--json", capsys=capsys)
    assert code == 0, err
    assert reclaimed(json.loads(out)) == {"alice/"}


def test_since_and_until_limit_the_window(db, capsys):
    code, out, err = backtest("--from-store", "--store", db, "--since", "36h", "--json", capsys=capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["trace"]["sessions"] == 3 and "dave/" not in reclaimed(report)
    assert report["trace"]["end"] >= (NOW - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    # an ISO time (offset or UTC when none) and a duration ago: only last week's session
    since = (NOW - dt.timedelta(days=7)).astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat()
    until = (NOW - dt.timedelta(days=2)).replace(tzinfo=None).isoformat()
    for window in (["--since", since, "--until", until], ["--since", "5d", "--until", "2d"]):
        code, out, err = backtest("--from-store", "--store", db, *window, "--json", capsys=capsys)
        assert code == 0, err
        report = json.loads(out)
        assert report["trace"]["sessions"] == 1 and reclaimed(report) == {"dave/"}
        end = dt.datetime.fromisoformat(report["trace"]["end"])
        # "2d" is two days before the command ran, which may be minutes after NOW was taken
        slack = dt.datetime.now(UTC) - NOW + dt.timedelta(minutes=5)
        assert dt.timedelta(0) <= end - (NOW - dt.timedelta(days=2)) < slack
        assert "." not in report["trace"]["end"]  # whole seconds


def test_default_store_url_is_the_services(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with Store.open() as s:  # the store's default: the service's --store-url default
        record(s, NOW - dt.timedelta(hours=4), 4, {"alice/": used_then_idle})
    code, out, err = backtest("--from-store", "--json", capsys=capsys)
    assert code == 0, err
    assert reclaimed(json.loads(out)) == {"alice/"}


@pytest.mark.parametrize("args, message", [
    (["--since", "soon"], "--since 'soon': not a duration back from now"),
    (["--until", "2026-13-01"], "--until '2026-13-01': not a duration"),
    (["--since", "1d", "--until", "2d"], "is not before --until"),
    (["--since", "0"], "is not before --until"),
    (["--since", "30d", "--until", "20d"], "has no observations from"),
])
def test_bad_windows_exit_2(db, capsys, args, message):
    code, out, err = backtest("--from-store", "--store", db, *args, capsys=capsys)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_only_one_source_and_store_options_need_from_store(db, tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"kind": "config", "version": 1, "start": "2026-11-02T08:00:00Z", '
                     '"end": "2026-11-02T09:00:00Z", "sample_interval_s": 60, "gpus_total": 1}\n')
    for args in (["--trace", trace, "--from-store"], []):
        code, out, err = backtest(*args, capsys=capsys)
        assert code == 2 and out == "" and "--trace" in err and "--from-store" in err
    code, out, err = backtest("--trace", trace, "--store", db, capsys=capsys)
    assert code == 2 and out == "" and "--store only goes with --from-store" in err
    code, out, err = backtest("--trace", trace, "--since", "7d", "--until", "1d", capsys=capsys)
    assert code == 2 and "--since, --until only go with --from-store" in err
    code, out, err = backtest("--trace", trace, "--json", capsys=capsys)
    assert code == 0 and json.loads(out)["trace"]["source"] == f"trace {trace}"


def test_missing_or_foreign_store_is_refused_not_created(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nope.sqlite"
    for args in (["--store", missing], ["--store", f"sqlite:///{missing}"], []):
        code, out, err = backtest("--from-store", *args, capsys=capsys)
        assert code == 2 and out == "" and "no such file" in err and "--store-url" in err
    assert list(tmp_path.iterdir()) == []  # neither nope.sqlite nor gpu_reclaim.sqlite
    code, out, err = backtest("--from-store", "--store", "sqlite://", capsys=capsys)
    assert code == 2 and "names no database file" in err
    code, out, err = backtest("--from-store", "--store", tmp_path, capsys=capsys)
    assert code == 2 and "is not a file" in err
    # a SQLite file of something else: refused, and left as it was
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("create table notes (x)")
    conn.close()
    code, out, err = backtest("--from-store", "--store", other, capsys=capsys)
    assert code == 2 and "not a gpu-reclaim store" in err
    with sqlite3.connect(other) as conn:
        assert conn.execute("select name from sqlite_master").fetchall() == [("notes",)]
    conn.close()
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database, just some text " * 100)
    code, out, err = backtest("--from-store", "--store", junk, capsys=capsys)
    assert code == 2 and "cannot read the database" in err and "Traceback" not in err


def test_newer_store_and_password_are_reported_in_one_line(db, capsys):
    with sqlite3.connect(db) as conn:
        conn.execute("update schema_version set version = 99")
    conn.close()
    code, out, err = backtest("--from-store", "--store", db, capsys=capsys)
    assert code == 2 and out == "" and "schema version 99" in err and err.count("\n") == 1
    code, out, err = backtest("--from-store", "--store", "nosuchdb://admin:s3cret@127.0.0.1:1/reclaim",
                              capsys=capsys)
    assert code == 2 and out == "" and "s3cret" not in err and "***" in err
