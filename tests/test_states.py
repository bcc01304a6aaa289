"""states.yaml loading: every malformed entry ends in one line naming file, entry and field."""

from __future__ import annotations

import json

import pytest

from swe_residual.errors import InputError
from swe_residual.states import json_schema, load_states
from swe_residual.tasks import load_tasks

from .taskfactory import make_task, partial_state_patch, state_entry, write_states


@pytest.fixture
def setup(tmp_path):
    task_dir = make_task(tmp_path)
    entry = state_entry(tmp_path, task_dir, partial_state_patch(task_dir))
    return tmp_path, {"demo": load_tasks(tmp_path / "tasks", "demo")}, entry


def _error(tmp_path, tasks, entries) -> str:
    path = write_states(tmp_path, entries)
    with pytest.raises(InputError) as err:
        load_states(path, tasks)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: ")
    return msg[len(f"{path}: ") :]


def test_valid_file_loads(setup):
    tmp, tasks, entry = setup
    states = load_states(write_states(tmp, [entry]), tasks)
    assert [s.id for s in states] == ["calc--partial"]
    assert states[0].changed_files == ["NOTES.md", "calc.py", "logo.bin"] or set(states[0].changed_files) == {
        "NOTES.md",
        "calc.py",
        "logo.bin",
    }


def test_missing_field(setup):
    tmp, tasks, entry = setup
    del entry["predecessor"]
    assert _error(tmp, tasks, [entry]) == "states[0] (id 'calc--partial'): predecessor: Field required"


def test_wrong_hash(setup):
    tmp, tasks, entry = setup
    entry["artifact"]["sha256"] = "0" * 64
    msg = _error(tmp, tasks, [entry])
    assert msg.startswith(
        "states[0] (id 'calc--partial'): artifact.sha256: does not match states/calc--partial.patch"
    )


def test_unknown_task(setup):
    tmp, tasks, entry = setup
    entry["task"] = "nope"
    assert _error(tmp, tasks, [entry]) == (
        "states[0] (id 'calc--partial'): task: unknown task 'nope': no such task "
        f"of track 'demo' in {(tmp / 'tasks').resolve()} (tasks: calc)"
    )
    entry["task"] = "calx"
    assert _error(tmp, tasks, [entry]).endswith("(did you mean 'calc'? tasks: calc)")


def test_unknown_track_is_an_error_even_when_its_track_is_not_selected(setup):
    # before: an entry of a misspelt track was skipped like one of another track, without a word
    tmp, tasks, entry = setup
    path = write_states(tmp, [dict(entry, track="dmeo")])
    with pytest.raises(InputError) as err:
        load_states(path, tasks, tracks={"demo"}, known_tracks={"demo", "deepswe", "terminal_bench"})
    assert str(err.value) == (
        f"{path}: states[0] (id 'calc--partial'): track: unknown track 'dmeo' (did you mean "
        "'demo'? known: deepswe, demo, terminal_bench)"
    )
    # a known track that is not selected is not loaded, and not an error
    path = write_states(tmp, [dict(entry, track="terminal_bench")])
    assert load_states(path, tasks, tracks={"demo"}, known_tracks={"demo", "terminal_bench"}) == []


def test_leave_out_mode_returns_the_entries_of_missing_tasks(setup):
    from swe_residual.states import read_states

    tmp, tasks, entry = setup
    other = dict(entry, id="other--state", task="other")
    got = read_states(write_states(tmp, [entry, other]), tasks, missing_tasks="leave_out")
    assert [s.id for s in got.states] == ["calc--partial"] and [s.id for s in got.left_out] == [
        "other--state"
    ]


