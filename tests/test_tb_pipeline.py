"""The Terminal-Bench track end to end on Docker (tests/tb_pipeline.py): tasks fetched over http,
leaderboard trials imported, filtered, reviewed twice, built, validated, packed, fetched into a fresh
cache and run by `pytest suites/terminal_bench` with nothing but that cache. Two tasks (a batch job,
and a daemon whose log grows, built with --volatile) and one state each here;
benchmarks/bench_tb_pipeline.py runs every task of the fixture."""

from __future__ import annotations

import json

import pytest

from .drivers import records
from .tb_pipeline import Pipeline, built_states, run_pipeline, snapshot_digests, stage4, volatile_paths

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_fetched_tasks_and_imported_trials_become_packed_states_a_fresh_cache_runs(
    tmp_path, docker_client, bookworm_image
):
    p = Pipeline(tmp_path, tasks=("sales-report", "heartbeat-daemon"), per_task=1)
    proc = run_pipeline(p)
    assert proc is not None
    out = p.outputs
    assert "2 task dirs match the digests" in out["tasks fetch"]
    # the hostile submission's entries are refused one line each, the rest imports
    assert "refused" in out["residualize import"] and "imported" in out["residualize import"]
    states = built_states(p)
    assert sorted(s["task"] for s in states.values()) == ["heartbeat-daemon", "sales-report"]
    for s in states.values():
        assert s["initial_verdict"]["failing_tests"] and s["provenance"]["snapshot"] == "commit-restart"
        # the daemon's log grows by itself: left out of every comparison of this state, recorded in it
        assert s["artifact"]["volatile_paths"] == volatile_paths(p.tasks) != []
    outcomes = stage4(p)
    included = [o for o in outcomes if o["result"] == "included"]
    assert len(included) == 2
    for o in included:  # the build's time, split into its parts
        assert {"task_images", "replay", "snapshot", "probe", "verify"} <= set(o["timings"]), o
    assert "replay" in out["residualize build"] and "snapshot" in out["residualize build"]
    assert "FAIL" not in out["validate --track"]
    installed = json.loads(
        (p.cache("suite") / "states" / "terminal_bench" / "swe-residual-source.json").read_text()
    )
    assert installed["n_states"] == 2
    # the suite found the fetched tasks and states by itself; each state was rebuilt once more,
    # from the pack, into the same machine
    assert proc.returncode == 1, proc.stdout[-3000:]  # nop fails every state
    recs = records(p.root / "run")
    assert {(r["agent"], r["state"], r["outcome"]) for r in recs} == {
        (agent, sid, int(agent == "oracle")) for agent in p.agents for sid in states
    }, [(r["case_id"], r["verdict"], r.get("error")) for r in recs]
    built, rebuilt = snapshot_digests(p.docker_cache("build")), snapshot_digests(p.docker_cache("suite"))
    assert {sid: built[sid] for sid in states} == {sid: rebuilt[sid] for sid in states}
