"""benchmarks/sim_scale.py refuses counts, rates and pauses below their floor before a cluster
starts (a negative --warmup-lists once timed 19 lists instead of 20, without a word)."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sim_scale.py"


@pytest.fixture(scope="module")
def sim_scale():
    spec = importlib.util.spec_from_file_location("sim_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv, said", [
    (["--warmup-lists", "-1"], "argument --warmup-lists: -1: must be 0 or more"),
    (["--lists", "-3"], "argument --lists: -3: must be 0 or more"),
    (["--concurrency", "0"], "argument --concurrency: 0: must be 1 or more"),
    (["--rate", "nan"], "argument --rate: nan: must be 0 or more"),
    (["--list-pause", "-0.5"], "argument --list-pause: -0.5: must be 0 or more"),
    (["--pods", "many"], "argument --pods: many: not an integer"),
])
def test_bad_numbers_are_refused_with_the_flag_named(sim_scale, capsys, argv, said):
    with pytest.raises(SystemExit) as exit_:
        sim_scale.parse_args(argv)
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err


def test_the_defaults_stand(sim_scale):
    args = sim_scale.parse_args([])
    assert (args.pods, args.rate, args.concurrency, args.gets, args.lists, args.warmup_lists,
            args.list_pause) == (5000, 100.0, 4, 2000, 20, 2, 0.2)
    assert sim_scale.parse_args(["--warmup-lists", "0", "--rate", "0"]).warmup_lists == 0