def test_misspelt_field_names_the_close_match(setup):
    tmp, tasks, entry = setup
    entry["tsak"] = entry.pop("task")
    # not "task: Field required": the misspelt key is what to fix
    msg = _error(tmp, tasks, [entry])
    assert msg.startswith(
        "states[0] (id 'calc--partial'): tsak: unknown field (did you mean 'task'? fields: "
    ), msg
    entry["task"] = entry.pop("tsak")
    entry["artifact"]["sha265"] = entry["artifact"].pop("sha256")
    assert _error(tmp, tasks, [entry]).startswith(
        "states[0] (id 'calc--partial'): artifact.sha265: unknown field (did you mean 'sha256'? fields: "
    )
    entry["artifact"]["sha256"] = entry["artifact"].pop("sha265")
    entry["initial_verdict"]["failing_test"] = entry["initial_verdict"].pop("failing_tests")
    assert _error(tmp, tasks, [entry]).startswith(
        "states[0] (id 'calc--partial'): initial_verdict.failing_test: "
        "unknown field (did you mean 'failing_tests'? fields: "
    )


def test_misspelt_top_level_key_is_not_an_empty_file(setup):
    tmp, tasks, entry = setup
    path = tmp / "states.yaml"
    path.write_text("stats: []\n")
    with pytest.raises(InputError) as err:
        load_states(path, tasks)
    assert (
        str(err.value)
        == f"{path}: stats: unknown field (did you mean 'states'? the top level holds only states: [...])"
    )


def test_missing_artifact_and_duplicate_id(setup):
    tmp, tasks, entry = setup
    other = dict(entry, artifact={"patch": "states/none.patch", "sha256": "a" * 64}, id="other")
    assert "artifact.patch: file " in _error(tmp, tasks, [other])
    assert (
        _error(tmp, tasks, [entry, entry])
        == "states[1] (id 'calc--partial'): id: duplicate state id 'calc--partial'"
    )


def test_invalid_yaml(setup):
    tmp, tasks, _ = setup
    path = tmp / "states.yaml"
    path.write_text("states: [\n  - id: x\n")
    with pytest.raises(InputError, match=r"states.yaml: line \d+ invalid YAML"):
        load_states(path, tasks)


def test_json_schema_lists_required_fields():
    schema = json_schema()
    state = schema["$defs"]["ResidualState"]
    assert set(state["required"]) >= {"id", "track", "task", "predecessor", "artifact", "initial_verdict"}
    json.dumps(schema)


def test_committed_json_schema_is_current():
    # states.schema.json is what editors and other tools validate states.yaml against
    from pathlib import Path

    committed = json.loads((Path(__file__).resolve().parent.parent / "states.schema.json").read_text())
    assert committed == json_schema(), "regenerate: swe-residual states schema > states.schema.json"


def test_artifact_outside_the_states_dir_and_garbage_patches_are_rejected(tmp_path):
    import hashlib

    from swe_residual.errors import InputError
    from swe_residual.states import load_states
    from swe_residual.tasks import load_tasks

    from .taskfactory import make_task, partial_state_patch, state_entry, write_states

    task = make_task(tmp_path)
    tasks = {"demo": load_tasks(tmp_path / "tasks", "demo")}
    outside = tmp_path.parent / f"{tmp_path.name}-outside.patch"
    outside.write_bytes(partial_state_patch(task))
    escape = state_entry(tmp_path, task, b"x", state_id="escape")
    escape["artifact"] = {
        "patch": f"../{outside.name}",
        "sha256": hashlib.sha256(outside.read_bytes()).hexdigest(),
    }
    with pytest.raises(InputError) as err:
        load_states(write_states(tmp_path, [escape]), tasks)
    assert "artifact.patch: ../" in str(err.value) and "outside" in str(err.value)
    assert hashlib.sha256(outside.read_bytes()).hexdigest() not in str(err.value)
    garbage = state_entry(tmp_path, task, bytes(range(256)) * 4, state_id="garbage")
    with pytest.raises(
        InputError, match=r"states\[0\] \(id 'garbage'\): artifact.patch: .* is not a git patch"
    ):
        load_states(write_states(tmp_path, [garbage]), tasks)
